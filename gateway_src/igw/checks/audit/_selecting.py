"""Which namespaced objects (NetworkPolicies, PDBs, Services) select a workload's pods."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from igw.checks.inventory import Manifest
from igw.checks.k8s import namespace_of, spec, template_labels
from igw.checks.selectors import selector_from_mapping


def selecting(
    workload: Manifest, candidates: Mapping[str, Sequence[Manifest]], *, selector_field: str
) -> list[Manifest]:
    """``candidates`` indexed by namespace (:func:`igw.checks.selectors.by_namespace`)."""
    labels = template_labels(workload)
    found = []
    for candidate in candidates.get(namespace_of(workload), ()):
        raw = spec(candidate).get(selector_field)
        try:
            selector = selector_from_mapping(raw if isinstance(raw, dict) else {})
        except ValueError:
            continue
        if selector.matches(labels):
            found.append(candidate)
    return found


def service_selects(service: Manifest, namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether ``service`` (an equality ``spec.selector``, as Services have) selects pods labelled
    ``labels`` in ``namespace``; a Service without a selector selects nothing."""
    selector = spec(service).get("selector")
    if namespace_of(service) != namespace or not isinstance(selector, Mapping) or not selector:
        return False
    return all(labels.get(str(k)) == str(v) for k, v in selector.items())
