"""What ``igw preflight`` and ``igw audit`` share: arguments, source selection, rendering, exit codes.

Exit codes: 0 nothing at or above ``--fail-on``; 1 findings at or above it; 2 usage error;
3 could not evaluate (API unreachable or forbidden, unreadable input) and nothing at or above the
threshold was found in what could be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from igw.checks.framework import (
    EXIT_NOT_EVALUATED,
    EXIT_OK,
    EXIT_USAGE,
    CheckContext,
    CheckOptions,
    exit_code,
    run_checks,
)
from igw.checks.inventory import Inventory
from igw.checks.model import Command, Severity
from igw.cli.arg_types import existing_file, existing_path, region_name

FORMATS = ("table", "json", "sarif", "junit")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("source (default: the live cluster of the current kubeconfig context)")
    exclusive = source.add_mutually_exclusive_group()
    exclusive.add_argument(
        "--manifests",
        metavar="PATH",
        type=existing_path,
        help="directory or file of Kubernetes manifests (rendered chart, model deployments)",
    )
    exclusive.add_argument(
        "--cdk-out", metavar="DIR", type=existing_path, help="CDK output directory (*.template.json)"
    )
    source.add_argument(
        "--kubeconfig",
        type=existing_file,
        help="kubeconfig file (default $KUBECONFIG or ~/.kube/config; "
        "in-cluster credentials when running in a pod)",
    )
    source.add_argument("--context", help="kubeconfig context")
    source.add_argument(
        "--cluster-name", help="EKS cluster name: also scan the AWS side (add-ons, IAM, subnets, LBs)"
    )
    source.add_argument("--region", type=region_name, help="AWS region (default from the AWS config)")
    source.add_argument("--profile", help="AWS profile")
    out = parser.add_argument_group("output")
    out.add_argument("-o", "--output", choices=FORMATS, default="table", help="output format (default table)")
    out.add_argument("--output-file", type=Path, help="write the report here instead of stdout")
    out.add_argument("--show-passed", action="store_true", help="table: list passed checks too")
    out.add_argument(
        "--fail-on",
        default="high",
        metavar="SEVERITY",
        help="exit 1 when a finding is at or above this severity: critical, high (default), medium, "
        "low, info",
    )
    sel = parser.add_argument_group("selection")
    sel.add_argument("--check", action="append", metavar="ID", help="run only this check (repeatable)")
    sel.add_argument("--skip-check", action="append", metavar="ID", help="do not run this check (repeatable)")
    sel.add_argument(
        "--include-system-namespaces",
        action="store_true",
        help="also audit kube-system, kube-public, kube-node-lease",
    )
    parser.add_argument(
        "--gateway-role-arn", help="the gateway's IAM role (default: found by its trust policy)"
    )


LIVE_ONLY = (
    ("--kubeconfig", "kubeconfig"),
    ("--context", "context"),
    ("--cluster-name", "cluster_name"),
    ("--region", "region"),
    ("--profile", "profile"),
)
"""The source options of the live cluster only (``--manifests`` and ``--cdk-out`` read files)."""


def _aws_account(args: argparse.Namespace) -> Any:
    """The AWS account of ``--cluster-name`` (``None`` without it), its set-up checked before anything
    is read: raises ``AwsSetupError`` (no region, an unknown profile, no credentials)."""
    if args.cluster_name is None or args.manifests is not None or args.cdk_out is not None:
        return None
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.checks.sources.aws_api import AwsAccount

    account = AwsAccount(region=args.region, profile=args.profile)
    account.check_setup()
    return account


def _load(args: argparse.Namespace, console: Any, account: Any = None) -> Inventory:
    if args.manifests is not None:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.checks.sources.manifests import load_manifests

        return load_manifests(args.manifests)
    if args.cdk_out is not None:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.checks.sources.cdk_out import load_cdk_out

        return load_cdk_out(args.cdk_out)
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.checks.sources.live import load_live
    from igw.gateway.discovery.kube_client import make_api_client

    with console.status("reading the cluster…"):
        api_client = make_api_client(kubeconfig=args.kubeconfig, context=args.context)
        return load_live(
            api_client=api_client,
            cluster_name=args.cluster_name,
            account=account,
            gateway_role_arn=args.gateway_role_arn,
        )


def run_command(args: argparse.Namespace, command: Command, options: CheckOptions) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from rich.console import Console

    from igw.checks.registry import select
    from igw.checks.render.report import build_report

    err = Console(stderr=True)

    def error(message: str) -> None:
        _print_error(err, command, message)

    try:
        fail_on = Severity.parse(args.fail_on)
        checks = select(command, only=args.check, skip=args.skip_check)
    except ValueError as exc:
        error(str(exc))
        return EXIT_USAGE
    static = (
        "--manifests" if args.manifests is not None else "--cdk-out" if args.cdk_out is not None else None
    )
    live_only = [flag for flag, dest in LIVE_ONLY if getattr(args, dest) is not None]
    if static is not None and live_only:
        # they were ignored: `--manifests deploy/ --cluster-name prod` scanned no AWS account, silently
        error(f"{', '.join(live_only)}: for the live cluster only, not with {static}")
        return EXIT_USAGE
    target = args.output_file
    if target is not None and (target.is_dir() or not target.parent.is_dir()):
        problem = "is a directory" if target.is_dir() else f"folder {target.parent} does not exist"
        error(f"--output-file {target}: {problem}")
        return EXIT_USAGE
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.checks.sources.aws_api import AwsSetupError

    try:
        # no region, an unknown profile, no credentials: one usage error before any check, not the same
        # error once per AWS fact (exit 3)
        account = _aws_account(args)
    except AwsSetupError as exc:
        error(str(exc))
        return EXIT_USAGE
    try:
        inventory = _load(args, err, account)
    except FileNotFoundError as exc:
        error(str(exc))
        return EXIT_USAGE
    except Exception as exc:  # kubeconfig missing/invalid, etc.: we cannot evaluate anything
        error(f"cannot read the source: {type(exc).__name__}: {exc}")
        return EXIT_NOT_EVALUATED
    ctx = CheckContext(inventory=inventory, options=options)
    live_table = (
        args.output == "table" and args.output_file is None and not inventory.kube.static and err.is_terminal
    )
    if live_table:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from rich.progress import Progress

        with Progress(console=err, transient=True) as progress:
            task = progress.add_task(f"{command.value}: running checks", total=len(checks))
            results = run_checks(
                checks, ctx, on_progress=lambda done, _t, _id: progress.update(task, completed=done)
            )
    else:
        results = run_checks(checks, ctx)
    code = exit_code(results, fail_on=fail_on)
    if code == EXIT_OK and inventory.errors:
        code = EXIT_NOT_EVALUATED
    report = build_report(
        command=command,
        source=inventory.source,
        checks=[c.meta for c in checks],
        results=results,
        fail_on=fail_on,
        exit_code=code,
        source_errors=inventory.errors,
        locations=inventory.locations,
        default_location=inventory.default_location,
    )
    try:
        _emit(report, args)
    except OSError as exc:  # e.g. no permission to write --output-file
        error(f"--output-file {args.output_file}: {exc.strerror or exc}")
        return EXIT_USAGE
    return code


def _print_error(err: Any, command: Command, message: str) -> None:
    """``igw COMMAND: error: MESSAGE`` on stderr, red on a terminal. The message is text, not rich
    markup: it quotes what the user gave (a path, a ``--fail-on`` or ``--check`` value), and as markup
    ``--fail-on '[/x]'`` ended in a ``MarkupError`` traceback (exit 1) and a ``[prod]`` folder lost
    that part of its name. Not wrapped at the console's width (80 columns when stderr is not a
    terminal), so a path-named error stays on one line for grep and CI logs."""
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from rich.text import Text

    err.print(Text.assemble(f"igw {command.value}: ", ("error:", "red"), f" {message}"), soft_wrap=True)


def _emit(report: Any, args: argparse.Namespace) -> None:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from rich.console import Console

    if args.output == "table":
        stream = args.output_file.open("w", encoding="utf-8") if args.output_file else sys.stdout
        try:
            # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
            from igw.checks.render.table import render_table

            console = Console(file=stream, width=160 if args.output_file else None)
            render_table(report, console=console, show_passed=args.show_passed)
        finally:
            if args.output_file:
                stream.close()
        return
    if args.output == "json":
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.checks.render.json_out import render_json

        text = render_json(report)
    elif args.output == "sarif":
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.checks.render.sarif import render_sarif

        text = render_sarif(report)
    else:
        # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
        from igw.checks.render.junit import render_junit

        text = render_junit(report)
    if args.output_file:
        args.output_file.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
