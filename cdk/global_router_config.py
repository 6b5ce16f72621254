"""The global router's deployment file (``cdk/examples/global/global-router.yaml``): where and how to run
tier 2.

Kept apart from the per-cluster deployment config: the router is one stack in one region in front
of many clusters, each deployed by its own per-cluster app. ``routerConfig`` names a
``GlobalRouterConfig`` file whose ``spec.clusters[].endpoint`` are those clusters' gateway URLs (the
per-cluster stacks' gateway endpoints); it is validated exactly as ``igw validate`` does, and the
stack fills in the Redis URLs of the ElastiCache it creates.
"""

from __future__ import annotations

import ipaddress
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
class PeerVpc:
    """A tier-1 cluster VPC in the router's region: the stack peers with it and routes its CIDR."""

    vpc_id: str
    cidr: str
    account: str | None = None
    """The peer VPC's account when it differs from the router's (the peering must then be accepted
    there)."""


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
    tier1_cidrs: tuple[str, ...] = ()
    """Networks whose tier-1 gateways publish heartbeats to the Redis (reached over a Transit
    Gateway or peering created elsewhere): admitted by the Redis security group."""
    tier1_peer_vpcs: tuple[PeerVpc, ...] = ()


DEFAULT_VPC_CIDR = "10.40.0.0/16"
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
    cidrs, peers, network_problems = _tier1_networks(
        raw.get("tier1Networks", {}),
        region=str(raw["region"]),
        vpc_cidr=str(raw.get("vpcCidr", DEFAULT_VPC_CIDR)),
        source=source,
    )
    problems += network_problems
    if problems:
        raise GlobalRouterDeploymentError("\n".join(problems))
    return GlobalRouterDeployment(
        account=str(raw["account"]),
        region=str(raw["region"]),
        availability_zones=tuple(str(z) for z in raw["availabilityZones"]),
        stack_name=str(raw.get("stackName", "IgwGlobalRouter")),
        vpc_cidr=str(raw.get("vpcCidr", DEFAULT_VPC_CIDR)),
        image=str(raw["image"]) if raw.get("image") else None,
        replicas=int(raw.get("replicas", 2)),
        public=bool(endpoint.get("public", False)),
        allowed_cidrs=tuple(str(c) for c in endpoint.get("allowedCidrs", ())),
        domain_name=str(endpoint["domainName"]),
        hosted_zone_id=str(endpoint["hostedZoneId"]),
        hosted_zone_name=str(endpoint["hostedZoneName"]),
        cache_node_type=str(raw.get("cacheNodeType", "cache.t4g.small")),
        router_document=documents[0],
        tier1_cidrs=cidrs,
        tier1_peer_vpcs=peers,
    )


def _cidr(value: Any, where: str) -> tuple[str | None, list[str]]:
    try:
        network = ipaddress.ip_network(str(value), strict=True)
    except ValueError as exc:
        return None, [f"{where}: {exc}"]
    if network.version != 4 or network.prefixlen == 0:
        return None, [f"{where}: an IPv4 network narrower than /0 (got {value})"]
    return str(network), []


def _tier1_networks(
    raw: Any, *, region: str, vpc_cidr: str, source: str
) -> tuple[tuple[str, ...], tuple[PeerVpc, ...], list[str]]:
    """``tier1Networks``: ``cidrs`` (reached through a Transit Gateway or peering made elsewhere) and
    ``peerVpcs`` (same-region VPCs the stack peers with); the problems, each naming its field."""
    where = f"{source}: tier1Networks"
    if not isinstance(raw, Mapping):
        return (), (), [f"{where}: expected a mapping"]
    problems: list[str] = []
    cidrs: list[str] = []
    for i, value in enumerate(raw.get("cidrs", [])):
        cidr, bad = _cidr(value, f"{where}.cidrs[{i}]")
        problems += bad
        if cidr is not None:
            cidrs.append(cidr)
    peers: list[PeerVpc] = []
    for i, peer in enumerate(raw.get("peerVpcs", [])):
        at = f"{where}.peerVpcs[{i}]"
        if not isinstance(peer, Mapping) or not str(peer.get("vpcId", "")).startswith("vpc-"):
            problems.append(f"{at}.vpcId: required, a VPC ID (vpc-...)")
            continue
        if str(peer.get("region", region)) != region:
            problems.append(
                f"{at}.region: {peer['region']} is not the router's region {region}; this stack peers only "
                "within its region: connect other regions through a Transit Gateway (inter-region "
                "peering attachment) and list their CIDRs under tier1Networks.cidrs"
            )
            continue
        cidr, bad = _cidr(peer.get("cidr"), f"{at}.cidr")
        problems += bad
        if cidr is not None and ipaddress.ip_network(cidr).overlaps(ipaddress.ip_network(vpc_cidr)):
            problems.append(
                f"{at}.cidr: {cidr} overlaps the router's vpcCidr {vpc_cidr} (peering needs disjoint)"
            )
        elif cidr is not None:
            account = peer.get("account")
            peers.append(PeerVpc(str(peer["vpcId"]), cidr, str(account) if account else None))
    return tuple(cidrs), tuple(peers), problems


def load(path: Path) -> GlobalRouterDeployment:
    return parse(yaml.safe_load(path.read_text(encoding="utf-8")), base=path.parent, source=str(path))


EXAMPLE_FILE = Path(__file__).resolve().parent / "examples" / "global" / "global-router.yaml"
