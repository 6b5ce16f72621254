"""The operator's Kube wrapper used from many worker threads at once, against the fake API server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from igw.operator.kube import FIELD_MANAGER, IGWC_API_VERSION, MISSING_KIND_RETRY_S, Kube, OperatorStopping
from tests.fakes.kube_api import KubeStore, running_fake_kube
from tests.fakes.kube_store import ResourceKind
from tests.operator.harness import install_crd, install_extension_crds

KINDS = [
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "Pod"),
    ("v1", "ServiceAccount"),
    ("policy/v1", "PodDisruptionBudget"),
    (IGWC_API_VERSION, "InferenceGatewayConfig"),
]
MISSING = [("inference.networking.x-k8s.io/v1alpha2", "InferenceModelRewrite"), ("example.com/v1", "Nothing")]
"""Kinds whose CRD is not installed: a miss makes the dynamic client refresh its whole cache."""


@dataclass
class Lookups:
    """Every thread's lookup, started together."""

    kube: Kube
    start: threading.Barrier
    found: list[Any] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def look(self, api_version: str, kind: str) -> None:
        self.start.wait()
        try:
            self.found.append(self.kube._resource(api_version, kind))
        except ResourceNotFoundError:
            self.missing.append(kind)
        except BaseException as exc:  # collected and asserted by the test
            self.errors.append(exc)


def test_resource_lookups_from_many_threads_at_once_all_succeed() -> None:
    """The dynamic client's discovery cache is not thread-safe (a miss rewrites it; concurrent lookups
    raised KeyError('resources') in a reconcile); the wrapper serialises lookups and keeps them."""
    with running_fake_kube() as server:
        install_crd(server)
        jobs = KINDS * 2 + MISSING * 3
        for _ in range(5):  # a fresh wrapper each round: the cold cache is where the race was
            run = Lookups(Kube(server.api_client()), threading.Barrier(len(jobs)))
            threads = [threading.Thread(target=run.look, args=job) for job in jobs]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert run.errors == []
            assert sorted(run.missing) == sorted([k for _, k in MISSING] * 3)
            assert {(r.api_version, r.kind) for r in run.found} == {(v.split("/")[-1], k) for v, k in KINDS}
            assert len(run.found) == len(KINDS) * 2
            assert run.kube._resource("apps/v1", "Deployment") is run.kube._resource("apps/v1", "Deployment")


def test_a_kind_not_served_is_not_rediscovered_on_every_call_until_it_may_be_installed() -> None:
    """A miss made the dynamic client read all of discovery again (``/version``, ``/api``, ``/apis``)
    under the lock every call waits on, and each pass missed twice where the InferenceObjective and
    InferenceModelRewrite CRDs are not installed. The miss is remembered for a while; a CRD installed
    after that is used."""
    clock = [0.0]
    with running_fake_kube() as server:
        install_crd(server)
        kube = Kube(server.api_client(), monotonic=lambda: clock[0])
        objectives = ("inference.networking.x-k8s.io/v1alpha2", "InferenceObjective")
        with pytest.raises(ResourceNotFoundError):
            kube._resource(*objectives)
        since = len(server.requests)
        for _ in range(5):
            with pytest.raises(ResourceNotFoundError):
                asyncio.run(kube.list(*objectives, "inference"))
        assert server.requests[since:] == []
        install_extension_crds(server)
        clock[0] += MISSING_KIND_RETRY_S
        assert asyncio.run(kube.list(*objectives, "inference")) == []


def _config_map(text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "chat-gateway-config", "namespace": "inference", "labels": {"app": "igw"}},
        "data": {"config.yaml": text},
    }


def _edit(store: KubeStore, edit: Callable[[dict[str, Any]], None]) -> None:
    kind = store.kind_for(api_version="v1", kind="ConfigMap")
    stored = store.get(kind, "inference", "chat-gateway-config")
    edit(stored)
    stored["metadata"].pop("resourceVersion")
    store.replace(kind, "inference", "chat-gateway-config", stored)


def _served(store: KubeStore) -> str:
    kind = store.kind_for(api_version="v1", kind="ConfigMap")
    return str(store.get(kind, "inference", "chat-gateway-config")["data"]["config.yaml"])


def test_apply_puts_back_an_edited_field_and_ignores_fields_others_add() -> None:
    """``kubectl edit`` of a field the operator writes keeps the applied-hash annotation: the hash
    alone never noticed it, and an edited ConfigMap (say, with ``spec.auth`` removed) was served for
    good while the object's status said all was well."""
    wanted = _config_map("spec: {auth: {jwt: {}}}\n")
    with running_fake_kube() as server:
        kube = Kube(server.api_client())
        assert kube._apply(wanted) is True
        assert kube._apply(wanted) is False

        def add_fields(obj: dict[str, Any]) -> None:
            obj["metadata"]["labels"]["team"] = "ml"
            obj["metadata"]["annotations"]["note"] = "added by someone else"
            obj["data"]["notes.txt"] = "not read by the gateway"

        _edit(server.store, add_fields)
        assert kube._apply(wanted) is False

        def strip_auth(obj: dict[str, Any]) -> None:
            obj["data"]["config.yaml"] = "spec: {}\n"

        _edit(server.store, strip_auth)
        assert kube._apply(wanted) is True
        assert _served(server.store) == "spec: {auth: {jwt: {}}}\n"
        assert kube._apply(wanted) is False


def test_the_operators_writes_are_filed_under_its_own_field_manager() -> None:
    """The API server files a write that names no ``fieldManager`` under its User-Agent's first
    segment: every object the operator wrote listed ``OpenAPI-Generator`` in its ``managedFields``,
    and a ``kubectl apply --server-side`` over a field the operator sets was refused with a conflict
    naming ``"OpenAPI-Generator"``, as any script using the Python client would be named."""
    igwc = {"apiVersion": IGWC_API_VERSION, "kind": "InferenceGatewayConfig"}
    with running_fake_kube() as server:
        install_crd(server)
        stored = server.add(
            {**igwc, "metadata": {"name": "chat", "namespace": "inference"}, "spec": {"schedulers": []}},
            admit_custom=False,
        )
        kube = Kube(server.api_client())
        assert kube._apply(_config_map("spec: {}\n")) is True
        kube._write_status(stored, {"observedGeneration": 1}, IGWC_API_VERSION, "InferenceGatewayConfig")
        kube._event(stored, reason="Applied", message="m", warning=False)
        written = [
            server.store.get(server.store.kind_for(api_version="v1", kind="ConfigMap"), "inference", name)
            for name in ("chat-gateway-config",)
        ]
        written.append(
            server.store.get(
                server.store.kind_for(api_version=IGWC_API_VERSION, kind=igwc["kind"]), "inference", "chat"
            )
        )
        events, _ = server.store.list(server.store.kind_for(api_version="v1", kind="Event"), "inference")
        managers = {
            (entry["manager"], entry.get("subresource", ""))
            for obj in [*written, *events]
            for entry in obj["metadata"]["managedFields"]
        }
        assert managers == {(FIELD_MANAGER, ""), (FIELD_MANAGER, "status")}
        assert FIELD_MANAGER == "igw-operator"


class _NormalisingStore(KubeStore):
    """Stores ``data.size`` in its own canonical form, as the API server stores quantities."""

    def create(
        self, kind: ResourceKind, namespace: str, obj: Mapping[str, Any], **options: Any
    ) -> dict[str, Any]:
        body = dict(obj)
        if "size" in (body.get("data") or {}):
            body["data"] = {**body["data"], "size": "500m"}
        return super().create(kind, namespace, body, **options)


def test_a_value_the_server_stores_in_its_own_form_is_not_rewritten_on_every_pass() -> None:
    wanted = {**_config_map("spec: {}\n"), "data": {"config.yaml": "spec: {}\n", "size": "0.5"}}
    with running_fake_kube(store=_NormalisingStore()) as server:
        kube = Kube(server.api_client())
        assert kube._apply(wanted) is True
        assert kube._apply(wanted) is False
        _edit(server.store, lambda obj: obj["data"].update({"size": "2"}))
        assert kube._apply(wanted) is True


def test_quiesce_waits_for_a_call_its_cancelled_pass_left_running_then_refuses_new_ones() -> None:
    """Stopping cancels the passes, but a blocking call already in its worker thread runs on: the
    runner must not give the Lease up before it ends, nor let a new call start after."""
    gate = threading.Event()
    with running_fake_kube() as server:
        kube = Kube(server.api_client())

        async def main() -> tuple[bool, bool]:
            running = asyncio.ensure_future(kube._in_thread(gate.wait, 10))
            await asyncio.sleep(0.2)
            running.cancel()  # as kopf's stop cancels a handler: the thread goes on
            busy = await asyncio.to_thread(kube.quiesce, 0.3)
            gate.set()
            idle = await asyncio.to_thread(kube.quiesce, 5)
            with pytest.raises(OperatorStopping):
                await kube.get("v1", "ConfigMap", "default", "any")
            return busy, idle

        assert asyncio.run(main()) == (False, True)
