"""``igw audit``: security posture - TLS, JWT, exposure, workload hardening, IAM, rate limits, tenancy."""

from __future__ import annotations

import argparse

from igw.cli.arg_types import NON_NEGATIVE_INT

HELP = (
    "Security audit: TLS policy, certificates, JWT, exposure, workload hardening, IAM, rate limits, tenancy."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.cli.checks_common import add_common_arguments

    add_common_arguments(parser)
    policy = parser.add_argument_group("policy")
    policy.add_argument(
        "--allow-internet-facing",
        action="store_true",
        help="internet-facing load balancers are an approved choice",
    )
    policy.add_argument(
        "--cert-warn-days",
        type=NON_NEGATIVE_INT,
        default=14,
        metavar="DAYS",
        help="warn when a certificate expires within DAYS (default 14)",
    )
    policy.add_argument(
        "--link",
        type=tier_link,
        action="append",
        default=[],
        metavar="CLUSTER=NAMESPACE/NAME",
        help="the GlobalRouterConfig cluster CLUSTER is served by that InferenceGatewayConfig "
        "(IGW-AU207..209; for gateways without spec.extensions.globalHeartbeat; repeatable)",
    )


def tier_link(text: str) -> tuple[str, str]:
    """``CLUSTER=NAMESPACE/NAME`` (or ``CLUSTER=NAME`` for an object without a namespace)."""
    cluster, sep, gateway = text.partition("=")
    if not (sep and cluster.strip() and gateway.strip()) or gateway.count("/") > 1:
        raise argparse.ArgumentTypeError(f"expected CLUSTER=NAMESPACE/NAME, got {text!r}")
    return cluster.strip(), gateway.strip()


def run(args: argparse.Namespace) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.checks.framework import CheckOptions
    from igw.checks.model import Command
    from igw.cli.checks_common import run_command

    options = CheckOptions(
        allow_internet_facing=args.allow_internet_facing,
        certificate_warn_days=args.cert_warn_days,
        gateway_role_arn=args.gateway_role_arn,
        include_system_namespaces=args.include_system_namespaces,
        tier_links=tuple(args.link),
    )
    return run_command(args, Command.AUDIT, options)
