"""Every version and fixed name the add-on and its infrastructure depend on, pinned in one place.

The CDK app (``cdk/``), the ``igw addon`` command and the chart generator all read these constants,
so a version bump is a one-line change here and every consumer (and its tests) follows.

Sources: the SageMaker HyperPod inference set-up guide and release notes (add-on name, namespace,
dependency minimums), aws-cdk-lib's ``aws_eks.KubernetesVersion`` (Kubernetes versions), the EKS
community add-ons page (cert-manager), the AWS Load Balancer Controller's Helm chart and the External
Secrets Operator's chart (``deploy/charts/external-secrets``, its CRDs' served versions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import igw

ADDON_NAME: Final = "amazon-sagemaker-hyperpod-inference"
"""AWS's EKS add-on whose gateway we re-implement (what the checks look for on a cluster)."""

AWS_ADDON_NAME: Final = ADDON_NAME
"""AWS's add-on, installed only when the deployment config asks for it (``inference.addon.mode:
awsManaged``) and configured to AWS's own schema (:mod:`igw.addon.aws_addon`)."""

IGW_ADDON_NAME: Final = "igw-inference-gateway"
"""Our add-on's name: the chart in ``addon/chart`` published as an EKS add-on (``igw addon create``).
A third party cannot publish under AWS's name, so ours differs from :data:`AWS_ADDON_NAME`."""

IGW_ADDON_VERSION: Final = "v0.1.0-eksbuild.1"
"""The version ``igw addon create`` installs of our add-on, in EKS's ``vX.Y.Z-eksbuild.N`` form."""

ADDON_NAMESPACE: Final = "hyperpod-inference-system"
"""Where the add-on installs (fixed across add-on versions, as EKS requires)."""

ADDON_MINIMUM_VERSION: Final = "v2.0.0-eksbuild.2"
"""The first add-on version that ships the inference gateway."""

ADDON_VERSION: Final = "v2.0.0-eksbuild.2"
"""The version the CDK app installs; never below :data:`ADDON_MINIMUM_VERSION`."""

AWS_GATEWAY_CONTROLLER_SERVICE_ACCOUNT: Final = "inference-gateway-controller"
"""Service account of AWS's gateway controller; its IRSA role carries
``AmazonSageMakerHyperPodInferenceGatewayAccess`` (AWS's add-on reads it at controller start)."""

GATEWAY_SERVICE_ACCOUNT: Final = "inference-gateway"
"""Service account of the gateway pods; IRSA trust and Pod Identity associations name it."""

CHART_NAME: Final = "inference-gateway"
"""The chart directory under ``addon/chart/`` and the packaged chart's name."""

CHART_VERSION: Final = "0.1.0"
"""The chart's own version (``Chart.yaml`` ``version``), semver as Helm requires."""

APP_VERSION: Final = igw.__version__
"""The gateway image tag the chart defaults to (``Chart.yaml`` ``appVersion``)."""

GATEWAY_IMAGE_REPOSITORY: Final = "public.ecr.aws/igw/inference-gateway"
"""Default image repository; production installs point this at their own ECR mirror."""

KUBERNETES_VERSION: Final = "1.35"
"""EKS version of a new cluster: the newest HyperPod supports (1.30–1.35), in EKS standard support until
2027-03-27 (:mod:`igw.addon.support_calendar`). The CDK app's kubectl handler runs the kubectl layer of
the cluster's own version (``cdk/constructs/kubectl_layer.py``)."""

SUPPORTED_KUBERNETES_VERSIONS: Final = ("1.32", "1.33", "1.34", "1.35")
"""Versions the deployment config accepts and the chart is rendered and validated against (the EKS
add-on rule: every supported one): those EKS still creates clusters on (1.31's extended support ended
2026-11-26) and HyperPod supports; ``tests/cdk/test_support_calendar.py`` checks both."""

LOAD_BALANCER_CONTROLLER_CHART: Final = "aws-load-balancer-controller"
LOAD_BALANCER_CONTROLLER_REPOSITORY: Final = "https://aws.github.io/eks-charts"
LOAD_BALANCER_CONTROLLER_CHART_VERSION: Final = "1.13.2"
"""Chart 1.13.2 ships controller v2.13.2, the pair the HyperPod operator chart pins."""
LOAD_BALANCER_CONTROLLER_NAMESPACE: Final = "kube-system"
LOAD_BALANCER_CONTROLLER_SERVICE_ACCOUNT: Final = "aws-load-balancer-controller"

EXTERNAL_SECRETS_CHART: Final = "external-secrets"
EXTERNAL_SECRETS_REPOSITORY: Final = "https://charts.external-secrets.io"
EXTERNAL_SECRETS_CHART_VERSION: Final = "2.9.0"
"""The External Secrets Operator's chart (app v2.9.0), installed only with the deployment config's
``inference.globalHeartbeatToken``. Its CRDs serve ``external-secrets.io/v1`` only (``v1beta1`` is
defined but no longer served), so the stack writes :data:`EXTERNAL_SECRETS_API_VERSION`."""
EXTERNAL_SECRETS_API_VERSION: Final = "external-secrets.io/v1"
EXTERNAL_SECRETS_NAMESPACE: Final = "external-secrets"
EXTERNAL_SECRETS_SERVICE_ACCOUNT: Final = "external-secrets"
"""The controller's service account (the chart's ``serviceAccount.name``); its role reads the one
Secrets Manager secret it syncs."""

VPC_CNI_ADDON: Final = "vpc-cni"
VPC_CNI_MINIMUM_VERSION: Final = "v1.18.3-eksbuild.1"
"""HyperPod with EKS orchestration supports only the VPC CNI, from 1.18.3."""
VPC_CNI_VERSION: Final = "v1.19.2-eksbuild.1"

POD_IDENTITY_AGENT_ADDON: Final = "eks-pod-identity-agent"
POD_IDENTITY_AGENT_VERSION: Final = "v1.3.8-eksbuild.2"
CLOUDWATCH_OBSERVABILITY_ADDON: Final = "amazon-cloudwatch-observability"
"""Container Insights and the CloudWatch agent (Pod Identity from 3.1.0, OTel Container Insights 6.2.0)."""
CLOUDWATCH_OBSERVABILITY_VERSION: Final = "v6.2.0-eksbuild.1"
CLOUDWATCH_NAMESPACE: Final = "amazon-cloudwatch"
CLOUDWATCH_AGENT_SERVICE_ACCOUNT: Final = "cloudwatch-agent"


@dataclass(frozen=True, slots=True)
class DependencyAddon:
    """An EKS add-on that must be installed, at ``minimum`` or newer, before ours."""

    name: str
    minimum: str
    """The oldest version the inference add-on accepts (install fails below it)."""
    pinned: str
    """The version the CDK app installs (at least ``minimum``)."""
    why: str
    """What breaks without it; printed when the dependency is missing."""


DEPENDENCY_ADDONS: Final[tuple[DependencyAddon, ...]] = (
    DependencyAddon(
        name="cert-manager",
        minimum="v1.18.2-eksbuild.2",
        pinned="v1.18.2-eksbuild.2",
        why="issues the gateway's TLS certificate when spec.tls asks for auto-issue",
    ),
    DependencyAddon(
        name="metrics-server",
        minimum="v0.7.2-eksbuild.4",
        pinned="v0.7.2-eksbuild.4",
        why="resource metrics for autoscaling the model deployments",
    ),
    DependencyAddon(
        name="aws-mountpoint-s3-csi-driver",
        minimum="v1.14.1-eksbuild.1",
        pinned="v1.14.1-eksbuild.1",
        why="mounts model weights from S3 (missing CSIDriver s3.csi.aws.com)",
    ),
    DependencyAddon(
        name="aws-fsx-csi-driver",
        minimum="v1.6.0-eksbuild.1",
        pinned="v1.6.0-eksbuild.1",
        why="mounts model weights from FSx for Lustre",
    ),
)
"""Dependencies of the inference add-on, in install order (cert-manager first)."""

FSX_CSI_CONTROLLER_SERVICE_ACCOUNT: Final = "fsx-csi-controller-sa"
"""The FSx CSI controller's service account (kube-system); its IRSA role manages FSx volumes."""

S3_CSI_SERVICE_ACCOUNT: Final = "s3-csi-driver-sa"
"""The Mountpoint S3 CSI driver's service account (kube-system). Driver v1 reads credentials through
IRSA only (EKS Pod Identity arrives with v2), so its role is always an IRSA role."""

CSI_NAMESPACE: Final = "kube-system"

NVIDIA_DEVICE_PLUGIN_CHART: Final = "nvidia-device-plugin"
NVIDIA_DEVICE_PLUGIN_REPOSITORY: Final = "https://nvidia.github.io/k8s-device-plugin"
NVIDIA_DEVICE_PLUGIN_VERSION: Final = "0.16.1"
"""The version AWS's HyperPod dependencies chart pins; it makes GPU nodes advertise ``nvidia.com/gpu``."""

EFA_DEVICE_PLUGIN_CHART: Final = "aws-efa-k8s-device-plugin"
EFA_DEVICE_PLUGIN_REPOSITORY: Final = "https://aws.github.io/eks-charts"
EFA_DEVICE_PLUGIN_VERSION: Final = "0.5.20"
"""The version AWS's HyperPod dependencies chart pins; it advertises ``vpc.amazonaws.com/efa``."""

HEALTH_MONITORING_AGENT_NAMESPACE: Final = "aws-hyperpod"
HEALTH_MONITORING_AGENT_TAG: Final = "1.0.935.0_1.0.282.0"
"""Image tag of HyperPod's health-monitoring agent (the default of AWS's dependencies chart)."""
HEALTH_MONITORING_AGENT_REGISTRIES: Final[dict[str, str]] = {
    "us-east-1": "767398015722",
    "us-west-2": "905418368575",
    "us-east-2": "851725546812",
    "us-west-1": "011528288828",
    "eu-central-1": "211125453373",
    "eu-north-1": "654654141839",
    "eu-west-1": "533267293120",
    "eu-west-2": "011528288831",
    "ap-northeast-1": "533267052152",
    "ap-south-1": "011528288864",
    "ap-southeast-1": "905418428165",
    "ap-southeast-2": "851725636348",
    "sa-east-1": "025066253954",
}
"""Account of the regional ECR registry that serves the health-monitoring agent image."""


def pinned_addons() -> tuple[tuple[str, str], ...]:
    """Every EKS add-on version the CDK app installs, as (name, version), for ``--check-pins``."""
    return (
        (VPC_CNI_ADDON, VPC_CNI_VERSION),
        (POD_IDENTITY_AGENT_ADDON, POD_IDENTITY_AGENT_VERSION),
        (CLOUDWATCH_OBSERVABILITY_ADDON, CLOUDWATCH_OBSERVABILITY_VERSION),
        *((dependency.name, dependency.pinned) for dependency in DEPENDENCY_ADDONS),
        (AWS_ADDON_NAME, ADDON_VERSION),
    )
