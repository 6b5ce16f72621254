"""The per-stack resource counts and cdk-nag counts that docs/infrastructure.md's ``make synth`` table
gives for each example config are those of the templates the examples synthesize to.

Before session s43 the table still said ``Platform 19, Inference 5`` for the default config (it had
21 and 17), ``ClusterAccess 9`` (10) and 21 acknowledged findings (24) for the existing-cluster
example: each session that added a resource left the numbers behind, and nothing compared them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cdk import nag
from tests.cdk.support import Synthesized

DOC = Path(__file__).resolve().parents[2] / "docs" / "infrastructure.md"
ROW = re.compile(
    r"^\| `cdk/examples/(?P<file>[\w.-]+)`[^|]*\| (?P<stacks>[^|]+) \|[^|]*\|"
    r" (?P<unsuppressed>\d+) unsuppressed, (?P<acknowledged>\d+) acknowledged \|",
    re.MULTILINE,
)
FIXTURES = {
    "deployment.yaml": "synthesized",
    "aws-managed-addon.yaml": "variant",
    "existing-cluster.yaml": "existing",
}


def documented_rows() -> dict[str, tuple[dict[str, int], int, int]]:
    """Example file -> (stack name -> resources, unsuppressed, acknowledged) as the table says."""
    rows: dict[str, tuple[dict[str, int], int, int]] = {}
    for match in ROW.finditer(DOC.read_text(encoding="utf-8")):
        stacks = {}
        for part in match["stacks"].split(","):
            name, count = part.split()
            stacks[name] = int(count)
        rows[match["file"]] = (stacks, int(match["unsuppressed"]), int(match["acknowledged"]))
    return rows


def synthesized_counts(synthesized: Synthesized) -> dict[str, int]:
    """Stack name without the example's ``Igw`` prefix -> resources in its template."""
    return {
        path.name.removesuffix(".template.json").removeprefix("Igw"): len(
            synthesized.templates[role]["Resources"]
        )
        for role, path in synthesized.files.items()
    }


def test_the_table_has_a_row_for_each_example() -> None:
    assert sorted(documented_rows()) == sorted(FIXTURES)


@pytest.mark.parametrize("example", sorted(FIXTURES))
def test_the_documented_counts_are_the_synthesized_ones(example: str, request: pytest.FixtureRequest) -> None:
    synthesized: Synthesized = request.getfixturevalue(FIXTURES[example])
    stacks, unsuppressed, acknowledged = documented_rows()[example]
    violations, suppressed = nag.read_report(synthesized.outdir)

    assert (stacks, unsuppressed, acknowledged) == (
        synthesized_counts(synthesized),
        len(violations),
        len(suppressed),
    )
