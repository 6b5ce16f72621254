"""Canary traffic splitting: a client-facing model name sent to weighted target models.

``spec.extensions.modelRewrites.rules[]`` maps a model name to targets (models or LoRA adapters some
scheduler serves) with relative weights. Each request draws a point ``u`` in ``[0, 1)`` and takes the
first target whose cumulative share exceeds ``u``: a random draw, or, with stickiness, a hash of the
tenant or of a header value so one user always lands on the same target while the weights stay.
Because targets are laid out in list order, growing the *last* target's weight (a 10% -> 50% ->
100% rollout) only moves users onto it, never off it.

A rule may also require request headers (exact values, all of them): for one model, the rules that
name it are tried in list order and the first whose headers all match wins. A rule without a model
(an ``InferenceModelRewrite`` rule with empty ``matches``, or a match on headers only) is a
fallback: it applies to a request only when no rule naming its model matched.

A continuation (``previous_response_id``) goes to the target whose pool stored the response it
continues, whatever the draw, when the gateway knows that pool (the stored response exists on one pod
only), even a target of weight 0: rolling a version back ends its new conversations, not those in
progress. When that target's pool has no usable endpoint (below), the continuation is not moved: no
other version's pod stores the response (its 404 would tell the client the conversation is gone), so
it is answered 503 ``no_endpoints`` with ``Retry-After``, naming the version that holds it, and is not
counted as a fallback (:attr:`Split.unready`, since session s49).

A target whose pool has no usable endpoint (none discovered, or none with fresh metrics: scaled to
zero, every pod gone or unreachable) gives its draw to the rule's other targets that have one, in
proportion to their weights (the same point ``u`` laid out over them, so stickiness holds), counted
as a fallback (``igw_model_rewrite_fallbacks_total``). Gateway API's HTTPRoute instead answers 500
(invalid backendRef) or SHOULD answer 503 (a Service without ready endpoints) for that share; a
gateway in front of a canary whose version is momentarily gone serves the clients from the version
that can, and tells the rollout so through the metric. When no other target has a usable endpoint
either, the draw stands (the scheduler's all-stale fallback, or 503 ``no_endpoints``). A pod that
fails while its pool still has fresh ones is the scheduler's business (exclusion), not the split's.

Rules are built with the gateway runtime, so a configuration reload swaps the weights atomically:
a request uses either the old rules or the new ones, never a mix.

Each rule has a ``label`` for the per-target metrics (:mod:`igw.gateway.rewrite_metrics`): its
``name`` when the configuration gives one (the operator sets the ``InferenceModelRewrite``'s name),
else ``rules[<index>]``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from igw.errors import IgwGatewayError
from igw.gateway.request_body import InferenceBody, with_fields

EXTENSION_NAME: Final = "modelRewrites"
_WHERE: Final = f"spec.extensions.{EXTENSION_NAME}.rules"


class ModelRewriteError(IgwGatewayError, ValueError):
    """A rewrite rule that cannot work (duplicate match, no positive weight, unknown target)."""


class StickyBy(StrEnum):
    NONE = "none"
    TENANT = "tenant"
    HEADER = "header"


@dataclass(frozen=True, slots=True)
class RewriteRule:
    model: str | None
    """The client-facing model name; ``None`` for a fallback rule that matches any model."""
    targets: tuple[str, ...]
    cumulative: tuple[float, ...]
    """Each target's upper bound in ``[0, 1]``, in list order (the last is 1.0)."""
    sticky_by: StickyBy = StickyBy.NONE
    sticky_header: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    """``(lower-case name, exact value)`` pairs that must all be present on the request."""
    label: str = ""
    """The rule's ``rule`` metric label: its configured ``name``, else ``rules[<index>]``."""

    def matches_headers(self, headers: Mapping[str, str]) -> bool:
        return all(headers.get(name) == value for name, value in self.headers)

    def target_at(self, u: float) -> str:
        for target, upper in zip(self.targets, self.cumulative, strict=True):
            if u < upper:
                return target
        # u at or past 1.0 (not a point of [0, 1)): the last target of positive weight, never one of
        # weight 0, which the loop would have reached only through such a point
        return self.reachable()[-1]

    def shares(self) -> tuple[float, ...]:
        """Each target's share of the draws, in list order (0 for a weight 0)."""
        lower = (0.0, *self.cumulative[:-1])
        return tuple(hi - lo for lo, hi in zip(lower, self.cumulative, strict=True))

    def reachable(self) -> tuple[str, ...]:
        """The targets a request can be sent to: those with a positive weight (a share above 0)."""
        return tuple(t for t, share in zip(self.targets, self.shares(), strict=True) if share > 0)

    def fallback_at(self, u: float, usable: Callable[[str], bool]) -> str | None:
        """The target for point ``u`` over the targets of positive weight that are ``usable``, each
        keeping its weight's proportion; ``None`` when none is."""
        kept = [
            (t, share)
            for t, share in zip(self.targets, self.shares(), strict=True)
            if share > 0 and usable(t)
        ]
        total = sum(share for _, share in kept)
        running = 0.0
        for target, share in kept:
            running += share
            if u * total < running:
                return target
        return kept[-1][0] if kept else None

    def sticky_key(self, headers: Mapping[str, str], tenant: str | None) -> str | None:
        if self.sticky_by is StickyBy.TENANT:
            return tenant
        if self.sticky_by is StickyBy.HEADER and self.sticky_header is not None:
            return headers.get(self.sticky_header)
        return None


def sticky_point(model: str, key: str) -> float:
    """A stable point in ``[0, 1)`` for ``key`` (independent per rule model)."""
    digest = hashlib.sha256(f"{model}\0{key}".encode()).digest()
    return hash_point(int.from_bytes(digest[:8], "big"))


def hash_point(h: int) -> float:
    """A 64-bit hash as a point in ``[0, 1)``: its top 53 bits (a float's precision) over ``2**53``.
    Divided whole by ``2**64``, the hashes from ``2**64 - 2**10`` up round to 1.0, a point past
    every target's bound, which :meth:`RewriteRule.target_at` once gave to the last target even at
    weight 0."""
    return (h >> 11) / 2**53


def _header_pairs(raw: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(h["name"]).lower(), str(h["value"])) for h in raw or ()))


class ModelRewrites:
    """The rules of one configuration: per client-facing model name, and the model-less fallbacks."""

    def __init__(
        self, rules: Mapping[str, Sequence[RewriteRule]], fallback: Sequence[RewriteRule] = ()
    ) -> None:
        self.rules: dict[str, tuple[RewriteRule, ...]] = {model: tuple(rs) for model, rs in rules.items()}
        """Rules by the model they name, in list order (the keys are listed in ``GET /v1/models``)."""
        self.fallback = tuple(fallback)
        self.configured = bool(self.rules or self.fallback)
        """Whether any rule exists (without one, :meth:`split` is ``None`` for every request)."""

    @staticmethod
    def from_extension(raw: Mapping[str, Any] | None, *, routable: Callable[[str], bool]) -> ModelRewrites:
        """Build from a schema-validated mapping; every target must be ``routable``."""
        rules: dict[str, list[RewriteRule]] = {}
        fallback: list[RewriteRule] = []
        seen: dict[tuple[str | None, tuple[tuple[str, str], ...]], int] = {}
        for i, rule in enumerate((raw or {}).get("rules", ())):
            model = str(rule["model"]) if rule.get("model") is not None else None
            headers = _header_pairs(rule.get("headers"))
            if (model, headers) in seen:
                raise ModelRewriteError(
                    f"{_WHERE}[{i}]: matches the same model and headers as {_WHERE}[{seen[model, headers]}]"
                )
            seen[model, headers] = i
            built = _rule(i, rule, model, headers, routable)
            if model is None:
                fallback.append(built)
            else:
                rules.setdefault(model, []).append(built)
        return ModelRewrites(rules, fallback)

    def targets_of(self, model: str) -> tuple[str, ...]:
        """Every target a request naming ``model`` can be sent to, over the rules naming it (whatever
        their headers): authorization judges the target, so a caller may use the name only when it
        may use each of these."""
        return tuple(dict.fromkeys(t for rule in self.rules.get(model, ()) for t in rule.reachable()))

    def match(self, model: str, headers: Mapping[str, str]) -> RewriteRule | None:
        """The first rule naming ``model`` whose headers match, else the first matching fallback."""
        for rule in (*self.rules.get(model, ()), *self.fallback):
            if rule.matches_headers(headers):
                return rule
        return None

    def choose(
        self, model: str, *, headers: Mapping[str, str], tenant: str | None, rng: random.Random
    ) -> str | None:
        """The target for a request naming ``model``, or ``None`` when no rule matches."""
        split = self.split(model, headers=headers, tenant=tenant, rng=rng)
        return None if split is None else split.target

    def split(
        self,
        model: str,
        *,
        headers: Mapping[str, str],
        tenant: str | None,
        rng: random.Random,
        holds: Callable[[str], bool] | None = None,
        usable: Callable[[str], bool] | None = None,
    ) -> Split | None:
        """The matching rule and its target for a request naming ``model``; ``None``: no rule.

        ``holds`` (given for a continuation, ``previous_response_id``) says whether a target's pool
        is known to store the response continued: when the drawn target's pool is not and another
        target's is, the request goes to that one, since only the pod that stored a response can
        continue it and any other answers 404. A target of weight 0 is followed too: a rollback
        (weight 0) stops new conversations on a version, not the ones its pods still hold, which
        continue there until the target leaves the rule or its pods go (Argo Rollouts likewise
        keeps an aborted canary's pods ``abortScaleDownDelaySeconds`` to drain).

        ``usable`` says whether a target's pool has an endpoint to send to (one with fresh metrics):
        when the chosen target's has none, the draw goes to the targets that have one
        (:meth:`RewriteRule.fallback_at`), named in :attr:`Split.fallback_from` - unless it is the
        target ``holds`` found, which stays, :attr:`Split.unready` (another's pods would answer 404)."""
        rule = self.match(model, headers)
        if rule is None:
            return None
        key = rule.sticky_key(headers, tenant)
        u = sticky_point(rule.model or "", key) if key else rng.random()
        target = rule.target_at(u)
        held = holds is not None and holds(target)
        if holds is not None and not held:
            # every target the rule lists, weight 0 too: a rolled-back version's pods still hold the
            # conversations they stored, and no other pod can continue one
            target = next((t for t in rule.targets if holds(t)), target)
            held = holds(target)
        if usable is not None and len(rule.targets) > 1 and not usable(target):
            if held:  # no other version's pod stores it: told so, not moved (since session s49)
                return Split(
                    rule.label, target, named=rule.model is not None, unready=True, targets=rule.targets
                )
            instead = rule.fallback_at(u, usable)
            if instead is not None:
                named = rule.model is not None
                return Split(rule.label, instead, named=named, fallback_from=target, targets=rule.targets)
        return Split(rule=rule.label, target=target, named=rule.model is not None, targets=rule.targets)


@dataclass(frozen=True, slots=True)
class Split:
    """One canary decision: the rule's metric label and the target it chose."""

    rule: str
    target: str
    named: bool = True
    """Whether the rule names the client's model (a configured name); ``False`` for a fallback rule,
    which catches any name a client makes up, so that name must not become a metric label."""
    fallback_from: str | None = None
    """The target drawn, when its pool had no usable endpoint and ``target`` took its draw."""
    unready: bool = False
    """``target`` stores the response a continuation continues and its pool has no usable endpoint:
    the request is answered 503 ``no_endpoints`` (no other version can continue it)."""
    targets: tuple[str, ...] = ()
    """Every target of the rule, in list order (weight 0 too): the versions a continuation of a
    response no scheduler here knows is searched for in, the drawn ``target``'s pool first."""


def _rule(
    i: int,
    rule: Mapping[str, Any],
    model: str | None,
    headers: tuple[tuple[str, str], ...],
    routable: Callable[[str], bool],
) -> RewriteRule:
    targets: Sequence[Mapping[str, Any]] = rule["targets"]
    for j, t in enumerate(targets):
        if not routable(str(t["model"])):
            raise ModelRewriteError(f"{_WHERE}[{i}].targets[{j}].model: no scheduler serves {t['model']!r}")
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
    return RewriteRule(
        model=model,
        targets=tuple(str(t["model"]) for t in targets),
        cumulative=tuple(cumulative),
        sticky_by=sticky_by,
        sticky_header=header.lower() if header else None,
        headers=headers,
        label=str(rule.get("name") or f"rules[{i}]"),
    )


def retargeted(body: InferenceBody, model: str) -> InferenceBody:
    """``body`` with its ``model`` field set to ``model`` (the model server must see the target)."""
    return with_fields(body, {"model": model})
