"""The add-on chart (addon/chart, rendered by real Helm through helm-python-sdk) passes the audit."""

from __future__ import annotations

import pytest

from igw.addon import chart
from igw.checks.model import Command, Severity
from igw.checks.sources.manifests import inventory_from_documents
from tests.checks.helpers import findings, run


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, object]]:
    return chart.render()


def test_rendered_chart_has_no_high_or_critical_audit_findings(rendered: list[dict[str, object]]) -> None:
    inventory = inventory_from_documents(rendered, source="chart")
    serious = {
        f for f in findings(run(inventory, Command.AUDIT)) if Severity[f[2]].rank >= Severity.HIGH.rank
    }
    assert serious == set()
    kinds = {str(d["kind"]) for d in rendered}
    assert {"Deployment", "NetworkPolicy", "PodDisruptionBudget"} <= kinds  # the audit had something to judge


def test_rendered_chart_preflight_only_misses_what_lives_outside_the_chart(
    rendered: list[dict[str, object]],
) -> None:
    inventory = inventory_from_documents(rendered, source="chart")
    failing = {f[0] for f in findings(run(inventory, Command.PREFLIGHT))}
    # The Load Balancer Controller and cert-manager are installed separately; configs are applied by users.
    assert failing <= {"IGW-PF007", "IGW-PF008", "IGW-PF009"}
