"""The ``GlobalRouterConfig`` contract: its JSON Schema and the checks the schema cannot express.

``schemas/globalrouterconfig.schema.json`` is the source. Its nodes marked
``{"x-igw-same-as": "spec.auth"}`` are replaced by the node at that path of the
InferenceGatewayConfig contract, so authentication, authorization and rate limits are written
(and validated) exactly as for one tier-1 gateway and cannot drift apart. An installed package
without a checkout reads the resolved copy ``igw generate`` bundles next to the IGWC one.

Problems name the field (``spec.clusters[1].name: duplicates spec.clusters[0].name ("a")``),
with the same wording as ``igw validate`` uses for InferenceGatewayConfig.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from jsonschema.protocols import Validator

from igw.config.errors import Problem
from igw.config.model import API_GROUP, API_VERSION
from igw.config.paths import BUNDLED_DIR, SCHEMAS_DIR_ENV, checkout_schemas_dir
from igw.config.rules import token_header_problem
from igw.config.schema import SchemaError, inline_refs, resolved_schema
from igw.config.schema_messages import ProblemCollector, json_type
from igw.config.schema_validator import schema_validator

KIND: Final = "GlobalRouterConfig"
SCHEMA_FILE: Final = "globalrouterconfig.schema.json"
SAME_AS: Final = "x-igw-same-as"
DEFAULT_POLL_S: Final = 0.5
"""``spec.heartbeats.pollIntervalSeconds``' default (the schema's)."""
DEFAULT_STALENESS_S: Final = 3.0
"""``spec.failover.heartbeatStalenessSeconds``' default (the schema's)."""
DEFAULT_REPLAY_KEEPALIVE_S: Final = 15.0
"""``spec.upstream.replayKeepAliveSeconds``' default (the schema's; tier 1's ``sseKeepAliveInterval``)."""


def is_global_router_config(doc: Any) -> bool:
    """Whether a parsed document claims to be a GlobalRouterConfig (by ``kind``)."""
    return isinstance(doc, Mapping) and doc.get("kind") == KIND


def _schema_folder() -> Path:

    override = os.environ.get(SCHEMAS_DIR_ENV)
    if override and (Path(override) / SCHEMA_FILE).is_file():
        return Path(override)
    return checkout_schemas_dir() or BUNDLED_DIR


def _igwc_node(igwc: Mapping[str, Any], dotted: str, *, source: str) -> dict[str, Any]:
    node: Any = igwc
    for part in dotted.split("."):
        node = node.get("properties", {}).get(part) if isinstance(node, Mapping) else None
        if node is None:
            raise SchemaError(f"{source}: {SAME_AS} {dotted!r} is not in the InferenceGatewayConfig schema")
    result: dict[str, Any] = copy.deepcopy(dict(node))
    return result


def _attach_same_as(node: Any, igwc: Mapping[str, Any], *, source: str) -> Any:
    if isinstance(node, list):
        return [_attach_same_as(item, igwc, source=source) for item in node]
    if not isinstance(node, dict):
        return node
    if SAME_AS in node:
        target = _igwc_node(igwc, str(node[SAME_AS]), source=source)
        rest = {k: v for k, v in node.items() if k != SAME_AS}
        return {**target, **rest}
    return {key: _attach_same_as(value, igwc, source=source) for key, value in node.items()}


@functools.lru_cache(maxsize=4)
def _resolved(folder: Path, _stamp: int) -> dict[str, Any]:
    path = folder / SCHEMA_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{path}: cannot read schema: {exc}") from exc
    inlined = inline_refs(raw, source=str(path))
    igwc = resolved_schema(folder) if (folder / "inferencegatewayconfig.schema.json").is_file() else {}
    resolved: dict[str, Any] = _attach_same_as(inlined, igwc, source=str(path))
    return resolved


def global_schema(folder: Path | None = None) -> dict[str, Any]:
    """The whole GlobalRouterConfig schema, ``$ref`` and ``x-igw-same-as`` resolved (a fresh copy)."""
    where = (folder or _schema_folder()).resolve()
    try:
        stamp = (where / SCHEMA_FILE).stat().st_mtime_ns
    except OSError as exc:
        raise SchemaError(f"{where / SCHEMA_FILE}: cannot read schema: {exc}") from exc
    return copy.deepcopy(_resolved(where, stamp))


@functools.lru_cache(maxsize=4)
def _validator(folder: Path | None) -> Validator:
    return schema_validator(global_schema(folder))


def _duplicates(items: list[Any], key: Any, *, list_path: str, field: str) -> list[Problem]:
    seen: dict[Any, int] = {}
    problems: list[Problem] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        value = key(item)
        if value is None:
            continue
        if value in seen:
            first = seen[value]
            problems.append(
                Problem(
                    path=f"{list_path}[{index}].{field}",
                    message=f"duplicates {list_path}[{first}].{field} ({json.dumps(value)})",
                    rule=f"global-unique-{field.lower()}",
                )
            )
        else:
            seen[value] = index
    return problems


def _origin_of(cluster: Mapping[str, Any]) -> str | None:
    """The origin a cluster's ``endpoint`` names, host without case and the default port written
    out: ``https://IGW.example.com/`` and ``https://igw.example.com:443`` are one gateway (before
    session s38 only a final ``/`` was ignored, so one gateway written two ways passed as two
    clusters). An endpoint that does not parse is compared as written (its
    pattern problem is reported)."""
    endpoint = cluster.get("endpoint")
    if not isinstance(endpoint, str):
        return None
    try:
        parts = urlsplit(endpoint)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return endpoint.rstrip("/")
    host = parts.hostname or ""
    return f"{parts.scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def rule_problems(doc: Mapping[str, Any]) -> list[Problem]:
    """Cross-field checks: unique cluster names and endpoints, unique rate-limit entries and
    ``rateLimits.tenants``, costs, ``authorization.maxTokenBytes`` within ``serverLimits.maxHeaderBytes``
    (the gateway's rule ``token-fits-header-limit``), the heartbeat poll within the staleness."""
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        return []
    problems: list[Problem] = []
    clusters = spec.get("clusters")
    if isinstance(clusters, list):
        problems += _duplicates(clusters, lambda c: c.get("name"), list_path="spec.clusters", field="name")
        problems += _duplicates(clusters, _origin_of, list_path="spec.clusters", field="endpoint")
        for index, cluster in enumerate(clusters):
            cost = cluster.get("cost") if isinstance(cluster, Mapping) else None
            if not isinstance(cost, Mapping):
                continue
            where = f"spec.clusters[{index}].cost"
            per_token, per_hour = "perMillionTokens" in cost, "perGpuHour" in cost
            if per_token and per_hour:
                problems.append(
                    Problem(where, "set perMillionTokens or perGpuHour, not both", "global-cost-one-basis")
                )
            elif per_hour and "tokensPerGpuSecond" not in cost:
                problems.append(
                    Problem(
                        f"{where}.tokensPerGpuSecond",
                        "required with perGpuHour (converts the hourly price to a price per token)",
                        "global-cost-gpu-throughput",
                    )
                )
            elif not per_token and not per_hour:
                problems.append(
                    Problem(where, "needs perMillionTokens or perGpuHour", "global-cost-one-basis")
                )
    rate_limits = spec.get("rateLimits")
    tenants = rate_limits.get("tenants") if isinstance(rate_limits, Mapping) else None
    if isinstance(tenants, list):  # igw global serve refuses a duplicate at start
        problems += _duplicates(
            tenants, lambda e: e.get("tenant"), list_path="spec.rateLimits.tenants", field="tenant"
        )
    limits = spec.get("modelRateLimits")
    if isinstance(limits, list):
        problems += _duplicates(
            limits,
            lambda e: f"{e.get('tenant')}/{e.get('model')}",
            list_path="spec.modelRateLimits",
            field="model",
        )
    poll_problem = _poll_within_staleness(spec)
    if poll_problem is not None:
        problems.append(poll_problem)
    token_header = token_header_problem(
        spec.get("authorization"), spec.get("serverLimits"), at=("spec",), auth=spec.get("auth")
    )
    if token_header is not None:
        problems.append(token_header)
    return problems


def _poll_within_staleness(spec: Mapping[str, Any]) -> Problem | None:
    """``heartbeats.pollIntervalSeconds`` below ``failover.heartbeatStalenessSeconds`` (defaults where
    unset; a value of the wrong type is the schema's problem). A heartbeat's age is measured from the
    read that saw it change, so reads that far apart age every cluster past the threshold between two
    reads: until session s42 such a configuration validated, and each failed request between reads
    (its evaluation of the fleet) drained every cluster as ``stale``, the next read brought each back
    with a slow start (24 failovers and recoveries in 20 s of healthy heartbeats, polling every 5 s
    against the default 3 s)."""
    heartbeats, failover = spec.get("heartbeats", {}), spec.get("failover", {})
    if not isinstance(heartbeats, Mapping) or not isinstance(failover, Mapping):
        return None
    poll = heartbeats.get("pollIntervalSeconds", DEFAULT_POLL_S)
    stale = failover.get("heartbeatStalenessSeconds", DEFAULT_STALENESS_S)
    numbers = (int, float)
    if type(poll) not in numbers or type(stale) not in numbers or poll < stale:
        return None
    return Problem(
        "spec.heartbeats.pollIntervalSeconds",
        f"must be below spec.failover.heartbeatStalenessSeconds ({stale:g}): reads that far apart "
        f"drain every cluster as stale between them; got {poll:g}",
        "global-poll-within-staleness",
    )


def validate_global_document(doc: Any, *, folder: Path | None = None) -> list[Problem]:
    """Every problem of one GlobalRouterConfig document; empty means valid."""
    if not isinstance(doc, Mapping):
        return [Problem(path="", message=f"expected an object, got {json_type(doc)}", rule="schema.type")]
    collector = ProblemCollector()
    for error in _validator(folder).iter_errors(doc):
        collector.translate(error)
    return [*collector.problems(), *rule_problems(doc)]


API_VERSION_TEXT: Final = f"{API_GROUP}/{API_VERSION}"


def render_bundled_global_schema(root: Path) -> str:
    """The resolved schema shipped inside the package (an installed router has no ``schemas/``)."""
    schema = global_schema(root / "schemas")
    schema["$comment"] = "Bundled by `igw generate` from schemas/ (references resolved). Do not edit."
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
