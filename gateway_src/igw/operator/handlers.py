"""The kopf side of the operator: which events run a reconciliation pass, and kopf's own settings.

kopf watches InferenceGatewayConfig objects (list + watch with bookmarks, re-listing after 410 Gone)
and calls :meth:`~igw.operator.reconcile.Reconciler.reconcile` on create, on spec/label/annotation
changes, when the operator (re)starts, and every ``resync_s`` from a timer - the timer keeps the
status current as pods and rollouts change and puts back data-plane objects someone deleted. Every
event of an InferenceObjective or InferenceModelRewrite re-runs the pass of the config it binds to.

kopf keeps its own bookkeeping in annotations under ``operator.igw.dev/`` (the CRD's status is a
closed schema, so kopf's default ``status.kopf`` stanza would be pruned), posts no Events of its
own (the reconciler posts one per condition transition) and registers no deletion handler: the
data plane is removed by owner references, so no finalizer blocks ``kubectl delete``. The one thing
outside the cluster, an ACM certificate imported for ``spec.tls: {}``, is deleted when the watch
reports the object DELETED (its last status names the ARN); an object deleted while no operator
runs leaves that certificate behind, found by its ``igw.dev/inference-gateway-config-uid`` tag.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import kopf

from igw.config.crd import PLURAL
from igw.config.inference_extension import GROUP as EXTENSION_GROUP
from igw.config.inference_extension import VERSION as EXTENSION_VERSION
from igw.config.inference_extension_crds import PLURALS as EXTENSION_PLURALS
from igw.config.model import API_GROUP, API_VERSION
from igw.operator.bindings import pool_name
from igw.operator.reconcile import Reconciler

KOPF_PREFIX: Final = "operator.igw.dev"


@dataclass(frozen=True, slots=True)
class Connection:
    """How kopf reaches the API server (from the same kubeconfig or pod account as the reconciler)."""

    server: str
    token: str | None = None
    ca_path: str | None = None
    certificate_path: str | None = None
    private_key_path: str | None = None
    insecure: bool = False


def build_settings() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.posting.enabled = False
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 90
    settings.networking.request_timeout = 30
    return settings


def build_registry(
    reconciler: Reconciler, connect: Callable[[], Connection], *, resync_s: float
) -> kopf.OperatorRegistry:
    """A private registry (several operators can run in one process, as the tests do).

    ``connect`` is asked again whenever kopf logs in anew (after a 401), so a rotated service-account
    token is picked up.
    """
    registry = kopf.OperatorRegistry()
    resource = (API_GROUP, API_VERSION, PLURAL)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        connection = connect()
        return kopf.ConnectionInfo(
            server=connection.server,
            token=connection.token,
            scheme="Bearer" if connection.token else None,
            ca_path=connection.ca_path,
            certificate_path=connection.certificate_path,
            private_key_path=connection.private_key_path,
            insecure=connection.insecure or None,
        )

    async def reconcile(namespace: str | None, name: str | None, **_: Any) -> None:
        if namespace and name:
            await reconciler.reconcile(namespace, name)

    kopf.on.resume(*resource, registry=registry, id="reconcile-on-resume")(reconcile)
    kopf.on.create(*resource, registry=registry, id="reconcile-on-create")(reconcile)
    kopf.on.update(*resource, registry=registry, id="reconcile-on-update")(reconcile)

    @kopf.on.event(*resource, registry=registry, id="forget-on-delete")
    async def forget(event: Mapping[str, Any], **_: Any) -> None:
        if event.get("type") == "DELETED":
            await reconciler.forget(event.get("object") or {})

    kopf.timer(*resource, registry=registry, id="resync", interval=resync_s, initial_delay=resync_s)(
        reconcile
    )

    # InferenceObjective / InferenceModelRewrite: any change (deletion included) re-runs the pass of
    # the config they bind to, which merges them and writes their conditions.
    async def rebind(event: Mapping[str, Any], **_: Any) -> None:
        obj = event.get("object") or {}
        namespace, pool = (obj.get("metadata") or {}).get("namespace"), pool_name(obj)
        if event.get("type") == "DELETED":  # its config's next pass leaves it out
            if namespace and pool:
                await reconciler.reconcile(str(namespace), pool)
            return
        await reconciler.reconcile_bound(obj)

    for kind, plural in EXTENSION_PLURALS.items():
        kopf.on.event(EXTENSION_GROUP, EXTENSION_VERSION, plural, registry=registry, id=f"rebind-{kind}")(
            rebind
        )
    return registry
