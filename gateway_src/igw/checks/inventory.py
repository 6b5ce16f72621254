"""The facts checks read, filled by a source (live cluster, manifests, cdk.out) in one shape.

Kubernetes objects are kept as plain manifests (mappings) because that is what all three sources
naturally have; AWS facts are small typed records. Anything a source cannot supply is a
:class:`Missing` with a reason, which :class:`MissingFact` carries out of a check so the runner can
report the check as skipped - the only way a check can end without a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from igw.checks.model import SkipKind
from igw.errors import IgwToolingError

Manifest = Mapping[str, Any]
T = TypeVar("T")

KINDS = (
    "Pod",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "Service",
    "Ingress",
    "IngressClass",
    "IngressClassParams",
    "Namespace",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    "CustomResourceDefinition",
    "InferenceGatewayConfig",
    "GlobalRouterConfig",
    "Certificate",
    "Secret",
    "ServiceAccount",
)
"""Kinds every source tries to provide (other kinds in a manifest directory are ignored)."""


@dataclass(frozen=True, slots=True)
class Missing:
    """A fact the source does not have, and why."""

    reason: str
    kind: SkipKind = SkipKind.NOT_APPLICABLE


class MissingFact(IgwToolingError):
    """Raised by :func:`need` inside a check; the runner turns it into a SKIP result."""

    def __init__(self, missing: Missing) -> None:
        super().__init__(missing.reason)
        self.missing = missing


def need(value: T | Missing) -> T:
    """Return the fact or abort the check with its reason."""
    if isinstance(value, Missing):
        raise MissingFact(value)
    return value


@dataclass(frozen=True, slots=True)
class EksCluster:
    name: str
    authentication_mode: str | None
    """``API``, ``API_AND_CONFIG_MAP``, ``CONFIG_MAP``; ``None`` when the template leaves it unset."""
    subnet_ids: tuple[str, ...] = ()
    oidc_issuer: str | None = None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class Addon:
    name: str
    version: str | None
    status: str | None = None
    """``ACTIVE``, ``DEGRADED``…; ``None`` for a template (not yet deployed)."""
    service_account_role_arn: str | None = None
    configuration_values: str | None = None
    pod_identity_role_arns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IamRole:
    """A role with every policy document that applies to it (inline and attached, resolved)."""

    name: str
    arn: str
    trust_policy: Mapping[str, Any]
    policies: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    """``(policy name or ARN, document)`` pairs."""
    managed_policy_arns: tuple[str, ...] = ()
    """Attached managed policies, also when their documents could not be read (templates)."""


@dataclass(frozen=True, slots=True)
class Subnet:
    id: str
    tags: Mapping[str, str]
    availability_zone: str | None = None


@dataclass(frozen=True, slots=True)
class Listener:
    protocol: str
    """``HTTP``, ``HTTPS``, ``TCP``, ``TLS``, ``UDP``, ``TCP_UDP`` (upper case)."""
    port: int | None
    ssl_policy: str | None
    """The *effective* policy for HTTPS/TLS listeners (the AWS default filled in when unset)."""
    ssl_policy_explicit: bool
    redirects_to_https: bool = False


@dataclass(frozen=True, slots=True)
class LoadBalancer:
    """An ALB/NLB, actual (AWS, template) or requested (Ingress/Service annotations)."""

    resource: str
    type: str
    """``application`` or ``network``."""
    scheme: str
    scheme_explicit: bool
    listeners: tuple[Listener, ...]
    inbound_cidrs: tuple[str, ...] | None
    """``None`` when unknown; an empty tuple means no inbound rule at all."""
    drop_invalid_header_fields: bool | None = None
    internet_facing_approved: bool = False
    params: str | None = None
    """The IngressClassParams whose fields override this Ingress's annotations (``None``: none)."""
    from_params: frozenset[str] = frozenset()
    """Which of ``scheme``, ``sslPolicy``, ``inboundCIDRs``, ``certificateArn`` and the attribute
    ``routing.http.drop_invalid_header_fields.enabled`` (``loadBalancerAttributes``) :attr:`params`
    set: findings about them name the params, not the Ingress annotation the controller ignored."""

    def source_of(self, *fields: str) -> str:
        """A finding's prefix naming the IngressClassParams that set any of ``fields`` (``""``: the
        values are the resource's own). Why: a value the class's params set was reported in the
        annotations' words, and the user searched the Ingress for an annotation that is not there."""
        named = [f for f in fields if f in self.from_params]
        if self.params is None or not named:
            return ""
        return f"IngressClassParams {self.params} ({', '.join(f'spec.{f}' for f in named)}): "


@dataclass
class KubeView:
    """Kubernetes objects by kind. ``static`` means manifests: no runtime status to read."""

    objects: dict[str, list[Manifest] | Missing] = field(default_factory=dict)
    static: bool = True
    source: str = ""

    def of(self, kind: str) -> list[Manifest] | Missing:
        return self.objects.get(
            kind, Missing(f"{self.source or 'this source'} does not provide {kind} objects")
        )


@dataclass(frozen=True, slots=True)
class InstanceQuota:
    """A HyperPod instance type: how many instances the cluster's groups ask for, and the account's
    Service Quotas value for that type in cluster usage (``None`` when no such quota exists)."""

    instance_type: str
    requested: int
    quota: float | None


NOT_COLLECTED = Missing("not collected by this source")


@dataclass
class AwsView:
    cluster: EksCluster | Missing
    addons: Mapping[str, Addon] | Missing
    roles: Sequence[IamRole] | Missing
    subnets: Sequence[Subnet] | Missing
    load_balancers: Sequence[LoadBalancer] | Missing
    published_addon_versions: Mapping[str, Sequence[Mapping[str, Any]]] | Missing = NOT_COLLECTED
    """DescribeAddonVersions' ``addonVersions`` per pinned add-on, for the cluster's Kubernetes version."""
    instance_quotas: Sequence[InstanceQuota] | Missing = NOT_COLLECTED
    """Per HyperPod instance type of the cluster: requested instances and the account's quota."""
    problems: list[str] = field(default_factory=list)
    """What affects many facts, said once (rejected credentials, throttling): the run's source problems."""

    @staticmethod
    def absent(reason: str, kind: SkipKind = SkipKind.NOT_APPLICABLE) -> AwsView:
        missing = Missing(reason, kind)
        return AwsView(missing, missing, missing, missing, missing)


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """Where a resource is declared: a file (path as given on the command line) and its first line."""

    uri: str
    line: int | None = None


@dataclass
class Inventory:
    kube: KubeView
    aws: AwsView
    source: str
    """Human description: ``cluster arn:…``, ``manifests ./deploy``, ``cdk.out ./cdk.out``."""
    errors: list[str] = field(default_factory=list)
    """Source-level problems (unparseable file, …) reported once by the CLI."""
    locations: dict[str, SourceLocation] = field(default_factory=dict)
    """Declaring file and line by resource (``Kind namespace/name``), for static sources."""
    default_location: SourceLocation | None = None
    """Where results without a resource of their own point (the folder or template scanned)."""
