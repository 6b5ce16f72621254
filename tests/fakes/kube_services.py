"""A Service's cluster IP and node ports, allocated as kube-apiserver's Service REST storage does.

Without this the fake stored a Service as sent: ``kubectl get svc`` showed ``CLUSTER-IP <none>`` and
``PORT(S) 80/TCP`` for a NodePort Service, where a cluster shows an IP and ``80:3xxxx/TCP``, and a
client reading ``spec.clusterIP`` or a ``nodePort`` back found nothing.

What the API server does (``pkg/registry/core/service/storage/alloc.go``, ``ipallocator``,
``portallocator``): on create, a Service that needs a cluster IP (every type but ExternalName, unless
``clusterIP: None``, headless) gets a free one from the service CIDR (:data:`SERVICE_CIDR`, kubeadm's
default) and ``clusterIPs`` to match; a requested one is kept if free and in range, else the write is
refused 422 ``Invalid`` on ``spec.clusterIPs``. A NodePort or LoadBalancer Service (the latter unless
``allocateLoadBalancerNodePorts: false``) gets a free port in :data:`NODE_PORT_RANGE` for each port
without one; a requested one taken or out of range is refused on ``spec.ports[i].nodePort``. On an
update that leaves them out, the stored values are carried over (``patchAllocatedValues``: the IP, and
each node port matched by port name). What is taken is what the stored Services hold, so deleting one
frees its IP and ports.

On create, ports of one number (53 over TCP and UDP) share one node port (``initNodePorts``); the
same node port twice for one protocol is refused ``Duplicate``. A LoadBalancer Service with
``externalTrafficPolicy: Local`` gets a ``healthCheckNodePort`` too. On an update the cluster IPs
may not change (:func:`immutable_errors`, after :func:`normalize_cluster_ips`).
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Iterable, Mapping
from typing import Any, Final

from tests.fakes.kube_field_errors import FieldError, quoted

SERVICE_CIDR: Final = ipaddress.ip_network("10.96.0.0/12")
"""The service CIDR (kubeadm's default ``--service-cluster-ip-range``)."""
NODE_PORT_RANGE: Final = range(30000, 32768)
"""``--service-node-port-range``'s default, 30000-32767."""
_FIRST_IP: Final = int(SERVICE_CIDR.network_address)
_random: Final = random.SystemRandom()


def _needs_cluster_ip(spec: Mapping[str, Any]) -> bool:
    return spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None"


def _needs_node_ports(spec: Mapping[str, Any]) -> bool:
    kind = spec.get("type")
    return kind == "NodePort" or (
        kind == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is not False
    )


def _needs_health_check(spec: Mapping[str, Any]) -> bool:
    return spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


def _ports(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [p for p in spec.get("ports") or [] if isinstance(p, dict)]


def set_defaults(spec: dict[str, Any]) -> None:
    """``SetDefaults_Service`` and the REST strategy's family defaulting: ``type: ClusterIP``,
    ``sessionAffinity: None``, ``internalTrafficPolicy: Cluster`` (``externalTrafficPolicy: Cluster``
    where node ports are used), each port ``protocol: TCP`` and ``targetPort`` its ``port``, and a
    single-stack IPv4 family on Services with a cluster IP."""
    spec.setdefault("type", "ClusterIP")
    if spec["type"] == "ExternalName":
        return
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    for port in _ports(spec):
        port.setdefault("protocol", "TCP")
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")


def taken(services: Iterable[Mapping[str, Any]]) -> tuple[set[str], set[int]]:
    """The cluster IPs and node ports the given (stored) Services hold."""
    ips: set[str] = set()
    node_ports: set[int] = set()
    for service in services:
        spec = service.get("spec") or {}
        ips.update(str(ip) for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip and ip != "None")
        node_ports.update(int(p["nodePort"]) for p in _ports(spec) if isinstance(p.get("nodePort"), int))
        if isinstance(spec.get("healthCheckNodePort"), int):
            node_ports.add(spec["healthCheckNodePort"])
    return ips, node_ports


def _free_ip(used: set[str]) -> str:
    # The network address and the first host (the ``kubernetes`` Service's) are never handed out.
    while True:
        ip = str(ipaddress.ip_address(_FIRST_IP + _random.randrange(2, SERVICE_CIDR.num_addresses - 1)))
        if ip not in used:
            return ip


def _ip_error(requested: str, used: set[str]) -> str | None:
    try:
        address = ipaddress.ip_address(requested)
    except ValueError:
        return None  # malformed: validation's to refuse, not the allocator's
    if address not in SERVICE_CIDR or address in (
        SERVICE_CIDR.network_address,
        SERVICE_CIDR.broadcast_address,
    ):
        return (
            f"failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. "
            f"The range of valid IPs is {SERVICE_CIDR}"
        )
    if requested in used:
        return f"failed to allocate IP {requested}: provided IP is already allocated"
    return None


def _same_cluster_ips(spec: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    return list(spec.get("clusterIPs") or []) == list(old.get("clusterIPs") or [])


def normalize_cluster_ips(spec: dict[str, Any], old: Mapping[str, Any]) -> None:
    """On an update, make ``clusterIP`` and ``clusterIPs`` agree as the REST storage's
    ``normalizeClusterIPs`` does: an old client that sends only ``clusterIP`` (unchanged) keeps the
    stored ``clusterIPs``; one that changes only ``clusterIP`` has ``clusterIPs`` follow it (and so
    is refused by :func:`immutable_errors`); one that clears both gets the stored ones back when
    allocating."""
    if old.get("clusterIPs") and not spec.get("clusterIPs") and old.get("clusterIP") == spec.get("clusterIP"):
        spec["clusterIPs"] = list(old["clusterIPs"])
    if old.get("clusterIP") != spec.get("clusterIP") and _same_cluster_ips(spec, old):
        if old.get("clusterIP") and not spec.get("clusterIP"):
            spec.pop("clusterIPs", None)
        elif spec.get("clusterIP"):
            spec["clusterIPs"] = [spec["clusterIP"]]
    if _needs_cluster_ip(old) and _needs_cluster_ip(spec):  # ``patchAllocatedValues``
        if not spec.get("clusterIP") and old.get("clusterIP"):
            spec["clusterIP"] = old["clusterIP"]
        if not spec.get("clusterIPs") and old.get("clusterIPs"):
            spec["clusterIPs"] = list(old["clusterIPs"])


def immutable_errors(spec: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    """``validateUpgradeDowngradeClusterIPs``: a Service's cluster IPs may not change once set
    (unless it is, or was, an ExternalName Service); each changed one is refused on
    ``spec.clusterIPs[i]``, the value printed being the whole new list."""
    if "ExternalName" in (spec.get("type"), old.get("type")):
        return []
    new_ips = list(spec.get("clusterIPs") or [])
    return [
        FieldError(f"spec.clusterIPs[{i}]", "FieldValueInvalid", quoted(new_ips), "may not change once set")
        for i, ip in enumerate(old.get("clusterIPs") or [])
        if i < len(new_ips) and ip != new_ips[i]
    ]


def _allocate_node_ports(
    ports: list[dict[str, Any]],
    old_ports_list: list[dict[str, Any]],
    claimed: set[int],
    creating: bool,
    errors: list[FieldError],
) -> None:
    """Give each port a node port, refusing requested ones taken or out of range (``claimed``: the
    other Services' node ports, added to). On create a port number served over several protocols
    (53 over TCP and UDP) shares one node port, the first requested among them or else a free one
    (``initNodePorts``); an update carries the stored ones over by port name."""
    old_by_name = {p.get("name"): p.get("nodePort") for p in old_ports_list}
    old_ports = set(old_by_name.values())
    kept = {p.get("nodePort") for p in ports} & old_ports
    for port in ports:
        if not port.get("nodePort") and old_by_name.get(port.get("name")) not in (None, *kept):
            port["nodePort"] = old_by_name[port.get("name")]
    if creating:
        for port in ports:
            if not port.get("nodePort"):
                port["nodePort"] = next(
                    (p["nodePort"] for p in ports if p.get("port") == port.get("port") and p.get("nodePort")),
                    None,
                )
    seen: set[tuple[Any, Any]] = set()
    duplicates = []
    for index, port in enumerate(ports):  # validation's: one node port per protocol
        node_port = port.get("nodePort")
        if node_port and (port.get("protocol"), node_port) in seen:
            duplicates.append(
                FieldError(f"spec.ports[{index}].nodePort", "FieldValueDuplicate", str(node_port))
            )
        seen.add((port.get("protocol"), node_port))
    if duplicates:  # refused by validation, before anything is allocated
        errors.extend(duplicates)
        return
    mine: dict[int, Any] = {}
    """The node ports this Service claimed, each with the port number it was claimed for."""
    for index, port in enumerate(ports):
        node_port = port.get("nodePort")
        if not isinstance(node_port, int) or not node_port:
            continue
        problem = None
        if node_port in old_ports:  # this Service's own, already allocated
            pass
        elif node_port in mine and (not creating or mine[node_port] == port.get("port")):
            pass  # shared with another protocol of the same port
        elif node_port not in NODE_PORT_RANGE:
            problem = (
                "provided port is not in the valid range. The range of valid ports is "
                f"{NODE_PORT_RANGE.start}-{NODE_PORT_RANGE.stop - 1}"
            )
        elif node_port in claimed:
            problem = "provided port is already allocated"
        if problem:
            errors.append(
                FieldError(f"spec.ports[{index}].nodePort", "FieldValueInvalid", str(node_port), problem)
            )
        claimed.add(node_port)
        mine.setdefault(node_port, port.get("port"))
    by_number: dict[Any, int] = {}
    for port in ports:
        if not port.get("nodePort"):
            if creating and port.get("port") in by_number:
                port["nodePort"] = by_number[port.get("port")]
            else:
                port["nodePort"] = _random.choice([p for p in NODE_PORT_RANGE if p not in claimed])
                claimed.add(port["nodePort"])
        by_number.setdefault(port.get("port"), port["nodePort"])


def allocate(
    spec: dict[str, Any], used_ips: set[str], used_ports: set[int], old: Mapping[str, Any] | None = None
) -> list[FieldError]:
    """Fill ``spec``'s cluster IP and node ports in place (``old``: the stored spec, on an update);
    ``used_*``: what the other Services hold. Returns the refusals, empty when all is allocated."""
    creating = old is None
    old = old or {}
    errors: list[FieldError] = []
    if _needs_cluster_ip(spec):
        if not spec.get("clusterIP") and spec.get("clusterIPs"):  # the primary family's IP
            spec["clusterIP"] = spec["clusterIPs"][0]
        if _needs_cluster_ip(old) and old.get("clusterIP") and not spec.get("clusterIP"):
            spec["clusterIP"] = old["clusterIP"]
        requested = spec.get("clusterIP")
        if not requested:
            spec["clusterIP"] = _free_ip(used_ips)
        elif requested != old.get("clusterIP"):
            problem = _ip_error(str(requested), used_ips)
            if problem:
                errors.append(FieldError("spec.clusterIPs", "FieldValueInvalid", f'["{requested}"]', problem))
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
    elif spec.get("clusterIP") == "None":
        spec.setdefault("clusterIPs", ["None"])
    claimed = set(used_ports)
    if _needs_node_ports(spec):
        _allocate_node_ports(
            _ports(spec), _ports(old) if _needs_node_ports(old) else [], claimed, creating, errors
        )
    if _needs_health_check(spec):
        if not spec.get("healthCheckNodePort") and _needs_health_check(old):  # ``patchAllocatedValues``
            spec["healthCheckNodePort"] = old.get("healthCheckNodePort")
        if not spec.get("healthCheckNodePort"):
            spec["healthCheckNodePort"] = _random.choice([p for p in NODE_PORT_RANGE if p not in claimed])
    elif spec.get("healthCheckNodePort") and spec.get("healthCheckNodePort") == old.get(
        "healthCheckNodePort"
    ):
        del spec["healthCheckNodePort"]  # ``dropTypeDependentFields``: no longer needed, so released
    return errors
