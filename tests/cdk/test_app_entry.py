"""``app.py`` run the way the ``cdk`` CLI runs it: a subprocess whose context arrives in
``CDK_CONTEXT_JSON`` (the CLI merges ``cdk.context.json``, ``cdk.json``'s ``context`` and the ``-c``
values into it) and whose cloud assembly goes to ``CDK_OUTDIR``.

Before session s40 ``cdk.json`` set ``deploymentConfig`` to the example, so the context always named a
file and ``IGW_DEPLOYMENT_CONFIG=my.yaml cdk deploy`` deployed the example; and a bad file ended the app
in a Python traceback with the problems at its foot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cdk.support import EXAMPLES

REPO_ROOT = Path(__file__).resolve().parents[2]


def cli_context(**values: str) -> str:
    """What the CLI puts in ``CDK_CONTEXT_JSON``: ``cdk.context.json``, then ``cdk.json``'s context, then
    the ``-c`` values (observed with aws-cdk 2.1149.0 and an app that printed its environment)."""
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.context.json").read_text(encoding="utf-8"))
    context.update(json.loads((REPO_ROOT / "cdk.json").read_text(encoding="utf-8"))["context"])
    context.update(values)
    return json.dumps(context)


def run_app(
    outdir: Path, *, context: str | None, program: tuple[str, ...] = ("app.py",), **environment: str
) -> subprocess.CompletedProcess[str]:
    """``app.py`` (or ``program``) as the CLI runs it; ``context=None``: run alone, without the CLI."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("IGW_DEPLOYMENT_CONFIG", "IGW_GLOBAL_ROUTER_CONFIG", "CDK_CONTEXT_JSON")
    }
    if context is not None:
        env["CDK_CONTEXT_JSON"] = context
    env.update(
        CDK_OUTDIR=str(outdir),
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
        **environment,
    )
    return subprocess.run(
        [sys.executable, *program],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


CLI_VALIDATION_CONTEXT = {"@aws-cdk/core:failSynthOnValidationErrors": False}
"""What aws-cdk 2.1149.0 adds to ``CDK_CONTEXT_JSON`` for ``cdk synth`` and ``cdk deploy``: the app is to
write its validation report and exit 0, and the CLI decides (``--ignore-errors``: it deploys anyway)."""

WITH_A_VIOLATION = """
import sys

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3

import app

synth = cdk.App.synth


def synth_with_a_violation(self, *args, **kwargs):
    stack = next(child for child in self.node.children if isinstance(child, cdk.Stack))
    s3.Bucket(stack, "UnacknowledgedBucket")  # no SSL-only policy, no access logs: acknowledged nowhere
    return synth(self, *args, **kwargs)


cdk.App.synth = synth_with_a_violation
sys.exit(app.main())
"""
"""``app.py``'s own ``main`` with one construct added that cdk-nag's AwsSolutions pack refuses."""


@pytest.mark.parametrize("under_the_cli", [True, False], ids=["cdk-cli-context", "run-alone"])
def test_an_unsuppressed_nag_finding_fails_the_app_whoever_runs_it(
    tmp_path: Path, under_the_cli: bool
) -> None:
    """Before session s40 the app exited 0 under the CLI's context (``cdk deploy --ignore-errors``
    deployed the finding) and ended in a jsii traceback when run alone."""
    existing = str(EXAMPLES / "existing-cluster.yaml")
    if under_the_cli:
        context = json.loads(cli_context(deploymentConfig=existing))
        context.update(CLI_VALIDATION_CONTEXT)
        done = run_app(tmp_path / "out", context=json.dumps(context), program=("-c", WITH_A_VIOLATION))
    else:
        done = run_app(
            tmp_path / "out", context=None, program=("-c", WITH_A_VIOLATION), IGW_DEPLOYMENT_CONFIG=existing
        )

    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "cdk-nag AwsSolutions: 2 unsuppressed finding(s)" in done.stderr
    for rule in ("AwsSolutions-S1 ", "AwsSolutions-S10 "):
        assert f"  {rule}IgwClusterAccess/UnacknowledgedBucket/Resource: " in done.stderr, done.stderr[-3000:]


def test_the_deployment_config_of_the_environment_variable_is_the_one_synthesized(tmp_path: Path) -> None:
    document = yaml.safe_load((EXAMPLES / "existing-cluster.yaml").read_text(encoding="utf-8"))
    document["clusterName"] = "team-b-inference"
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(document), encoding="utf-8")

    done = run_app(tmp_path / "out", context=cli_context(), IGW_DEPLOYMENT_CONFIG=str(mine))

    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    assert "IgwClusterAccess" in manifest["artifacts"], sorted(manifest["artifacts"])  # not the example's
    template = json.loads((tmp_path / "out" / "IgwClusterAccess.template.json").read_text(encoding="utf-8"))
    [entry] = [r for r in template["Resources"].values() if r["Type"] == "AWS::EKS::AccessEntry"]
    assert entry["Properties"]["ClusterName"] == "team-b-inference"


def test_a_bad_deployment_config_names_its_fields_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text('account: "111111111111"\nregion: us-west-2\nclusterName: x\nstackPrefix: 9\n')
    good = EXAMPLES / "existing-cluster.yaml"

    # -c wins over the environment variable.
    done = run_app(
        tmp_path / "out", context=cli_context(deploymentConfig=str(bad)), IGW_DEPLOYMENT_CONFIG=str(good)
    )

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"{bad}: invalid deployment config" in done.stderr
    assert "(root): 'inference' is a required property" in done.stderr
    assert "stackPrefix: 9 is not of type 'string'" in done.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_missing_deployment_config_or_global_router_file_is_named(tmp_path: Path) -> None:
    missing = run_app(tmp_path / "a", context=cli_context(deploymentConfig=str(tmp_path / "nope.yaml")))
    router = run_app(
        tmp_path / "b",
        context=cli_context(deploymentConfig=str(EXAMPLES / "existing-cluster.yaml")),
        IGW_GLOBAL_ROUTER_CONFIG=str(tmp_path / "router.yaml"),
    )

    for done in (missing, router):
        assert done.returncode == 1
        assert "Traceback" not in done.stderr
    assert "nope.yaml: invalid deployment config" in missing.stderr
    assert "cannot read: No such file or directory" in missing.stderr
    assert "router.yaml" in router.stderr


def test_only_the_nag_packs_findings_fail_the_app(tmp_path: Path) -> None:
    """aws-cdk-lib's own "CloudFormation Validate" plugin writes its warnings into the same report; they
    are not cdk-nag findings and fail nothing."""
    from cdk import nag

    finding = {
        "ruleName": "W3010",
        "description": "Avoid hardcoding availability zones",
        "violatingConstructs": [],
    }
    report = {
        "pluginReports": [
            {"pluginName": "CloudFormation Validate", "violations": [finding]},
            {"pluginName": "AwsSolutions", "violations": [], "suppressedViolations": []},
        ]
    }
    (tmp_path / nag.REPORT_FILE).write_text(json.dumps(report), encoding="utf-8")

    assert nag.read_report(tmp_path) == ([], [])
