"""The Redis nodes of the objects the audit reads: an InferenceGatewayConfig's shared rate limits and
heartbeats, a GlobalRouterConfig's heartbeats and rate limits (IGW-AU308, IGW-AU309)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from igw.checks.framework import CheckContext
from igw.checks.inventory import Manifest, need
from igw.checks.k8s import spec
from igw.config.redis_password import GATEWAY_REDIS_NODES, GLOBAL_ROUTER_REDIS_NODES, spec_node

REDIS_NODES: Final[Mapping[str, tuple[tuple[str, ...], ...]]] = {
    "InferenceGatewayConfig": GATEWAY_REDIS_NODES,
    "GlobalRouterConfig": GLOBAL_ROUTER_REDIS_NODES,
}
"""Per kind, the spec paths of its ``redis`` nodes (``url``, ``passwordEnv``)."""


def redis_nodes(ctx: CheckContext) -> list[tuple[Manifest, list[tuple[str, Mapping[str, Any]]]]]:
    """Each object of either kind with its ``redis`` nodes, each as ``(the url's field path, node)``.
    Skips the check (with the source's reason) when there is no object of either kind."""
    kinds = {kind: ctx.inventory.kube.of(kind) for kind in REDIS_NODES}
    configs = [(kind, c) for kind, objects in kinds.items() if isinstance(objects, list) for c in objects]
    if not configs:
        need(kinds["InferenceGatewayConfig"])  # nothing of either kind: skipped with the source's reason
    found = []
    for kind, config in configs:
        nodes = []
        for path in REDIS_NODES[kind]:
            node = spec_node(spec(config), path)
            if node is not None:
                nodes.append(("spec." + ".".join(path) + ".url", node))
        found.append((config, nodes))
    return found
