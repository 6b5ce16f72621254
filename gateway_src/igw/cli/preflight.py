"""``igw preflight``: will the gateway work here? Versions, dependencies, labels, ports, live signals."""

from __future__ import annotations

import argparse

from igw.cli.arg_types import PROBE_TIMEOUT, ca_bundle

HELP = (
    "Pre-flight checks: add-on and dependency versions, CRD, IAM, subnets, selectors, model servers, signals."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.cli.checks_common import add_common_arguments

    add_common_arguments(parser)
    probe = parser.add_argument_group("live signals")
    probe.add_argument(
        "--probe",
        action="store_true",
        help="fetch each Ready model-server pod's /metrics and each JWT provider's JWKS",
    )
    probe.add_argument(
        "--probe-timeout",
        type=PROBE_TIMEOUT,
        default=5.0,
        metavar="SECONDS",
        help="per-fetch timeout (default 5)",
    )
    probe.add_argument(
        "--ca-bundle",
        type=ca_bundle,
        metavar="PEM",
        help="CA file for HTTPS probes (default: system trust store); this and --probe-timeout need --probe",
    )


def run(args: argparse.Namespace) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.checks.framework import EXIT_USAGE, CheckOptions
    from igw.checks.model import Command
    from igw.cli.checks_common import run_command
    from igw.cli.option_scope import refuse_given

    # without --probe nothing is fetched: a --probe-timeout or --ca-bundle given then was dropped and the
    # run exited as if the probes had used them
    if not args.probe and refuse_given(
        args, command="igw preflight", mode="a run without --probe", ignored=("probe_timeout", "ca_bundle")
    ):
        return EXIT_USAGE
    options = CheckOptions(
        probe=args.probe,
        probe_timeout_s=args.probe_timeout,
        ca_bundle=args.ca_bundle,
        gateway_role_arn=args.gateway_role_arn,
        include_system_namespaces=args.include_system_namespaces,
    )
    return run_command(args, Command.PREFLIGHT, options)
