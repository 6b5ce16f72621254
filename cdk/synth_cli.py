"""``make synth``: validate the deployment config, synthesize every stack into ``cdk.out`` offline, and
report the time taken and the cdk-nag findings. Exit 1 on an invalid config or unsuppressed findings."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdk.synth_cli", description=__doc__)
    parser.add_argument("--config", type=Path, default=None, help="deployment config (default: the example)")
    parser.add_argument("--out", type=Path, default=Path("cdk.out"), help="cloud assembly directory")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    import aws_cdk as cdk

    from cdk import config, nag
    from cdk.app_builder import build_app, feature_flags

    try:
        deployment = config.load(args.config or config.EXAMPLE_FILE)
    except config.DeploymentConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    app = cdk.App(outdir=str(args.out), context=feature_flags())
    built = build_app(deployment, app=app)
    try:
        assembly = app.synth()
    except Exception as exc:  # jsii surfaces validation failures as a generic RuntimeError
        print(f"synthesis failed: {exc}", file=sys.stderr)
        if (args.out / nag.REPORT_FILE).is_file():
            violations, _ = nag.read_report(args.out)
            for finding in violations:
                print(f"  {finding.rule} {', '.join(finding.constructs)}: {finding.message}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - started
    for stack in built.stacks:
        artifact = assembly.get_stack_artifact(stack.artifact_id)
        print(
            f"{stack.stack_name}: {len(artifact.template.get('Resources', {}))} resources -> "
            f"{args.out}/{artifact.template_file}"
        )
    violations, acknowledged = nag.read_report(args.out)
    print(
        f"synthesized {len(built.stacks)} stacks offline in {elapsed:.1f} s; cdk-nag AwsSolutions: "
        f"{len(violations)} unsuppressed, {len(acknowledged)} acknowledged with a reason"
    )
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
