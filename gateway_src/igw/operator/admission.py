"""Admission of an InferenceGatewayConfig by the operator: the rules of ``igw validate``, then conflicts.

An object is checked as ``igw validate`` checks a file (JSON Schema, admission rules - the same
rules the CRD carries as CEL), so a cluster that lacks the CRD's validation (an older CRD, or
server-side validation switched off) still never gets a data plane from an invalid object.

Operator-only rule: a ``redis.passwordEnv`` the gateway pods cannot have. The operator gives its pods
only ``spec.podDefaults.env`` and ``envFrom``, so a variable named there and defined by neither (with
no ``envFrom``, whose Secret's keys the operator does not read) would stop every pod at start
(``igw serve`` exits 2 naming it): refused here, where the status says so, instead of a crash loop.

Cross-object rule: two configs in one namespace serving the same ``modelName`` would both discover
that namespace's model servers, and clients could not tell which endpoint serves the model. The first
to serve a model keeps it: a spec asking for a model another config of the namespace serves (its
``status.models``, written from its served ConfigMap) is refused while this one does not serve it, so
an edit that takes another config's model is the one refused (by creation time alone, editing the
older config to take a newer one's model was admitted, and the newer one - refused, keeping its
previous data plane - went on serving it too: two gateways on the same model servers). When neither
serves it (two new configs applied together) or both do, the older object (``creationTimestamp``,
then name) keeps it. A config that serves the model but no longer asks for it refuses the others
until it has stopped serving it (its next admitted pass).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from igw.config.redis_password import GATEWAY_REDIS_NODES, spec_node
from igw.config.validate import validate_document
from igw.operator.dataplane import served_document
from igw.redaction import redact_value


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an object is not admitted: a condition reason and one message per problem."""

    reason: str
    messages: tuple[str, ...]

    @property
    def message(self) -> str:
        return "; ".join(self.messages)


def spec_problems(igwc: Mapping[str, Any]) -> list[str]:
    """Every problem of the object, as ``path: message [rule]`` lines (empty when valid), redacted
    (:func:`igw.redaction.redact_value`): they become the ``Accepted`` condition and Events,
    readable by anyone with the cluster's ``view`` role, and a quoted value may be a token put in the
    wrong field (the config layer masks only a URL's user-info, and cuts a token rather than hiding it)."""
    problems = validate_document(served_document(igwc))
    return [
        redact_value(f"{p.path}: {p.message} [{p.rule}]" if p.path else f"{p.message} [{p.rule}]")
        for p in problems
    ]


def password_env_problems(igwc: Mapping[str, Any]) -> list[str]:
    """A message per ``redis.passwordEnv`` of ``igwc`` that its gateway pods would not have (see the
    module docstring); empty when ``spec.podDefaults.envFrom`` is set (it may hold any name)."""
    spec = igwc.get("spec")
    if not isinstance(spec, Mapping):
        return []
    defaults = spec.get("podDefaults")
    defaults = defaults if isinstance(defaults, Mapping) else {}
    if defaults.get("envFrom"):
        return []
    env = defaults.get("env")
    given = {str(e.get("name")) for e in (env if isinstance(env, list) else []) if isinstance(e, Mapping)}
    messages: list[str] = []
    for path in GATEWAY_REDIS_NODES:
        node = spec_node(spec, path)
        name = node.get("passwordEnv") if node is not None else None
        if isinstance(name, str) and name not in given:
            messages.append(
                f"spec.{'.'.join(path)}.passwordEnv: {name} is set by neither spec.podDefaults.env nor "
                "envFrom, so the gateway pods would not start (add it from a Secret with "
                "valueFrom.secretKeyRef)"
            )
    return messages


def _age_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))


def _model_names(obj: Mapping[str, Any]) -> set[str]:
    spec = obj.get("spec")
    schedulers = spec.get("schedulers") if isinstance(spec, Mapping) else None
    return {
        str(s.get("modelName"))
        for s in (schedulers if isinstance(schedulers, list) else [])
        if isinstance(s, Mapping) and s.get("modelName")
    }


def served_models(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The model names ``obj``'s data plane serves, as its ``status.models`` says (the operator writes
    it from the served ConfigMap, ``", "``-joined); empty when it serves nothing."""
    text = (obj.get("status") or {}).get("models")
    return tuple(text.split(", ")) if isinstance(text, str) and text else ()


def _serves(obj: Mapping[str, Any], model: str) -> bool:
    """Whether ``obj`` serves ``model`` (a name holding ``", "`` spans several entries of the list)."""
    served, wanted = served_models(obj), model.split(", ")
    return any(list(served[i : i + len(wanted)]) == wanted for i in range(len(served)))


def _keeper(igwc: Mapping[str, Any], other: Mapping[str, Any], model: str) -> str | None:
    """Why ``other`` keeps ``model`` that ``igwc``'s spec asks for, or ``None`` when ``igwc`` may have it."""
    they_serve, i_serve = _serves(other, model), _serves(igwc, model)
    if they_serve and not i_serve:
        return "it serves it already: the first config to serve a model keeps it"
    if i_serve and not they_serve:
        return None
    if model not in _model_names(other):  # both serve it, and the other is giving it up
        return None
    if _age_key(other) < _age_key(igwc):
        return "the older object keeps it"
    return None


def model_conflicts(igwc: Mapping[str, Any], neighbours: Iterable[Mapping[str, Any]]) -> list[str]:
    """Model names of ``igwc``'s spec another object of its namespace keeps (see the module
    docstring), one message per scheduler, naming its field and the other object."""
    me = igwc["metadata"]
    mine = _model_names(igwc)
    messages: list[str] = []
    for other in sorted(neighbours, key=_age_key):
        meta = other.get("metadata") or {}
        if meta.get("uid") == me.get("uid") or meta.get("namespace") != me.get("namespace"):
            continue
        for model in sorted(mine):
            why = _keeper(igwc, other, model)
            if why is None:
                continue
            verb = "is already served by" if _serves(other, model) else "is also asked for by"
            messages.extend(
                f'spec.schedulers[{index}].modelName: "{model}" {verb} InferenceGatewayConfig '
                f'"{meta.get("name")}" in namespace "{me.get("namespace")}" ({why})'
                for index in _scheduler_indexes(igwc, model)
            )
    return messages


def _scheduler_indexes(obj: Mapping[str, Any], model: str) -> list[int]:
    """The indexes of ``obj``'s schedulers serving ``model``: a refusal names the field it refuses
    (``spec.schedulers[].modelName`` left the user to find which of up to 16 schedulers it meant)."""
    spec = obj.get("spec")
    schedulers = spec.get("schedulers") if isinstance(spec, Mapping) else None
    return [
        index
        for index, scheduler in enumerate(schedulers if isinstance(schedulers, list) else [])
        if isinstance(scheduler, Mapping) and str(scheduler.get("modelName")) == model
    ]


def admit(igwc: Mapping[str, Any], neighbours: Iterable[Mapping[str, Any]]) -> Refusal | None:
    """``None`` when the object may be programmed, else why not (invalid spec before conflicts)."""
    problems = spec_problems(igwc) or password_env_problems(igwc)
    if problems:
        return Refusal("InvalidSpec", tuple(problems))
    conflicts = model_conflicts(igwc, neighbours)
    if conflicts:
        return Refusal("ModelNameConflict", tuple(conflicts))
    return None
