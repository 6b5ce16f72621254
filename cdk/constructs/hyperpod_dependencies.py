"""What HyperPod GPU nodes need before a model pod can be scheduled on them: the parts of AWS's
HyperPod dependencies chart that serve inference, installed from their public sources.

- the NVIDIA device plugin (its Helm chart), so nodes advertise ``nvidia.com/gpu``;
- the EFA device plugin (its Helm chart from eks-charts), so nodes advertise ``vpc.amazonaws.com/efa``;
- HyperPod's health-monitoring agent (a DaemonSet of AWS's regional image), which reports GPU and
  network faults as node labels and feeds HyperPod's automatic node recovery.

Deep health checks are not a workload: HyperPod runs them when an instance group lists
``deepHealthChecks`` (the cluster stack sets ``OnStartDeepHealthChecks``).

Every workload here runs only on HyperPod nodes (they carry ``sagemaker.amazonaws.com/node-health-
status``) and tolerates their taints. The NVIDIA plugin's own default affinity expects labels from
Node Feature Discovery, which HyperPod nodes lack, so it is replaced.
"""

from __future__ import annotations

from typing import Any, Final

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from cdk.config import HyperPodDependenciesConfig
from igw.addon import pins
from igw.operator.placement import HYPERPOD_NODE_LABEL

HEALTH_AGENT: Final = "health-monitoring-agent"

HYPERPOD_NODES: Final[dict[str, Any]] = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": HYPERPOD_NODE_LABEL, "operator": "Exists"}]}]
        }
    }
}
TOLERATE_ALL: Final[list[dict[str, str]]] = [
    {"operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists", "effect": "NoExecute"},
]


def health_agent_image(region: str) -> str:
    """The agent's image in the regional registry AWS serves it from."""
    account = pins.HEALTH_MONITORING_AGENT_REGISTRIES.get(region)
    if account is None:
        raise ValueError(
            f"HyperPod's health-monitoring agent is not published in {region}; set "
            f"platform.hyperpodDependencies.healthMonitoringAgent: false"
        )
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return (
        f"{account}.dkr.ecr.{region}.{suffix}/hyperpod-health-monitoring-agent:"
        f"{pins.HEALTH_MONITORING_AGENT_TAG}"
    )


def health_agent_manifests(region: str) -> list[dict[str, Any]]:
    """Namespace, service account, RBAC (read nodes, patch their status, write events) and DaemonSet."""
    namespace = pins.HEALTH_MONITORING_AGENT_NAMESPACE
    labels = {"app.kubernetes.io/name": HEALTH_AGENT}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": HEALTH_AGENT, "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": HEALTH_AGENT},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["patch"]},
                {
                    "apiGroups": ["", "events.k8s.io"],
                    "resources": ["events"],
                    "verbs": ["create", "patch", "update"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": HEALTH_AGENT},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": HEALTH_AGENT},
            "subjects": [{"kind": "ServiceAccount", "name": HEALTH_AGENT, "namespace": namespace}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": HEALTH_AGENT, "namespace": namespace, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": HEALTH_AGENT,
                        "affinity": HYPERPOD_NODES,
                        "tolerations": TOLERATE_ALL,
                        "containers": [
                            {
                                "name": HEALTH_AGENT,
                                "image": health_agent_image(region),
                                "resources": {
                                    "requests": {"cpu": "500m", "memory": "512Mi"},
                                    "limits": {"cpu": "500m", "memory": "512Mi"},
                                },
                                "securityContext": {"runAsUser": 1000, "runAsGroup": 2000},
                                "env": [
                                    {
                                        "name": "NODE_NAME",
                                        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                    },
                                    {
                                        "name": "NODE_IP",
                                        "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}},
                                    },
                                ],
                                # The agent reads kernel and system logs to detect faults.
                                "volumeMounts": [
                                    {"name": "log", "mountPath": "/var/log"},
                                    {"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True},
                                    {"name": "localtime", "mountPath": "/etc/localtime", "readOnly": True},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "log", "hostPath": {"path": "/var/log/"}},
                            {"name": "kmsg", "hostPath": {"path": "/dev/kmsg"}},
                            {"name": "localtime", "hostPath": {"path": "/etc/localtime"}},
                        ],
                    },
                },
            },
        },
    ]


class HyperPodDependencies(Construct):
    """Exposes ``charts`` (name -> ``HelmChart``) and ``health_agent`` (or ``None``)."""

    def __init__(
        self, scope: Construct, id_: str, *, cluster: eks.ICluster, config: HyperPodDependenciesConfig
    ) -> None:
        super().__init__(scope, id_)
        self.charts: dict[str, eks.HelmChart] = {}
        plugins = (
            (config.nvidia_device_plugin, "NvidiaDevicePlugin", pins.NVIDIA_DEVICE_PLUGIN_CHART,
             pins.NVIDIA_DEVICE_PLUGIN_REPOSITORY, pins.NVIDIA_DEVICE_PLUGIN_VERSION),
            (config.efa_device_plugin, "EfaDevicePlugin", pins.EFA_DEVICE_PLUGIN_CHART,
             pins.EFA_DEVICE_PLUGIN_REPOSITORY, pins.EFA_DEVICE_PLUGIN_VERSION),
        )  # fmt: skip
        for wanted, construct_id, chart, repository, version in plugins:
            if not wanted:
                continue
            self.charts[chart] = eks.HelmChart(
                self,
                construct_id,
                cluster=cluster,
                chart=chart,
                repository=repository,
                version=version,
                release=chart,
                namespace="kube-system",
                values={"affinity": HYPERPOD_NODES, "tolerations": TOLERATE_ALL},
            )
        self.health_agent: eks.KubernetesManifest | None = None
        if config.health_monitoring_agent:
            self.health_agent = eks.KubernetesManifest(
                self,
                "HealthMonitoringAgent",
                cluster=cluster,
                manifest=health_agent_manifests(cdk.Stack.of(self).region),
                overwrite=True,
            )
