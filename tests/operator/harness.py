"""Helpers for operator tests: a fake cluster with the CRD installed, operators in threads, polling."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import trustme
import yaml

from igw.config.crd import CRD_PATH
from igw.config.inference_extension import OBJECTIVE_KIND, REWRITE_KIND
from igw.config.inference_extension_crds import crd_path
from igw.config.resource_quantities import parse_quantity
from igw.operator.runner import OperatorOptions, run_operator
from tests.fakes.kube_api import FakeKubeApiServer
from tests.fakes.kube_store import StoreError

ROOT = Path(__file__).resolve().parents[2]
IGWC_API = ("inference.sagemaker.aws.amazon.com", "v1alpha1", "inferencegatewayconfigs")
T = TypeVar("T")


def install_crd(kube: FakeKubeApiServer) -> None:
    kube.add(yaml.safe_load((ROOT / CRD_PATH).read_text()))


def install_extension_crds(kube: FakeKubeApiServer) -> None:
    """The InferenceObjective and InferenceModelRewrite CRDs (the operator watches both kinds)."""
    for kind in (OBJECTIVE_KIND, REWRITE_KIND):
        kube.add(yaml.safe_load((ROOT / crd_path(kind)).read_text()))


def crd_document(
    group: str,
    names: dict[str, Any],
    properties: dict[str, Any],
    **version: Any,
) -> dict[str, Any]:
    """A namespaced, single-version (``v1``, served and stored) CustomResourceDefinition whose root
    schema declares ``apiVersion``, ``kind``, ``metadata`` and ``properties``; ``version`` adds fields to
    the version (``subresources``, ``additionalPrinterColumns``)."""
    schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            **properties,
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{names['plural']}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    **version,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


DATA_PLANE_KINDS: Final = {
    "ConfigMap",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "Deployment",
    "Service",
    "PodDisruptionBudget",
    "NetworkPolicy",
}
"""The kinds of a config's data plane the operator writes (an HPA too, with autoscaling)."""


def igwc(
    name: str, namespace: str = "inference", *, model: str = "llama", app: str = "llama"
) -> dict[str, Any]:
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "bbr": {"enabled": True},
            "schedulers": [
                {"name": "main", "modelName": model, "modelSelector": {"matchLabels": {"app": app}}}
            ],
        },
    }


def jwt_provider(uri: str, *, name: str = "idp", audience: str = "inference") -> dict[str, Any]:
    """``spec.auth`` with one JWT provider (issuer ``https://idp.example.com``) whose JWKS is at ``uri``."""
    issuer = "https://idp.example.com"
    return {
        "jwt": {
            "provider": {"name": name, "issuer": issuer, "remoteJWKS": {"uri": uri}, "audiences": [audience]}
        }
    }


def tls_igwc(name: str) -> dict[str, Any]:
    """``name`` asking for an auto-issued certificate (``tls: {}``) for ``<name>.llm.example.com``."""
    obj = igwc(name)
    obj["spec"]["tls"] = {}
    obj["spec"].setdefault("extensions", {})["dataPlane"] = {"hostnames": [f"{name}.llm.example.com"]}
    return obj


def write_tls_secret(
    kube: FakeKubeApiServer, name: str, hostname: str | Sequence[str], *, certificate: str | None = None
) -> str:
    """Play cert-manager: a real certificate (leaf + CA chain) and key in the Certificate's Secret,
    annotated with the Certificate's name as cert-manager annotates it (``certificate``; by default
    the Secret's name without ``-tls``, the operator's naming) and labelled with that Certificate's
    ``spec.secretTemplate.labels`` when it exists, as cert-manager labels it. The leaf covers
    ``hostname`` (one name, or several: a Certificate's ``dnsNames``)."""
    ca = trustme.CA()
    leaf = ca.issue_cert(*([hostname] if isinstance(hostname, str) else hostname))
    chain = b"".join(blob.bytes() for blob in leaf.cert_chain_pems)
    data = {
        "tls.crt": base64.b64encode(chain).decode(),
        "tls.key": base64.b64encode(leaf.private_key_pem.bytes()).decode(),
    }
    current = find(kube, "Secret", "inference", name)
    issued_for = certificate if certificate is not None else name.removesuffix("-tls")
    meta: dict[str, Any] = {"name": name, "namespace": "inference"}
    if issued_for:
        meta["annotations"] = {"cert-manager.io/certificate-name": issued_for}
        issued_by = find(kube, "Certificate", "inference", issued_for) or {}
        labels = ((issued_by.get("spec") or {}).get("secretTemplate") or {}).get("labels")
        if labels:
            meta["labels"] = dict(labels)
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": meta}
    body |= {"type": "kubernetes.io/tls", "data": data}
    if current is None:
        kube.add(body)
    else:
        kube.store.replace(kube.store.kind_for(api_version="v1", kind="Secret"), "inference", name, body)
    return leaf.cert_chain_pems[0].bytes().decode()


def find(kube: FakeKubeApiServer, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    for obj in kube.store.iter_all():
        meta = obj["metadata"]
        if obj["kind"] == kind and meta.get("namespace", "") == namespace and meta["name"] == name:
            return obj
    return None


def owned_by(kube: FakeKubeApiServer, uid: str) -> list[dict[str, Any]]:
    return [
        obj
        for obj in kube.store.iter_all()
        if any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])
    ]


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for entry in ((obj or {}).get("status") or {}).get("conditions") or []:
        if entry["type"] == kind:
            return dict(entry)
    return {}


def wait_for(probe: Callable[[], T | None], *, timeout: float = 30.0, what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy (no wall-clock assertion, only a give-up time)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def wait_condition(
    kube: FakeKubeApiServer,
    name: str,
    kind: str,
    status: str | None = None,
    *,
    namespace: str = "inference",
    timeout: float = 30.0,
) -> dict[str, Any]:
    """The condition ``kind`` of an InferenceGatewayConfig once it exists (and has ``status``, if given)."""

    def probe() -> dict[str, Any] | None:
        found = condition(find(kube, "InferenceGatewayConfig", namespace, name), kind)
        return found if found and (status is None or found.get("status") == status) else None

    return wait_for(probe, timeout=timeout, what=f"{kind}={status or 'any'} on {namespace}/{name}")


def mark_deployment_ready(kube: FakeKubeApiServer, namespace: str, name: str) -> None:
    """Play the Deployment controller: every desired replica updated and ready."""
    kind = kube.store.kind_for(api_version="apps/v1", kind="Deployment")

    def ready(current: dict[str, Any]) -> dict[str, Any]:
        replicas = current["spec"]["replicas"]
        return {
            **current,
            "status": {
                "observedGeneration": current["metadata"]["generation"],
                "replicas": replicas,
                "updatedReplicas": replicas,
                "readyReplicas": replicas,
                "availableReplicas": replicas,
            },
        }

    write_latest(
        kube,
        "Deployment",
        namespace,
        name,
        lambda body: kube.store.replace(kind, namespace, name, ready(body), status_only=True),
    )


def write_latest(
    kube: FakeKubeApiServer,
    kind_name: str,
    namespace: str,
    name: str,
    write: Callable[[dict[str, Any]], object],
) -> None:
    """Read, change, write with the read's resourceVersion, again on 409 Conflict - as ``kubectl edit``
    and every controller do, so a test's write never overwrites what the operator wrote meanwhile."""
    for _ in range(50):
        current = find(kube, kind_name, namespace, name)
        assert current is not None, f"no {kind_name} {namespace}/{name}"
        try:
            write(current)
            return
        except StoreError as exc:
            if exc.code != 409:
                raise
    raise AssertionError(f"{kind_name} {namespace}/{name}: 50 conflicting writes in a row")


def update_spec(
    kube: FakeKubeApiServer,
    namespace: str,
    name: str,
    mutate: Callable[[dict[str, Any]], None],
    *,
    admit_custom: bool = True,
) -> None:
    """Write the InferenceGatewayConfig's spec as ``mutate`` changes it; ``admit_custom=False`` stores a
    spec the CRD refuses (see :meth:`tests.fakes.kube_store.KubeStore.create`)."""
    kind = kube.store.kind_for(
        api_version="inference.sagemaker.aws.amazon.com/v1alpha1", kind="InferenceGatewayConfig"
    )

    def write(current: dict[str, Any]) -> None:
        mutate(current["spec"])
        kube.store.replace(kind, namespace, name, current, admit_custom=admit_custom)

    write_latest(kube, "InferenceGatewayConfig", namespace, name, write)


class OperatorThread:
    """``run_operator`` on its own event loop in a thread; :meth:`stop` ends it and returns its exit code."""

    def __init__(self, options: OperatorOptions) -> None:
        self.options = options
        self.exit_code: int | None = None
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="igw-operator", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> int:
            self._stop = asyncio.Event()
            self._started.set()
            return await run_operator(self.options, stop=self._stop)

        self.exit_code = self._loop.run_until_complete(main())
        self._loop.close()

    def start(self) -> OperatorThread:
        self._thread.start()
        self._started.wait(10)
        return self

    def stop(self) -> int | None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        return self.exit_code


def operator_options(kubeconfig: Path, **overrides: Any) -> OperatorOptions:
    settings: dict[str, Any] = {
        "kubeconfig": str(kubeconfig),
        "resync_s": 0.5,
        "leader_election": False,
        "lease_namespace": "default",
    }
    settings.update(overrides)
    return OperatorOptions(**settings)


@contextlib.contextmanager
def running_operator(kubeconfig: Path, **overrides: Any) -> Iterator[OperatorThread]:
    operator = OperatorThread(operator_options(kubeconfig, **overrides)).start()
    try:
        yield operator
    finally:
        operator.stop()


def kubelet_env(container: dict[str, Any], *, pod_name: str, namespace: str) -> dict[str, str]:
    """The environment the kubelet gives ``container``: plain values, the pod's name and namespace
    (``fieldRef``) and its own requests and limits (``resourceFieldRef``: the quantity divided by the
    divisor, rounded up, as the kubelet does), later entries of a name winning. Processes the tests
    start as a pod's stand-in get it, so ``igw serve --workers auto`` counts the pod's CPU request."""
    fields = {"metadata.name": pod_name, "metadata.namespace": namespace}
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        source = entry.get("valueFrom") or {}
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
        elif "fieldRef" in source:
            env[entry["name"]] = fields[source["fieldRef"]["fieldPath"]]
        elif "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            kind, resource = ref["resource"].split(".", 1)
            quantity = parse_quantity((container.get("resources") or {}).get(kind, {}).get(resource, "0"))
            divisor = parse_quantity(ref.get("divisor", "1"))
            assert quantity is not None, ref
            assert divisor, ref
            env[entry["name"]] = str(math.ceil(quantity / divisor))
    return env


class InUseOnce:
    """moto's ACM, except that the first DeleteCertificate is refused as real ACM refuses one while a
    load balancer listener still uses the certificate (the Load Balancer Controller moves the
    listener to the new ARN after the Service changed, not at once)."""

    def __init__(self, acm: Any) -> None:
        self._acm = acm
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._acm, name)

    def delete_certificate(self, **kwargs: Any) -> Any:
        if not self.refused:
            self.refused += 1
            error = {"Error": {"Code": "ResourceInUseException", "Message": "in use by a listener"}}
            raise self._acm.exceptions.ResourceInUseException(error, "DeleteCertificate")
        return self._acm.delete_certificate(**kwargs)


def add_issuer(
    kube: FakeKubeApiServer,
    kind: str,
    name: str,
    *,
    namespace: str | None = None,
    ready: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Play cert-manager: an ``Issuer`` (in ``namespace``) or ``ClusterIssuer`` ``name`` (self-signed)
    whose ``Ready`` condition is ``ready`` (``{"status": "True"}`` by default, as cert-manager sets it
    on an issuer it can use); replaced when it exists."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    body: dict[str, Any] = {"apiVersion": "cert-manager.io/v1", "kind": kind, "metadata": meta}
    body["spec"] = {"selfSigned": {}}
    store_kind = kube.store.kind_for(api_version="cert-manager.io/v1", kind=kind)
    live = find(kube, kind, namespace or "", name) or kube.add(body)
    live["status"] = {
        "conditions": [{"type": "Ready", "status": "True", "reason": "IsReady"} | (ready or {})]
    }
    return kube.store.replace(store_kind, namespace or "", name, live, status_only=True)
