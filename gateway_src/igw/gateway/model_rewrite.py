"""Canary traffic splitting: a client-facing model name sent to weighted target models.

``spec.extensions.modelRewrites.rules[]`` maps a model name to targets (models or LoRA adapters some
scheduler serves) with relative weights. Each request draws a point ``u`` in ``[0, 1)`` and takes the
first target whose cumulative share exceeds ``u``: a random draw, or, with stickiness, a hash of the
tenant or of a header value so one user always lands on the same target while the weights stay.
Because targets are laid out in list order, growing the *last* target's weight (a 10% -> 50% ->
100% rollout) only moves users onto it, never off it.

Rules are built with the gateway runtime, so a configuration reload swaps the weights atomically:
a request uses either the old rules or the new ones, never a mix.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import orjson

from igw.errors import IgwGatewayError
from igw.gateway.request_body import InferenceBody

EXTENSION_NAME: Final = "modelRewrites"
_WHERE: Final = f"spec.extensions.{EXTENSION_NAME}.rules"


class ModelRewriteError(IgwGatewayError, ValueError):
    """A rewrite rule that cannot work (duplicate model, no positive weight, unknown target)."""


class StickyBy(StrEnum):
    NONE = "none"
    TENANT = "tenant"
    HEADER = "header"


@dataclass(frozen=True, slots=True)
class RewriteRule:
    model: str
    targets: tuple[str, ...]
    cumulative: tuple[float, ...]
    """Each target's upper bound in ``[0, 1]``, in list order (the last is 1.0)."""
    sticky_by: StickyBy = StickyBy.NONE
    sticky_header: str | None = None

    def target_at(self, u: float) -> str:
        for target, upper in zip(self.targets, self.cumulative, strict=True):
            if u < upper:
                return target
        return self.targets[-1]

    def sticky_key(self, headers: Mapping[str, str], tenant: str | None) -> str | None:
        if self.sticky_by is StickyBy.TENANT:
            return tenant
        if self.sticky_by is StickyBy.HEADER and self.sticky_header is not None:
            return headers.get(self.sticky_header)
        return None


def sticky_point(model: str, key: str) -> float:
    """A stable point in ``[0, 1)`` for ``key`` (independent per rule model)."""
    digest = hashlib.sha256(f"{model}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class ModelRewrites:
    """The rules of one configuration, by client-facing model name."""

    def __init__(self, rules: Mapping[str, RewriteRule]) -> None:
        self.rules = dict(rules)

    @staticmethod
    def from_extension(raw: Mapping[str, Any] | None, *, routable: Callable[[str], bool]) -> ModelRewrites:
        """Build from a schema-validated mapping; every target must be ``routable``."""
        rules: dict[str, RewriteRule] = {}
        for i, rule in enumerate((raw or {}).get("rules", ())):
            model = str(rule["model"])
            if model in rules:
                raise ModelRewriteError(f"{_WHERE}[{i}].model: {model!r} has more than one rule")
            targets: Sequence[Mapping[str, Any]] = rule["targets"]
            for j, t in enumerate(targets):
                if not routable(str(t["model"])):
                    raise ModelRewriteError(
                        f"{_WHERE}[{i}].targets[{j}].model: no scheduler serves {t['model']!r}"
                    )
            total = sum(int(t["weight"]) for t in targets)
            if total <= 0:
                raise ModelRewriteError(f"{_WHERE}[{i}].targets: at least one weight must be positive")
            running = 0
            cumulative = []
            for t in targets:
                running += int(t["weight"])
                cumulative.append(running / total)
            sticky_by = StickyBy(rule.get("stickyBy", StickyBy.NONE))
            header = rule.get("stickyHeader")
            if sticky_by is StickyBy.HEADER and not header:
                raise ModelRewriteError(f"{_WHERE}[{i}].stickyHeader: required when stickyBy is header")
            rules[model] = RewriteRule(
                model=model,
                targets=tuple(str(t["model"]) for t in targets),
                cumulative=tuple(cumulative),
                sticky_by=sticky_by,
                sticky_header=header.lower() if header else None,
            )
        return ModelRewrites(rules)

    def choose(
        self, model: str, *, headers: Mapping[str, str], tenant: str | None, rng: random.Random
    ) -> str | None:
        """The target for a request naming ``model``, or ``None`` when no rule matches."""
        rule = self.rules.get(model)
        if rule is None:
            return None
        key = rule.sticky_key(headers, tenant)
        u = sticky_point(model, key) if key else rng.random()
        return rule.target_at(u)


def retargeted(body: InferenceBody, model: str) -> InferenceBody:
    """``body`` with its ``model`` field set to ``model`` (the model server must see the target)."""
    doc = orjson.loads(body.raw)
    doc["model"] = model
    return dataclasses.replace(body, raw=orjson.dumps(doc), model=model)
