"""Fields the API server refuses to change on an update, with its 422 ``Invalid`` causes.

Without this the fake stored any edit: a Deployment's new ``spec.selector`` or an edited
``immutable: true`` ConfigMap was accepted here and refused on a cluster, so a controller (or a doc's
``kubectl`` command) that rewrote one passed its tests and failed in production.

What kube-apiserver's update validation refuses (``pkg/apis/apps/validation``,
``pkg/apis/core/validation``), checked before anything is allocated or stored:

- apps/v1 Deployments, ReplicaSets and DaemonSets: ``spec.selector`` may not change
  (``ValidateImmutableField``: ``Invalid value: <new selector>: field is immutable``); a
  StatefulSet's spec may change only in :data:`_STATEFULSET_MUTABLE` (``spec: Forbidden: ...``);
- a ConfigMap or Secret stored with ``immutable: true``: ``immutable`` may not be unset, nor
  ``data`` (nor a ConfigMap's ``binaryData``) changed (``Forbidden: field is immutable when
  `immutable` is set``); a Secret's ``type`` may never change;
- a batch/v1 Job's ``spec.template`` (``Invalid value: core.PodTemplateSpec{...}: field is
  immutable``), but for the scheduling directives of a Job suspended before it started;
- a Service's ``spec.clusterIPs`` (see :func:`tests.fakes.kube_services.immutable_errors`).

- a Job's ``spec.selector``, ``completionMode``, ``podFailurePolicy``, ``backoffLimitPerIndex``,
  ``managedBy``, ``successPolicy``, and ``completions`` but for an Indexed Job changing it together
  with ``parallelism`` (elastic Indexed Jobs), after the spec rules of :mod:`tests.fakes.kube_jobs`.

Not modelled: PersistentVolumeClaims (the fake serves none, and nothing the project ships makes one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tests.fakes.kube_field_errors import FieldError, quoted
from tests.fakes.kube_jobs import job_spec_errors

FIELD_IMMUTABLE: Final = "field is immutable"
"""apimachinery's ``FieldImmutableErrorMsg``."""
IMMUTABLE_WHEN_SET: Final = "field is immutable when `immutable` is set"
_SELECTOR_IMMUTABLE: Final = frozenset({"deployments", "replicasets", "daemonsets"})
_STATEFULSET_MUTABLE: Final = (
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
)
STATEFULSET_SPEC_FORBIDDEN: Final = (
    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
    "'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and "
    "'minReadySeconds' are forbidden"
)
"""``ValidateStatefulSetUpdate``'s refusal of any other change (its selector, serviceName,
volumeClaimTemplates, podManagementPolicy)."""


JOB_TEMPLATE_VALUE: Final = "core.PodTemplateSpec{...}"
"""A Job's changed ``spec.template`` as the fake names it in the refusal. kube-apiserver prints the
internal Go struct (``%#v``: ``core.PodTemplateSpec{ObjectMeta:v1.ObjectMeta{Name:"", ...`` with
pointer addresses such as ``(0xc032f43038)``, different on each request), which no client can match
beyond its type name; the fake keeps that and the message's shape around it."""
_SCHEDULING_DIRECTIVES: Final = ("nodeSelector", "tolerations", "schedulingGates")


def _job_template(template: Any, scheduling_mutable: bool) -> Any:
    """``template`` as ``validatePodTemplateUpdate`` compares it: a suspended Job that never started
    may change its pods' labels, annotations, node selector, tolerations, scheduling gates and node
    affinity (``JobMutableSchedulingDirectives``), so those are left out of the comparison."""
    if not scheduling_mutable or not isinstance(template, Mapping):
        return template
    result = {k: v for k, v in template.items() if k != "metadata"}
    meta = {k: v for k, v in (template.get("metadata") or {}).items() if k not in ("labels", "annotations")}
    if meta:
        result["metadata"] = meta
    spec = template.get("spec")
    if isinstance(spec, Mapping):
        spec = {k: v for k, v in spec.items() if k not in _SCHEDULING_DIRECTIVES}
        affinity = {k: v for k, v in (spec.get("affinity") or {}).items() if k != "nodeAffinity"}
        spec.pop("affinity", None)
        if affinity:
            spec["affinity"] = affinity
        result["spec"] = spec
    return result


_JOB_STRUCTS: Final = {
    "podFailurePolicy": "batch.PodFailurePolicy{...}",
    "successPolicy": "batch.SuccessPolicy{...}",
}
"""Internal structs the refusal prints with ``%#v`` (abbreviated, as :data:`JOB_TEMPLATE_VALUE`)."""
COMPLETIONS_IN_TANDEM: Final = "can only be modified in tandem with spec.parallelism"
NULL: Final = '"null"'
"""A nil value as ``field.Error`` prints it: replaced by the string ``"null"``, then quoted."""


def _shown(value: Any) -> str:
    return NULL if value is None else quoted(value)


def _completions_errors(new_spec: Mapping[str, Any], old_spec: Mapping[str, Any]) -> list[FieldError]:
    """``validateCompletions`` (``ElasticIndexedJob``, GA): an Indexed Job may change ``completions``
    together with ``parallelism`` (to the same number); any other Job may not change it."""
    completions = new_spec.get("completions")
    if completions == old_spec.get("completions"):
        return []
    if new_spec.get("completionMode") != "Indexed":
        return [FieldError("spec.completions", "FieldValueInvalid", _shown(completions), FIELD_IMMUTABLE)]
    if completions is not None and completions != new_spec.get("parallelism"):
        return [
            FieldError("spec.completions", "FieldValueInvalid", quoted(completions), COMPLETIONS_IN_TANDEM)
        ]
    return []


def _job_errors(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    """``ValidateJob`` and ``ValidateJobUpdate`` of a Job update, in the API server's order: the spec's
    own rules (twice: ``ValidateJobSpecUpdate`` runs them again, and the causes keep both), then the
    immutable fields - ``completions`` (:func:`_completions_errors`), ``selector``, ``template`` (but
    for the scheduling directives of a Job suspended before it started), ``completionMode``,
    ``podFailurePolicy``, ``backoffLimitPerIndex``, ``managedBy``, ``successPolicy``."""
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    spec_errors = job_spec_errors(new)
    errors = [*spec_errors, *spec_errors, *_completions_errors(new_spec, old_spec)]
    if new_spec.get("selector") != old_spec.get("selector"):
        selector = new_spec.get("selector")
        value = NULL if selector is None else _selector_value(selector)
        errors.append(FieldError("spec.selector", "FieldValueInvalid", value, FIELD_IMMUTABLE))
    scheduling_mutable = old_spec.get("suspend") is True and not (old.get("status") or {}).get("startTime")
    new_template = _job_template(new_spec.get("template"), scheduling_mutable)
    if new_template != _job_template(old_spec.get("template"), scheduling_mutable):
        errors.append(FieldError("spec.template", "FieldValueInvalid", JOB_TEMPLATE_VALUE, FIELD_IMMUTABLE))
    for field in ("completionMode", "podFailurePolicy", "backoffLimitPerIndex", "managedBy", "successPolicy"):
        changed = new_spec.get(field)
        if changed != old_spec.get(field):
            shown = _JOB_STRUCTS[field] if field in _JOB_STRUCTS and changed is not None else _shown(changed)
            errors.append(FieldError(f"spec.{field}", "FieldValueInvalid", shown, FIELD_IMMUTABLE))
    return errors


def _selector_value(selector: Any) -> str:
    """A ``metav1.LabelSelector`` as ``json.Marshal`` writes it: its fields in Go's order,
    empty ones left out (``omitempty``)."""
    if not isinstance(selector, Mapping):
        return quoted(selector)
    ordered = {k: selector[k] for k in ("matchLabels", "matchExpressions") if selector.get(k)}
    return quoted(ordered)


def _immutable_object(plural: str, new: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    if old.get("immutable") is True:
        if new.get("immutable") is not True:
            errors.append(FieldError("immutable", "FieldValueForbidden", detail=IMMUTABLE_WHEN_SET))
        if (new.get("data") or None) != (old.get("data") or None):
            errors.append(FieldError("data", "FieldValueForbidden", detail=IMMUTABLE_WHEN_SET))
        if plural == "configmaps" and (new.get("binaryData") or None) != (old.get("binaryData") or None):
            errors.append(FieldError("binaryData", "FieldValueForbidden", detail=IMMUTABLE_WHEN_SET))
    return errors


def update_errors(
    key: tuple[str, str, str], new: Mapping[str, Any], old: Mapping[str, Any]
) -> list[FieldError]:
    """What the API server's update validation of ``key``'s kind refuses in ``new`` (the object
    about to be stored, defaulted) against ``old`` (the stored one); empty when the update may go
    on. Service cluster IPs are checked where they are allocated."""
    group, version, plural = key
    errors: list[FieldError] = []
    if group == "apps" and version == "v1" and plural in _SELECTOR_IMMUTABLE:
        new_selector = (new.get("spec") or {}).get("selector")
        old_selector = (old.get("spec") or {}).get("selector")
        if new_selector != old_selector:
            value = _selector_value(new_selector)
            errors.append(FieldError("spec.selector", "FieldValueInvalid", value, FIELD_IMMUTABLE))
    if group == "apps" and version == "v1" and plural == "statefulsets":
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        if {k: v for k, v in new_spec.items() if k not in _STATEFULSET_MUTABLE} != {
            k: v for k, v in old_spec.items() if k not in _STATEFULSET_MUTABLE
        }:
            errors.append(FieldError("spec", "FieldValueForbidden", detail=STATEFULSET_SPEC_FORBIDDEN))
    if (group, version, plural) == ("batch", "v1", "jobs"):
        errors.extend(_job_errors(new, old))
    if group == "" and plural in ("configmaps", "secrets"):
        if plural == "secrets" and (new.get("type") or "Opaque") != (old.get("type") or "Opaque"):
            errors.append(
                FieldError("type", "FieldValueInvalid", quoted(new.get("type") or ""), FIELD_IMMUTABLE)
            )
        errors.extend(_immutable_object(plural, new, old))
    return errors
