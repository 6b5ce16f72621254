"""Every version and fixed name the add-on and its infrastructure depend on, pinned in one place.

The CDK app (``cdk/``), the ``igw addon`` command and the chart generator all read these constants,
so a version bump is a one-line change here and every consumer (and its tests) follows.

Sources: the SageMaker HyperPod inference set-up guide and release notes (add-on name, namespace,
dependency minimums), aws-cdk-lib's ``aws_eks.KubernetesVersion`` (Kubernetes versions), the EKS
community add-ons page (cert-manager) and the AWS Load Balancer Controller's Helm chart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import igw

ADDON_NAME: Final = "amazon-sagemaker-hyperpod-inference"
"""The EKS add-on whose gateway we re-implement; ``create-addon --addon-name`` takes this."""

ADDON_NAMESPACE: Final = "hyperpod-inference-system"
"""Where the add-on installs (fixed across add-on versions, as EKS requires)."""

ADDON_MINIMUM_VERSION: Final = "v2.0.0-eksbuild.2"
"""The first add-on version that ships the inference gateway."""

ADDON_VERSION: Final = "v2.0.0-eksbuild.2"
"""The version the CDK app installs; never below :data:`ADDON_MINIMUM_VERSION`."""

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

KUBERNETES_VERSION: Final = "1.34"
"""EKS version of the cluster; HyperPod supports 1.28–1.34 and aws-cdk-lib's kubectl layer matches it."""

SUPPORTED_KUBERNETES_VERSIONS: Final = ("1.31", "1.32", "1.33", "1.34")
"""Versions the chart is rendered and validated against (the EKS add-on rule: every supported one)."""

LOAD_BALANCER_CONTROLLER_CHART: Final = "aws-load-balancer-controller"
LOAD_BALANCER_CONTROLLER_REPOSITORY: Final = "https://aws.github.io/eks-charts"
LOAD_BALANCER_CONTROLLER_CHART_VERSION: Final = "1.13.2"
"""Chart 1.13.2 ships controller v2.13.2, the pair the HyperPod operator chart pins."""
LOAD_BALANCER_CONTROLLER_NAMESPACE: Final = "kube-system"
LOAD_BALANCER_CONTROLLER_SERVICE_ACCOUNT: Final = "aws-load-balancer-controller"

VPC_CNI_ADDON: Final = "vpc-cni"
VPC_CNI_MINIMUM_VERSION: Final = "v1.18.3-eksbuild.1"
"""HyperPod with EKS orchestration supports only the VPC CNI, from 1.18.3."""
VPC_CNI_VERSION: Final = "v1.19.2-eksbuild.1"

POD_IDENTITY_AGENT_ADDON: Final = "eks-pod-identity-agent"
POD_IDENTITY_AGENT_VERSION: Final = "v1.3.8-eksbuild.2"


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
