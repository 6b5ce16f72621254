"""Cross-references in ``spec.extensions`` that ``igw validate`` resolves against the whole document.

The gateway refuses these when it builds its runtime (start or hot reload); checking them here as
well lets ``igw validate`` (and CI running it) refuse the file before it is deployed, naming the
entry at fault:

* a model, adapter or tenant listed under two ``flowControl.objectives`` (which priority would it
  get?);
* a ``flowControl.bands`` entry keeping less room for higher bands than a lower band does
  (``dispatchBelow``, ``maxEndpointQueue``, ``keepSlots``): each band is compared with every other;
* a ``modelRewrites`` target that no scheduler serves (neither a ``modelName`` nor one of its
  ``loraAdapters``): the canary would send requests to a name nothing routes;
* a ``flowControl.enginePriority`` entry naming no scheduler, one listed twice, one whose engine
  reads no priority (TGI, a generic server without ``engine``), or SGLang settings on vLLM;
* an ``engines`` entry (``tgi[i]``, ``generic[i].scheduler``) naming no scheduler, or a scheduler
  given an engine twice (the rules of :func:`igw.config.engine_selection.scheduler_engines`);
* a tenant listed twice under ``rateLimits.tenants`` (which limits would it get?). The CRD refuses
  it too, as a list keyed by ``tenant`` (``x-kubernetes-list-type: map``): a CEL uniqueness rule
  over its 1,000 items would exceed the API server's cost budget.

They are not admission rules (``schemas/admission-rules.yaml``) because each needs nested loops over
every member list of every entry, which the API server's CEL cost budget (``igw.config.cel_cost``)
does not allow. Values of the
wrong type are skipped: the schema reports those.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from igw.config.errors import Problem
from igw.config.jsonpath import PathPart, format_path

OBJECTIVE_MEMBER_RULE: Final = "unique-objective-member"
REWRITE_TARGET_RULE: Final = "rewrite-target-served"
ENGINE_PRIORITY_RULE: Final = "engine-priority-scheduler"
ENGINE_SELECTION_RULE: Final = "engine-selection-scheduler"
BAND_ORDER_RULE: Final = "flow-band-order"
RATE_LIMIT_TENANT_RULE: Final = "unique-rate-limit-tenant"
_SGLANG_ONLY: Final = ("preemptionThreshold", "preemption", "lowValuesFirst")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else []


def _extension(doc: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return _mapping(_mapping(_mapping(doc.get("spec")).get("extensions")).get(name))


def _problem(rule: str, parts: Sequence[PathPart], message: str) -> Problem:
    return Problem(path=format_path(parts), message=message, rule=rule)


def objective_member_problems(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """A model or tenant under two objectives (listing it twice in one objective is harmless)."""
    objectives = _list(_extension(doc, "flowControl").get("objectives"))
    for field in ("models", "tenants"):
        owner: dict[str, int] = {}
        for i, objective in enumerate(objectives):
            for j, value in enumerate(_list(_mapping(objective).get(field))):
                if not isinstance(value, str):
                    continue
                first = owner.setdefault(value, i)
                if first != i:
                    yield _problem(
                        OBJECTIVE_MEMBER_RULE,
                        ("spec", "extensions", "flowControl", "objectives", i, field, j),
                        f"{json.dumps(value)} is already listed under "
                        f"spec.extensions.flowControl.objectives[{first}].{field}: one {field[:-1]} "
                        "can have only one objective",
                    )


def band_order_violations(bands: Sequence[Any]) -> Iterator[tuple[int, str, str]]:
    """``(index, field, message)`` for each ``flowControl.bands`` entry that keeps less room for the
    bands above it than the next lower band does: a higher ``dispatchBelow``, ``maxEndpointQueue``
    (absent: no limit) or a lower ``keepSlots`` (absent: 0) would let a lower band past a higher one.
    Bands are compared in priority order, each with the next lower one; entries of the wrong type
    are skipped (the schema reports them). The gateway refuses the first of these at start
    (:class:`~igw.scheduling.flow_control.FlowControlSettings`), ``igw validate`` reports them all."""
    typed = [
        (i, b)
        for i, b in enumerate(bands)
        if isinstance(b, Mapping)
        and isinstance(b.get("priority"), int)
        and not isinstance(b["priority"], bool)
    ]
    indexed = sorted(typed, key=lambda ib: int(ib[1]["priority"]))
    for (_, low), (j, high) in itertools.pairwise(indexed):
        lower = int(low["priority"])
        low_value, high_value = _number(low, "dispatchBelow", 1.0), _number(high, "dispatchBelow", 1.0)
        if low_value is not None and high_value is not None and low_value > high_value:
            yield (
                j,
                "dispatchBelow",
                (
                    f"{high_value:g} is below the {low_value:g} of the lower priority {lower}; a lower band "
                    "cannot keep headroom from a higher one"
                ),
            )
        low_cap, high_cap = (
            _number(low, "maxEndpointQueue", math.inf),
            _number(high, "maxEndpointQueue", math.inf),
        )
        if low_cap is not None and high_cap is not None and low_cap > high_cap:
            yield (
                j,
                "maxEndpointQueue",
                (
                    f"{high_cap:g} is below the {low_cap:g} of the lower priority {lower}; a lower band "
                    "cannot keep queue places from a higher one"
                ),
            )
        low_keep, high_keep = _number(low, "keepSlots", 0), _number(high, "keepSlots", 0)
        if low_keep is not None and high_keep is not None and low_keep < high_keep:
            yield (
                j,
                "keepSlots",
                (
                    f"{int(high_keep)} is above the {int(low_keep)} of the lower priority {lower}; "
                    "a lower band cannot keep batch slots from a higher one"
                ),
            )


def _number(band: Mapping[str, Any], key: str, default: float) -> float | None:
    """``band[key]`` as a number (``default`` when absent); ``None`` when it is not one (a string, an
    object, a boolean: the schema reports it). Before session s42 ``float()``/``int()`` of such a value
    raised out of ``igw validate`` (a ``TypeError`` traceback for ``keepSlots: {}``)."""
    value = band.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def band_order_problems(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """:func:`band_order_violations` of the document's ``flowControl.bands``, by path."""
    bands = _list(_extension(doc, "flowControl").get("bands"))
    for j, field, message in band_order_violations(bands):
        yield _problem(BAND_ORDER_RULE, ("spec", "extensions", "flowControl", "bands", j, field), message)


def served_models(spec: Mapping[str, Any]) -> set[str]:
    """Model names a config ``spec`` serves: each scheduler's ``modelName`` and ``loraAdapters``."""
    names: set[str] = set()
    for scheduler in _list(spec.get("schedulers")):
        s = _mapping(scheduler)
        if isinstance(s.get("modelName"), str) and s["modelName"]:
            names.add(s["modelName"])
        names.update(a for a in _list(s.get("loraAdapters")) if isinstance(a, str))
    return names


def rewrite_target_problems(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """A canary target that no scheduler serves."""
    rules = _list(_extension(doc, "modelRewrites").get("rules"))
    if not rules:
        return
    served = served_models(_mapping(doc.get("spec")))
    for i, rule in enumerate(rules):
        for j, target in enumerate(_list(_mapping(rule).get("targets"))):
            model = _mapping(target).get("model")
            if isinstance(model, str) and model not in served:
                yield _problem(
                    REWRITE_TARGET_RULE,
                    ("spec", "extensions", "modelRewrites", "rules", i, "targets", j, "model"),
                    f"no scheduler serves {json.dumps(model)}: it is neither a spec.schedulers[].modelName "
                    "nor one of their loraAdapters",
                )


def engine_priority_problems(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``enginePriority`` entries the gateway would refuse (the same rules as
    :func:`igw.scheduling.engine_priority.engine_priorities`, as path-named problems)."""
    entries = _list(_extension(doc, "flowControl").get("enginePriority"))
    if not entries:
        return
    spec = _mapping(doc.get("spec"))
    engine_of: dict[str, str] = {}
    for scheduler in _list(spec.get("schedulers")):
        s = _mapping(scheduler)
        if isinstance(s.get("name"), str):
            engine_of[s["name"]] = str(s.get("engineType", "vllm"))
    engines_ext = _extension(doc, "engines")
    for name in _list(engines_ext.get("tgi")):
        engine_of[str(name)] = "tgi"
    for entry in _list(engines_ext.get("generic")):
        engine_of[str(_mapping(entry).get("scheduler"))] = "generic"
    seen: set[str] = set()
    base = ("spec", "extensions", "flowControl", "enginePriority")
    for i, raw in enumerate(entries):
        entry = _mapping(raw)
        name = entry.get("scheduler")
        if not isinstance(name, str):
            continue
        if name not in engine_of:
            yield _problem(
                ENGINE_PRIORITY_RULE,
                (*base, i, "scheduler"),
                f"no scheduler named {json.dumps(name)} in spec.schedulers",
            )
            continue
        if name in seen:
            yield _problem(
                ENGINE_PRIORITY_RULE, (*base, i, "scheduler"), f"{json.dumps(name)} is listed twice"
            )
        seen.add(name)
        engine = entry.get("engine", engine_of[name])
        if engine not in ("vllm", "sglang"):
            yield _problem(
                ENGINE_PRIORITY_RULE,
                (*base, i, "engine"),
                f"scheduler {json.dumps(name)} runs {engine}, which reads no request priority; set engine: "
                "vllm or sglang if its servers are one of those",
            )
        elif engine == "vllm":
            for key in _SGLANG_ONLY:
                if key in entry:
                    yield _problem(
                        ENGINE_PRIORITY_RULE,
                        (*base, i, key),
                        "an SGLang setting; vLLM's priority policy serves lower values first and preempts "
                        "only on a KV-cache shortage",
                    )


def engine_selection_problems(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``engines`` entries the gateway would refuse at start: no such scheduler, or one listed twice
    (across ``tgi`` and ``generic``)."""
    engines_ext = _extension(doc, "engines")
    if not engines_ext:
        return
    names = {
        s["name"]
        for s in map(_mapping, _list(_mapping(doc.get("spec")).get("schedulers")))
        if isinstance(s.get("name"), str)
    }
    base = ("spec", "extensions", "engines")
    claims: list[tuple[Any, tuple[PathPart, ...]]] = [
        (name, (*base, "tgi", i)) for i, name in enumerate(_list(engines_ext.get("tgi")))
    ]
    claims += [
        (_mapping(entry).get("scheduler"), (*base, "generic", i, "scheduler"))
        for i, entry in enumerate(_list(engines_ext.get("generic")))
    ]
    seen: dict[str, str] = {}
    for name, parts in claims:
        if not isinstance(name, str):
            continue
        if name not in names:
            yield _problem(
                ENGINE_SELECTION_RULE, parts, f"no scheduler named {json.dumps(name)} in spec.schedulers"
            )
        elif name in seen:
            yield _problem(
                ENGINE_SELECTION_RULE,
                parts,
                f"scheduler {json.dumps(name)} is already given an engine at {seen[name]}",
            )
        else:
            seen[name] = format_path(parts)


def rate_limit_tenant_problems(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """A ``rateLimits.tenants`` entry naming a tenant an earlier entry names (the gateway refuses
    the first at start: :class:`~igw.security.settings.RateLimitSettings`)."""
    first_seen: dict[str, int] = {}
    for index, entry in enumerate(_list(_extension(doc, "rateLimits").get("tenants"))):
        tenant = _mapping(entry).get("tenant")
        if not isinstance(tenant, str):
            continue
        first = first_seen.setdefault(tenant, index)
        if first != index:
            yield _problem(
                RATE_LIMIT_TENANT_RULE,
                ("spec", "extensions", "rateLimits", "tenants", index, "tenant"),
                f"duplicates spec.extensions.rateLimits.tenants[{first}].tenant ({json.dumps(tenant)}); "
                "each tenant may have one entry",
            )


def reference_problems(doc: Mapping[str, Any]) -> list[Problem]:
    """Every cross-reference problem of one InferenceGatewayConfig document."""
    return [
        *objective_member_problems(doc),
        *band_order_problems(doc),
        *rewrite_target_problems(doc),
        *engine_priority_problems(doc),
        *engine_selection_problems(doc),
        *rate_limit_tenant_problems(doc),
    ]
