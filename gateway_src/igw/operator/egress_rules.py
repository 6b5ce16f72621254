"""Extra NetworkPolicy egress rules for every gateway the operator runs (``igw operator
--gateway-extra-egress``, the chart's ``networkPolicy.extraEgress``), checked before any is applied.

The operator derives what each gateway needs from its config (model-server and default-backend
ports, the JWKS and discovery ports, Redis, the observability endpoints it was given), but some
destinations are the cluster's, not the config's: a NodeLocal DNSCache on a link-local address, an
HTTPS proxy the pods reach through ``HTTPS_PROXY``, the pods of a Service the operator could not
resolve (:mod:`igw.operator.service_ports`), the keys of an OIDC discovery document on another host
and port. Gateway mode
has ``networkPolicy.extraEgress`` for them; before session s41 operator mode refused it and had no
other way. A rule is one ``NetworkPolicyEgressRule`` (``to`` and ``ports``) as JSON. A malformed one
is refused here, naming the flag and the field: sent as it was, the API server would refuse the
NetworkPolicy of every config, each pass. So is a rule that opens every destination on every port
(``{}``, ``{"to": []}``, ``{"ports": [{"protocol": "TCP"}]}``): Kubernetes reads a missing ``to`` as
every destination and a missing port as every port, so before session s42 such a rule silently turned
the default-deny egress of every gateway into allow-all. Meaning that takes an explicit destination
(:data:`ALLOW_ALL_HINT`).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from igw.errors import IgwToolingError

RULE_FIELDS: Final = frozenset({"to", "ports"})
PEER_FIELDS: Final = frozenset({"ipBlock", "namespaceSelector", "podSelector"})
PORT_FIELDS: Final = frozenset({"port", "endPort", "protocol"})
SELECTOR_FIELDS: Final = frozenset({"matchLabels", "matchExpressions"})
PROTOCOLS: Final = ("TCP", "UDP", "SCTP")
_PORT_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
"""An IANA service name as a container port's name (at most 15 characters, a letter among them)."""
_LABEL_NAME: Final = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_SUBDOMAIN: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_KEY: Final = re.compile(f"({_DNS_SUBDOMAIN}/)?{_LABEL_NAME}")
"""A label key: an optional DNS-subdomain prefix (at most 253 characters) and '/', then a name."""
_LABEL_VALUE: Final = re.compile(f"({_LABEL_NAME})?")
SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")
ALLOW_ALL_HINT: Final = '"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]'
"""How to open every destination on purpose: a rule that names them, rather than one that names none."""


class EgressRuleError(IgwToolingError, ValueError):
    """An extra egress rule that is not a NetworkPolicyEgressRule; the message names the field."""


def _fields(value: object, allowed: frozenset[str], where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise EgressRuleError(f"{where}: expected an object, got {type(value).__name__}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise EgressRuleError(
            f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
        )
    return value


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise EgressRuleError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _cidr(value: object, where: str) -> None:
    if not isinstance(value, str) or "/" not in value:
        raise EgressRuleError(f"{where}: {value!r} is not a CIDR block (e.g. 169.254.20.10/32)")
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise EgressRuleError(f"{where}: {value!r} is not a CIDR block (e.g. 169.254.20.10/32)") from None


def _label_key(value: object, where: str) -> None:
    prefix = value.rpartition("/")[0] if isinstance(value, str) else ""
    if not isinstance(value, str) or len(prefix) > 253 or not _LABEL_KEY.fullmatch(value):
        raise EgressRuleError(f"{where}: {value!r} is not a label key")


def _label_value(value: object, where: str) -> None:
    if not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value):
        raise EgressRuleError(f"{where}: {value!r} is not a label value (at most 63 characters)")


def _selector(value: object, where: str) -> None:
    """A LabelSelector whose labels and expressions the API server takes: a malformed one was passed
    on, and the API server refused the NetworkPolicy (and so the whole data plane) of every config."""
    selector = _fields(value, SELECTOR_FIELDS, where)
    labels = selector.get("matchLabels", {})
    if not isinstance(labels, Mapping):
        raise EgressRuleError(f"{where}.matchLabels: expected an object, got {type(labels).__name__}")
    for key, label in labels.items():
        _label_key(key, f"{where}.matchLabels")
        _label_value(label, f"{where}.matchLabels[{key!r}]")
    for index, item in enumerate(_list(selector.get("matchExpressions", []), f"{where}.matchExpressions")):
        at = f"{where}.matchExpressions[{index}]"
        expression = _fields(item, frozenset({"key", "operator", "values"}), at)
        _label_key(expression.get("key"), f"{at}.key")
        operator = expression.get("operator")
        if operator not in SELECTOR_OPERATORS:
            allowed = ", ".join(SELECTOR_OPERATORS)
            raise EgressRuleError(f"{at}.operator: {operator!r} is not one of {allowed}")
        values = _list(expression.get("values", []), f"{at}.values")
        for position, label in enumerate(values):
            _label_value(label, f"{at}.values[{position}]")
        if operator in ("In", "NotIn") and not values:
            raise EgressRuleError(f"{at}.values: {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise EgressRuleError(f"{at}.values: {operator} takes no values")


def _peer(value: object, where: str) -> None:
    peer = _fields(value, PEER_FIELDS, where)
    if not peer:
        raise EgressRuleError(f"{where}: names no destination (ipBlock, namespaceSelector or podSelector)")
    if "ipBlock" in peer:
        if len(peer) > 1:
            raise EgressRuleError(f"{where}: ipBlock cannot be combined with a selector")
        block = _fields(peer["ipBlock"], frozenset({"cidr", "except"}), f"{where}.ipBlock")
        _cidr(block.get("cidr"), f"{where}.ipBlock.cidr")
        outer = ipaddress.ip_network(block["cidr"], strict=False)
        for index, item in enumerate(_list(block.get("except", []), f"{where}.ipBlock.except")):
            _cidr(item, f"{where}.ipBlock.except[{index}]")
            # The API server refuses an exception outside the block (or the whole block): the
            # NetworkPolicy of every config, each pass.
            inner = ipaddress.ip_network(item, strict=False)
            if inner.version != outer.version or inner == outer or not inner.subnet_of(outer):  # type: ignore[arg-type]
                raise EgressRuleError(
                    f"{where}.ipBlock.except[{index}]: {item!r} is not a strict subset of {block['cidr']!r}"
                )
    for selector in ("namespaceSelector", "podSelector"):
        if selector in peer:
            _selector(peer[selector], f"{where}.{selector}")


def _port(value: object, where: str) -> None:
    entry = _fields(value, PORT_FIELDS, where)
    protocol = entry.get("protocol", "TCP")
    if protocol not in PROTOCOLS:
        raise EgressRuleError(f"{where}.protocol: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    port = entry.get("port")
    if port is None:
        if "endPort" in entry:
            raise EgressRuleError(f"{where}.endPort: needs a port")
        return
    if isinstance(port, bool) or not isinstance(port, int | str):
        raise EgressRuleError(f"{where}.port: expected a number or a port name, got {port!r}")
    if isinstance(port, int) and not 1 <= port <= 65535:
        raise EgressRuleError(f"{where}.port: {port} is not in 1-65535")
    if isinstance(port, str) and not (len(port) <= 15 and _PORT_NAME.fullmatch(port)):
        raise EgressRuleError(f"{where}.port: {port!r} is not a port name")
    end = entry.get("endPort")
    if end is not None:
        if not isinstance(port, int):
            raise EgressRuleError(f"{where}.endPort: needs a numeric port")
        if isinstance(end, bool) or not isinstance(end, int) or not port <= end <= 65535:
            raise EgressRuleError(f"{where}.endPort: {end!r} is not a port from {port} to 65535")


def opens_all_egress(rule: Mapping[str, Any]) -> bool:
    """Whether ``rule`` names no destination and, for some protocol, no port: every destination on
    every port (Kubernetes reads a missing or empty ``to`` as all destinations, a missing or empty
    ``ports`` or an entry without ``port`` as all ports)."""
    if rule.get("to"):
        return False
    ports = rule.get("ports") or []
    return not ports or any(isinstance(p, Mapping) and p.get("port") is None for p in ports)


def parse_egress_rule(text: str) -> dict[str, Any]:
    """The rule ``text`` (a JSON object) holds; :class:`EgressRuleError` naming the field otherwise."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise EgressRuleError(f"not JSON: {exc}") from None
    rule = dict(_fields(value, RULE_FIELDS, "rule"))
    for index, peer in enumerate(_list(rule.get("to", []), "to")):
        _peer(peer, f"to[{index}]")
    for index, port in enumerate(_list(rule.get("ports", []), "ports")):
        _port(port, f"ports[{index}]")
    if opens_all_egress(rule):
        raise EgressRuleError(
            "rule: names no destination ('to') and no port, so it allows all egress on every port; "
            f"to mean that, name the destinations: {ALLOW_ALL_HINT}"
        )
    return rule
