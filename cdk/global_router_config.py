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
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdk import cdk_tokens
from cdk.config import REPO_ROOT, ipv4_network, schema_message, subnets_fit
from igw.config.documents import DocumentReadError, read_documents
from igw.config.schema_validator import schema_validator
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
SCHEMA_FILE = REPO_ROOT / "schemas" / "global-router-deployment.schema.json"
SUBNET_MASKS = (24, 22, 26)
"""The router VPC's subnets per zone, in CDK's allocation order (``GlobalRouterStack``): public,
private (the tasks), isolated (the Redis)."""


def _path(parts: Sequence[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def _schema_problems(raw: Any, source: str) -> list[str]:
    """Every problem of ``raw`` against ``schemas/global-router-deployment.schema.json``, with its path:
    a wrong type, an unknown key (a misspelt one changed nothing before) or a value out of range; a
    pattern in the words of its ``x-igw-hint`` (:func:`cdk.config.schema_message`)."""
    validator = schema_validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")), formats=False)
    errors = sorted(validator.iter_errors(raw), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{source}: {_path(list(error.absolute_path))}: {schema_message(error)}" for error in errors]


def _token_problems(raw: Any, source: str) -> list[str]:
    """Values CDK would read as its tokens (:mod:`cdk.cdk_tokens`), each with its field."""
    return [f"{source}: {_path(path)}: {message}" for path, message in cdk_tokens.problems(raw)]


def _network_problems(raw: Mapping[str, Any], source: str) -> list[str]:
    """The zones, the VPC and the admitted networks: what EC2 or CDK refuse (CDK with a traceback)."""
    problems: list[str] = []
    region = raw["region"]
    zones = raw["availabilityZones"]
    for i, zone in enumerate(zones):
        if zone[:-1] != region:
            problems.append(f"{source}: availabilityZones[{i}]: {zone} is not a zone of the region {region}")
    vpc_cidr = raw.get("vpcCidr", DEFAULT_VPC_CIDR)
    network, why = ipv4_network(vpc_cidr)
    if network is None:
        problems.append(f"{source}: vpcCidr: {why}")
    elif not subnets_fit(network, [mask for mask in SUBNET_MASKS for _ in zones]):
        problems.append(
            f"{source}: vpcCidr: {vpc_cidr} cannot hold a public /24, a private /22 and a cache /26 "
            f"subnet in each of {len(zones)} zones"
        )
    endpoint = raw["endpoint"]
    for i, cidr in enumerate(endpoint.get("allowedCidrs", ())):
        _, why = ipv4_network(cidr)
        if why is not None:
            problems.append(f"{source}: endpoint.allowedCidrs[{i}]: {why}")
    if endpoint.get("public", False) and "allowedCidrs" not in endpoint:
        problems.append(
            f"{source}: endpoint.allowedCidrs: required with public: true (without it the "
            "internet-facing load balancer admits only the router's own VPC)"
        )
    return problems


def parse(raw: Any, *, base: Path, source: str) -> GlobalRouterDeployment:
    """Validate a decoded deployment file (schema, then zones, networks and the router configuration
    it names) and return it typed, or raise :class:`GlobalRouterDeploymentError` listing every
    problem with its field."""
    problems = _schema_problems(raw, source) + _token_problems(raw, source)
    if problems:
        raise GlobalRouterDeploymentError("\n".join(problems))
    problems = _network_problems(raw, source)
    endpoint = raw["endpoint"]
    router_path = (base / str(raw["routerConfig"])).resolve()
    documents: list[Any] = []
    try:
        documents = [d.content for d in read_documents(router_path) if is_global_router_config(d.content)]
    except DocumentReadError as exc:
        problems.append(f"{source}: routerConfig: {exc}")
    else:
        if len(documents) != 1:
            problems.append(f"{router_path}: expected exactly one GlobalRouterConfig document")
        else:
            problems += [f"{router_path}: {p}" for p in validate_global_document(documents[0])]
            # The stack embeds the router's configuration in its template.
            problems += _token_problems(documents[0], str(router_path))
    vpc_cidr = str(raw.get("vpcCidr", DEFAULT_VPC_CIDR))
    cidrs, peers, network_problems = _tier1_networks(
        raw.get("tier1Networks", {}), region=str(raw["region"]), vpc_cidr=vpc_cidr, source=source
    )
    problems += network_problems
    if problems:
        raise GlobalRouterDeploymentError("\n".join(problems))
    return GlobalRouterDeployment(
        account=raw["account"],
        region=raw["region"],
        availability_zones=tuple(raw["availabilityZones"]),
        stack_name=raw.get("stackName", "IgwGlobalRouter"),
        vpc_cidr=vpc_cidr,
        image=raw.get("image"),
        replicas=raw.get("replicas", 2),
        public=endpoint.get("public", False),
        allowed_cidrs=tuple(endpoint.get("allowedCidrs", ())),
        domain_name=endpoint["domainName"],
        hosted_zone_id=endpoint["hostedZoneId"],
        hosted_zone_name=endpoint["hostedZoneName"],
        cache_node_type=raw.get("cacheNodeType", "cache.t4g.small"),
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
    problems: list[str] = []
    router_network, _ = ipv4_network(vpc_cidr)
    cidrs: list[str] = []
    for i, value in enumerate(raw.get("cidrs", [])):
        cidr, bad = _cidr(value, f"{where}.cidrs[{i}]")
        problems += bad
        if cidr is not None:
            cidrs.append(cidr)
    peers: list[PeerVpc] = []
    for i, peer in enumerate(raw.get("peerVpcs", [])):
        at = f"{where}.peerVpcs[{i}]"
        if str(peer.get("region", region)) != region:
            problems.append(
                f"{at}.region: {peer['region']} is not the router's region {region}; this stack peers only "
                "within its region: connect other regions through a Transit Gateway (inter-region "
                "peering attachment) and list their CIDRs under tier1Networks.cidrs"
            )
            continue
        cidr, bad = _cidr(peer.get("cidr"), f"{at}.cidr")
        problems += bad
        if cidr is not None and router_network and ipaddress.ip_network(cidr).overlaps(router_network):
            problems.append(
                f"{at}.cidr: {cidr} overlaps the router's vpcCidr {vpc_cidr} (peering needs disjoint)"
            )
        elif cidr is not None:
            account = peer.get("account")
            peers.append(PeerVpc(str(peer["vpcId"]), cidr, str(account) if account else None))
    return tuple(cidrs), tuple(peers), problems


def load(path: Path) -> GlobalRouterDeployment:
    """Read a deployment file like every configuration file (a syntax error with its line; a file nested
    thousands of levels deep, an alias bomb or a duplicate key refused) and :func:`parse` it."""
    try:
        documents = read_documents(path)
    except DocumentReadError as exc:
        raise GlobalRouterDeploymentError(str(exc)) from exc
    if len(documents) != 1:
        raise GlobalRouterDeploymentError(f"{path}: one document expected, got {len(documents)}")
    return parse(documents[0].content, base=path.parent, source=str(path))


EXAMPLE_FILE = Path(__file__).resolve().parent / "examples" / "global" / "global-router.yaml"
