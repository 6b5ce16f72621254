"""What every renderer receives: the run's results plus the metadata of the checks that ran."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from igw.checks.inventory import SourceLocation
from igw.checks.model import CheckMeta, Command, Result, Severity, Status


@dataclass(frozen=True, slots=True)
class Report:
    command: Command
    source: str
    checks: tuple[CheckMeta, ...]
    results: tuple[Result, ...]
    fail_on: Severity
    exit_code: int
    source_errors: tuple[str, ...] = ()
    locations: Mapping[str, SourceLocation] = field(default_factory=dict)
    default_location: SourceLocation | None = None

    def location(self, resource: str) -> SourceLocation | None:
        """The declaring file of ``resource`` (or of the object it names first), else the source's."""
        found = self.locations.get(resource)
        if found is None:
            owners = [key for key in self.locations if resource.startswith(key + " ")]
            found = self.locations[max(owners, key=len)] if owners else None
        return found or self.default_location

    def meta(self, check_id: str) -> CheckMeta:
        return next(m for m in self.checks if m.id == check_id)

    def counts(self) -> dict[str, int]:
        counter = Counter(r.status.value for r in self.results)
        return {status.value: counter.get(status.value, 0) for status in Status}


def build_report(
    *,
    command: Command,
    source: str,
    checks: Sequence[CheckMeta],
    results: Sequence[Result],
    fail_on: Severity,
    exit_code: int,
    source_errors: Sequence[str] = (),
    locations: Mapping[str, SourceLocation] | None = None,
    default_location: SourceLocation | None = None,
) -> Report:
    return Report(
        command,
        source,
        tuple(checks),
        tuple(results),
        fail_on,
        exit_code,
        tuple(source_errors),
        dict(locations or {}),
        default_location,
    )
