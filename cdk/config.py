"""The deployment config: a YAML file validated by ``schemas/deployment-config.schema.json``, read into
frozen dataclasses that the stacks consume.

Validation happens once, here, before any construct exists, and reports *every* problem with the
field's path (``hyperpod.instanceGroups[1].instanceType: ...``), so a bad file fails synthesis with a
message a platform engineer can act on. Beyond the JSON Schema it checks what a schema cannot: the
add-on version against the pinned minimum, the add-on ``configurationValues`` against the add-on's
configuration schema, and the ``InferenceGatewayConfig`` with the project's own validator.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from jsonschema.exceptions import ValidationError

from cdk import aws_tags, cdk_tokens
from igw.addon import addon_version, aws_addon, chart, configuration, pins
from igw.config.documents import DocumentReadError, parse_text
from igw.config.schema_validator import schema_validator

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
SCHEMA_FILE: Final = REPO_ROOT / "schemas" / "deployment-config.schema.json"
S3_CSI_ADDON: Final = "aws-mountpoint-s3-csi-driver"
"""The Mountpoint S3 CSI driver's add-on: the one whose role carries ``platform.modelBuckets``."""
EXAMPLE_FILE: Final = Path(__file__).resolve().parent / "examples" / "deployment.yaml"
LIFECYCLE_SCRIPTS_DIR: Final = Path(__file__).resolve().parent / "constructs" / "lifecycle_scripts"
"""What the cluster stack uploads to the HyperPod lifecycle bucket (and nothing else: the upload
prunes what it did not put there), so ``hyperpod.lifecycleScriptOnCreate`` must name a file here."""

AuthenticationMode = Literal["API", "API_AND_CONFIG_MAP"]
IdentityMode = Literal["podIdentity", "irsa"]
AddonMode = Literal["igw", "awsManaged"]
ChartMode = Literal["operator", "gateway"]
ConflictPolicy = Literal["OVERWRITE", "NONE", "PRESERVE"]


class DeploymentConfigError(ValueError):
    """The deployment config is invalid; ``problems`` lists each as ``path: message``."""

    def __init__(self, problems: Sequence[str], *, source: str) -> None:
        self.problems = list(problems)
        self.source = source
        lines = [f"{source}: invalid deployment config ({len(self.problems)} problem(s))"]
        lines += [f"  {problem}" for problem in self.problems]
        super().__init__("\n".join(lines))


DEFAULT_VPC_CIDR: Final = "10.0.0.0/16"


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    vpc_id: str | None = None
    """Import this VPC; ``None`` creates a new one."""
    private_subnet_ids: tuple[str, ...] = ()
    cidr: str = DEFAULT_VPC_CIDR
    max_azs: int = 3
    nat_gateways: int = 1


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    kubernetes_version: str = pins.KUBERNETES_VERSION
    authentication_mode: AuthenticationMode = "API"
    endpoint_access: Literal["private", "publicAndPrivate"] = "private"
    public_access_cidrs: tuple[str, ...] = ()
    admin_role_arns: tuple[str, ...] = ()
    system_instance_type: str = "m6i.xlarge"
    system_min_size: int = 2
    system_max_size: int = 4


@dataclass(frozen=True, slots=True)
class InstanceGroupConfig:
    name: str
    instance_type: str
    instance_count: int
    ebs_volume_size_gb: int = 500
    threads_per_core: int = 1
    deep_health_checks: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HyperPodConfig:
    cluster_name: str
    instance_groups: tuple[InstanceGroupConfig, ...]
    node_recovery: Literal["Automatic", "None"] = "Automatic"
    lifecycle_script_on_create: str = "on_create.sh"


@dataclass(frozen=True, slots=True)
class HyperPodDependenciesConfig:
    """The parts of AWS's HyperPod dependencies chart that GPU inference nodes need."""

    nvidia_device_plugin: bool = True
    efa_device_plugin: bool = True
    health_monitoring_agent: bool = True


@dataclass(frozen=True, slots=True)
class PlatformConfig:
    identity: IdentityMode = "podIdentity"
    model_buckets: tuple[str, ...] = ()
    hyperpod_dependencies: HyperPodDependenciesConfig = field(default_factory=HyperPodDependenciesConfig)


@dataclass(frozen=True, slots=True)
class AddonConfig:
    mode: AddonMode = "igw"
    """``igw``: our chart through Helm with our image; ``awsManaged``: AWS's add-on."""
    version: str = pins.ADDON_VERSION
    """AWS's add-on version (``awsManaged`` only)."""
    conflict_policy: ConflictPolicy = "OVERWRITE"
    configuration_values: Mapping[str, Any] = field(default_factory=dict)
    """Our chart's values (``igw``) or AWS's add-on values (``awsManaged``), each checked against its
    own schema."""

    @property
    def chart_mode(self) -> ChartMode:
        """Our chart's ``mode`` (``igw`` only): ``operator`` (the chart's default: the operator turns the
        applied InferenceGatewayConfig into its gateway) unless the values ask for ``gateway`` (one
        gateway the chart renders from ``gateway.config``)."""
        return "gateway" if self.configuration_values.get("mode") == "gateway" else "operator"


@dataclass(frozen=True, slots=True)
class ImageConfig:
    """The gateway image: built from ``gateway_src/Dockerfile`` as a CDK asset unless ``repository``
    names an image that already exists."""

    repository: str | None = None
    tag: str | None = None


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """A DNS name clients outside the cluster trust: an ACM certificate validated in ``zone_name`` and
    an alias record to the gateway's load balancer."""

    hosted_zone_id: str
    zone_name: str
    record_name: str

    @property
    def fqdn(self) -> str:
        return f"{self.record_name}.{self.zone_name}"


@dataclass(frozen=True, slots=True)
class ExistingClusterConfig:
    """Deploy into a cluster that already exists (named by ``clusterName``): no VPC, EKS or HyperPod
    cluster is created, only the platform add-ons and the gateway."""

    vpc_id: str
    private_subnet_ids: tuple[str, ...]
    oidc_provider_arn: str | None = None
    """Its IAM OIDC provider; IRSA roles (S3/FSx CSI drivers, AWS's add-on) need it."""
    hyperpod_cluster_arn: str | None = None
    """The HyperPod cluster it orchestrates (AWS's add-on needs it)."""
    cluster_security_group_id: str | None = None
    """The cluster security group; the kubectl handler joins it to reach a private endpoint."""
    installed_addons: tuple[str, ...] = ()
    """EKS add-ons already on the cluster: not created again (CloudFormation cannot adopt them)."""
    kubernetes_version: str = pins.KUBERNETES_VERSION
    """Its EKS version: which kubectl layer the kubectl handler runs (``cdk/constructs/kubectl_layer.py``)."""


@dataclass(frozen=True, slots=True)
class GatewayConfigManifest:
    """The ``InferenceGatewayConfig`` the inference stack applies (already validated)."""

    name: str
    namespace: str
    spec: Mapping[str, Any]

    def document(self, *, acm_arn: str | None = None) -> dict[str, Any]:
        """The manifest; with ``acm_arn``, ``spec.tls.acmArn`` names that certificate (the operator puts
        it on the load balancer's TLS listener)."""
        spec: dict[str, Any] = json.loads(json.dumps(self.spec))
        if acm_arn is not None:
            spec["tls"] = {**dict(spec.get("tls") or {}), "acmArn": acm_arn}
        return {
            "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
            "kind": "InferenceGatewayConfig",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }


DEFAULT_HEARTBEAT_TOKEN_SECRET: Final = "igw-global-redis"
DEFAULT_HEARTBEAT_TOKEN_KEY: Final = "token"
DEFAULT_HEARTBEAT_TOKEN_REFRESH: Final = "1h"
HEARTBEAT_REDIS_NODE: Final = ("extensions", "globalHeartbeat", "redis")
"""Where an InferenceGatewayConfig's spec names the global router's Redis (its ``passwordEnv``)."""
DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A DNS-1123 label: what ``spec.extensions.globalHeartbeat.cluster`` must be (a cluster's name in the
GlobalRouterConfig)."""
NAME_HASH_LENGTH: Final = 8
"""Hex digits of a name's SHA-256 that keep a derived name apart from its look-alikes."""


def heartbeat_cluster_name(cluster_name: str) -> str:
    """The cluster name a heartbeat added later outside the stack would take, which the failed-writes
    alarms watch while the gateway config names none: ``clusterName`` itself when it is a DNS-1123
    label, as ``spec.extensions.globalHeartbeat.cluster`` must be. An EKS name need not be one (upper
    case, ``_``, up to 100 characters): it is lower-cased, ``_`` written ``-``, cut, and ends in ``-``
    and a hash of the name as given, so that ``ML-prod``, ``ml-prod`` and ``ml_prod`` (three EKS
    clusters of one account and region) do not watch one series."""
    if DNS_LABEL.fullmatch(cluster_name):
        return cluster_name
    digest = hashlib.sha256(cluster_name.encode()).hexdigest()[:NAME_HASH_LENGTH]
    readable = cluster_name.lower().replace("_", "-")[: 63 - NAME_HASH_LENGTH - 1].strip("-")
    return f"{readable}-{digest}"


@dataclass(frozen=True, slots=True)
class GlobalHeartbeatTokenConfig:
    """``inference.globalHeartbeatToken``: the global router's Redis AUTH token (the global router
    stack's ``RedisAuthTokenSecretArn``, any region) synced by the External Secrets Operator into the
    Kubernetes Secret ``secret_name`` (key ``key``) in ``namespace``, refreshed every
    ``refresh_interval``."""

    secret_arn: str
    namespace: str
    """Default: the namespace of ``inference.gatewayConfig`` (where the operator runs its gateways)."""
    secret_name: str = DEFAULT_HEARTBEAT_TOKEN_SECRET
    key: str = DEFAULT_HEARTBEAT_TOKEN_KEY
    refresh_interval: str = DEFAULT_HEARTBEAT_TOKEN_REFRESH
    kms_key_arn: str | None = None
    """The customer-managed key the secret is encrypted with, if any (``kms:Decrypt`` through Secrets
    Manager only)."""

    @property
    def region(self) -> str:
        """The secret's region (from its ARN): the SecretStore's and ``kms:ViaService``'s."""
        return arn_region(self.secret_arn)


def arn_region(arn: str) -> str:
    """The region field of an ARN (``arn:<partition>:<service>:<region>:...``)."""
    return arn.split(":")[3]


def partition_of_region(region: str) -> str:
    """The AWS partition a region belongs to."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


@dataclass(frozen=True, slots=True)
class DeploymentConfig:
    account: str
    region: str
    cluster_name: str
    hyperpod: HyperPodConfig | None
    """``None`` in existing-cluster mode."""
    gateway_config: GatewayConfigManifest
    availability_zones: tuple[str, ...] = ()
    stack_prefix: str = "Igw"
    tags: Mapping[str, str] = field(default_factory=dict)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    platform: PlatformConfig = field(default_factory=PlatformConfig)
    addon: AddonConfig = field(default_factory=AddonConfig)
    image: ImageConfig = field(default_factory=ImageConfig)
    endpoint: EndpointConfig | None = None
    existing_cluster: ExistingClusterConfig | None = None
    global_heartbeat_token: GlobalHeartbeatTokenConfig | None = None
    """``None``: the stack does not sync the global router's Redis token into the cluster."""


def _path(parts: Sequence[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def _schema_problems(document: Any) -> list[str]:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    validator = schema_validator(schema, formats=False)
    errors = sorted(
        validator.iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    return [f"{_path(list(error.absolute_path))}: {schema_message(error)}" for error in errors]


def schema_message(error: ValidationError) -> str:
    """jsonschema's message, except for a pattern the schema describes in words (``x-igw-hint``): what
    is allowed, not the bare regular expression (``'ml.prod' does not match '^[0-9A-Za-z]...'``).
    Both deployment files' validators use it (this one and :mod:`cdk.global_router_config`);
    ``tests/cdk/test_schema_hints.py`` fails while a pattern of their schemas has no hint."""
    hint = error.schema.get("x-igw-hint") if isinstance(error.schema, Mapping) else None
    if error.validator == "pattern" and isinstance(hint, str):
        return f"must be {hint}; got {error.instance!r}"
    return error.message


HYPERPOD_NAME_MAX: Final = 63
"""``AWS::SageMaker::Cluster`` ``ClusterName``: at most 63 characters (CDK only warns at synth)."""
HYPERPOD_NAME: Final = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*")
"""``AWS::SageMaker::Cluster`` ``ClusterName``'s characters (SageMaker's ``CreateCluster``): letters,
digits and hyphens, no underscore (an EKS name may have one)."""
PUBLIC_SUBNET_MASK: Final = 24
PRIVATE_SUBNET_MASK: Final = 19
"""A new VPC's subnets, one of each per zone (``cdk/constructs/network.py``)."""


def ipv4_network(text: str) -> tuple[ipaddress.IPv4Network | None, str | None]:
    """``text`` as an IPv4 network, or why it is not one (a bad octet, a prefix over 32, host bits
    set: ``10.0.0.1/16`` would otherwise be re-aligned silently by whoever reads it next)."""
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        return None, str(exc)
    if not isinstance(network, ipaddress.IPv4Network):
        return None, f"{text} is not an IPv4 network"
    return network, None


def subnets_fit(network: ipaddress.IPv4Network, masks: Sequence[int]) -> bool:
    """Whether CDK's allocation of a new VPC's subnets fits ``network``: one block per prefix length in
    ``masks``, in order, each starting at the next multiple of its own size (``1 of /19 exceeds
    remaining space`` at synth otherwise)."""
    cursor = int(network.network_address)
    for mask in masks:
        size = 1 << (32 - mask)
        cursor = -(-cursor // size) * size + size
    return cursor <= int(network.broadcast_address) + 1


NEW_VPC_KEYS: Final = ("cidr", "maxAzs", "natGateways")
"""``network`` keys read only when the stacks create the VPC."""


def _network_problems(doc: Mapping[str, Any]) -> list[str]:
    """Addresses and zones that the schema's patterns let through but EC2 or EKS refuse at deploy
    time (or CDK at synth, with a traceback), and new-VPC settings CDK would silently not apply."""
    problems: list[str] = []
    region = doc["region"]
    zones = doc.get("availabilityZones", [])
    for i, zone in enumerate(zones):
        if zone[:-1] != region:
            problems.append(f"availabilityZones[{i}]: {zone} is not a zone of the region {region}")
    cidrs = doc.get("cluster", {}).get("publicAccessCidrs", [])
    for i, cidr in enumerate(cidrs):
        network, why = ipv4_network(cidr)
        if network is None:
            problems.append(f"cluster.publicAccessCidrs[{i}]: {why}")
        elif network.prefixlen == 0:
            problems.append(f"cluster.publicAccessCidrs[{i}]: {cidr} opens the API endpoint to everyone")
    net = doc.get("network", {})
    # Each is read for one kind of VPC only; set for the other it changed nothing, without a word.
    if "vpcId" in net:
        problems += [
            f"network.{key}: only for a new VPC (network.vpcId imports a VPC as it is); remove it"
            for key in NEW_VPC_KEYS
            if key in net
        ]
    elif "privateSubnetIds" in net:
        problems.append(
            "network.privateSubnetIds: only with network.vpcId (a new VPC makes its own subnets); add "
            "vpcId to import that VPC, or remove privateSubnetIds"
        )
    if "vpcId" in net or "existingCluster" in doc:
        return problems
    count = len(zones) or net.get("maxAzs", 3)
    if zones and "maxAzs" in net and net["maxAzs"] != len(zones):
        problems.append(
            f"network.maxAzs: {net['maxAzs']}, but the new VPC spans the {len(zones)} availabilityZones "
            "listed; remove maxAzs or list that many zones"
        )
    if net.get("natGateways", 1) > count:
        problems.append(
            f"network.natGateways: {net['natGateways']}, but the new VPC has {count} zones (one NAT "
            "gateway per zone at most)"
        )
    cidr = net.get("cidr", DEFAULT_VPC_CIDR)
    network, why = ipv4_network(cidr)
    if network is None:
        problems.append(f"network.cidr: {why}")
    elif not subnets_fit(network, [PUBLIC_SUBNET_MASK] * count + [PRIVATE_SUBNET_MASK] * count):
        problems.append(
            f"network.cidr: {cidr} cannot hold a public /{PUBLIC_SUBNET_MASK} and a private "
            f"/{PRIVATE_SUBNET_MASK} subnet in each of {count} zones; use a larger network (a /16 holds "
            "six zones)"
        )
    return problems


ACM_DOMAIN_NAME_MAX: Final = 64
"""ACM's limit on a certificate's domain name (its first name, the subject's common name)."""


def _platform_problems(doc: Mapping[str, Any]) -> list[str]:
    """HyperPod's health-monitoring agent (on by default) where AWS does not publish its image: the
    platform stack needs the image's regional registry, and without one synthesis ended in a
    ``ValueError`` traceback instead of this message. And ``modelBuckets`` beside an installed
    Mountpoint S3 CSI driver, whose role the app does not make (until session s43 the buckets went
    into a role nothing used)."""
    problems: list[str] = []
    dependencies = doc.get("platform", {}).get("hyperpodDependencies", {})
    region = doc["region"]
    published = pins.HEALTH_MONITORING_AGENT_REGISTRIES
    if dependencies.get("healthMonitoringAgent", True) and region not in published:
        problems.append(
            f"platform.hyperpodDependencies.healthMonitoringAgent: HyperPod's health-monitoring agent is "
            f"not published in {region} (it is in {', '.join(sorted(published))}); set it to false"
        )
    installed = (doc.get("existingCluster") or {}).get("installedAddons", ())
    if doc.get("platform", {}).get("modelBuckets") and S3_CSI_ADDON in installed:
        # The app grants the buckets through the role of the S3 CSI add-on it creates; an installed
        # driver runs with its installer's role, so the list would be ignored without a word.
        problems.append(
            f"platform.modelBuckets: the Mountpoint S3 CSI driver is in existingCluster.installedAddons, "
            f"so it runs with the role it was installed with and the app grants it nothing; grant "
            f"these buckets to that role, and remove modelBuckets or {S3_CSI_ADDON} from installedAddons"
        )
    return problems


@functools.cache
def known_instance_types(service: str, shape: str) -> frozenset[str]:
    """The instance types an AWS API accepts, from botocore's offline model of it (``sagemaker``
    ``ClusterInstanceType`` for HyperPod, ``ec2`` ``InstanceType`` for the system node group)."""
    import botocore.session  # imported here: the EC2 model is large, and only a config with a type needs it

    model = botocore.session.Session().get_service_model(service)
    return frozenset(model.shape_for(shape).enum)


def _unknown_instance_type(where: str, value: str, known: frozenset[str], what: str) -> str:
    import botocore

    close = difflib.get_close_matches(value, sorted(known), n=1)
    guess = f"; did you mean {close[0]}?" if close else ""
    return (
        f"{where}: {value} is not {what} (botocore {botocore.__version__} lists {len(known)}){guess} A type "
        "newer than that botocore needs a newer one (pip install -U botocore)"
    )


def _instance_type_problems(doc: Mapping[str, Any]) -> list[str]:
    """Instance types that match the schema's shape but that no AWS API accepts (``ml.p5.48xlarg``,
    ``m6i.huge``): accepted and synthesized until session s50, they failed only at deploy time, the
    HyperPod cluster's after the VPC and the EKS cluster had been created."""
    problems: list[str] = []
    groups = (doc.get("hyperpod") or {}).get("instanceGroups", [])
    if groups and "existingCluster" not in doc:
        hyperpod_types = known_instance_types("sagemaker", "ClusterInstanceType")
        problems += [
            _unknown_instance_type(
                f"hyperpod.instanceGroups[{i}].instanceType",
                group["instanceType"],
                hyperpod_types,
                "a HyperPod instance type",
            )
            for i, group in enumerate(groups)
            if group["instanceType"] not in hyperpod_types
        ]
    system = doc.get("cluster", {}).get("systemNodes", {}).get("instanceType")
    if system is not None and "existingCluster" not in doc:
        ec2_types = known_instance_types("ec2", "InstanceType")
        if system not in ec2_types:
            problems.append(
                _unknown_instance_type(
                    "cluster.systemNodes.instanceType", system, ec2_types, "an EC2 instance type"
                )
            )
    return problems


S3_RESERVED_PREFIXES: Final = ("xn--", "sthree-", "amzn-s3-demo-")
S3_RESERVED_SUFFIXES: Final = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
"""What S3's bucket naming rules reserve beyond the schema's characters and length."""


def _bucket_problems(doc: Mapping[str, Any]) -> list[str]:
    """``platform.modelBuckets`` names no bucket can have (``a..b``, ``192.168.1.1``, a reserved prefix
    or suffix): they matched the schema's characters and were granted in the S3 CSI driver's role
    without a word (before session s50), a grant on a bucket that cannot exist."""
    problems: list[str] = []
    for i, name in enumerate(doc.get("platform", {}).get("modelBuckets", [])):
        why = None
        if ".." in name:
            why = "two adjacent periods"
        elif re.fullmatch(r"[0-9]{1,3}(\.[0-9]{1,3}){3}", name):
            why = "the form of an IP address"
        elif name.startswith(S3_RESERVED_PREFIXES) or name.endswith(S3_RESERVED_SUFFIXES):
            why = "a prefix or suffix S3 reserves"
        if why is not None:
            problems.append(f"platform.modelBuckets[{i}]: {name!r} is not an S3 bucket name ({why})")
    return problems


def _endpoint_problems(doc: Mapping[str, Any]) -> list[str]:
    """An endpoint name ACM cannot put in a certificate: ``recordName.zoneName`` over 64 characters
    ended synthesis in a jsii traceback (``Domain name must be 64 characters or less``)."""
    endpoint = doc["inference"].get("endpoint")
    if endpoint is None:
        return []
    fqdn = f"{endpoint['recordName']}.{endpoint['zoneName']}"
    if len(fqdn) > ACM_DOMAIN_NAME_MAX:
        return [
            f"inference.endpoint.recordName: {fqdn} is {len(fqdn)} characters, over the "
            f"{ACM_DOMAIN_NAME_MAX} ACM allows in a certificate's domain name; use a shorter recordName or "
            "zoneName"
        ]
    return []


AWS_ADDON_GENERATED: Final = {
    ("executionRoleArn",): "the execution role the app creates",
    ("tlsCertificateS3Bucket",): "the TLS-certificate bucket the app creates",
    ("hyperpodClusterArn",): "the HyperPod cluster's ARN (existingCluster.hyperpodClusterArn names an "
    "existing one)",
    ("inferenceGateway", "serviceAccount", "roleArn"): "the gateway controller's IRSA role the app creates",
}
"""AWS's add-on values the app fills in itself (:func:`igw.addon.aws_addon.values_for`), with what."""


def _aws_addon_generated_problems(values: Mapping[str, Any]) -> list[str]:
    """Values for AWS's add-on that the app replaces: a user's was accepted and silently overwritten
    (their own execution role, bucket, or ``alb.enabled: true`` for the add-on's bundled Load Balancer
    Controller, which the app switches off because the platform stack runs one)."""
    found: list[str] = []
    for path, what in AWS_ADDON_GENERATED.items():
        node: Any = values
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if node is not None:
            found.append(
                f"inference.addon.configurationValues.{'.'.join(path)}: set by the app to {what}; remove it"
            )
    alb = values.get("alb")
    if isinstance(alb, Mapping) and alb.get("enabled") is True:
        found.append(
            "inference.addon.configurationValues.alb.enabled: the app sets it false (the platform stack "
            "runs the AWS Load Balancer Controller, and two controllers would fight over the same load "
            "balancers); remove it"
        )
    return found


def _aws_gateway_disabled_problems(values: Mapping[str, Any]) -> list[str]:
    """AWS's add-on with its gateway switched off (``inferenceGateway.enabled: false``): the stacks still
    applied ``inference.gatewayConfig`` and created the gateway controller's role, and ``cdk deploy``
    succeeded with an InferenceGatewayConfig no controller would ever act on (no gateway, no error)."""
    gateway = values.get("inferenceGateway")
    if isinstance(gateway, Mapping) and gateway.get("enabled") is False:
        return [
            "inference.addon.configurationValues.inferenceGateway.enabled: false switches off the gateway "
            "of AWS's add-on, yet the stacks apply inference.gatewayConfig for it (an "
            "InferenceGatewayConfig nothing would act on); remove it (the app turns the gateway on)"
        ]
    return []


def _chart_generated_problems(doc: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """Chart values the app fills in itself (``cdk.constructs.igw_chart``): ``image.repository`` and
    ``image.tag`` from ``inference.image`` (a user's won silently, while the app still built and pushed
    its own image, or ignored ``inference.image``); in the chart's gateway mode also
    ``gateway.config`` from ``inference.gatewayConfig`` and, with ``inference.endpoint``, the endpoint's
    certificate in ``service.tls.certificateArn``. A user's ``gateway.config`` won silently (the gateway
    served it, while the dashboard, the alarms and the applied object followed ``inference.gatewayConfig``),
    and a user's certificate was silently replaced by the endpoint's."""
    found: list[str] = []
    image = values.get("image")
    for key in ("repository", "tag"):
        if isinstance(image, Mapping) and key in image:
            # The chart ran it while the app still built and pushed its own image (or ignored
            # inference.image).
            found.append(
                f"inference.addon.configurationValues.image.{key}: the app sets it from inference.image "
                "(default: the image it builds); set inference.image instead"
            )
    if values.get("mode", "operator") != "gateway":
        return found
    gateway = values.get("gateway")
    if isinstance(gateway, Mapping) and "config" in gateway:
        found.append(
            "inference.addon.configurationValues.gateway.config: the app serves inference.gatewayConfig "
            "there; remove it and configure the gateway in inference.gatewayConfig"
        )
    service = values.get("service")
    tls = service.get("tls") if isinstance(service, Mapping) else None
    if "endpoint" in doc["inference"] and isinstance(tls, Mapping) and "certificateArn" in tls:
        found.append(
            "inference.addon.configurationValues.service.tls.certificateArn: the app puts "
            "inference.endpoint's certificate there; remove it, or remove inference.endpoint"
        )
    return found


IPV6_REASONS: Final = {
    "cluster": "the stacks build an IPv4 VPC (no IPv6 block) and an IPv4 cluster",
    "existingCluster": "an IPv6 cluster's pods have only IPv6 addresses",
}
"""Why ``ipv6`` is refused in each section that takes ``ipFamily``."""


def _ip_family_problems(doc: Mapping[str, Any]) -> list[str]:
    """An IPv6 cluster asked for, new or existing: refused before synthesis rather than deployed with a
    gateway load balancer that never reaches its pods (its NLB is IPv4 with IP targets; IPv6 pods need
    ``aws-load-balancer-ip-address-type: dualstack``, which nothing here sets)."""
    return [
        f"{section}.ipFamily: ipv6 is not supported: {why}, and the gateway's internal NLB is IPv4-only; "
        'use ipv4 (docs/infrastructure.md, "IPv6")'
        for section, why in IPV6_REASONS.items()
        if (doc.get(section) or {}).get("ipFamily", "ipv4") == "ipv6"
    ]


def _semantic_problems(doc: Mapping[str, Any]) -> list[str]:
    """Rules beyond the schema; only called on a schema-valid document."""
    problems: list[str] = _network_problems(doc)
    problems += aws_tags.problems(doc.get("tags", {}))
    problems += _platform_problems(doc)
    problems += _instance_type_problems(doc)
    problems += _bucket_problems(doc)
    problems += _endpoint_problems(doc)
    problems += _ip_family_problems(doc)
    cluster = doc.get("cluster", {})
    public = cluster.get("endpointAccess") == "publicAndPrivate"
    if public and not cluster.get("publicAccessCidrs"):
        problems.append("cluster.publicAccessCidrs: required when cluster.endpointAccess is publicAndPrivate")
    if not public and "publicAccessCidrs" in cluster:
        problems.append(
            "cluster.publicAccessCidrs: only with cluster.endpointAccess publicAndPrivate (a private "
            "endpoint has no public access to limit)"
        )
    cluster_sizes = cluster.get("systemNodes", {})
    if cluster_sizes.get("minSize", 2) > cluster_sizes.get("maxSize", 4):
        problems.append("cluster.systemNodes.minSize: larger than cluster.systemNodes.maxSize")
    existing = doc.get("existingCluster")
    if existing is None and "hyperpod" not in doc:
        problems.append("hyperpod: required unless existingCluster is set")
    if existing is not None:
        if "oidcProviderArn" not in existing:
            problems.append(
                "existingCluster.oidcProviderArn: required (the S3 and FSx CSI drivers' roles use IRSA)"
            )
        if "network" in doc:
            problems.append("network: not used with existingCluster (give existingCluster.vpcId)")
        # Both are read only by the stacks that create a cluster: set here, they changed nothing.
        if "hyperpod" in doc:
            problems.append(
                "hyperpod: not used with existingCluster (no HyperPod cluster is created; name the one "
                "the cluster orchestrates in existingCluster.hyperpodClusterArn)"
            )
        for key in doc.get("cluster", {}):
            problems.append(
                f"cluster.{key}: not used with existingCluster (the existing cluster keeps its own "
                "settings; change them where the cluster was created)"
            )
    hyperpod = doc.get("hyperpod")
    if existing is None and hyperpod is not None and "clusterName" not in hyperpod:
        default = f"{doc['clusterName']}-hyperpod"
        if not HYPERPOD_NAME.fullmatch(default):
            # EKS allows underscores in clusterName, HyperPod not in its own name.
            problems.append(
                f"hyperpod.clusterName: the default {default!r} is not a HyperPod cluster name (letters, "
                "digits and hyphens only: clusterName has an underscore, which EKS allows and HyperPod "
                "does not); set hyperpod.clusterName"
            )
        elif len(default) > HYPERPOD_NAME_MAX:
            problems.append(
                f"hyperpod.clusterName: the default {default!r} is {len(default)} characters, over "
                f"HyperPod's {HYPERPOD_NAME_MAX}; set hyperpod.clusterName (or a clusterName of at most "
                f"{HYPERPOD_NAME_MAX - len('-hyperpod')} characters)"
            )
    script = (hyperpod or {}).get("lifecycleScriptOnCreate")
    if existing is None and script is not None:
        target = (LIFECYCLE_SCRIPTS_DIR / script).resolve()
        if not target.is_relative_to(LIFECYCLE_SCRIPTS_DIR) or not target.is_file():
            bundled = sorted(
                str(path.relative_to(LIFECYCLE_SCRIPTS_DIR)) for path in LIFECYCLE_SCRIPTS_DIR.rglob("*.sh")
            )
            problems.append(
                f"hyperpod.lifecycleScriptOnCreate: {script} is not among the lifecycle scripts the stack "
                f"uploads ({', '.join(bundled)} in cdk/constructs/lifecycle_scripts/); add it there, or "
                "HyperPod's nodes fail to run it"
            )
    names = [group["name"] for group in doc.get("hyperpod", {}).get("instanceGroups", [])]
    for i, name in enumerate(names):
        if name in names[:i]:
            problems.append(f"hyperpod.instanceGroups[{i}].name: duplicates {name!r}")
    addon = doc["inference"].get("addon", {})
    mode = addon.get("mode", "igw")
    values = addon.get("configurationValues", {})
    if mode == "awsManaged":
        version = addon.get("version")
        if version is not None and not addon_version.at_least(version, pins.ADDON_MINIMUM_VERSION):
            problems.append(
                f"inference.addon.version: {version} is below {pins.ADDON_MINIMUM_VERSION}, the first "
                f"with the gateway"
            )
        problems += [
            f"inference.addon.configurationValues.{p}"
            for p in aws_addon.problems(values, require_generated=False)
        ]
        problems += _aws_addon_generated_problems(values)
        problems += _aws_gateway_disabled_problems(values)
        if existing is not None and "hyperpodClusterArn" not in existing:
            problems.append("existingCluster.hyperpodClusterArn: required by AWS's add-on (awsManaged)")
        if "endpoint" in doc["inference"]:
            problems.append(
                "inference.endpoint: only with mode igw (AWS's add-on runs its own load balancer)"
            )
        if "image" in doc["inference"]:
            # Read only for our chart; AWS's add-on runs AWS's images (accepted and ignored until s43).
            problems.append(
                "inference.image: only with mode igw (AWS's add-on runs AWS's own images, which this "
                "setting does not reach)"
            )
    else:
        if "version" in addon:
            problems.append("inference.addon.version: only with mode awsManaged (our chart is local)")
        if "conflictPolicy" in addon:
            # Read only for AWS's add-on (EKS's resolveConflicts); our chart is a Helm release.
            problems.append(
                "inference.addon.conflictPolicy: only with mode awsManaged (EKS resolves an add-on's "
                "conflicts; our chart is installed by Helm, which this setting does not reach)"
            )
        problems += [f"inference.addon.configurationValues.{p}" for p in configuration.problems(values)]
        if values.get("mode", "operator") == "operator":
            problems += [
                f"inference.addon.configurationValues.{key}: has no effect with the chart's mode operator "
                f"(the operator builds the gateway from inference.gatewayConfig: replicas from "
                f"spec.schedulers[].replicas, the Service from spec.tls and spec.extensions.dataPlane, "
                f"pod settings from spec.podDefaults; gateway pods call no AWS API and need no role); "
                f"remove it, or set mode: gateway"
                for key in chart.gateway_mode_only_paths(values)
            ]
        problems += _chart_generated_problems(doc, values)
        acm_arn = ((doc["inference"]["gatewayConfig"]["spec"].get("tls") or {}).get("acmArn")) or ""
        if "endpoint" in doc["inference"] and acm_arn:
            problems.append(
                "inference.gatewayConfig.spec.tls.acmArn: leave it empty with inference.endpoint (the app "
                "puts the endpoint's certificate there)"
            )
        problems += _auto_tls_problems(doc)
    problems += [f"inference.gatewayConfig.{p}" for p in _gateway_config_problems(doc)]
    problems += _redis_url_password_problems(doc)
    problems += _heartbeat_token_problems(doc)
    return problems


def _redis_url_password_problems(doc: Mapping[str, Any]) -> list[str]:
    """A Redis URL of ``inference.gatewayConfig`` that carries a password (user-info or
    ``?password=``, both of which redis-py reads): the stacks write the config into the inference
    stack's CloudFormation template (kept in the CDK assets bucket, shown by ``GetTemplate`` and the
    console) and into the InferenceGatewayConfig object, so the password would be readable wherever
    they are. Refused, naming the field and never quoting the password; ``passwordEnv`` read from a
    Secret is the way (:mod:`igw.config.redis_password`). Before session s42 it was synthesized as given."""
    from igw.config.redis_password import GATEWAY_REDIS_NODES, spec_node, url_holds_password

    problems: list[str] = []
    for path in GATEWAY_REDIS_NODES:
        node = spec_node(doc["inference"]["gatewayConfig"].get("spec"), path)
        url = node.get("url") if node is not None else None
        if isinstance(url, str) and url_holds_password(url):
            problems.append(
                f"inference.gatewayConfig.spec.{'.'.join(path)}.url: holds a password, which the stacks "
                "would write into the CloudFormation template and the InferenceGatewayConfig object; "
                "remove it from the URL and set passwordEnv, read from a Secret in spec.podDefaults.env"
            )
    return problems


def _auto_tls_problems(doc: Mapping[str, Any]) -> list[str]:
    """The deployment's own InferenceGatewayConfig asking the operator for an auto-issued certificate
    (``spec.tls: {}`` without ``inference.endpoint``, whose certificate would fill ``acmArn``) when the
    chart values leave the operator unable to get one: auto-issue switched off, or the default issuer
    ``ClusterIssuer/igw-selfsigned`` named while the chart does not create it (off by default). Either
    way ``cdk deploy`` succeeded and the gateway never got its TLS listener. Schema-valid ``doc``, our
    chart (``mode: igw``)."""
    from igw.operator.tls import DEFAULT_ISSUER, wants_auto_issue

    values = doc["inference"].get("addon", {}).get("configurationValues", {})
    spec = doc["inference"]["gatewayConfig"]["spec"]
    if values.get("mode", "operator") != "operator" or "endpoint" in doc["inference"]:
        return []
    if not isinstance(spec, Mapping) or not wants_auto_issue(spec):
        return []
    operator = values.get("operator") or {}
    where = "inference.addon.configurationValues.operator"
    if operator.get("autoTls", True) is False:
        return [
            f"{where}.autoTls: false, but inference.gatewayConfig.spec.tls asks the operator for an "
            "auto-issued certificate (tls without acmArn), which it then refuses (AutoTlsDisabled); set "
            "spec.tls.acmArn, add inference.endpoint, or leave autoTls on"
        ]
    issuer = operator.get("tlsIssuer", DEFAULT_ISSUER)
    if issuer == DEFAULT_ISSUER and operator.get("selfSignedClusterIssuer") is not True:
        return [
            f"{where}.selfSignedClusterIssuer: inference.gatewayConfig.spec.tls asks for an auto-issued "
            f"certificate from the default issuer {DEFAULT_ISSUER}, which the chart creates only with "
            f"selfSignedClusterIssuer: true (the certificate would never be issued); set {where}.tlsIssuer "
            "to an issuer of your cluster, set selfSignedClusterIssuer: true (a self-signed certificate "
            "clients must be told to trust), or add inference.endpoint (an ACM certificate for a DNS name)"
        ]
    return []


def _duration_seconds(text: str) -> int:
    """Seconds of a schema-valid ``refreshInterval`` (``1h``, ``30m``, ``1h30m``, ``90s``)."""
    total, number = 0, ""
    for char in text:
        if char.isdigit():
            number += char
        else:
            total += int(number) * {"h": 3600, "m": 60, "s": 1}[char]
            number = ""
    return total


def _heartbeat_token_problems(doc: Mapping[str, Any]) -> list[str]:
    """``inference.globalHeartbeatToken`` against the rest of the document (schema-valid)."""
    token = doc["inference"].get("globalHeartbeatToken")
    if token is None:
        return []
    where = "inference.globalHeartbeatToken"
    problems: list[str] = []
    addon = doc["inference"].get("addon", {})
    if addon.get("mode", "igw") == "awsManaged":
        problems.append(
            f"{where}: only with inference.addon.mode igw (AWS's add-on runs its own gateway, which "
            "publishes no heartbeats to the global router)"
        )
    elif addon.get("configurationValues", {}).get("mode", "operator") != "operator":
        problems.append(
            f"{where}: only with the chart's mode operator (in mode gateway the chart's own gateway "
            "starts, and Helm waits for it, before a synced Secret could exist in its namespace); "
            "give it the token through inference.addon.configurationValues.gateway.extraEnv yourself"
        )
    if problems:
        return problems
    secret_arn: str = token["secretArn"]
    region = arn_region(secret_arn)
    partition = secret_arn.split(":")[1]
    if partition != partition_of_region(region) or partition != partition_of_region(doc["region"]):
        problems.append(
            f"{where}.secretArn: partition {partition} with region {region}, but the stacks deploy to "
            f"{doc['region']} ({partition_of_region(doc['region'])}); Secrets Manager is not read across "
            "partitions"
        )
    kms_key_arn = token.get("kmsKeyArn")
    if kms_key_arn is not None and arn_region(kms_key_arn) != region:
        problems.append(
            f"{where}.kmsKeyArn: in {arn_region(kms_key_arn)}, but the secret is in {region} (Secrets "
            "Manager encrypts a secret with a key of its own region)"
        )
    refresh = token.get("refreshInterval", DEFAULT_HEARTBEAT_TOKEN_REFRESH)
    if _duration_seconds(refresh) == 0:
        problems.append(
            f"{where}.refreshInterval: {refresh} would sync the token once and never again (a rotated "
            "token would not reach the cluster)"
        )
    problems += _token_wiring_problems(doc, token)
    return problems


def _token_wiring_problems(doc: Mapping[str, Any], token: Mapping[str, Any]) -> list[str]:
    """When the gateways read the global Redis password from a variable, it must come from the Secret
    the stack syncs: otherwise they start without the token (or with a stale hand-made copy)."""
    from igw.config.redis_password import spec_node

    gateway = doc["inference"]["gatewayConfig"]
    spec = gateway["spec"]
    node = spec_node(spec, HEARTBEAT_REDIS_NODE)
    variable = node.get("passwordEnv") if node is not None else None
    if not isinstance(variable, str):
        return []
    where = "inference.globalHeartbeatToken"
    field = f"inference.gatewayConfig.spec.{'.'.join(HEARTBEAT_REDIS_NODE)}.passwordEnv"
    secret_name = token.get("secretName", DEFAULT_HEARTBEAT_TOKEN_SECRET)
    key = token.get("key", DEFAULT_HEARTBEAT_TOKEN_KEY)
    gateway_namespace = gateway.get("namespace", "default")
    namespace = token.get("namespace", gateway_namespace)
    if namespace != gateway_namespace:
        return [
            f"{where}.namespace: {namespace}, but {field} is read by gateway pods in {gateway_namespace} "
            "(inference.gatewayConfig.namespace), which can only read Secrets of their own namespace"
        ]
    # Read defensively: a malformed spec is reported by the gatewayConfig validation, not a traceback.
    defaults = spec.get("podDefaults")
    defaults = defaults if isinstance(defaults, Mapping) else {}
    env = defaults.get("env")
    entries = [
        (i, entry)
        for i, entry in enumerate(env if isinstance(env, list) else [])
        if isinstance(entry, Mapping) and entry.get("name") == variable
    ]
    if entries:
        # The last entry of a name is the one a container gets.
        i, entry = entries[-1]
        value_from = entry.get("valueFrom")
        ref = value_from.get("secretKeyRef") if isinstance(value_from, Mapping) else None
        ref = ref if isinstance(ref, Mapping) else {}
        if ref.get("name") == secret_name and ref.get("key") == key:
            return []
        reads = (
            f"reads Secret {ref.get('name')} key {ref.get('key')}"
            if ref
            else "does not read a Secret (valueFrom.secretKeyRef)"
        )
        found = f"inference.gatewayConfig.spec.podDefaults.env[{i}] ({variable}) {reads}"
    else:
        sources = defaults.get("envFrom")
        for source in sources if isinstance(sources, list) else []:
            ref = source.get("secretRef") if isinstance(source, Mapping) else None
            if (
                isinstance(ref, Mapping)
                and ref.get("name") == secret_name
                and f"{source.get('prefix', '')}{key}" == variable
            ):
                return []
        found = f"inference.gatewayConfig.spec.podDefaults.env has no entry {variable}"
    return [
        f"{field}: {variable} is not read from the Secret that {where} syncs ({secret_name}, key "
        f"{key}): {found}; add {{name: {variable}, valueFrom: {{secretKeyRef: {{name: {secret_name}, "
        f"key: {key}}}}}}} to inference.gatewayConfig.spec.podDefaults.env, or the gateways start "
        "without the token"
    ]


def _gateway_config_problems(doc: Mapping[str, Any]) -> list[str]:
    from igw.config.validate import validate_document

    manifest = _manifest(doc["inference"]["gatewayConfig"])
    return [str(problem) for problem in validate_document(manifest.document())]


def _manifest(raw: Mapping[str, Any]) -> GatewayConfigManifest:
    return GatewayConfigManifest(
        name=raw["name"], namespace=raw.get("namespace", "default"), spec=raw["spec"]
    )


def _build(doc: Mapping[str, Any]) -> DeploymentConfig:
    net = doc.get("network", {})
    cluster = doc.get("cluster", {})
    system = cluster.get("systemNodes", {})
    platform = doc.get("platform", {})
    dependencies = platform.get("hyperpodDependencies", {})
    addon = doc["inference"].get("addon", {})
    image = doc["inference"].get("image", {})
    endpoint = doc["inference"].get("endpoint")
    existing = doc.get("existingCluster")
    token = doc["inference"].get("globalHeartbeatToken")
    gateway_config = _manifest(doc["inference"]["gatewayConfig"])
    return DeploymentConfig(
        account=doc["account"],
        region=doc["region"],
        cluster_name=doc["clusterName"],
        availability_zones=tuple(doc.get("availabilityZones", ())),
        stack_prefix=doc.get("stackPrefix", "Igw"),
        tags=dict(doc.get("tags", {})),
        network=NetworkConfig(
            vpc_id=net.get("vpcId"),
            private_subnet_ids=tuple(net.get("privateSubnetIds", ())),
            cidr=net.get("cidr", DEFAULT_VPC_CIDR),
            max_azs=net.get("maxAzs", 3),
            nat_gateways=net.get("natGateways", 1),
        ),
        cluster=ClusterConfig(
            kubernetes_version=cluster.get("kubernetesVersion", pins.KUBERNETES_VERSION),
            authentication_mode=cluster.get("authenticationMode", "API"),
            endpoint_access=cluster.get("endpointAccess", "private"),
            public_access_cidrs=tuple(cluster.get("publicAccessCidrs", ())),
            admin_role_arns=tuple(cluster.get("adminRoleArns", ())),
            system_instance_type=system.get("instanceType", "m6i.xlarge"),
            system_min_size=system.get("minSize", 2),
            system_max_size=system.get("maxSize", 4),
        ),
        hyperpod=_hyperpod(doc),
        platform=PlatformConfig(
            identity=platform.get("identity", "podIdentity"),
            model_buckets=tuple(platform.get("modelBuckets", ())),
            hyperpod_dependencies=HyperPodDependenciesConfig(
                nvidia_device_plugin=dependencies.get("nvidiaDevicePlugin", True),
                efa_device_plugin=dependencies.get("efaDevicePlugin", True),
                health_monitoring_agent=dependencies.get("healthMonitoringAgent", True),
            ),
        ),
        addon=AddonConfig(
            mode=addon.get("mode", "igw"),
            version=addon.get("version", pins.ADDON_VERSION),
            conflict_policy=addon.get("conflictPolicy", "OVERWRITE"),
            configuration_values=dict(addon.get("configurationValues", {})),
        ),
        gateway_config=gateway_config,
        image=ImageConfig(repository=image.get("repository"), tag=image.get("tag")),
        endpoint=EndpointConfig(
            hosted_zone_id=endpoint["hostedZoneId"],
            zone_name=endpoint["zoneName"],
            record_name=endpoint["recordName"],
        )
        if endpoint
        else None,
        existing_cluster=ExistingClusterConfig(
            vpc_id=existing["vpcId"],
            private_subnet_ids=tuple(existing["privateSubnetIds"]),
            oidc_provider_arn=existing.get("oidcProviderArn"),
            hyperpod_cluster_arn=existing.get("hyperpodClusterArn"),
            cluster_security_group_id=existing.get("clusterSecurityGroupId"),
            installed_addons=tuple(existing.get("installedAddons", ())),
            kubernetes_version=existing.get("kubernetesVersion", pins.KUBERNETES_VERSION),
        )
        if existing
        else None,
        global_heartbeat_token=GlobalHeartbeatTokenConfig(
            secret_arn=token["secretArn"],
            namespace=token.get("namespace", gateway_config.namespace),
            secret_name=token.get("secretName", DEFAULT_HEARTBEAT_TOKEN_SECRET),
            key=token.get("key", DEFAULT_HEARTBEAT_TOKEN_KEY),
            refresh_interval=token.get("refreshInterval", DEFAULT_HEARTBEAT_TOKEN_REFRESH),
            kms_key_arn=token.get("kmsKeyArn"),
        )
        if token
        else None,
    )


def _hyperpod(doc: Mapping[str, Any]) -> HyperPodConfig | None:
    hyperpod = doc.get("hyperpod")
    if hyperpod is None:
        return None
    return HyperPodConfig(
        cluster_name=hyperpod.get("clusterName", f"{doc['clusterName']}-hyperpod"),
        node_recovery=hyperpod.get("nodeRecovery", "Automatic"),
        lifecycle_script_on_create=hyperpod.get("lifecycleScriptOnCreate", "on_create.sh"),
        instance_groups=tuple(
            InstanceGroupConfig(
                name=group["name"],
                instance_type=group["instanceType"],
                instance_count=group["instanceCount"],
                ebs_volume_size_gb=group.get("ebsVolumeSizeGb", 500),
                threads_per_core=group.get("threadsPerCore", 1),
                deep_health_checks=tuple(group.get("deepHealthChecks", ())),
                labels=dict(group.get("labels", {})),
            )
            for group in hyperpod["instanceGroups"]
        ),
    )


def parse(document: Any, *, source: str = "<deployment config>") -> DeploymentConfig:
    """Validate a decoded document and return the typed config, or raise :class:`DeploymentConfigError`."""
    problems = _schema_problems(document)
    if not problems:
        problems = _semantic_problems(document)
    # Whatever the schema says of the field: any string or number of the file may reach a construct.
    problems += [f"{_path(path)}: {message}" for path, message in cdk_tokens.problems(document)]
    if problems:
        raise DeploymentConfigError(problems, source=source)
    return _build(document)


def load(path: Path) -> DeploymentConfig:
    """Read and validate a deployment config file (YAML or JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DeploymentConfigError([f"cannot read: {exc.strerror}"], source=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise DeploymentConfigError(
            [f"cannot read: not UTF-8 text ({exc.reason})"], source=str(path)
        ) from exc
    # Read like every configuration file: syntax errors with their line, and a file nested thousands
    # of levels deep or YAML aliases expanding past a million values refused (the former ended
    # `make synth` in a RecursionError traceback).
    try:
        documents = parse_text(text, source=str(path))
    except DocumentReadError as exc:
        raise DeploymentConfigError([f"not valid YAML: {exc}"], source=str(path)) from exc
    if len(documents) > 1:
        raise DeploymentConfigError([f"one document expected, got {len(documents)}"], source=str(path))
    return parse(documents[0].content if documents else None, source=str(path))
