"""A namespace being deleted: the fake API server's NamespaceLifecycle, and what the operator does.

Deleting a namespace leaves it ``Terminating`` until the namespace controller has deleted what is in it;
meanwhile the API server refuses to create anything there (403 with a ``NamespaceTerminating``
cause) but lets existing objects be updated. An InferenceGatewayConfig's pass in that window found a
data-plane object missing (the namespace controller deletes in no particular order, or someone
deleted it) and reported ``ApplyFailed`` with a WARNING at every resync (every 5 s) until the
namespace was gone, plus a WARNING per refused Event carrying the API server's whole JSON answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from igw.operator.dataplane import DataPlaneSettings
from igw.operator.handlers import Resync
from igw.operator.kube import IGWC_API_VERSION, Kube
from igw.operator.reconcile import Reconciler
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import condition, find, igwc, running_operator, wait_condition, wait_for

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "inference"}}


def _config_map(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "inference"}}


def test_the_fake_refuses_creating_in_a_namespace_being_deleted_as_the_api_server_does(
    cluster: FakeKubeApiServer,
) -> None:
    """Real client, real answers: Active with the ``kubernetes`` finalizer when made; Terminating once
    deleted; a create there (dry run too) refused 403 with the NamespaceLifecycle message and cause;
    an update allowed; gone once the namespace controller has emptied it; kube-system undeletable."""
    core: Any = kubernetes.client.CoreV1Api(cluster.api_client())
    made = core.create_namespace(NAMESPACE)
    assert (made.spec.finalizers, made.status.phase) == (["kubernetes"], "Active")
    core.create_namespaced_config_map("inference", _config_map("kept"))
    core.delete_namespace("inference")
    marked = core.read_namespace("inference")
    assert marked.status.phase == "Terminating"
    assert marked.metadata.deletion_timestamp is not None

    for dry_run in ("All", None):
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_config_map("inference", _config_map("new"), dry_run=dry_run)
        assert refused.value.status == 403
        status = json.loads(str(refused.value.body))
        assert status["reason"] == "Forbidden"
        assert status["message"] == (
            'configmaps "new" is forbidden: unable to create new content in namespace inference '
            "because it is being terminated"
        )
        assert status["details"]["causes"] == [
            {
                "reason": "NamespaceTerminating",
                "message": "namespace inference is being terminated",
                "field": "metadata.namespace",
            }
        ]
    core.patch_namespaced_config_map("kept", "inference", {"data": {"a": "b"}})  # updates still pass
    core.create_namespaced_config_map("elsewhere", {**_config_map("x"), "metadata": {"name": "x"}})

    assert cluster.store.finalize_namespace("inference") is True
    assert find(cluster, "ConfigMap", "inference", "kept") is None
    with pytest.raises(ApiException) as gone:
        core.read_namespace("inference")
    assert gone.value.status == 404

    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    with pytest.raises(ApiException) as immortal:
        core.delete_namespace("kube-system")
    assert immortal.value.status == 403
    assert "this namespace may not be deleted" in str(immortal.value.body)


def test_a_config_in_a_namespace_being_deleted_reports_it_once_and_writes_nothing(
    cluster: FakeKubeApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The namespace controller deleted the ConfigMap first; the config is still there. Each pass is
    refused in its dry run: the status says ``NamespaceTerminating`` (not a fault to chase), the log
    says it once at INFO (no WARNING per resync, none per refused Event), nothing is half-written (the
    objects still there keep their resourceVersion); once the namespace is emptied the operator
    forgets the config without an error."""
    cluster.add(NAMESPACE)
    caplog.set_level(logging.DEBUG, logger="igw.operator")
    with running_operator(kubeconfig, resync_s=0.2):
        cluster.add(igwc("chat"))
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        namespace_kind = cluster.store.kind_for(api_version="v1", kind="Namespace")
        cluster.store.delete(namespace_kind, "", "inference")
        before = {
            kind: find(cluster, kind, "inference", "chat-gateway")["metadata"]["resourceVersion"]  # type: ignore[index]
            for kind in ("Deployment", "Service", "ServiceAccount")
        }
        cluster.store.delete(
            cluster.store.kind_for(api_version="v1", kind="ConfigMap"), "inference", "chat-gateway-config"
        )
        programmed = wait_condition(cluster, "chat", "GatewayProgrammed", "False")
        wait_for(
            lambda: wait_condition(cluster, "chat", "GatewayProgrammed")["reason"] == "NamespaceTerminating",
            what="GatewayProgrammed=False NamespaceTerminating",
        )
        programmed = wait_condition(cluster, "chat", "GatewayProgrammed")
        assert "namespace inference is being deleted" in programmed["message"]
        assert "ConfigMap inference/chat-gateway-config" in programmed["message"]
        time.sleep(1.5)  # several resync passes
        after = {
            kind: find(cluster, kind, "inference", "chat-gateway")["metadata"]["resourceVersion"]  # type: ignore[index]
            for kind in ("Deployment", "Service", "ServiceAccount")
        }
        assert after == before
        assert find(cluster, "ConfigMap", "inference", "chat-gateway-config") is None
        assert cluster.store.finalize_namespace("inference") is True
        time.sleep(1.0)
    said = [r for r in caplog.records if "is being deleted" in r.getMessage()]
    assert [r.levelno for r in said[:1]] == [logging.INFO]
    assert all(r.levelno == logging.DEBUG for r in said[1:])
    assert len(said) >= 3, "the pass ran several times"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [w for w in warnings if "inference/chat" in w], warnings
    assert find(cluster, "InferenceGatewayConfig", "inference", "chat") is None


def test_a_config_deleted_while_its_pass_runs_ends_the_pass_quietly(
    cluster: FakeKubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The object goes (``kubectl delete``, or its namespace's deletion) between the pass's read and
    its status write: the write's 404 ended the pass in a ``NotFoundError`` (the resync logged an
    ERROR carrying the client's traceback text; kopf retried the handler)."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    kind = cluster.store.kind_for(api_version=IGWC_API_VERSION, kind="InferenceGatewayConfig")

    def delete_config_once(operation: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> None:
        if find(cluster, "InferenceGatewayConfig", "inference", "chat") is not None:
            cluster.store.delete(kind, "inference", "chat")
        return None

    cluster.add_validating_webhook("deleter", ["configmaps"], delete_config_once)
    with caplog.at_level(logging.WARNING, logger="igw.operator"):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert find(cluster, "InferenceGatewayConfig", "inference", "chat") is None
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def test_a_namespace_deleted_between_the_dry_run_and_the_writes_is_reported_namespace_terminating(
    cluster: FakeKubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The namespace goes Terminating after every object passed its dry run, while the real writes
    run: the first create after that is refused 403 ``NamespaceTerminating``. The pass reported
    ``ApplyFailed`` (``PartlyApplied: ...``) with a WARNING, where the same refusal one request earlier
    is ``NamespaceTerminating`` at INFO: not a fault to chase, the namespace's deletion clears it up."""
    cluster.add(NAMESPACE)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    namespace_kind = cluster.store.kind_for(api_version="v1", kind="Namespace")
    written: list[str] = []

    def delete_namespace_after_first_write(
        operation: str, kind: Any, obj: Mapping[str, Any], old: Mapping[str, Any] | None, dry_run: bool
    ) -> None:
        # the config's own write (the last-admitted annotation, ahead of the apply) is not the data plane's
        if not dry_run and not written and kind.plural not in ("namespaces", "inferencegatewayconfigs"):
            written.append(f"{kind.kind} {obj['metadata']['name']}")
            cluster.store.delete(namespace_kind, "", "inference")

    cluster.store.validators.append(delete_namespace_after_first_write)
    with caplog.at_level(logging.INFO, logger="igw.operator"):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert written == ["ConfigMap chat-gateway-config"]
    programmed = wait_condition(cluster, "chat", "GatewayProgrammed", "False")
    assert programmed["reason"] == "NamespaceTerminating", programmed
    assert "namespace inference is being deleted" in programmed["message"]
    assert "written ConfigMap inference/chat-gateway-config" in programmed["message"]
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.levelno for r in caplog.records if "is being deleted" in r.getMessage()] == [logging.INFO]


def test_a_pass_of_a_config_the_watch_shows_being_deleted_writes_nothing_more(
    cluster: FakeKubeApiServer,
) -> None:
    """The config is marked for deletion (its namespace is being deleted) after its pass read it, and
    the watch says so (:meth:`Reconciler.leaving`): the pass applies, writes and posts nothing more.
    Deleting a namespace of 50 configs, the passes that had read them went on: 44 status writes and
    ~600 reads about objects the namespace controller was removing."""
    cluster.add(NAMESPACE)
    kube = Kube(cluster.api_client())
    reconciler = Reconciler(kube, DataPlaneSettings())
    held = igwc("chat")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    cluster.add(held)
    kind = cluster.store.kind_for(api_version=IGWC_API_VERSION, kind="InferenceGatewayConfig")
    listed = kube.list
    marked: list[int] = []

    async def list_then_delete(
        api_version: str, kind_name: str, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        found = await listed(api_version, kind_name, namespace, label_selector=label_selector)
        if kind_name == "InferenceGatewayConfig" and not marked:
            cluster.store.delete(kind, "inference", "chat")  # held by its finalizer: marked only
            reconciler.leaving(find(cluster, "InferenceGatewayConfig", "inference", "chat") or {})
            marked.append(len(cluster.requests))
        return found

    kube.list = list_then_delete  # type: ignore[method-assign,assignment]
    asyncio.run(reconciler.reconcile("inference", "chat"))
    assert marked, "the pass listed its namespace's configs"
    writes = [(method, path) for method, path, _ in cluster.requests[marked[0] :] if method != "GET"]
    assert writes == []
    assert find(cluster, "Deployment", "inference", "chat-gateway") is None
    assert "status" not in (find(cluster, "InferenceGatewayConfig", "inference", "chat") or {})


def _verbs(requests: list[tuple[str, str, dict[str, str]]]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for method, _, _ in requests:
        counted[method] = counted.get(method, 0) + 1
    return counted


def _config_reads(requests: list[tuple[str, str, dict[str, str]]]) -> int:
    return sum(method == "GET" and "/inferencegatewayconfigs/" in path for method, path, _ in requests)


CONFIGS = 30


def test_deleting_a_namespace_of_many_configs_costs_about_one_read_per_config_and_pass(
    cluster: FakeKubeApiServer,
) -> None:
    """The namespace controller deletes a Terminating namespace's content kind by kind (the ConfigMaps
    first here; the configs, holding no finalizer, last), so resyncs pass configs whose data plane is
    half gone. Each pass of each config read every data-plane object, dry-ran the missing ones (all
    refused ``NamespaceTerminating``) and read the Deployment and Service again: ~12 GETs per config
    and resync (50 configs: ~600 GETs a resync, for objects the namespace controller was removing).
    Once a pass was refused so, the other configs the namespace held then are known to go with it:
    each pass of one reads the config, reports ``NamespaceTerminating`` once, and stops; passes already
    running stop before their next request, as the mark is set at the refusal, not when its pass ends."""
    cluster.add(NAMESPACE)
    # passes already reading a data plane when the first refusal comes read on to their next request:
    # as many at once as the API threads
    reconciler = Reconciler(Kube(cluster.api_client(), threads=4), DataPlaneSettings())
    resync = Resync(reconciler, interval_s=60)
    for i in range(CONFIGS):
        obj = cluster.add(igwc(f"c{i}", model=f"m{i}", app=f"a{i}"))
        resync.saw("ADDED", obj)
    asyncio.run(resync.pass_all())
    for i in range(CONFIGS):  # every data plane made before the namespace goes
        programmed = condition(
            find(cluster, "InferenceGatewayConfig", "inference", f"c{i}"), "GatewayProgrammed"
        )
        assert (programmed["status"], programmed["reason"]) == ("True", "Programmed"), (i, programmed)
    store = cluster.store
    store.delete(store.kind_for(api_version="v1", kind="Namespace"), "", "inference")
    config_maps = store.kind_for(api_version="v1", kind="ConfigMap")
    for i in range(CONFIGS):  # the namespace controller's first kind
        store.delete(config_maps, "inference", f"c{i}-gateway-config")

    since = len(cluster.requests)
    asyncio.run(resync.pass_all())
    first = cluster.requests[since:]
    since = len(cluster.requests)
    asyncio.run(resync.pass_all())
    second = cluster.requests[since:]

    for i in range(CONFIGS):
        programmed = condition(
            find(cluster, "InferenceGatewayConfig", "inference", f"c{i}"), "GatewayProgrammed"
        )
        assert (programmed["status"], programmed["reason"]) == ("False", "NamespaceTerminating"), (
            i,
            programmed,
        )
        assert "namespace inference is being deleted" in programmed["message"]
    assert _config_reads(first) == CONFIGS
    # one read of each config, and the reads of the passes already planning in the API threads when
    # the first dry run is refused (up to 9 each: their plans' reads; ~35 in all, whatever CONFIGS);
    # 100-332 while the mark was set when the refused pass ended, ~12 per config before any mark
    assert _verbs(first).get("GET", 0) <= CONFIGS + 45, _verbs(first)
    assert _verbs(first).get("PATCH", 0) <= CONFIGS, _verbs(first)
    # settled: one read of each config, nothing written
    assert _config_reads(second) == CONFIGS
    assert _verbs(second).get("GET", 0) <= CONFIGS + 3, _verbs(second)
    assert set(_verbs(second)) == {"GET"}, _verbs(second)


def test_a_config_made_in_a_new_namespace_of_the_same_name_is_reconciled(cluster: FakeKubeApiServer) -> None:
    """The namespace is gone and made again at once, with configs of the same names in it: the marks
    the old namespace's refusals left (its configs, by uid, not by name) stop no pass of the new ones."""
    cluster.add(NAMESPACE)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    resync = Resync(reconciler, interval_s=60)
    for name in ("a", "b"):
        resync.saw("ADDED", cluster.add(igwc(name, model=name, app=name)))
    asyncio.run(resync.pass_all())
    store = cluster.store
    store.delete(store.kind_for(api_version="v1", kind="Namespace"), "", "inference")
    store.delete(store.kind_for(api_version="v1", kind="ConfigMap"), "inference", "a-gateway-config")
    asyncio.run(resync.pass_all())  # a's pass is refused; b's may have ended before
    asyncio.run(resync.pass_all())
    assert wait_condition(cluster, "b", "GatewayProgrammed")["reason"] == "NamespaceTerminating"
    assert store.finalize_namespace("inference") is True
    # made again before any resync or DELETED event told the operator the old configs are gone
    cluster.add(NAMESPACE)
    for name in ("a", "b"):
        resync.saw("ADDED", cluster.add(igwc(name, model=name, app=name)))
    for passes in (["a", "b"], None):  # the watch's passes (ADDED), then a resync
        if passes is None:
            asyncio.run(resync.pass_all())
        else:
            for name in passes:
                asyncio.run(reconciler.reconcile("inference", name))
        for name in ("a", "b"):
            programmed = wait_condition(cluster, name, "GatewayProgrammed")
            assert (programmed["status"], programmed["reason"]) == ("True", "Programmed"), programmed
            assert find(cluster, "Deployment", "inference", f"{name}-gateway") is not None
            assert find(cluster, "ConfigMap", "inference", f"{name}-gateway-config") is not None
