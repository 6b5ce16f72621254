"""``make synth``: validate the deployment config, synthesize every stack into ``cdk.out`` offline, and
report the time taken and the cdk-nag findings. Exit 1 on an invalid config or unsuppressed findings.

A value CDK or a construct refuses while the stacks are built or synthesized ends it in one line naming
the file, as ``app.py`` does; any other exception is a bug and keeps its traceback (one rule for both,
:func:`cdk.synth_errors.refusal`)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdk.config import DeploymentConfig

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


def quotas_ok(deployment: DeploymentConfig, *, service_quotas: Any = None) -> bool:
    """Print one line per HyperPod instance type: requested instances against the account's
    "<type> for cluster usage" quota (pre-flight check IGW-PF031's verdicts, before any cluster exists)."""
    from igw.checks.model import Status
    from igw.checks.preflight import instance_quotas
    from igw.checks.sources import aws_api

    if deployment.hyperpod is None:
        print("quotas: existing-cluster mode creates no HyperPod instances")
        return True
    counts: dict[str, int] = {}
    for group in deployment.hyperpod.instance_groups:
        counts[group.instance_type] = counts.get(group.instance_type, 0) + group.instance_count
    if service_quotas is None:
        import boto3

        service_quotas = boto3.client("service-quotas", region_name=deployment.region)
    found = aws_api.instance_quotas(counts, aws_api.quota_values(service_quotas))
    failed = False
    for item in found:
        status, message = instance_quotas.verdict(item)
        failed = failed or status is Status.FAIL
        print(f"{status.value:<5} {instance_quotas.resource_of(item)}: {message}")
    return not failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdk.synth_cli", description=__doc__)
    parser.add_argument("--config", type=Path, default=None, help="deployment config (default: the example)")
    parser.add_argument("--out", type=Path, default=Path("cdk.out"), help="cloud assembly directory")
    parser.add_argument(
        "--check-quotas",
        action="store_true",
        help="before synthesizing, compare the HyperPod instance groups with the account's Service Quotas "
        "(needs AWS credentials; everything else stays offline)",
    )
    args = parser.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        # CDK refuses it only once the app is created, in a jsii traceback.
        parser.error(f"--out: {args.out} is a file; the cloud assembly is a directory")

    started = time.perf_counter()
    import aws_cdk as cdk

    from cdk import config, nag
    from cdk.app_builder import build_app, feature_flags
    from cdk.synth_errors import refusal

    source = args.config or config.EXAMPLE_FILE
    try:
        deployment = config.load(source)
    except config.DeploymentConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.check_quotas and not quotas_ok(deployment):
        return 1
    app = cdk.App(outdir=str(args.out), context=feature_flags())
    try:
        # Both inside: a construct refusing a value raises while the stacks are built (jsii's
        # RuntimeError), and a traceback would bury its one-line message.
        built = build_app(deployment, app=app)
        # Removes an earlier run's report first: read after a failed synthesis, it was printed as this
        # run's findings.
        violations = nag.synthesize(app)
    except Exception as exc:
        message = refusal(exc)
        if message is None:  # a bug (one in an aspect too, which jsii reraises): its traceback
            raise
        print(f"{source}: synthesis failed: {message}", file=sys.stderr)
        return 1
    if violations:
        print(f"synthesis failed: cdk-nag AwsSolutions: {len(violations)} unsuppressed", file=sys.stderr)
        for finding in violations:
            print(f"  {finding.rule} {', '.join(finding.constructs)}: {finding.message}", file=sys.stderr)
        return 1
    assembly = app.synth()  # the assembly nag.synthesize made (an App synthesizes once)
    elapsed = time.perf_counter() - started
    for stack in built.stacks:
        artifact = assembly.get_stack_artifact(stack.artifact_id)
        print(
            f"{stack.stack_name}: {len(artifact.template.get('Resources', {}))} resources -> "
            f"{args.out}/{artifact.template_file}"
        )
    _, acknowledged = nag.read_report(args.out)
    print(
        f"synthesized {len(built.stacks)} stacks offline in {elapsed:.1f} s; cdk-nag AwsSolutions: "
        f"0 unsuppressed, {len(acknowledged)} acknowledged with a reason"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
