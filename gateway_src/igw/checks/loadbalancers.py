"""Load balancers as the audit sees them: actual ones (AWS, templates) and requested ones (Ingress/Service).

The Load Balancer Controller turns annotations into ALBs/NLBs; its defaults matter as much as what
is written (scheme ``internal``, listener ``HTTP:80``, policy ELBSecurityPolicy-2016-08, inbound
``0.0.0.0/0``), so they are filled in here and marked implicit. A Service of type LoadBalancer *not*
handled by the controller falls to the legacy in-tree provider, whose default scheme is
internet-facing.

An IngressClass may name an IngressClassParams (``elbv2.k8s.aws``, ``spec.parameters``) whose
``scheme``, ``sslPolicy``, ``inboundCIDRs``, ``certificateArn`` and ``loadBalancerAttributes`` the
controller applies to every Ingress of the class, over the Ingress's own annotations (attributes:
merged, the class's winning). Before session s39 only the annotations were read: an
IngressClassParams making every ALB of a class internet-facing, open to ``0.0.0.0/0`` with a TLS 1.0
policy passed as the annotations' internal, restricted, TLS 1.3 load balancer. Findings about a value
the params set name them (:meth:`LoadBalancer.source_of`), since the Ingress has no such annotation.

The params' ``namespaceSelector`` restricts the namespaces whose Ingresses may use the class: the
controller refuses to reconcile any other Ingress of it (AWS Load Balancer Controller guide,
"IngressClassParams specification"), so such an Ingress is no load balancer. A namespace the sources
do not describe is judged selected (the controller may well reconcile it: a missed exposure costs
more than a finding on an Ingress that gets no ALB); its ``kubernetes.io/metadata.name`` label is the
one the API server sets on every namespace.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from igw.checks.framework import CheckContext
from igw.checks.inventory import Listener, LoadBalancer, Manifest, Missing, MissingFact
from igw.checks.k8s import annotations_of, labels_of, name_of, namespace_of, ref, spec
from igw.checks.model import SkipKind
from igw.checks.selectors import selector_from_mapping
from igw.checks.tls_policies import AWS_DEFAULT_POLICY

ALB = "alb.ingress.kubernetes.io/"
NLB = "service.beta.kubernetes.io/"
APPROVAL_ANNOTATION = "igw.dev/internet-facing-approved"
OPEN_CIDRS = ("0.0.0.0/0", "::/0")
DROP_INVALID_HEADERS = "routing.http.drop_invalid_header_fields.enabled"


def _listen_ports(ann: Mapping[str, str], has_cert: bool) -> list[tuple[str, int]]:
    raw = ann.get(f"{ALB}listen-ports")
    if raw:
        try:
            parsed = json.loads(raw)
            return [(str(proto).upper(), int(port)) for item in parsed for proto, port in item.items()]
        except (ValueError, TypeError, AttributeError):
            pass  # the controller rejects it too; fall back to its default so the audit still says something
    return [("HTTPS", 443)] if has_cert else [("HTTP", 80)]


def _attributes(text: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        key, sep, value = item.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _cidrs(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(c.strip() for c in text.split(",") if c.strip())


ALB_CONTROLLER = "ingress.k8s.aws/alb"
"""``spec.controller`` of an IngressClass the AWS Load Balancer Controller serves."""
DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
PARAMS_GROUP = "elbv2.k8s.aws"
PARAMS_KIND = "IngressClassParams"
NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server sets on every Namespace to its name (Kubernetes 1.21+)."""


@dataclass(frozen=True, slots=True)
class AlbClasses:
    """The Ingress class names the Load Balancer Controller turns into ALBs: ``alb`` (its default
    ``--ingress-class``, also the legacy annotation's value) and every IngressClass whose controller is
    :data:`ALB_CONTROLLER`; ``default`` is such a class marked the cluster's default, which takes
    Ingresses that name no class."""

    names: frozenset[str] = frozenset({"alb"})
    default: str | None = None
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Class name -> the ``spec`` of the IngressClassParams that class names."""
    params_names: Mapping[str, str] = field(default_factory=dict)
    """Class name -> the name of that IngressClassParams (what findings about its values quote)."""
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None
    """Namespace name -> its labels, for the params' ``namespaceSelector`` (``None``: the source
    lists no Namespaces; then every namespace counts as selected)."""
    unreadable: Missing | None = None
    """Set when a class names IngressClassParams the source could not list (what they override is
    unknown, so the load-balancer checks are not evaluated rather than judged on annotations)."""


def alb_classes(ctx: CheckContext) -> AlbClasses:
    """The ALB Ingress classes the sources declare (only ``alb`` when they list no IngressClass).

    Why: only the name ``alb`` was read, so an Ingress of a class named ``internal-alb`` or ``public``
    (the Load Balancer Controller's IngressClass under another name, common with IngressClassParams),
    or of none with an ALB class as the cluster default, was no load balancer to the audit: its
    TLS policy, scheme and inbound ranges were never graded."""
    classes = ctx.inventory.kube.of("IngressClass")
    if isinstance(classes, Missing):
        return AlbClasses()
    listed = ctx.inventory.kube.of(PARAMS_KIND)
    by_name = {} if isinstance(listed, Missing) else {name_of(p): spec(p) for p in listed}
    names, default = {"alb"}, None
    params: dict[str, Mapping[str, Any]] = {}
    params_names: dict[str, str] = {}
    unreadable = None
    for item in classes:
        if spec(item).get("controller") != ALB_CONTROLLER:
            continue
        name = name_of(item) if (item.get("metadata") or {}).get("name") else ""
        names.add(name)
        if annotations_of(item).get(DEFAULT_CLASS_ANNOTATION) == "true":
            default = name
        ref_ = spec(item).get("parameters")
        if not (
            isinstance(ref_, Mapping)
            and ref_.get("apiGroup") == PARAMS_GROUP
            and ref_.get("kind") == PARAMS_KIND
        ):
            continue
        if isinstance(listed, Missing):
            unreadable = unreadable or listed
        elif str(ref_.get("name")) in by_name:
            params[name] = by_name[str(ref_.get("name"))]
            params_names[name] = str(ref_.get("name"))
    namespaces = ctx.inventory.kube.of("Namespace")
    namespace_labels = (
        None
        if isinstance(namespaces, Missing)
        else {name_of(ns): {**labels_of(ns), NAME_LABEL: name_of(ns)} for ns in namespaces}
    )
    return AlbClasses(
        names=frozenset(names - {""}),
        default=default,
        params=params,
        params_names=params_names,
        namespace_labels=namespace_labels,
        unreadable=unreadable,
    )


def _selected(params: Mapping[str, Any], namespace: str, classes: AlbClasses) -> bool:
    """Whether the params' ``namespaceSelector`` lets an Ingress in ``namespace`` use the class (no
    selector: every namespace; an unknown namespace or a selector the API would not accept: selected,
    so the Ingress is still judged)."""
    raw = params.get("namespaceSelector")
    if raw is None:
        return True
    labels = (classes.namespace_labels or {}).get(namespace)
    if labels is None:
        return True
    try:
        return selector_from_mapping(raw).matches(labels)
    except ValueError:
        return True


def _params_attributes(params: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in params.get("loadBalancerAttributes") or []:
        if isinstance(item, Mapping) and "key" in item:
            out[str(item["key"]).strip()] = str(item.get("value", "")).strip()
    return out


def _params_cidrs(params: Mapping[str, Any]) -> tuple[str, ...] | None:
    value = params.get("inboundCIDRs")
    if not isinstance(value, list) or not value:
        return None
    return tuple(str(c).strip() for c in value if str(c).strip())


def from_ingress(ingress: Manifest, classes: AlbClasses = AlbClasses()) -> LoadBalancer | None:
    ann = annotations_of(ingress)
    ingress_class = (
        spec(ingress).get("ingressClassName") or ann.get("kubernetes.io/ingress.class") or classes.default
    )
    if ingress_class not in classes.names:
        return None
    params = classes.params.get(str(ingress_class), {})
    if not _selected(params, namespace_of(ingress), classes):
        return None  # the controller refuses to reconcile it: no load balancer
    has_cert = (
        bool(params.get("certificateArn"))
        or bool(ann.get(f"{ALB}certificate-arn"))
        or bool(spec(ingress).get("tls"))
    )
    policy = params.get("sslPolicy") or ann.get(f"{ALB}ssl-policy")
    policy = str(policy) if policy is not None else None
    redirect = f"{ALB}ssl-redirect" in ann
    listeners = tuple(
        Listener(
            protocol=proto,
            port=port,
            ssl_policy=(policy or AWS_DEFAULT_POLICY) if proto == "HTTPS" else None,
            ssl_policy_explicit=policy is not None,
            redirects_to_https=redirect and proto == "HTTP",
        )
        for proto, port in _listen_ports(ann, has_cert)
    )
    attrs = {**_attributes(ann.get(f"{ALB}load-balancer-attributes")), **_params_attributes(params)}
    scheme = str(params["scheme"]) if params.get("scheme") else ann.get(f"{ALB}scheme")
    from_params = {key for key in ("scheme", "sslPolicy", "certificateArn") if params.get(key)}
    if _params_cidrs(params):
        from_params.add("inboundCIDRs")
    if DROP_INVALID_HEADERS in _params_attributes(params):
        from_params.add("loadBalancerAttributes")
    return LoadBalancer(
        resource=ref(ingress),
        type="application",
        scheme=scheme or "internal",
        scheme_explicit=scheme is not None,
        listeners=listeners,
        inbound_cidrs=_params_cidrs(params) or _cidrs(ann.get(f"{ALB}inbound-cidrs")) or OPEN_CIDRS[:1],
        drop_invalid_header_fields=attrs.get(DROP_INVALID_HEADERS) == "true",
        internet_facing_approved=ann.get(APPROVAL_ANNOTATION) == "true",
        params=classes.params_names.get(str(ingress_class)) if from_params else None,
        from_params=frozenset(from_params),
    )


def from_service(service: Manifest) -> LoadBalancer | None:
    svc = spec(service)
    if svc.get("type") != "LoadBalancer":
        return None
    ann = annotations_of(service)
    lbc = (
        ann.get(f"{NLB}aws-load-balancer-type") in ("external", "nlb-ip")
        or svc.get("loadBalancerClass") == "service.k8s.aws/nlb"
    )
    scheme = ann.get(f"{NLB}aws-load-balancer-scheme")
    if scheme is None and not lbc:
        scheme_value = (
            "internal" if ann.get(f"{NLB}aws-load-balancer-internal") == "true" else "internet-facing"
        )
    else:
        scheme_value = scheme or "internal"
    cert = ann.get(f"{NLB}aws-load-balancer-ssl-cert")
    ssl_ports = {p.strip() for p in ann.get(f"{NLB}aws-load-balancer-ssl-ports", "*").split(",")}
    policy = ann.get(f"{NLB}aws-load-balancer-ssl-negotiation-policy")
    listeners = []
    for port in svc.get("ports") or []:
        if not isinstance(port, Mapping):
            continue
        number = port.get("port")
        tls = bool(cert) and (
            "*" in ssl_ports or str(number) in ssl_ports or str(port.get("name")) in ssl_ports
        )
        listeners.append(
            Listener(
                protocol="TLS" if tls else "TCP",
                port=int(number) if isinstance(number, int) else None,
                ssl_policy=(policy or AWS_DEFAULT_POLICY) if tls else None,
                ssl_policy_explicit=policy is not None,
            )
        )
    ranges = svc.get("loadBalancerSourceRanges") or _cidrs(ann.get(f"{NLB}load-balancer-source-ranges"))
    return LoadBalancer(
        resource=ref(service),
        type="network",
        scheme=scheme_value,
        scheme_explicit=scheme is not None or f"{NLB}aws-load-balancer-internal" in ann,
        listeners=tuple(listeners),
        inbound_cidrs=tuple(ranges) if ranges else OPEN_CIDRS[:1],
        drop_invalid_header_fields=None,
        internet_facing_approved=ann.get(APPROVAL_ANNOTATION) == "true",
    )


def load_balancers(ctx: CheckContext) -> list[LoadBalancer]:
    """Every load balancer the sources know of.

    Raises :class:`MissingFact` when any source that should know could not be read (a partial list
    would let an unseen internet-facing listener pass), or when no source can know at all.
    """
    found: list[LoadBalancer] = []
    missing: list[Missing] = []
    kube = ctx.inventory.kube
    classes = alb_classes(ctx)
    if classes.unreadable is not None:
        missing.append(classes.unreadable)
    for kind, convert in (
        ("Ingress", lambda obj: from_ingress(obj, classes)),
        ("Service", from_service),
    ):
        objects = kube.of(kind)
        if isinstance(objects, Missing):
            missing.append(objects)
            continue
        found.extend(lb for obj in objects if (lb := convert(obj)) is not None)
    aws = ctx.inventory.aws.load_balancers
    if isinstance(aws, Missing):
        missing.append(aws)
    else:
        found.extend(aws)
    unreadable = [m for m in missing if m.kind is SkipKind.NOT_EVALUATED]
    if unreadable:
        raise MissingFact(unreadable[0])
    if not found and len(missing) == 3:
        raise MissingFact(missing[0])
    return found
