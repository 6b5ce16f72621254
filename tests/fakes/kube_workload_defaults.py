"""The defaults kube-apiserver fills in on every write of a Pod or an apps/v1 workload.

``pkg/apis/core/v1/defaults.go`` and ``pkg/apis/apps/v1/defaults.go``: what a client reads back (and
``kubectl diff`` or a server dry-run shows) carries these though nobody sent them. Without them the
fake answered objects as sent, so a controller comparing its desired spec with the stored one, or a
test of ``kubectl diff`` output, passed here and saw drift on a cluster. The common ones are filled:
a pod spec's ``dnsPolicy``, ``restartPolicy``, ``schedulerName``, ``securityContext``,
``terminationGracePeriodSeconds``; each container's ``imagePullPolicy`` (``Always`` for ``:latest``
or no tag, else ``IfNotPresent``), ``terminationMessagePath``/``Policy``, ``resources``, each port's
``protocol``, each probe's timings, each ``fieldRef``'s ``apiVersion``; volume ``defaultMode`` s;
and the workloads' ``replicas``, rollout strategy and ``revisionHistoryLimit`` (batch kinds are left
as sent here: :mod:`tests.fakes.kube_jobs` defaults Jobs).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

_PROBE_DEFAULTS: Final = {
    "timeoutSeconds": 1,
    "periodSeconds": 10,
    "successThreshold": 1,
    "failureThreshold": 3,
}
_DEFAULT_MODE: Final = 420  # 0644
_VOLUME_SOURCES: Final = frozenset(
    {
        "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs",
        "iscsi", "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker",
        "downwardAPI", "fc", "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk",
        "photonPersistentDisk", "projected", "portworxVolume", "scaleIO", "storageos", "csi",
        "ephemeral", "image",
    }
)  # fmt: skip


def image_tag(image: str) -> str:
    """The tag ``parsers.ParseImageName`` reads from an image reference: ``latest`` when there is
    neither a tag nor a digest, ``""`` for a digest alone."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        return last.rsplit(":", 1)[1]
    return "" if digest else "latest"


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    return (item for item in value if isinstance(item, dict)) if isinstance(value, list) else iter(())


def _default_container(container: dict[str, Any]) -> None:
    if not container.get("imagePullPolicy"):
        tag = image_tag(str(container.get("image") or ""))
        container["imagePullPolicy"] = "Always" if tag == "latest" else "IfNotPresent"
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for port in _dicts(container.get("ports")):
        port.setdefault("protocol", "TCP")
    for env in _dicts(container.get("env")):
        field_ref = (env.get("valueFrom") or {}).get("fieldRef")
        if isinstance(field_ref, dict):
            field_ref.setdefault("apiVersion", "v1")
    for probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(probe_name)
        if isinstance(probe, dict):
            for key, value in _PROBE_DEFAULTS.items():
                probe.setdefault(key, value)
            http_get = probe.get("httpGet")
            if isinstance(http_get, dict):
                http_get.setdefault("path", "/")
                http_get.setdefault("scheme", "HTTP")


def _default_volume(volume: dict[str, Any]) -> None:
    if not any(key in volume for key in _VOLUME_SOURCES):
        volume["emptyDir"] = {}
    for source in ("configMap", "secret", "projected", "downwardAPI"):
        spec = volume.get(source)
        if isinstance(spec, dict):
            spec.setdefault("defaultMode", _DEFAULT_MODE)


def default_pod_spec(spec: dict[str, Any]) -> None:
    """``SetDefaults_PodSpec`` and the defaults of its containers and volumes, in place."""
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    for key in ("initContainers", "containers"):
        for container in _dicts(spec.get(key)):
            _default_container(container)
    for volume in _dicts(spec.get("volumes")):
        _default_volume(volume)


def default_pod(spec: dict[str, Any]) -> None:
    """A Pod's spec: the pod spec defaults, and ``SetDefaults_Pod``'s ``enableServiceLinks``."""
    default_pod_spec(spec)
    spec.setdefault("enableServiceLinks", True)


def _rolling_update(spec: dict[str, Any], field: str, defaults: dict[str, Any]) -> None:
    strategy = spec.setdefault(field, {})
    if not isinstance(strategy, dict):
        return
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        if isinstance(rolling, dict):
            for key, value in defaults.items():
                rolling.setdefault(key, value)


def default_workload(plural: str, spec: dict[str, Any]) -> None:
    """An apps/v1 workload's spec defaults (``SetDefaults_Deployment`` and its kin) and its pod
    template's; other kinds are left alone."""
    if plural not in ("deployments", "statefulsets", "daemonsets", "replicasets"):
        return
    if plural != "daemonsets" and spec.get("replicas") is None:
        spec["replicas"] = 1
    if plural != "replicasets":
        spec.setdefault("revisionHistoryLimit", 10)
    if plural == "deployments":
        _rolling_update(spec, "strategy", {"maxUnavailable": "25%", "maxSurge": "25%"})
        spec.setdefault("progressDeadlineSeconds", 600)
    elif plural == "statefulsets":
        _rolling_update(spec, "updateStrategy", {"partition": 0})
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault(
            "persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"}
        )
    elif plural == "daemonsets":
        _rolling_update(spec, "updateStrategy", {"maxUnavailable": 1, "maxSurge": 0})
    template_spec = (spec.get("template") or {}).get("spec")
    if isinstance(template_spec, dict):
        default_pod_spec(template_spec)
