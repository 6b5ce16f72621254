"""The global router's deployment file (``cdk/examples/global/global-router.yaml``): where and how to run
tier 2.

Kept apart from the per-cluster deployment config: the router is one stack in one region in front
of many clusters, each deployed by its own per-cluster app. ``routerConfig`` names a
``GlobalRouterConfig`` file whose ``spec.clusters[].endpoint`` are those clusters' gateway URLs (the
per-cluster stacks' gateway endpoints); it is validated exactly as ``igw validate`` does, and the
stack fills in the Redis URLs of the ElastiCache it creates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from igw.config.documents import read_documents
from igw.global_router.schema import is_global_router_config, validate_global_document


class GlobalRouterDeploymentError(ValueError):
    """The deployment file or the router configuration it names is invalid; lists every problem."""


@dataclass(frozen=True, slots=True)
class GlobalRouterDeployment:
    account: str
    region: str
    availability_zones: tuple[str, ...]
    stack_name: str
    vpc_cidr: str
    image: str | None
    """An existing gateway image URI (it also runs ``igw global serve``), e.g. the per-cluster app's
    ECR image; ``None`` (the default): built from ``gateway_src/Dockerfile`` as a CDK asset."""
    replicas: int
    public: bool
    allowed_cidrs: tuple[str, ...]
    domain_name: str
    hosted_zone_id: str
    hosted_zone_name: str
    cache_node_type: str
    router_document: Mapping[str, Any]


_REQUIRED = ("account", "region", "availabilityZones", "endpoint", "routerConfig")


def parse(raw: Any, *, base: Path, source: str) -> GlobalRouterDeployment:
    if not isinstance(raw, Mapping):
        raise GlobalRouterDeploymentError(f"{source}: expected a mapping")
    problems = [f"{source}: missing required field {name!r}" for name in _REQUIRED if name not in raw]
    if problems:
        raise GlobalRouterDeploymentError("\n".join(problems))
    endpoint = raw["endpoint"]
    for name in ("domainName", "hostedZoneId", "hostedZoneName"):
        if name not in endpoint:
            problems.append(f"{source}: endpoint.{name}: required (TLS certificate and DNS record)")
    router_path = (base / str(raw["routerConfig"])).resolve()
    documents = [d.content for d in read_documents(router_path) if is_global_router_config(d.content)]
    if len(documents) != 1:
        problems.append(f"{router_path}: expected exactly one GlobalRouterConfig document")
    else:
        problems += [f"{router_path}: {p}" for p in validate_global_document(documents[0])]
    if len(raw["availabilityZones"]) < 2:
        problems.append(f"{source}: availabilityZones: at least 2 (Multi-AZ Redis and load balancer)")
    if problems:
        raise GlobalRouterDeploymentError("\n".join(problems))
    return GlobalRouterDeployment(
        account=str(raw["account"]),
        region=str(raw["region"]),
        availability_zones=tuple(str(z) for z in raw["availabilityZones"]),
        stack_name=str(raw.get("stackName", "IgwGlobalRouter")),
        vpc_cidr=str(raw.get("vpcCidr", "10.40.0.0/16")),
        image=str(raw["image"]) if raw.get("image") else None,
        replicas=int(raw.get("replicas", 2)),
        public=bool(endpoint.get("public", False)),
        allowed_cidrs=tuple(str(c) for c in endpoint.get("allowedCidrs", ())),
        domain_name=str(endpoint["domainName"]),
        hosted_zone_id=str(endpoint["hostedZoneId"]),
        hosted_zone_name=str(endpoint["hostedZoneName"]),
        cache_node_type=str(raw.get("cacheNodeType", "cache.t4g.small")),
        router_document=documents[0],
    )


def load(path: Path) -> GlobalRouterDeployment:
    return parse(yaml.safe_load(path.read_text(encoding="utf-8")), base=path.parent, source=str(path))


EXAMPLE_FILE = Path(__file__).resolve().parent / "examples" / "global" / "global-router.yaml"
