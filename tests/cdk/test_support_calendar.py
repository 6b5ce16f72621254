"""The pinned versions are deployable on the calendar's review day (``igw/addon/support_calendar.py``).

Session s47 (reviewed as of 2026-12-07) found the default ``cluster.kubernetesVersion`` 1.34 past its
EKS end of standard support (2026-12-02: every new cluster billed for extended support) and 1.31 still
accepted although EKS ended its extended support on 2026-11-26 (``cdk deploy`` of a new cluster fails).
The checks use the table's fixed ``AS_OF``, never today, so the suite does not start failing by itself;
the next expiry shows up when ``AS_OF`` is moved at the next review.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from igw.addon import pins, support_calendar
from igw.addon.support_calendar import kubernetes_problem, runtime_problem


def _runtimes(templates: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Every Lambda function's runtime in the templates, by ``stack/logical id``."""
    found: dict[str, str] = {}
    for role, template in templates.items():
        for logical_id, resource in template.get("Resources", {}).items():
            if resource["Type"] == "AWS::Lambda::Function" and "Runtime" in resource["Properties"]:
                found[f"{role}/{logical_id}"] = resource["Properties"]["Runtime"]
    return found


def test_the_default_kubernetes_version_is_in_eks_standard_support() -> None:
    assert kubernetes_problem(pins.KUBERNETES_VERSION, default=True) is None


@pytest.mark.parametrize("version", pins.SUPPORTED_KUBERNETES_VERSIONS)
def test_every_accepted_kubernetes_version_can_still_be_created(version: str) -> None:
    assert kubernetes_problem(version) is None


def test_the_synthesized_lambda_runtimes_are_not_deprecated(synthesized: Any, existing: Any) -> None:
    runtimes = {**_runtimes(synthesized.templates), **_runtimes(existing.templates)}
    assert runtimes, "no Lambda function found: the check would pass vacuously"
    problems = {name: runtime_problem(runtime) for name, runtime in runtimes.items()}
    assert {name: problem for name, problem in problems.items() if problem} == {}


def test_the_checks_refuse_what_aws_retired() -> None:
    """The tables' verdicts on the versions s47 found (so a wrong table cannot pass everything)."""
    assert "standard support ended 2026-12-02" in (kubernetes_problem("1.34", default=True) or "")
    assert kubernetes_problem("1.34") is None  # accepted (an existing cluster may run it), not the default
    assert "extended support ended 2026-11-26" in (kubernetes_problem("1.31") or "")
    assert "not in the EKS release calendar" in (kubernetes_problem("1.36") or "")
    assert "deprecated 2026-06-30" in (runtime_problem("python3.11") or "")
    assert "not in the deprecation table" in (runtime_problem("nodejs99.x") or "")
    assert runtime_problem("python3.13") is None


def test_the_verdicts_are_those_of_the_review_day_not_today() -> None:
    """The default day is ``AS_OF``; the same pin is refused once the calendar is moved past its date."""
    assert kubernetes_problem("1.35", default=True) is None
    later = support_calendar.AS_OF + datetime.timedelta(days=120)
    assert "standard support ended 2027-03-27" in (kubernetes_problem("1.35", on=later, default=True) or "")
