"""The alerts and their runbook entries stay in step: one entry per alert, none for an alert that no
longer exists, each stating the alert's severity and ``for``, and every rule's ``runbook_url``
pointing at a heading that exists."""

from __future__ import annotations

import re

import pytest
import yaml

from igw.addon.alert_rules import (
    ALERTS,
    GLOBAL_ALERTS,
    GLOBAL_RUNBOOK_SECTION,
    RUNBOOK_DOC,
    Alert,
    rule_groups,
)
from igw.config import paths

_HEADING = re.compile(r"^(#{2,6}) (.+)$", re.MULTILINE)


def _anchor(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _alert_entries(section_title: str = "Alerts") -> dict[str, str]:
    """The ``###`` entries of a runbook section ("Alerts": the chart's; "Global router alerts": the
    global router's rule file), by heading, with their text."""
    text = (paths.REPO_ROOT / RUNBOOK_DOC).read_text(encoding="utf-8")
    start = text.index(f"\n## {section_title}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    parts = re.split(r"^### (.+)$", section, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


_SECTIONS = pytest.mark.parametrize(
    ("section", "alerts"),
    [("Alerts", ALERTS), (GLOBAL_RUNBOOK_SECTION, GLOBAL_ALERTS)],
    ids=["chart", "global"],
)


@_SECTIONS
def test_every_alert_has_a_runbook_entry_and_every_entry_an_alert(
    section: str, alerts: tuple[Alert, ...]
) -> None:
    entries = _alert_entries(section)
    assert sorted(entries) == sorted(a.name for a in alerts)


@_SECTIONS
def test_each_entry_states_its_alerts_severity_and_for(section: str, alerts: tuple[Alert, ...]) -> None:
    entries = _alert_entries(section)
    for alert in alerts:
        first = entries[alert.name].strip()
        assert first.startswith(f"`{alert.severity}`, for `{alert.for_}`."), (alert.name, first[:60])


@_SECTIONS
def test_every_runbook_url_resolves_to_a_heading(section: str, alerts: tuple[Alert, ...]) -> None:
    rules = yaml.safe_load(yaml.safe_dump(rule_groups(alerts)))["groups"][0]["rules"]
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        doc = paths.REPO_ROOT / path
        assert doc.is_file(), url
        anchors = {_anchor(h) for _, h in _HEADING.findall(doc.read_text(encoding="utf-8"))}
        assert anchor in anchors, url
        assert anchor == _anchor(rule["alert"]), url
