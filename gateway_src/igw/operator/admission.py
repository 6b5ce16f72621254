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

``status.models`` alone lost races: a config admitted for a model whose status was not yet written
(or not yet in the list a pass read: a resync lists a namespace once for all its passes, and passes of
different objects run concurrently) looked to the other configs as serving nothing, so an edit of
another config taking that model, or a second new config naming it, was admitted too - two data planes
on one model. The operator (leader-elected: one reconciler at a time) keeps its own record of the
models it admitted for each config (:class:`Claim`, recorded in the same step as the admission); a
config serves a model when its status or that record says so, and a recorded config missing from the
list read is checked too. After a restart (or a change of leader) the record starts from the statuses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from igw.config.errors import Problem
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


@dataclass(frozen=True, slots=True)
class Claim:
    """The models the operator has admitted for one config, by its own record (module docstring)."""

    uid: str
    name: str
    namespace: str
    created: str
    """``metadata.creationTimestamp``: the age rule for a config missing from the list read."""
    wanted: frozenset[str]
    """The model names of its spec at its last pass (one it gives up is still ``serving``)."""
    serving: frozenset[str]
    """The model names its data plane may serve: those of every spec admitted since the last one
    applied in full (an apply that failed leaves the previous ones served)."""


def spec_problems(igwc: Mapping[str, Any], checked: Sequence[Problem] | None = None) -> list[str]:
    """Every problem of the object, as ``path: message [rule]`` lines (empty when valid), redacted
    (:func:`igw.redaction.redact_value`): they become the ``Accepted`` condition and Events,
    readable by anyone with the cluster's ``view`` role, and a quoted value may be a token put in the
    wrong field (the config layer masks only a URL's user-info, and cuts a token rather than hiding it).
    ``checked``: the problems of ``igwc``'s served document as the caller found them already
    (:func:`igw.operator.crd_skew.resolve_skew`: a newer CRD's fields named as such), else validated here."""
    problems = validate_document(served_document(igwc)) if checked is None else checked
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


def model_names(obj: Mapping[str, Any]) -> frozenset[str]:
    """The model names ``obj``'s spec asks for."""
    return frozenset(_model_names(obj))


def _with_claims(obj: Mapping[str, Any], claim: Claim | None) -> Mapping[str, Any]:
    """``obj`` with ``status.models`` also naming what ``claim`` records it serving."""
    if claim is None or not claim.serving:
        return obj
    served = list(served_models(obj))
    extra = sorted(model for model in claim.serving if not _serves(obj, model))
    if not extra:
        return obj
    return {**obj, "status": {**(obj.get("status") or {}), "models": ", ".join(served + extra)}}


def _claimed(claim: Claim) -> dict[str, Any]:
    """A config known only from the operator's record (not in the list a pass read)."""
    meta = {"name": claim.name, "namespace": claim.namespace, "uid": claim.uid}
    return {
        "metadata": {**meta, "creationTimestamp": claim.created},
        "spec": {"schedulers": [{"modelName": model} for model in sorted(claim.wanted)]},
        "status": {"models": ", ".join(sorted(claim.serving))},
    }


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


def model_conflicts(
    igwc: Mapping[str, Any], neighbours: Iterable[Mapping[str, Any]], claims: Iterable[Claim] = ()
) -> list[str]:
    """Model names of ``igwc``'s spec another object of its namespace keeps (see the module
    docstring), one message per scheduler, naming its field and the other object. ``claims``: the
    operator's record of the models it admitted, by config (:class:`Claim`)."""
    recorded = {claim.uid: claim for claim in claims}
    igwc = _with_claims(igwc, recorded.get(str(igwc["metadata"].get("uid") or "")))
    listed = [
        _with_claims(other, recorded.get(str((other.get("metadata") or {}).get("uid") or "")))
        for other in neighbours
    ]
    # A record of a name listed (or ``igwc``'s own) under another uid is an object deleted and made anew.
    seen = {str((other.get("metadata") or {}).get("uid") or "") for other in listed}
    names = {str((other.get("metadata") or {}).get("name") or "") for other in listed}
    names.add(str(igwc["metadata"].get("name") or ""))
    unlisted = [claim for uid, claim in recorded.items() if uid not in seen and claim.name not in names]
    neighbours = [*listed, *(_claimed(claim) for claim in unlisted)]
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


def spec_refusal(igwc: Mapping[str, Any], checked: Sequence[Problem] | None = None) -> Refusal | None:
    """Why ``igwc``'s spec may not be served, alone (no neighbours): the rules of ``igw validate``,
    then the variables its pods would lack. Run on every spec admitted and on every last admitted spec
    restored (from the served ConfigMap or the annotation, which anyone who may edit them may rewrite,
    and which an older operator may have written before a rule existed): a restored spec whose pods
    would not start was applied, a crash loop the refusal of the new spec did not explain.
    ``checked``: as :func:`spec_problems`."""
    problems = spec_problems(igwc, checked) or password_env_problems(igwc)
    return Refusal("InvalidSpec", tuple(problems)) if problems else None


def admit(
    igwc: Mapping[str, Any],
    neighbours: Iterable[Mapping[str, Any]],
    claims: Iterable[Claim] = (),
    checked: Sequence[Problem] | None = None,
) -> Refusal | None:
    """``None`` when the object may be programmed, else why not (invalid spec before conflicts);
    ``claims``: the operator's record of admitted models (:func:`model_conflicts`); ``checked``: as
    :func:`spec_problems`."""
    refusal = spec_refusal(igwc, checked)
    if refusal is not None:
        return refusal
    conflicts = model_conflicts(igwc, neighbours, claims)
    if conflicts:
        return Refusal("ModelNameConflict", tuple(conflicts))
    return None
