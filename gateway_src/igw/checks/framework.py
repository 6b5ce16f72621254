"""The check protocol, the context a check runs in, and the runner.

A check is any object with ``meta`` (:class:`CheckMeta`) and ``run(ctx)`` yielding
:class:`Result`s, built through :class:`Reporter` so severity, remediation and IDs stay consistent.
The runner turns a :class:`MissingFact` into a SKIP with its reason and a crash into a
``not-evaluated`` SKIP naming the exception: a check that did not finish is never a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

from igw.checks.inventory import Inventory, Missing, MissingFact
from igw.checks.model import CheckMeta, Result, Severity, SkipKind, Status

Clock = Callable[[], datetime]
ProgressCallback = Callable[[int, int, str], None]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """User choices that change verdicts; every field maps to a CLI flag."""

    allow_internet_facing: bool = False
    probe: bool = False
    probe_timeout_s: float = 5.0
    ca_bundle: str | None = None
    """PEM CA file for ``--probe`` HTTPS fetches (JWKS, discovery); default: the system trust store."""
    certificate_warn_days: int = 14
    gateway_role_arn: str | None = None
    include_system_namespaces: bool = False
    tier_links: tuple[tuple[str, str], ...] = ()
    """``igw audit --link CLUSTER=NAMESPACE/NAME``: a GlobalRouterConfig cluster served by that
    InferenceGatewayConfig, for gateways without ``globalHeartbeat`` (IGW-AU207..209)."""


@dataclass
class CheckContext:
    inventory: Inventory
    options: CheckOptions = field(default_factory=CheckOptions)
    clock: Clock = utc_now
    check_ids: tuple[str, ...] = ()
    """The IDs of the checks this run holds, in order (:func:`run_checks` sets them; empty for a check
    run alone): a note several checks would each repeat goes to the first of them that runs
    (IGW-AU207..209's unlinked gateways)."""


class Check(Protocol):
    @property
    def meta(self) -> CheckMeta: ...

    def run(self, ctx: CheckContext) -> Iterable[Result]: ...


class Reporter:
    """Builds results for one check; keeps the check's ID, severity and remediation."""

    def __init__(self, meta: CheckMeta) -> None:
        self.meta = meta

    def _result(
        self,
        status: Status,
        resource: str,
        message: str,
        *,
        severity: Severity | None = None,
        remediation: str | None = None,
        skip_kind: SkipKind | None = None,
    ) -> Result:
        return Result(
            check_id=self.meta.id,
            status=status,
            severity=severity or self.meta.severity,
            resource=resource,
            message=message,
            remediation=self.meta.remediation if remediation is None else remediation,
            skip_kind=skip_kind,
        )

    def passed(self, resource: str, message: str) -> Result:
        return self._result(Status.PASS, resource, message, remediation="")

    def fail(
        self, resource: str, message: str, *, severity: Severity | None = None, remediation: str | None = None
    ) -> Result:
        return self._result(Status.FAIL, resource, message, severity=severity, remediation=remediation)

    def warn(
        self, resource: str, message: str, *, severity: Severity | None = None, remediation: str | None = None
    ) -> Result:
        return self._result(Status.WARN, resource, message, severity=severity, remediation=remediation)

    def skip(self, resource: str, missing: Missing) -> Result:
        return self._result(Status.SKIP, resource, missing.reason, remediation="", skip_kind=missing.kind)


@dataclass(frozen=True, slots=True)
class FunctionCheck:
    """A check written as a function ``body(ctx, reporter)``: how every module in this package does it."""

    meta: CheckMeta
    body: Callable[[CheckContext, Reporter], Iterable[Result]]

    def run(self, ctx: CheckContext) -> Iterable[Result]:
        return self.body(ctx, Reporter(self.meta))


def run_check(check: Check, ctx: CheckContext) -> list[Result]:
    reporter = Reporter(check.meta)
    try:
        results = list(check.run(ctx))
    except MissingFact as missing:
        return [reporter.skip("-", missing.missing)]
    except Exception as exc:  # a bug or an unexpected shape: say so, never pass
        reason = f"check could not run: {type(exc).__name__}: {exc}"
        return [reporter.skip("-", Missing(reason, SkipKind.NOT_EVALUATED))]
    if not results:
        return [reporter.skip("-", Missing("nothing in scope for this check"))]
    return results


def run_checks(
    checks: Sequence[Check], ctx: CheckContext, *, on_progress: ProgressCallback | None = None
) -> list[Result]:
    """Run ``checks`` in order; results sorted deterministically (check ID, resource, message)."""
    results: list[Result] = []
    ctx = replace(ctx, check_ids=tuple(check.meta.id for check in checks))
    for index, check in enumerate(checks, start=1):
        results.extend(run_check(check, ctx))
        if on_progress is not None:
            on_progress(index, len(checks), check.meta.id)
    return sorted(results, key=lambda r: (r.check_id, r.resource, r.status.value, r.message))


EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_NOT_EVALUATED = 3


def exit_code(results: Iterable[Result], *, fail_on: Severity) -> int:
    """1 if any FAIL/WARN at or above ``fail_on``; else 3 if anything could not be evaluated; else 0.

    Findings win over "incomplete" because they are certain and actionable; a run with nothing
    certain to report but gaps must not look clean, hence 3 rather than 0.
    """
    items = list(results)
    if any(r.is_finding and r.severity.rank >= fail_on.rank for r in items):
        return EXIT_FINDINGS
    if any(r.not_evaluated for r in items):
        return EXIT_NOT_EVALUATED
    return EXIT_OK


def iter_findings(results: Iterable[Result]) -> Iterator[Result]:
    return (r for r in results if r.is_finding)
