"""EKS add-on versions: parsing and ordering.

AWS-published add-ons are versioned ``vMAJOR.MINOR.PATCH-eksbuild.N``; Marketplace add-ons may use plain
semver with a pre-release (``1.0.1-rc.1``). Ordering is by the semver triple, then a release sorts above
its pre-releases, then by the ``eksbuild`` number. Anything else is rejected with a message naming the
string, never guessed at: a dependency check must not pass on a version it cannot read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering
from typing import Final

from igw.errors import IgwToolingError

_PATTERN: Final = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)"
    r"(?:-(?:eksbuild\.(?P<build>\d+)|(?P<pre>[0-9A-Za-z.-]+)))?$"
)


class AddonVersionError(IgwToolingError, ValueError):
    """A string is not an EKS add-on version."""


@total_ordering
@dataclass(frozen=True, slots=True)
class AddonVersion:
    """A parsed add-on version; compare with ``<``/``>=``. ``str()`` gives the original text."""

    major: int
    minor: int
    patch: int
    eksbuild: int = 0
    prerelease: str | None = None
    text: str = ""

    @staticmethod
    def parse(text: str) -> AddonVersion:
        match = _PATTERN.match(text.strip())
        if match is None:
            raise AddonVersionError(
                f"{text!r} is not an add-on version (expected vMAJOR.MINOR.PATCH-eksbuild.N, e.g. "
                f"v2.0.0-eksbuild.2)"
            )
        build = match.group("build")
        return AddonVersion(
            major=int(match.group("major")),
            minor=int(match.group("minor")),
            patch=int(match.group("patch")),
            eksbuild=int(build) if build is not None else 0,
            prerelease=match.group("pre"),
            text=text.strip(),
        )

    def _key(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...], int]:
        # A release (no pre-release) sorts above every pre-release of the same triple.
        return (
            self.major,
            self.minor,
            self.patch,
            0 if self.prerelease is not None else 1,
            _prerelease_key(self.prerelease or ""),
            self.eksbuild,
        )

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, AddonVersion):
            return NotImplemented
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AddonVersion):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self.text or f"v{self.major}.{self.minor}.{self.patch}-eksbuild.{self.eksbuild}"


def _prerelease_key(prerelease: str) -> tuple[tuple[int, int, str], ...]:
    """SemVer 2.0.0's pre-release order (item 11): dot-separated identifiers compared one by one, numeric
    ones as numbers and below alphanumeric ones, a shorter list below a longer one it starts. Compared
    as one string, ``1.0.1-rc.9`` sorted above ``1.0.1-rc.10``: ``igw addon versions`` listed the older
    Marketplace pre-release as the newest."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in prerelease.split(".") if part
    )


def at_least(version: str, minimum: str) -> bool:
    """Whether ``version`` satisfies ``minimum``; :class:`AddonVersionError` if either is unreadable."""
    return AddonVersion.parse(version) >= AddonVersion.parse(minimum)
