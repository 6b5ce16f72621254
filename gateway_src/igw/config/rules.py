"""Python side of the cross-field admission rules in ``schemas/admission-rules.yaml``.

Each rule there carries a CEL expression (enforced by Kubernetes on the CRD); here, under the same
id, is the check ``igw validate`` runs. Where CEL can only say "modelName must be unique", the
Python check names the exact duplicate (``spec.schedulers[1].modelName: duplicates
spec.schedulers[0].modelName``). Checks run even when the schema found problems, and skip values of
the wrong type (the schema already reported those), so the user sees every problem in one run.

``tests/config`` evaluates both sides with a real CEL implementation and requires them to agree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from igw.config.durations import parse_duration
from igw.config.errors import Problem
from igw.config.jsonpath import PathPart, format_path
from igw.config.schema import admission_rules, shared_schema

RuleCheck = Callable[[Mapping[str, Any]], Iterator[Problem]]

MIN_UNKNOWN_KID_COOLDOWN_S: Final = 10.0
"""Shortest ``authorization.jwks.unknownKidCooldown`` (rule ``jwks-timing``, whose CEL expression
states the same bound; ``igw.security.settings`` refuses it too, for the global router's copy)."""


def _mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else []


def _spec(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(doc.get("spec")) or {}


def _schedulers(doc: Mapping[str, Any]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    for index, item in enumerate(_list(_spec(doc).get("schedulers"))):
        if isinstance(item, Mapping):
            yield index, item


def _problem(rule: str, parts: Sequence[PathPart], message: str) -> Problem:
    return Problem(path=format_path(parts), message=message, rule=rule)


def _bbr_required(doc: Mapping[str, Any]) -> Iterator[Problem]:
    spec = _spec(doc)
    schedulers = spec.get("schedulers")
    if not isinstance(schedulers, list) or len(schedulers) <= 1:
        return
    bbr = _mapping(spec.get("bbr"))
    enabled = bbr.get("enabled") if bbr is not None else None
    if enabled is True:
        return
    yield _problem(
        "bbr-required-for-multiple-schedulers",
        ("spec", "bbr", "enabled"),
        f"bbr must be enabled when more than one scheduler is defined ({len(schedulers)} are)",
    )


def _unique(field: str, rule: str) -> RuleCheck:
    def check(doc: Mapping[str, Any]) -> Iterator[Problem]:
        first_seen: dict[Any, int] = {}
        for index, sched in _schedulers(doc):
            value = sched.get(field)
            if value is None or isinstance(value, (dict, list)):
                continue
            if value in first_seen:
                yield _problem(
                    rule,
                    ("spec", "schedulers", index, field),
                    f"duplicates spec.schedulers[{first_seen[value]}].{field} ({json.dumps(value)}); "
                    f"{field} must be unique across schedulers",
                )
            else:
                first_seen[value] = index

    return check


def _weights_xor_configmap(doc: Mapping[str, Any]) -> Iterator[Problem]:
    for index, sched in _schedulers(doc):
        if "weights" in sched and "configMapRef" in sched:
            yield _problem(
                "weights-xor-configmapref",
                ("spec", "schedulers", index),
                "weights and configMapRef are mutually exclusive: set weights for the built-in "
                "scorers, or configMapRef for a full plugin configuration, not both",
            )


def _lru_requires_llm_d(doc: Mapping[str, Any]) -> Iterator[Problem]:
    for index, sched in _schedulers(doc):
        weights = _mapping(sched.get("weights"))
        if weights is None or "lru" not in weights:
            continue
        kind = sched.get("scheduler", "llm-d")
        if kind != "llm-d":
            yield _problem(
                "lru-requires-llm-d",
                ("spec", "schedulers", index, "weights", "lru"),
                f"weights.lru is only valid with scheduler: llm-d (this scheduler is {json.dumps(kind)})",
            )


def _selector_not_empty(doc: Mapping[str, Any]) -> Iterator[Problem]:
    for index, sched in _schedulers(doc):
        selector = _mapping(sched.get("modelSelector"))
        if selector is None:
            continue
        labels, exprs = selector.get("matchLabels"), selector.get("matchExpressions")
        if (isinstance(labels, Mapping) and labels) or (isinstance(exprs, list) and exprs):
            continue
        yield _problem(
            "model-selector-not-empty",
            ("spec", "schedulers", index, "modelSelector"),
            "modelSelector must set matchLabels or matchExpressions; an empty selector would send "
            "this model's traffic to every pod in the namespace",
        )


def _selector_values(doc: Mapping[str, Any]) -> Iterator[Problem]:
    for index, sched in _schedulers(doc):
        selector = _mapping(sched.get("modelSelector")) or {}
        for j, expr in enumerate(_list(selector.get("matchExpressions"))):
            if not isinstance(expr, Mapping) or not isinstance(expr.get("operator"), str):
                continue
            operator = expr["operator"]
            values = expr.get("values")
            count = len(values) if isinstance(values, list) else 0
            path = ("spec", "schedulers", index, "modelSelector", "matchExpressions", j, "values")
            if operator in {"In", "NotIn"} and count == 0:
                yield _problem(
                    "selector-values-match-operator", path, f"operator {operator} needs at least one value"
                )
            elif operator not in {"In", "NotIn"} and count > 0:
                yield _problem(
                    "selector-values-match-operator",
                    path,
                    f"operator {operator} takes no values (got {count})",
                )


OPERATOR_POD_LABEL_KEYS: Final = frozenset(
    {
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/managed-by",
        "inference.sagemaker.aws.amazon.com/config",
    }
)
"""The label keys the operator sets on the gateway's pods over ``spec.podDefaults.labels``
(``igw.operator.dataplane``); the CEL rule ``gateway-pods-not-model-servers`` lists the same keys."""


def _requirement_met_by_gateway_pods(key: str, operator: str, values: Any, labels: Mapping[str, Any]) -> bool:
    """Whether the gateway's pods (``labels`` plus the operator's keys) surely satisfy one requirement.

    A requirement on an operator key is met only by ``Exists`` (its value is derived from the
    object's name, so ``In``/``NotIn`` are taken as not met: the rule never refuses a selector the
    pods might not match).
    """
    own = key in OPERATOR_POD_LABEL_KEYS
    if operator == "Exists":
        return own or key in labels
    if operator == "DoesNotExist":
        return not (own or key in labels)
    if not isinstance(values, list) or own:
        return False
    listed = key in labels and labels[key] in values
    return listed if operator == "In" else not listed


def _rule_message(rule_id: str) -> str:
    """The rule's message as ``schemas/admission-rules.yaml`` states it (one text for CEL and Python)."""
    return next(rule.message for rule in admission_rules() if rule.id == rule_id)


def _gateway_pods_not_selected(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """A modelSelector the gateway's own pods satisfy would make the gateway route to itself."""
    defaults = _mapping(_spec(doc).get("podDefaults")) or {}
    labels = _mapping(defaults.get("labels")) or {}
    for index, sched in _schedulers(doc):
        selector = _mapping(sched.get("modelSelector"))
        if selector is None:
            continue
        match_labels = _mapping(selector.get("matchLabels")) or {}
        expressions = _list(selector.get("matchExpressions"))
        if not match_labels and not expressions:
            continue  # model-selector-not-empty reports it
        if not all(
            key not in OPERATOR_POD_LABEL_KEYS and key in labels and labels[key] == value
            for key, value in match_labels.items()
        ):
            continue
        if not all(
            isinstance(expr, Mapping)
            and _requirement_met_by_gateway_pods(
                str(expr.get("key")), str(expr.get("operator")), expr.get("values"), labels
            )
            for expr in expressions
        ):
            continue
        yield _problem(
            "gateway-pods-not-model-servers",
            ("spec", "schedulers", index, "modelSelector"),
            f"{_rule_message('gateway-pods-not-model-servers')}; the gateway's pods carry "
            f"{json.dumps(dict(labels), sort_keys=True)} from spec.podDefaults.labels",
        )


def _jwt_provider(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    auth = _mapping(_spec(doc).get("auth")) or {}
    jwt = _mapping(auth.get("jwt")) or {}
    return _mapping(jwt.get("provider"))


def _audiences_or_claims(doc: Mapping[str, Any]) -> Iterator[Problem]:
    provider = _jwt_provider(doc)
    if provider is None:
        return
    if _list(provider.get("audiences")) or _list(provider.get("requiredClaims")):
        return
    yield _problem(
        "jwt-audiences-or-claims",
        ("spec", "auth", "jwt", "provider"),
        "at least one of audiences or requiredClaims must be set; otherwise any token the issuer "
        "signs, for any application, would be accepted",
    )


def _unique_claim_names(doc: Mapping[str, Any]) -> Iterator[Problem]:
    provider = _jwt_provider(doc) or {}
    first_seen: dict[str, int] = {}
    for index, claim in enumerate(_list(provider.get("requiredClaims"))):
        name = claim.get("name") if isinstance(claim, Mapping) else None
        if not isinstance(name, str):
            continue
        if name in first_seen:
            yield _problem(
                "unique-claim-name",
                ("spec", "auth", "jwt", "provider", "requiredClaims", index, "name"),
                f"duplicates spec.auth.jwt.provider.requiredClaims[{first_seen[name]}].name "
                f"({json.dumps(name)})",
            )
        else:
            first_seen[name] = index


def _unique_in_extension(extension: str, items: str, field: str, rule: str) -> RuleCheck:
    """``spec.extensions.<extension>.<items>[].<field>`` must not repeat."""

    def check(doc: Mapping[str, Any]) -> Iterator[Problem]:
        ext = _mapping(_mapping(_spec(doc).get("extensions")) or {}) or {}
        entries = _list((_mapping(ext.get(extension)) or {}).get(items))
        first_seen: dict[Any, int] = {}
        for index, entry in enumerate(entries):
            value = entry.get(field) if isinstance(entry, Mapping) else None
            if value is None or isinstance(value, (dict, list)):
                continue
            if value in first_seen:
                yield _problem(
                    rule,
                    ("spec", "extensions", extension, items, index, field),
                    f"duplicates spec.extensions.{extension}.{items}[{first_seen[value]}].{field} "
                    f"({json.dumps(value)})",
                )
            else:
                first_seen[value] = index

    return check


def _unique_rewrite_match(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``spec.extensions.modelRewrites.rules[]``: one rule per (model, headers) pair, as written."""
    ext = _mapping(_mapping(_spec(doc).get("extensions")) or {}) or {}
    entries = _list((_mapping(ext.get("modelRewrites")) or {}).get("rules"))
    first_seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            continue
        key = json.dumps([entry.get("model"), entry.get("headers") or []], sort_keys=True)
        if key in first_seen:
            yield _problem(
                "unique-rewrite-model",
                ("spec", "extensions", "modelRewrites", "rules", index, "model"),
                "matches the same model and headers as "
                f"spec.extensions.modelRewrites.rules[{first_seen[key]}]",
            )
        else:
            first_seen[key] = index


SERVER_LIMITS_MAX_KEEPALIVE_S: Final = 120.0
"""Longest ``serverLimits.keepAliveTimeout`` (a load balancer's idle timeout is shorter than this);
the CEL rule ``server-limits-keepalive-timeout-range`` states the same bound."""


def _server_limit_duration(field: str, rule: str, *, at_most_s: float | None = None) -> RuleCheck:
    """``spec.extensions.serverLimits.<field>``, a duration, must be above 0s (and ``<= at_most_s``)."""

    def check(doc: Mapping[str, Any]) -> Iterator[Problem]:
        ext = _mapping(_spec(doc).get("extensions")) or {}
        value = (_mapping(ext.get("serverLimits")) or {}).get(field)
        if not isinstance(value, str):
            return
        try:
            seconds = parse_duration(value)
        except ValueError:
            return  # the schema's duration pattern reports it
        if seconds <= 0 or (at_most_s is not None and seconds > at_most_s):
            bound = f" and at most {at_most_s:g}s" if at_most_s is not None else ""
            yield _problem(
                rule,
                ("spec", "extensions", "serverLimits", field),
                f"must be greater than 0s{bound} (got {json.dumps(value)})",
            )

    return check


OPERATOR_SERVING_PORT: Final = 8080
"""The inference port of every gateway ``igw operator`` runs (``igw.operator.dataplane`` serves on it);
``spec.extensions.management.port`` must differ from it (rule ``management-port-not-serving-port``,
whose CEL expression states the same number)."""


def _management_port_not_serving_port(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``spec.extensions.management.port`` is not the operator's inference port: metrics, pod addresses
    and scrape errors would be served to every inference client on it."""
    ext = _mapping(_spec(doc).get("extensions")) or {}
    port = (_mapping(ext.get("management")) or {}).get("port")
    if port == OPERATOR_SERVING_PORT and not isinstance(port, bool):
        yield _problem(
            "management-port-not-serving-port",
            ("spec", "extensions", "management", "port"),
            f"must differ from {OPERATOR_SERVING_PORT}, the inference port of the gateways igw operator runs "
            "(metrics and pod detail would be served to inference clients)",
        )


def _autoscaling_bounds(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``spec.extensions.dataPlane.autoscaling``: ``minReplicas`` and ``maxReplicas``, the first at
    most the second, for the operator's HorizontalPodAutoscaler; or ``external: true`` alone, when
    another autoscaler owns the count (then the HPA's fields would be silently unused)."""
    ext = _mapping(_spec(doc).get("extensions")) or {}
    scaling = _mapping((_mapping(ext.get("dataPlane")) or {}).get("autoscaling"))
    if scaling is None:
        return
    rule = "autoscaling-bounds"
    at = ("spec", "extensions", "dataPlane", "autoscaling")
    if scaling.get("external") is True:
        for field in ("minReplicas", "maxReplicas", "targetCPUUtilizationPercentage"):
            if field in scaling:
                yield _problem(
                    rule, (*at, field), "not used with external: true (another autoscaler owns the count)"
                )
        return
    low, high = scaling.get("minReplicas"), scaling.get("maxReplicas")
    for field, value in (("minReplicas", low), ("maxReplicas", high)):
        if value is None:
            yield _problem(rule, (*at, field), "required unless external: true")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        yield _problem(rule, (*at, "maxReplicas"), f"must be at least minReplicas ({low}), got {high}")


def _outlier_ejection_times(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``spec.extensions.routing.outlierDetection``: while it ejects (``consecutiveFailures`` above 0)
    an ejection lasts more than 0s and ``maxEjectionTime`` is at least ``baseEjectionTime`` (the
    schema's defaults where a field is absent)."""
    ext = _mapping(_spec(doc).get("extensions")) or {}
    od = _mapping((_mapping(ext.get("routing")) or {}).get("outlierDetection"))
    if od is None or od.get("consecutiveFailures") == 0:
        return
    fields = shared_schema()["properties"]["spec"]["properties"]["extensions"]["properties"]["routing"][
        "properties"
    ]["outlierDetection"]["properties"]  # the defaults, where the routing extension states them
    try:
        base = parse_duration(od.get("baseEjectionTime", fields["baseEjectionTime"]["default"]))
        longest = parse_duration(od.get("maxEjectionTime", fields["maxEjectionTime"]["default"]))
    except (TypeError, ValueError):
        return  # the schema's duration pattern reports it
    rule = "outlier-ejection-times"
    at = ("spec", "extensions", "routing", "outlierDetection")
    if base <= 0:
        yield _problem(
            rule, (*at, "baseEjectionTime"), "must be greater than 0s unless consecutiveFailures is 0"
        )
    elif longest < base:
        yield _problem(
            rule, (*at, "maxEjectionTime"), f"must be at least baseEjectionTime ({base:g}s), got {longest:g}s"
        )


def _jwks_timing(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``spec.extensions.authorization.jwks``: the JWKS cache's timing is one the cache can keep
    (the schema's defaults where a field is absent). ``ttl: 0s`` refetched the keys without pause
    (422 fetches a second with no traffic), ``fetchTimeout: 0s`` never loaded them, a ``maxStale``
    under ``ttl`` let them go unusable before their refresh (``0s``: a fetch per request, every
    token refused), and an ``unknownKidCooldown`` under 10s stopped ``igw serve`` at start
    although ``igw validate`` had accepted it."""
    ext = _mapping(_spec(doc).get("extensions")) or {}
    jwks = _mapping((_mapping(ext.get("authorization")) or {}).get("jwks"))
    if jwks is None:
        return
    fields = shared_schema()["properties"]["spec"]["properties"]["extensions"]["properties"]["authorization"][
        "properties"
    ]["jwks"]["properties"]  # the defaults, where the authorization extension states them
    try:
        ttl, fetch_timeout, cooldown, max_stale = (
            parse_duration(jwks.get(name, fields[name]["default"]))
            for name in ("ttl", "fetchTimeout", "unknownKidCooldown", "maxStale")
        )
    except (TypeError, ValueError):
        return  # the schema's duration pattern reports it
    rule = "jwks-timing"
    at = ("spec", "extensions", "authorization", "jwks")
    if ttl <= 0:
        yield _problem(
            rule, (*at, "ttl"), "must be greater than 0s (the keys would be refetched without pause)"
        )
    if fetch_timeout <= 0:
        yield _problem(rule, (*at, "fetchTimeout"), "must be greater than 0s (no fetch could complete)")
    if cooldown < MIN_UNKNOWN_KID_COOLDOWN_S:
        yield _problem(
            rule,
            (*at, "unknownKidCooldown"),
            f"must be at least {MIN_UNKNOWN_KID_COOLDOWN_S:g}s, got {cooldown:g}s "
            "(a shorter cooldown lets unknown-kid floods hammer the issuer)",
        )
    if ttl > 0 and max_stale < ttl:
        yield _problem(
            rule,
            (*at, "maxStale"),
            f"must be at least ttl ({ttl:g}s), got {max_stale:g}s "
            "(the keys would go unusable before their refresh)",
        )


AUTHORIZATION_HEADER_OVERHEAD_BYTES: Final = len("authorization") + len("Bearer ")
"""What a header field holding a bearer token takes beyond the token: the listener's
``serverLimits.maxHeaderBytes`` counts the field's name and value (rule ``token-fits-header-limit``,
whose CEL expression states the same 20)."""


def _token_fits_header_limit(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``spec.extensions.authorization.maxTokenBytes`` fits in ``serverLimits.maxHeaderBytes``
    (:func:`token_header_problem`)."""
    spec = _spec(doc)
    ext = _mapping(spec.get("extensions")) or {}
    problem = token_header_problem(
        ext.get("authorization"), ext.get("serverLimits"), at=("spec", "extensions"), auth=spec.get("auth")
    )
    if problem is not None:
        yield problem


def default_max_token_bytes() -> int:
    """``authorization.maxTokenBytes``' default as the schema states it (the guard's own default; a
    test keeps the two equal)."""
    properties = shared_schema()["properties"]["spec"]["properties"]["extensions"]["properties"]
    default: int = properties["authorization"]["properties"]["maxTokenBytes"]["default"]
    return default


def token_header_problem(
    authorization: Any, limits: Any, *, at: Sequence[PathPart], auth: Any = None
) -> Problem | None:
    """The authorization extension's ``maxTokenBytes`` fits in ``serverLimits.maxHeaderBytes`` (the
    schema's defaults where a field is absent), both nodes under ``at`` (``spec.extensions``; a
    GlobalRouterConfig's ``spec``). Checked when tokens are verified (``auth``, the ``spec.auth``
    node, is present) or the authorization extension is written. A larger cap changed nothing: the
    listener answered 431 to every token over about 16 KB before the guard saw it, so
    ``maxTokenBytes: 32768`` alone was accepted and silently ineffective (before session s40); and
    until session s42 a ``spec.auth`` without the authorization extension was not checked at all,
    so ``serverLimits.maxHeaderBytes: 4096`` served and answered 431 to every token over 4,076 bytes
    although the default cap of 8,192 is in force."""
    authz = _mapping(authorization)
    if authz is None:
        if _mapping(auth) is None:
            return None
        authz = {}
    header_limits = _mapping(limits) or {}
    properties = shared_schema()["properties"]["spec"]["properties"]["extensions"]["properties"]
    token_bytes = authz.get("maxTokenBytes", default_max_token_bytes())
    header_bytes = header_limits.get(
        "maxHeaderBytes", properties["serverLimits"]["properties"]["maxHeaderBytes"]["default"]
    )
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (token_bytes, header_bytes)):
        return None  # the schema reports it
    needed = token_bytes + AUTHORIZATION_HEADER_OVERHEAD_BYTES
    if needed <= header_bytes:
        return None
    stated = "" if "maxHeaderBytes" in header_limits else " (its default)"
    cap = "" if "maxTokenBytes" in authz else " (its default)"
    return _problem(
        "token-fits-header-limit",
        (*at, "authorization", "maxTokenBytes"),
        f"{token_bytes}{cap} needs {format_path((*at, 'serverLimits', 'maxHeaderBytes'))} "
        f"of at least {needed}, "
        f"got {header_bytes}{stated}: the listener answers 431 to an Authorization header longer than "
        f"maxHeaderBytes (the field name and 'Bearer ' take {AUTHORIZATION_HEADER_OVERHEAD_BYTES} bytes), "
        f"so tokens over {header_bytes - AUTHORIZATION_HEADER_OVERHEAD_BYTES} bytes never reach the token "
        "check; raise serverLimits.maxHeaderBytes or lower maxTokenBytes",
    )


def _extension(doc: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """``spec.extensions.<name>`` as a mapping (empty when absent or of the wrong type)."""
    return _mapping((_mapping(_spec(doc).get("extensions")) or {}).get(name)) or {}


def _positive_duration(value: Any) -> bool:
    """Whether a duration string is above 0s; a value the schema refuses counts as fine here."""
    if not isinstance(value, str):
        return True
    try:
        return parse_duration(value) > 0
    except ValueError:
        return True  # the schema's duration pattern reports it


def _flow_poll_interval_positive(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``flowControl.pollInterval`` above 0s: at 0s the queue's pump re-ran without a pause, taking a
    CPU core for as long as a request waited (the duration pattern allows ``0s``)."""
    value = _extension(doc, "flowControl").get("pollInterval")
    if not _positive_duration(value):
        yield _problem(
            "flow-poll-interval-positive",
            ("spec", "extensions", "flowControl", "pollInterval"),
            f"must be greater than 0s (got {json.dumps(value)}): at 0s the queue is re-run without "
            "pause, taking a CPU core while a request waits",
        )


MIN_TLS_RELOAD_INTERVAL_S: Final = 0.1
"""Shortest ``tlsTermination.reloadInterval`` (rule ``tls-reload-interval-minimum``, whose CEL
expression states the same bound; ``igw.security.settings`` refuses a shorter one too)."""


def _tls_reload_interval_minimum(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``tlsTermination.reloadInterval`` at least 100ms: the duration pattern allows ``0s``, with
    which the gateway re-read and hashed the certificate and key without pause (half a CPU core of an
    idle gateway, measured in session s42; 7 % at ``1ms``) for files cert-manager renews monthly."""
    value = _extension(doc, "tlsTermination").get("reloadInterval")
    if not isinstance(value, str):
        return
    try:
        seconds = parse_duration(value)
    except ValueError:
        return  # the schema's duration pattern reports it
    if seconds < MIN_TLS_RELOAD_INTERVAL_S:
        yield _problem(
            "tls-reload-interval-minimum",
            ("spec", "extensions", "tlsTermination", "reloadInterval"),
            f"must be at least 100ms (got {json.dumps(value)}): a shorter interval re-reads the "
            "certificate and key without pause, taking CPU from the requests",
        )


def _flow_band_durations_positive(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """Each ``flowControl.bands[]`` ``ttl`` and ``slotWait`` above 0s (the gateway refuses 0s)."""
    for index, band in enumerate(_list(_extension(doc, "flowControl").get("bands"))):
        if not isinstance(band, Mapping):
            continue
        for field in ("ttl", "slotWait"):
            if field in band and not _positive_duration(band[field]):
                yield _problem(
                    "flow-band-durations-positive",
                    ("spec", "extensions", "flowControl", "bands", index, field),
                    f"must be greater than 0s (got {json.dumps(band[field])})",
                )


def _retry_after_bounds(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``routing.retryAfter``: ``minSeconds`` at most ``maxSeconds`` (the schema's defaults where one
    is absent)."""
    bounds = _mapping(_extension(doc, "routing").get("retryAfter"))
    if bounds is None:
        return
    fields = shared_schema()["properties"]["spec"]["properties"]["extensions"]["properties"]["routing"][
        "properties"
    ]["retryAfter"]["properties"]
    low = bounds.get("minSeconds", fields["minSeconds"]["default"])
    high = bounds.get("maxSeconds", fields["maxSeconds"]["default"])
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
        return  # the schema reports the type
    if low > high:
        yield _problem(
            "retry-after-bounds",
            ("spec", "extensions", "routing", "retryAfter", "maxSeconds"),
            f"must be at least minSeconds ({low}), got {high}",
        )


def _rewrite_rules(doc: Mapping[str, Any]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    for index, rule in enumerate(_list(_extension(doc, "modelRewrites").get("rules"))):
        if isinstance(rule, Mapping):
            yield index, rule


def _rewrite_positive_weight(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """Each ``modelRewrites.rules[]`` has a target with a positive weight (no share to split by)."""
    for index, rule in _rewrite_rules(doc):
        targets = rule.get("targets")
        if not isinstance(targets, list):
            continue
        weights = [t.get("weight") for t in targets if isinstance(t, Mapping)]
        if not any(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in weights):
            yield _problem(
                "rewrite-positive-weight",
                ("spec", "extensions", "modelRewrites", "rules", index, "targets"),
                "at least one target needs a positive weight",
            )


def _rewrite_sticky_header(doc: Mapping[str, Any]) -> Iterator[Problem]:
    """``stickyBy: header`` names its header in ``stickyHeader``."""
    for index, rule in _rewrite_rules(doc):
        if rule.get("stickyBy") == "header" and "stickyHeader" not in rule:
            yield _problem(
                "rewrite-sticky-header",
                ("spec", "extensions", "modelRewrites", "rules", index, "stickyHeader"),
                "required when stickyBy is header",
            )


RULE_CHECKS: Final[Mapping[str, RuleCheck]] = {
    "bbr-required-for-multiple-schedulers": _bbr_required,
    "unique-scheduler-name": _unique("name", "unique-scheduler-name"),
    "unique-model-name": _unique("modelName", "unique-model-name"),
    "weights-xor-configmapref": _weights_xor_configmap,
    "lru-requires-llm-d": _lru_requires_llm_d,
    "model-selector-not-empty": _selector_not_empty,
    "selector-values-match-operator": _selector_values,
    "gateway-pods-not-model-servers": _gateway_pods_not_selected,
    "jwt-audiences-or-claims": _audiences_or_claims,
    "unique-claim-name": _unique_claim_names,
    "unique-flow-band-priority": _unique_in_extension(
        "flowControl", "bands", "priority", "unique-flow-band-priority"
    ),
    "unique-flow-objective-name": _unique_in_extension(
        "flowControl", "objectives", "name", "unique-flow-objective-name"
    ),
    "jwks-timing": _jwks_timing,
    "token-fits-header-limit": _token_fits_header_limit,
    "unique-flow-objective-access": _unique_in_extension(
        "flowControl", "objectiveAccess", "objective", "unique-flow-objective-access"
    ),
    "flow-poll-interval-positive": _flow_poll_interval_positive,
    "flow-band-durations-positive": _flow_band_durations_positive,
    "tls-reload-interval-minimum": _tls_reload_interval_minimum,
    "retry-after-bounds": _retry_after_bounds,
    "rewrite-positive-weight": _rewrite_positive_weight,
    "rewrite-sticky-header": _rewrite_sticky_header,
    "unique-rewrite-model": _unique_rewrite_match,
    "server-limits-header-timeout-positive": _server_limit_duration(
        "headerTimeout", "server-limits-header-timeout-positive"
    ),
    "server-limits-body-timeout-positive": _server_limit_duration(
        "bodyTimeout", "server-limits-body-timeout-positive"
    ),
    "server-limits-send-timeout-positive": _server_limit_duration(
        "sendTimeout", "server-limits-send-timeout-positive"
    ),
    "server-limits-keepalive-timeout-range": _server_limit_duration(
        "keepAliveTimeout", "server-limits-keepalive-timeout-range", at_most_s=SERVER_LIMITS_MAX_KEEPALIVE_S
    ),
    "management-port-not-serving-port": _management_port_not_serving_port,
    "autoscaling-bounds": _autoscaling_bounds,
    "outlier-ejection-times": _outlier_ejection_times,
}
"""The one registry of Python rule checks, keyed by the ids in ``schemas/admission-rules.yaml``."""


def check_rules(doc: Mapping[str, Any], *, rule_ids: Sequence[str]) -> list[Problem]:
    """Run the checks for ``rule_ids``; an id without a Python check is a contract bug."""
    problems: list[Problem] = []
    for rule_id in rule_ids:
        check = RULE_CHECKS.get(rule_id)
        if check is None:
            raise LookupError(f"admission rule {rule_id!r} has no Python check in igw.config.rules")
        problems.extend(check(doc))
    return problems
