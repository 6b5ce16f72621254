"""Vocabulary of the checks: severities, statuses, cross-references, check metadata, results.

Severity follows Trivy's ladder (CRITICAL…INFO) and status kube-bench's (PASS/FAIL/WARN/SKIP), so the output
reads like the tools security teams already know. A SKIP carries *why*: ``not-applicable`` (this source
cannot know the fact, e.g. runtime state from manifests) or ``not-evaluated`` (the fact exists but we could
not read it: API unreachable or forbidden) - only the latter makes the run incomplete (exit code 3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Final

from igw.redaction import redact_value

_UNPRINTABLE: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)


def printable(text: str) -> str:
    """``text`` with control characters written out as ``\\xNN``/``\\uNNNN`` escapes (newline and tab kept).

    A report quotes names and values of the scanned source, which an untrusted change can set: an
    ANSI escape (``\\x1b[2J``), a carriage return or a bidirectional override in a manifest's name went
    to the terminal as written, and a C0 control made the JUnit file not XML (XML 1.0 admits none)."""
    return _UNPRINTABLE.sub(lambda m: ascii(m.group())[1:-1], text)


class Severity(Enum):
    """Ordered by rank; ``security_severity`` is the SARIF/GitHub 0-10 score for the level."""

    CRITICAL = ("CRITICAL", 4, 9.5)
    HIGH = ("HIGH", 3, 8.0)
    MEDIUM = ("MEDIUM", 2, 5.5)
    LOW = ("LOW", 1, 3.0)
    INFO = ("INFO", 0, 0.0)

    def __init__(self, label: str, rank: int, security_severity: float) -> None:
        self.label = label
        self.rank = rank
        self.security_severity = security_severity

    def __str__(self) -> str:
        return self.label

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            names = ", ".join(s.label.lower() for s in cls)
            raise ValueError(f"unknown severity {text!r}; expected one of {names}") from None


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    WARN = "WARN"
    SKIP = "SKIP"


class SkipKind(StrEnum):
    NOT_APPLICABLE = "not-applicable"
    NOT_EVALUATED = "not-evaluated"


class Command(StrEnum):
    PREFLIGHT = "preflight"
    AUDIT = "audit"


TOOLS: Final = ("CIS-EKS", "Checkov", "kube-score", "Polaris", "Trivy", "cdk-nag", "SecurityHub")


@dataclass(frozen=True, slots=True)
class CrossRef:
    """The equivalent check in another tool, e.g. ``CrossRef("Checkov", "CKV_AWS_103")``."""

    tool: str
    id: str

    def __post_init__(self) -> None:
        if self.tool not in TOOLS:
            raise ValueError(f"unknown cross-reference tool {self.tool!r}; expected one of {TOOLS}")

    def __str__(self) -> str:
        return f"{self.tool}:{self.id}"


def refs(*pairs: str) -> tuple[CrossRef, ...]:
    """``refs("Checkov:CKV_K8S_22", "Trivy:KSV014")`` - compact cross-reference lists for check modules."""
    out = []
    for pair in pairs:
        tool, _, ident = pair.partition(":")
        out.append(CrossRef(tool, ident))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class CheckMeta:
    """What a check is, independent of any run. ``id`` is stable forever (documented, used in SARIF)."""

    id: str
    title: str
    command: Command
    category: str
    severity: Severity
    """Severity of a failure unless the result says otherwise."""
    description: str
    remediation: str
    cross_refs: tuple[CrossRef, ...] = ()


@dataclass(frozen=True, slots=True)
class Result:
    """One verdict of one check about one resource."""

    check_id: str
    status: Status
    severity: Severity
    resource: str
    message: str
    remediation: str = ""
    skip_kind: SkipKind | None = None

    def __post_init__(self) -> None:
        # Reports leave the machine (SARIF uploaded to code scanning, JSON and JUnit in CI): what a
        # result quotes of a manifest, a stack or a cluster - an annotation, a name, a field a token
        # was put in by mistake - passes the gateway's log redaction first. ``igw audit`` quoted
        # such a token whole.
        # The resource is a name the check wrote (``IAM role <logical ID>``): CDK's logical IDs and
        # AWS's type names, token-like to the redaction, stay readable there and nowhere else.
        object.__setattr__(self, "resource", printable(redact_value(self.resource, identifiers=True)))
        object.__setattr__(self, "message", printable(redact_value(self.message)))
        object.__setattr__(self, "remediation", printable(redact_value(self.remediation)))

    @property
    def is_finding(self) -> bool:
        return self.status in (Status.FAIL, Status.WARN)

    @property
    def not_evaluated(self) -> bool:
        return self.status is Status.SKIP and self.skip_kind is SkipKind.NOT_EVALUATED
