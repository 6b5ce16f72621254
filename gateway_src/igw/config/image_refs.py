"""Parse container image references and read an engine release version from their tags.

Real image references are messy: ``my.reg:5000/vllm/vllm-openai:v0.9.2``, ``lmsysorg/sglang:
v0.4.6.post1-cu124``, ``vllm/vllm-openai:nightly-20260901``, ``...:latest``, ``...@sha256:<hex>``.
A version we cannot read is an explicit :class:`UnknownVersion`, never a guess: a pre-flight check
must say "unknown" rather than silently pass or fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from packaging.version import InvalidVersion, Version

_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_FLOATING_TAGS: Final = frozenset({"latest", "nightly", "main", "stable", "dev", "edge"})


@dataclass(frozen=True, slots=True)
class ImageReference:
    """``[registry/]repository[:tag][@digest]`` split into its parts (registry may carry a port)."""

    registry: str | None
    repository: str
    tag: str | None
    digest: str | None


@dataclass(frozen=True, slots=True)
class KnownVersion:
    """A version read from a tag; ``source`` is the tag it came from."""

    version: Version
    source: str

    known = True

    def __str__(self) -> str:
        return str(self.version)


@dataclass(frozen=True, slots=True)
class UnknownVersion:
    """No version could be read; ``reason`` says why (shown to the user as is)."""

    source: str
    reason: str

    known = False

    def __str__(self) -> str:
        return f"unknown version ({self.reason})"


EngineVersion = KnownVersion | UnknownVersion


def parse_image_reference(image: str) -> ImageReference:
    """Split an image reference; ``ValueError`` if it is empty or malformed."""
    text = image.strip()
    if not text or any(ch.isspace() for ch in text):
        raise ValueError(f"invalid image reference {image!r}")
    digest: str | None = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not _DIGEST.fullmatch(digest):
            raise ValueError(f"invalid digest {digest!r} in image reference {image!r}")
    tag: str | None = None
    last_slash = text.rfind("/")
    colon = text.rfind(":")
    if colon > last_slash:  # a colon before the last slash is a registry port, not a tag
        text, tag = text[:colon], text[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ValueError(f"invalid tag {tag!r} in image reference {image!r}")
    registry: str | None = None
    first, sep, rest = text.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, text = first, rest
    if not text:
        raise ValueError(f"invalid image reference {image!r}: no repository")
    return ImageReference(registry=registry, repository=text, tag=tag, digest=digest)


def parse_version_tag(tag: str) -> EngineVersion:
    """Read a release version from an image tag (``v0.9.2``, ``0.4.6.post1-cu124``, ``0.9.2rc1``).

    A leading ``v`` is dropped; a trailing ``-<build flavour>`` (``-cu124``, ``-ubuntu22.04``) is
    dropped when what precedes it is a version. Floating tags (``latest``, ``nightly-20260901``)
    and anything else are :class:`UnknownVersion`.
    """
    raw = tag.strip()
    bare = raw[1:] if raw[:1] in {"v", "V"} else raw
    head = bare.split("-", 1)[0].lower()
    if head in _FLOATING_TAGS:
        return UnknownVersion(source=raw, reason=f"tag {raw!r} is a moving tag, not a release")
    pieces = bare.split("-")
    for end in range(len(pieces), 0, -1):
        candidate = "-".join(pieces[:end])
        if not candidate[:1].isdigit():
            break
        try:
            return KnownVersion(version=Version(candidate), source=raw)
        except InvalidVersion:
            continue
    return UnknownVersion(source=raw, reason=f"tag {raw!r} does not contain a release version")


def engine_version(image: str) -> EngineVersion:
    """The engine version an image reference pins, or why it cannot be told."""
    try:
        ref = parse_image_reference(image)
    except ValueError as exc:
        return UnknownVersion(source=image, reason=str(exc))
    if ref.tag is None:
        if ref.digest is not None:
            return UnknownVersion(
                source=image, reason="image is pinned by digest only; the version is not in the reference"
            )
        return UnknownVersion(source=image, reason="no tag (implicitly 'latest', a moving tag)")
    return parse_version_tag(ref.tag)
