"""What every renderer receives: the run's results plus the metadata of the checks that ran."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from igw.checks.inventory import SourceLocation
from igw.checks.model import CheckMeta, Command, Result, Severity, Status, printable
from igw.redaction import redact_value


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
    # What the report says about where it looked and what it could not read passes the same
    # redaction as its results (igw.checks.model.Result): the source names a cluster by its API
    # server URL, which a kubeconfig may give with a password in it, and a source's error may quote
    # it. The locations are keyed by the results' (redacted) resources.
    return Report(
        command,
        printable(redact_value(source)),
        tuple(checks),
        tuple(results),
        fail_on,
        exit_code,
        tuple([printable(redact_value(error)) for error in source_errors]),
        {redact_value(resource): where for resource, where in (locations or {}).items()},
        default_location,
    )
