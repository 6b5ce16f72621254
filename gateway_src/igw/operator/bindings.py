"""InferenceObjective and InferenceModelRewrite objects merged into the spec an InferenceGatewayConfig serves.

Binding: the reference binds these objects to an ``InferencePool`` through ``spec.poolRef``; in igw
an InferenceGatewayConfig plays the pool's role, so an object binds to the InferenceGatewayConfig
**of its own namespace whose name is** ``spec.poolRef.name`` (``poolRef.group`` and ``kind`` keep
the reference's values and are only checked by the schema).

Merge (pure; the reconciler lists the objects and writes the result into the data-plane ConfigMap):

* each accepted objective becomes one ``spec.extensions.flowControl.objectives`` entry
  ``{name: <object name>, priority: <spec.priority or 0>}``; a config without ``flowControl`` gets
  flow control with its defaults, since an objective means nothing without it;
* each rule of an accepted rewrite becomes one ``spec.extensions.modelRewrites.rules`` entry per
  match (``model.value`` and ``headers``; a rule without matches becomes a model-less fallback),
  with its targets (``modelRewrite`` -> ``model``; no weights, or all zero, means equal shares)
  and the object's name as the rule's ``name`` (the ``rule`` label of the per-target metrics);
* what the config's own spec writes comes first and wins; between objects, the older one
  (``creationTimestamp``, then name) wins.

An object is refused whole (never half-merged) when it is invalid (``InvalidSpec``), when it
collides with the spec or an older object (an objective name, or a rewrite's model-and-headers
match: ``Conflict``), or when a rewrite target is no model the config serves (``UnknownTarget``).
Every bound object gets ``Accepted`` and ``ResolvedRefs`` conditions from :func:`conditions`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from igw.config.errors import Problem
from igw.config.extension_references import served_models
from igw.config.inference_extension import OBJECTIVE_KIND, REWRITE_KIND, validate_resource

ACCEPTED: Final = "Accepted"
RESOLVED_REFS: Final = "ResolvedRefs"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one bound object's conditions say: accepted or why not, and whether its pool resolved."""

    accepted: bool
    reason: str
    message: str
    resolved: bool = True
    resolved_reason: str = "ResolvedRefs"
    resolved_message: str = "spec.poolRef names an InferenceGatewayConfig of this namespace"


@dataclass(slots=True)
class Merge:
    """The spec to serve and one verdict per bound object, keyed by ``(kind, name)``."""

    spec: dict[str, Any]
    verdicts: dict[tuple[str, str], Verdict] = field(default_factory=dict)


def pool_name(obj: Mapping[str, Any]) -> str | None:
    ref = ((obj.get("spec") or {}).get("poolRef")) or {}
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return name if isinstance(name, str) else None


def _age_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _match_key(model: Any, headers: Any) -> str:
    """One string per (model, header set), header names case-insensitive and order-free."""
    pairs = sorted((str(h.get("name", "")).lower(), str(h.get("value", ""))) for h in headers or ())
    return json.dumps([model, pairs])


def rewrite_rules(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The file-mode ``modelRewrites`` rules one (valid) InferenceModelRewrite stands for."""
    out: list[dict[str, Any]] = []
    for rule in (obj.get("spec") or {}).get("rules") or ():
        raw_targets = rule.get("targets") or ()
        weights = [int(t.get("weight", 0)) for t in raw_targets]
        equal = not any(weights)
        targets = [
            {"model": str(t["modelRewrite"]), "weight": 1 if equal else w}
            for t, w in zip(raw_targets, weights, strict=True)
        ]
        for match in rule.get("matches") or [{}]:
            entry: dict[str, Any] = {"name": _name(obj)}  # the rule label of the per-target metrics
            if match.get("model"):
                entry["model"] = str(match["model"]["value"])
            if match.get("headers"):
                entry["headers"] = [{"name": h["name"], "value": h["value"]} for h in match["headers"]]
            entry["targets"] = copy.deepcopy(targets)
            out.append(entry)
    return out


Checked = Mapping[tuple[str, str], Sequence[Problem]]
"""The problems of bound objects, by ``(kind, name)``, as the caller found them already (an operator
older than the objects' CRD: :func:`igw.operator.crd_skew.resolve_skew`)."""


def _invalid(kind: str, obj: Mapping[str, Any], checked: Checked) -> Verdict | None:
    key = (kind, _name(obj))
    problems = checked[key] if key in checked else validate_resource(obj)
    if not problems:
        return None
    text = "; ".join(f"{p.path}: {p.message}" if p.path else p.message for p in problems)
    return Verdict(False, "InvalidSpec", text)


def merge(
    spec: Mapping[str, Any],
    objectives: Iterable[Mapping[str, Any]],
    rewrites: Iterable[Mapping[str, Any]],
    checked: Checked | None = None,
) -> Merge:
    """``spec`` with the bound objects merged in, and each object's verdict (see the module doc);
    ``checked``: problems of some objects found already (:data:`Checked`), the others validated here."""
    checked = checked or {}
    merged: dict[str, Any] = copy.deepcopy(dict(spec))
    result = Merge(spec=merged)
    extensions: dict[str, Any] = merged.setdefault("extensions", {})
    if isinstance(extensions.get("flowControl", {}), Mapping):  # else admission names the type
        _merge_objectives(result, extensions, sorted(objectives, key=_age_key), checked)
    if isinstance(extensions.get("modelRewrites", {}), Mapping):
        _merge_rewrites(result, extensions, sorted(rewrites, key=_age_key), served_models(spec), checked)
    if not extensions:
        merged.pop("extensions")
    return result


def _merge_objectives(
    result: Merge, extensions: dict[str, Any], objectives: Sequence[Mapping[str, Any]], checked: Checked
) -> None:
    flow = extensions.get("flowControl")
    owners: dict[str, str] = {
        str(o.get("name")): "spec.extensions.flowControl.objectives"
        for o in (flow or {}).get("objectives") or ()
        if isinstance(o, Mapping)
    }
    added: list[dict[str, Any]] = []
    for obj in objectives:
        name = _name(obj)
        verdict = _invalid(OBJECTIVE_KIND, obj, checked)
        if verdict is None and name in owners:
            verdict = Verdict(
                False, "Conflict", f'objective name "{name}" is already defined by {owners[name]}'
            )
        if verdict is None:
            owners[name] = f'{OBJECTIVE_KIND} "{name}"'
            added.append({"name": name, "priority": int((obj.get("spec") or {}).get("priority", 0))})
            verdict = Verdict(True, "Accepted", "merged into the flow-control objectives of the gateway")
        result.verdicts[OBJECTIVE_KIND, name] = verdict
    if added:
        flow = extensions.setdefault("flowControl", {})
        flow["objectives"] = [*(flow.get("objectives") or ()), *added]


def _merge_rewrites(
    result: Merge,
    extensions: dict[str, Any],
    rewrites: Sequence[Mapping[str, Any]],
    served: set[str],
    checked: Checked,
) -> None:
    existing = (extensions.get("modelRewrites") or {}).get("rules") or ()
    owners: dict[str, str] = {
        _match_key(rule.get("model"), rule.get("headers")): f"spec.extensions.modelRewrites.rules[{i}]"
        for i, rule in enumerate(existing)
        if isinstance(rule, Mapping)
    }
    added: list[dict[str, Any]] = []
    for obj in rewrites:
        name = _name(obj)
        verdict = _invalid(REWRITE_KIND, obj, checked)
        rules = rewrite_rules(obj) if verdict is None else []
        if verdict is None:
            verdict = _rewrite_problem(rules, owners, served)
        if verdict is None:
            for rule in rules:
                owners[_match_key(rule.get("model"), rule.get("headers"))] = f'{REWRITE_KIND} "{name}"'
            added.extend(rules)
            verdict = Verdict(True, "Accepted", f"merged as {len(rules)} rewrite rule(s) of the gateway")
        result.verdicts[REWRITE_KIND, name] = verdict
    if added:
        section = extensions.setdefault("modelRewrites", {})
        section["rules"] = [*(section.get("rules") or ()), *added]


def _rewrite_problem(
    rules: Sequence[Mapping[str, Any]], owners: Mapping[str, str], served: set[str]
) -> Verdict | None:
    mine: set[str] = set()
    for rule in rules:
        key = _match_key(rule.get("model"), rule.get("headers"))
        what = f'model "{rule["model"]}"' if "model" in rule else "the fallback (no model)"
        if rule.get("headers"):
            what += " with headers " + ", ".join(f"{h['name']}={h['value']}" for h in rule["headers"])
        if key in owners:
            return Verdict(False, "Conflict", f"{what} is already matched by {owners[key]}")
        if key in mine:
            return Verdict(False, "Conflict", f"{what} is matched twice in this object")
        mine.add(key)
        for target in rule["targets"]:
            if target["model"] not in served:
                return Verdict(
                    False,
                    "UnknownTarget",
                    f'target "{target["model"]}" is not a modelName or loraAdapters entry of the '
                    "InferenceGatewayConfig",
                )
    return None


def unbound(reason: str, message: str) -> Verdict:
    """The verdict for an object whose pool cannot serve it (missing, or itself refused)."""
    if reason == "PoolNotFound":
        return Verdict(
            False, reason, message, resolved=False, resolved_reason=reason, resolved_message=message
        )
    return Verdict(False, reason, message)


def conditions(
    verdict: Verdict, previous: Sequence[Mapping[str, Any]], *, now: datetime, generation: int | None
) -> list[dict[str, Any]]:
    """``Accepted`` and ``ResolvedRefs`` for ``verdict``; each keeps its time while its status stays."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    before = {str(c.get("type")): c for c in previous if isinstance(c, Mapping)}
    out: list[dict[str, Any]] = []
    for kind, ok, reason, message in (
        (ACCEPTED, verdict.accepted, verdict.reason, verdict.message),
        (RESOLVED_REFS, verdict.resolved, verdict.resolved_reason, verdict.resolved_message),
    ):
        status = "True" if ok else "False"
        old = before.get(kind) or {}
        entry: dict[str, Any] = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": old.get("lastTransitionTime", stamp)
            if old.get("status") == status
            else stamp,
        }
        if generation is not None:
            entry["observedGeneration"] = generation
        out.append(entry)
    return out
