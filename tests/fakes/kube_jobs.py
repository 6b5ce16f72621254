"""A batch/v1 Job as kube-apiserver defaults, completes and validates it.

Without this the fake stored a Job as sent: no ``spec.selector``, no ``controller-uid``/``job-name``
labels on its pod template, no ``backoffLimit``/``completions``/``parallelism``. A client reading a
Job back, or ``kubectl replace -f`` of the manifest it was created from, saw here what no cluster
answers: on a cluster that replace is refused (the manifest has neither the generated selector nor
the generated labels, and both are immutable), here it went through.

What the API server does (``pkg/apis/batch/v1/defaults.go`` ``SetDefaults_Job``,
``pkg/registry/batch/job/strategy.go``, ``pkg/apis/batch/validation``):

- defaults, on every write: ``completions`` and ``parallelism`` 1 when both are unset (else
  ``parallelism`` 1), ``backoffLimit`` 6 (``MaxInt32`` with ``backoffLimitPerIndex``),
  ``completionMode: NonIndexed``, ``suspend: false``, ``podReplacementPolicy``
  (``Failed`` with a ``podFailurePolicy``, else ``TerminatingOrFailed``), ``manualSelector: false``,
  the pod template's defaults; and a Job without labels takes its template's label map - the same
  map, so it also gets the generated labels below;
- on create only (``generateSelector``, unless ``manualSelector: true``): the template labels
  ``job-name``/``batch.kubernetes.io/job-name`` (the name) and ``controller-uid``/
  ``batch.kubernetes.io/controller-uid`` (the uid), and the selector
  ``matchLabels: {batch.kubernetes.io/controller-uid: <uid>}``;
- validation (create and update): ``spec.selector`` is required and must match the template's labels,
  the template's ``restartPolicy`` must be ``OnFailure`` or ``Never``.

Update immutability is :mod:`tests.fakes.kube_immutable`'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from tests.fakes.kube_field_errors import FieldError
from tests.fakes.kube_workload_defaults import default_pod_spec

JOB_NAME_LABELS: Final = ("job-name", "batch.kubernetes.io/job-name")
CONTROLLER_UID_LABELS: Final = ("controller-uid", "batch.kubernetes.io/controller-uid")
SELECTOR_LABEL: Final = "batch.kubernetes.io/controller-uid"
MAX_INT32: Final = 2**31 - 1


def default_job(job: dict[str, Any]) -> None:
    """``SetDefaults_Job`` and the template's pod spec defaults, in place."""
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    if spec.get("parallelism") is None:
        spec["parallelism"] = 1
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6
    if spec.get("completionMode") is None:
        spec["completionMode"] = "NonIndexed"
    if spec.get("suspend") is None:
        spec["suspend"] = False
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    if spec.get("manualSelector") is None:
        spec["manualSelector"] = False
    template = spec.get("template")
    if not isinstance(template, dict):
        return
    template_spec = template.get("spec")
    if isinstance(template_spec, dict):
        default_pod_spec(template_spec)


def takes_template_labels(job: Mapping[str, Any]) -> bool:
    """Whether defaulting gives the Job its template's label map (it has none of its own, the template
    has a map): that map is shared, so the labels :func:`generate_selector` adds land on both."""
    labels = (((job.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels")
    return isinstance(labels, dict) and not (job.get("metadata") or {}).get("labels")


def generate_selector(job: dict[str, Any], shared_labels: bool) -> None:
    """``generateSelectorIfNeeded`` on create (after the uid is set), in place; ``shared_labels``:
    :func:`takes_template_labels` before anything was added."""
    spec = job.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector") is True:
        return
    meta = job.get("metadata") or {}
    template = spec.setdefault("template", {})
    template_meta = template.setdefault("metadata", {})
    labels = template_meta.get("labels")
    if not isinstance(labels, dict):
        labels = template_meta["labels"] = {}
    for key in JOB_NAME_LABELS:
        labels.setdefault(key, meta.get("name", ""))
    for key in CONTROLLER_UID_LABELS:
        labels.setdefault(key, meta.get("uid", ""))
    selector = spec.get("selector")
    if not isinstance(selector, dict):
        selector = spec["selector"] = {}
    match_labels = selector.get("matchLabels")
    if not isinstance(match_labels, dict):
        match_labels = selector["matchLabels"] = {}
    match_labels.setdefault(SELECTOR_LABEL, meta.get("uid", ""))
    if shared_labels:
        job.setdefault("metadata", {})["labels"] = dict(labels)


def _matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """``LabelSelectorAsSelector(selector).Matches(labels)``: an empty selector matches everything."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def job_spec_errors(job: Mapping[str, Any]) -> list[FieldError]:
    """``ValidateJobSpec``'s selector and restart-policy rules."""
    spec = job.get("spec") or {}
    template = spec.get("template") or {}
    raw_labels = (template.get("metadata") or {}).get("labels")
    labels = raw_labels if isinstance(raw_labels, Mapping) else {}
    selector = spec.get("selector")
    errors: list[FieldError] = []
    if selector is None:
        errors.append(FieldError("spec.selector", "FieldValueRequired"))
    if not isinstance(selector, Mapping) or not _matches(selector, labels):  # nil selects nothing
        value = '"null"' if raw_labels is None else json.dumps(labels, separators=(",", ":"), sort_keys=True)
        errors.append(
            FieldError(
                "spec.template.metadata.labels",
                "FieldValueInvalid",
                value,
                "`selector` does not match template `labels`",
            )
        )
    restart = (template.get("spec") or {}).get("restartPolicy") or ""
    if restart in ("", "Always"):
        errors.append(
            FieldError(
                "spec.template.spec.restartPolicy",
                "FieldValueRequired",
                detail='valid values: "OnFailure", "Never"',
            )
        )
    elif restart not in ("OnFailure", "Never"):
        errors.append(
            FieldError(
                "spec.template.spec.restartPolicy",
                "FieldValueNotSupported",
                json.dumps(restart),
                'supported values: "OnFailure", "Never"',
            )
        )
    return errors
