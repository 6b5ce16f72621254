"""``app.py`` ends a synthesis CDK refuses in one line naming the file, and keeps a bug's traceback
(session s41).

Before the fix a value CDK refused while synthesizing (``UnrecognizedTokenKey`` from a config value
that looked like a token, before the config refused those) ended ``cdk synth`` / ``cdk deploy`` in a
thirty-line jsii traceback, while ``make synth`` printed one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cdk.support import EXAMPLES
from tests.cdk.test_app_entry import run_app

WITH_AN_ADDITION = """
import sys

import aws_cdk as cdk
import jsii

import app

synth = cdk.App.synth


@jsii.implements(cdk.IAspect)
class Buggy:
    def visit(self, node):
        raise KeyError("bug-in-an-aspect")


def synth_with_an_addition(self, *args, **kwargs):
    stack = next(child for child in self.node.children if isinstance(child, cdk.Stack))
    if sys.argv[1] == "refused":
        cdk.CfnOutput(stack, "Refused", value="${Token[TOKEN.99999]}")  # a token CDK does not know
    else:
        cdk.Aspects.of(stack).add(Buggy())
    return synth(self, *args, **kwargs)


cdk.App.synth = synth_with_an_addition
sys.exit(app.main())
"""
"""``app.py``'s own ``main`` with one value CDK refuses at synthesis (``refused``) or one Python bug
raised inside a callback from CDK (``bug``)."""


@pytest.mark.parametrize("case", ["refused", "bug"])
def test_a_refusal_is_one_line_and_a_bug_keeps_its_traceback(tmp_path: Path, case: str) -> None:
    existing = EXAMPLES / "existing-cluster.yaml"
    done = run_app(
        tmp_path / "out",
        context=None,
        program=("-c", WITH_AN_ADDITION, case),
        IGW_DEPLOYMENT_CONFIG=str(existing),
    )

    assert done.returncode == 1, done.stderr[-3000:]
    if case == "refused":
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"{existing}: synthesis failed: UnrecognizedTokenKey: "), line
        assert line.endswith("Unrecognized token key: TOKEN.99999"), line
    else:
        # jsii re-raises the aspect's KeyError as a RuntimeError (the KeyError is its context).
        assert "Traceback (most recent call last)" in done.stderr
        assert done.stderr.strip().endswith("RuntimeError: 'bug-in-an-aspect'"), done.stderr[-3000:]
        assert "synthesis failed" not in done.stderr
