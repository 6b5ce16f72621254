"""Hypothesis strategies that build documents *from the JSON Schema itself*.

Generating from the schema (instead of hand-written fixtures) means a field added to the schema is
exercised without anyone writing a new test. Only the subset of JSON Schema our contract uses is
supported; anything else raises, so the generator cannot silently skip part of the schema.
``repair`` then makes a schema-valid document satisfy the cross-field admission rules.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from hypothesis import strategies as st

from igw.config.jsonpath import PathPart
from igw.config.resource_quantities import parse_quantity

QUANTITIES = ["1", "500m", "2Gi", "0.5", "128974848", "1e3"]
URLS = ["https://idp.example.com", "https://login.example.org/realms/ml", "https://a.b.c:8443/x/y"]
TIMES = ["2026-11-29T10:00:00Z", "2026-01-02T03:04:05.123+01:00"]
LABEL_KEYS = ["app", "tier", "app.kubernetes.io/name", "team"]
MAX_ITEMS = 3


def _string(node: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    if node.get("format") == "uri":
        return st.sampled_from(URLS)
    if node.get("format") == "date-time":
        return st.sampled_from(TIMES)
    low, high = node.get("minLength", 0), node.get("maxLength", 40)
    if "pattern" in node:
        return st.from_regex(node["pattern"], fullmatch=True).filter(lambda s: low <= len(s) <= high)
    return st.text(
        alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=low, max_size=min(high, 40)
    )


def from_schema(node: Mapping[str, Any], *, skip: frozenset[str] = frozenset()) -> st.SearchStrategy[Any]:
    """Values valid against ``node`` (a ``$ref``-free schema)."""
    if "const" in node:
        return st.just(node["const"])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if node.get("x-kubernetes-int-or-string"):
        return st.sampled_from(QUANTITIES) | st.integers(min_value=0, max_value=64)
    kind = node.get("type")
    if kind == "string":
        return _string(node)
    if kind == "integer":
        return st.integers(min_value=node.get("minimum", -(10**6)), max_value=node.get("maximum", 10**6))
    if kind == "number":
        return st.floats(
            min_value=node.get("minimum", -1e6), max_value=node.get("maximum", 1e6), allow_nan=False
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        items = from_schema(node["items"], skip=skip)
        low = node.get("minItems", 0)
        high = min(node.get("maxItems", MAX_ITEMS), max(low, MAX_ITEMS))
        return st.lists(
            items, min_size=low, max_size=high, unique_by=str if node.get("uniqueItems") else None
        )
    if kind == "object":
        return _object(node, skip=skip)
    # A schema construct this generator has no strategy for must stop the test loudly (so the
    # property tests never silently cover less of the schema than they claim).
    raise TypeError(f"schema node not supported by the generator: {dict(node)}")


def _object(node: Mapping[str, Any], *, skip: frozenset[str]) -> st.SearchStrategy[Any]:
    props: Mapping[str, Any] = node.get("properties", {})
    if not props:
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            return st.dictionaries(st.sampled_from(LABEL_KEYS), from_schema(extra, skip=skip), max_size=2)
        return st.just({})
    required = set(node.get("required", ()))
    fixed = {k: from_schema(v, skip=skip) for k, v in props.items() if k in required and k not in skip}
    optional = {k: from_schema(v, skip=skip) for k, v in props.items() if k not in required and k not in skip}
    return st.fixed_dictionaries(fixed, optional=optional)


def document_strategy(schema: Mapping[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Whole IGWC documents, extensions included (no status: the controller writes that)."""
    spec = from_schema(schema["properties"]["spec"])
    names = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)
    return st.builds(
        lambda s, n: repair(
            {
                "apiVersion": schema["properties"]["apiVersion"]["const"],
                "kind": schema["properties"]["kind"]["const"],
                "metadata": {"name": n},
                "spec": s,
            }
        ),
        spec,
        names,
    )


def repair(doc: dict[str, Any]) -> dict[str, Any]:
    """Make a schema-valid document satisfy every cross-field rule in schemas/admission-rules.yaml."""
    doc = copy.deepcopy(doc)
    spec = doc["spec"]
    for index, sched in enumerate(spec["schedulers"]):
        sched["name"], sched["modelName"] = f"s{index}", f"model-{index}"
        if "weights" in sched:
            sched.pop("configMapRef", None)
            if sched.get("scheduler", "llm-d") != "llm-d":
                sched["weights"].pop("lru", None)
        selector = sched["modelSelector"]
        in_keys = [e["key"] for e in selector.get("matchExpressions", []) if e["operator"] == "In"]
        if not selector.get("matchLabels") and not in_keys:
            selector["matchLabels"] = {"app": f"s{index}"}
        for expr in selector.get("matchExpressions", []):
            if expr["operator"] in {"In", "NotIn"}:
                expr["values"] = expr.get("values") or ["v"]
            else:
                expr.pop("values", None)
        # the gateway's own pods must not match: none of them carries a key the selector asks for
        pod_labels = spec.get("podDefaults", {}).get("labels", {})
        for key in [*selector.get("matchLabels", {}), *in_keys]:
            pod_labels.pop(key, None)
    if len(spec["schedulers"]) > 1:
        spec["bbr"]["enabled"] = True
    resources = spec.get("podDefaults", {}).get("resources", {})
    limits, requests = resources.get("limits", {}), resources.get("requests", {})
    for name, limit in limits.items():  # a limit below its request is refused (pod-resources rule)
        limit_value, request_value = parse_quantity(limit), parse_quantity(requests.get(name))
        if limit_value is not None and request_value is not None and limit_value < request_value:
            limits[name] = requests[name]
    extensions = spec.get("extensions") or {}
    for index, rule in enumerate((extensions.get("modelRewrites") or {}).get("rules", [])):
        rule["model"] = f"alias-{index}"  # one rule per model and header set
        for t_index, target in enumerate(rule.get("targets", [])):  # a model some scheduler serves
            target["model"] = f"model-{t_index % len(spec['schedulers'])}"
    flow = extensions.get("flowControl") or {}
    for index, band in enumerate(flow.get("bands", [])):
        band["priority"] = index
    if "enginePriority" in flow:  # one entry per scheduler, each naming an engine that reads priority
        flow["enginePriority"] = flow["enginePriority"][: len(spec["schedulers"])]
        for index, entry in enumerate(flow["enginePriority"]):
            entry["scheduler"], entry["engine"] = f"s{index}", "sglang"
    engines = extensions.get("engines") or {}
    if engines:  # each scheduler given at most one engine, every name a scheduler
        count = len(spec["schedulers"])
        tgi = engines.get("tgi", [])[:count]
        generic = engines.get("generic", [])[: count - len(tgi)]
        if "tgi" in engines:
            engines["tgi"] = [f"s{index}" for index in range(len(tgi))]
        if "generic" in engines:
            engines["generic"] = generic
            for index, entry in enumerate(generic):
                entry["scheduler"] = f"s{len(tgi) + index}"
    for index, objective in enumerate(flow.get("objectives", [])):
        objective["name"] = f"objective-{index}"
        for field in ("models", "tenants"):  # no model or tenant under two objectives
            if field in objective:
                objective[field] = [f"{index}-{value[:240]}" for value in objective[field]]
    scaling = (extensions.get("dataPlane") or {}).get("autoscaling")
    if scaling is not None:  # bounds with min <= max, or external alone
        if scaling.get("external") is True:
            for key in ("minReplicas", "maxReplicas", "targetCPUUtilizationPercentage"):
                scaling.pop(key, None)
        else:
            low = scaling.setdefault("minReplicas", 2)
            scaling["maxReplicas"] = max(low, scaling.get("maxReplicas", low))
    outliers = (extensions.get("routing") or {}).get("outlierDetection") or {}
    for key, value in (("baseEjectionTime", "30s"), ("maxEjectionTime", "300s")):
        if key in outliers:
            outliers[key] = value  # an ejection above 0s, the longest at least the first
    management = extensions.get("management") or {}
    if management.get("port") == 8080:
        management["port"] = 9090  # not the operator's inference port
    limits = extensions.get("serverLimits") or {}
    for key, value in (
        ("headerTimeout", "10s"),
        ("bodyTimeout", "60s"),
        ("sendTimeout", "60s"),
        ("keepAliveTimeout", "75s"),
    ):
        if key in limits:
            limits[key] = value  # above 0s; keep-alive at most 120s
    provider = spec.get("auth", {}).get("jwt", {}).get("provider")
    if provider is not None:
        claims = provider.get("requiredClaims", [])
        for index, claim in enumerate(claims):
            claim["name"] = f"claim{index}"
        if not provider.get("audiences") and not claims:
            provider["audiences"] = ["gateway"]
    return doc


def walk(
    value: Any, node: Mapping[str, Any], path: tuple[PathPart, ...] = ()
) -> Iterator[tuple[tuple[PathPart, ...], Any, Mapping[str, Any]]]:
    """Every (path, value, schema node) pair in a document, parents before children."""
    yield path, value, node
    if isinstance(value, dict):
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        for key, sub in value.items():
            child = props.get(key) or (extra if isinstance(extra, Mapping) else None)
            if child is not None:
                yield from walk(sub, child, (*path, key))
    elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from walk(item, node["items"], (*path, index))
