"""End to end: the operator (kopf + the real client) against the fake API server, object by object."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.operator.dataplane import (
    CONFIG_KEY,
    RESTART_CONFIG_ANNOTATION,
    DataPlaneSettings,
    base_name,
    desired_objects,
)
from igw.operator.handlers import KOPF_FINALIZER, Resync
from igw.operator.kube import IGWC_API_VERSION, Kube, NotOwnedError
from igw.operator.reconcile import LAST_ADMITTED_ANNOTATION, LAST_ADMITTED_GZIP, Reconciler
from tests.fakes.kube_api import FakeKubeApiServer, make_pod
from tests.operator.harness import (
    DATA_PLANE_KINDS,
    OperatorThread,
    condition,
    find,
    igwc,
    jwt_provider,
    mark_deployment_ready,
    owned_by,
    running_operator,
    update_spec,
    wait_condition,
    wait_for,
    write_latest,
)
from tests.operator.kubectl_cli import kubectl, needs_kubectl


def _served_spec_of(kube: FakeKubeApiServer, base: str) -> str:
    config_map = find(kube, "ConfigMap", "inference", f"{base}-config")
    assert config_map is not None
    return str(config_map["data"][CONFIG_KEY])


def _served_spec(kube: FakeKubeApiServer, name: str) -> dict[str, object]:
    config_map = find(kube, "ConfigMap", "inference", f"{name}-gateway-config")
    assert config_map is not None
    return dict(yaml.safe_load(config_map["data"][CONFIG_KEY])["spec"])


def test_apply_creates_an_owned_data_plane_and_becomes_ready(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    cluster.add(make_pod(name="llama-0", namespace="inference", labels={"app": "llama"}))
    created = cluster.add(igwc("chat"))
    uid = created["metadata"]["uid"]

    owned = wait_for(
        lambda: {o["kind"] for o in owned_by(cluster, uid)} >= DATA_PLANE_KINDS or None, what="data plane"
    )
    assert owned
    deployment = find(cluster, "Deployment", "inference", "chat-gateway")
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"][:5] == [
        "serve",
        "--config",
        "/var/run/igw/config.yaml",
        "--config-map",
        "inference/chat-gateway-config/config.yaml",
    ]
    service = find(cluster, "Service", "inference", "chat-gateway")
    assert service is not None
    annotations = service["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert _served_spec(cluster, "chat") == created["spec"]
    accepted = wait_condition(cluster, "chat", "Accepted")
    assert accepted["status"] == "True"
    programmed = wait_condition(cluster, "chat", "GatewayProgrammed")
    assert programmed["status"] == "True"
    # No gateway replica is ready until the Deployment controller says so.
    not_ready = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "Ready")
    assert (not_ready["status"], not_ready["reason"]) == ("False", "GatewayNotReady")

    mark_deployment_ready(cluster, "inference", "chat-gateway")
    ready = wait_condition(cluster, "chat", "Ready", "True")
    assert ready["reason"] == "Ready"
    obj = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert obj is not None
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["readyEndpoints"] == 1
    assert status["models"] == "llama"
    assert status["address"] == "chat-gateway.inference.svc"
    [scheduler] = status["schedulers"]
    assert scheduler["endpoints"] == {"found": 1, "ready": 1, "stale": 0}
    assert scheduler["rolloutState"] == "Available"
    assert condition(obj, "BBRReady")["status"] == "True"
    assert condition(obj, "AdmissionBlocked")["status"] == "False"
    wanted = {"AcceptedValid", "GatewayProgrammedProgrammed", "ReadyReady"}

    def reasons() -> set[str] | None:
        posted = {
            str(e["reason"])
            for e in cluster.store.iter_all()
            if e["kind"] == "Event" and e["involvedObject"]["uid"] == uid
        }
        return posted if wanted <= posted else None

    # Events are posted right after the status they describe: wait for them, too.
    assert wanted <= wait_for(reasons, what="the transition events")


def test_invalid_spec_is_refused_and_the_previous_data_plane_stays(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    cluster.add(igwc("chat"))
    wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="deployment")
    before = _served_spec(cluster, "chat")
    deployment_rv = find(cluster, "Deployment", "inference", "chat-gateway")["metadata"]["resourceVersion"]  # type: ignore[index]

    def break_it(spec: dict[str, object]) -> None:
        spec["schedulers"] = [
            {"name": "main", "modelName": "llama", "modelSelector": {"matchLabels": {"app": "llama"}}},
            {
                "name": "main2",
                "modelName": "llama",
                "modelSelector": {"matchLabels": {"app": "x"}},
            },
        ]

    # The CRD refuses this spec (the fake API server too): stored as under an older or schema-less CRD,
    # to test the operator's own admission, which must not trust the API server's.
    update_spec(cluster, "inference", "chat", break_it, admit_custom=False)
    refused = wait_condition(cluster, "chat", "Accepted", "False")
    assert refused["reason"] == "InvalidSpec"
    assert "spec.schedulers[1].modelName" in refused["message"]
    obj = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert condition(obj, "AdmissionBlocked")["status"] == "True"
    assert condition(obj, "GatewayProgrammed")["status"] == "True"
    assert _served_spec(cluster, "chat") == before
    deployment = find(cluster, "Deployment", "inference", "chat-gateway")
    assert deployment is not None
    assert deployment["metadata"]["resourceVersion"] == deployment_rv


def test_spec_change_is_rendered_and_rolled(cluster: FakeKubeApiServer, operator: OperatorThread) -> None:
    cluster.add(igwc("chat"))
    wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="deployment")

    def grow(spec: dict[str, object]) -> None:
        schedulers = spec["schedulers"]
        assert isinstance(schedulers, list)
        schedulers[0]["replicas"] = 3
        schedulers.append(
            {"name": "mistral", "modelName": "mistral", "modelSelector": {"matchLabels": {"app": "mistral"}}}
        )

    update_spec(cluster, "inference", "chat", grow)
    wait_for(
        lambda: len(_served_spec(cluster, "chat")["schedulers"]) == 2,  # type: ignore[arg-type]
        what="new spec rendered",
    )
    deployment = wait_for(
        lambda: (
            (d := find(cluster, "Deployment", "inference", "chat-gateway"))
            and d["spec"]["replicas"] == 3
            and d
        ),
        what="replicas from the spec",
    )
    assert deployment["spec"]["replicas"] == 3
    obj = wait_for(
        lambda: (
            (o := find(cluster, "InferenceGatewayConfig", "inference", "chat"))
            and o.get("status", {}).get("observedGeneration") == o["metadata"]["generation"]
            and len(o["status"]["schedulers"]) == 2
            and o
        ),
        what="status of generation 2",
    )
    assert obj["status"]["models"] == "llama, mistral"
    assert [s["rolloutState"] for s in obj["status"]["schedulers"]] == ["Pending", "Pending"]


def _restart_config(cluster: FakeKubeApiServer) -> str | None:
    deployment = find(cluster, "Deployment", "inference", "chat-gateway")
    assert deployment is not None
    annotations = deployment["spec"]["template"]["metadata"].get("annotations") or {}
    value = annotations.get(RESTART_CONFIG_ANNOTATION)
    return None if value is None else str(value)


def test_a_change_igw_serve_reads_only_at_start_rolls_the_pods_and_others_do_not(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    """serverLimits and globalHeartbeat are read when igw serve starts; a hot reload keeps the old
    values. Before, such an edit changed only the served ConfigMap: the pods kept the old listener
    limits or heartbeat settings until some unrelated restart while the status said Programmed."""
    cluster.add(igwc("chat"))
    wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="deployment")
    assert _restart_config(cluster) is None  # neither is set: no annotation, nothing rolls

    def limits(value: str) -> Callable[[dict[str, object]], None]:
        def change(spec: dict[str, object]) -> None:
            extensions = spec.setdefault("extensions", {})
            assert isinstance(extensions, dict)
            extensions["serverLimits"] = {"headerTimeout": value}

        return change

    update_spec(cluster, "inference", "chat", limits("3s"))
    first = wait_for(_restart_config_of(cluster), what="restart annotation")
    update_spec(cluster, "inference", "chat", limits("4s"))
    second = wait_for(lambda: (v := _restart_config(cluster)) != first and v, what="new restart annotation")

    def heartbeat(spec: dict[str, object]) -> None:
        extensions = spec["extensions"]
        assert isinstance(extensions, dict)
        extensions["globalHeartbeat"] = {"cluster": "east-a", "region": "east"}

    update_spec(cluster, "inference", "chat", heartbeat)
    third = wait_for(lambda: (v := _restart_config(cluster)) != second and v, what="heartbeat rolls too")

    def hot(spec: dict[str, object]) -> None:  # applied by the hot reload: no roll
        schedulers = spec["schedulers"]
        assert isinstance(schedulers, list)
        schedulers[0]["replicas"] = 3

    update_spec(cluster, "inference", "chat", hot)
    wait_for(
        lambda: (
            (d := find(cluster, "Deployment", "inference", "chat-gateway")) and d["spec"]["replicas"] == 3
        ),
        what="replicas from the spec",
    )
    assert _restart_config(cluster) == third


def _restart_config_of(cluster: FakeKubeApiServer) -> Callable[[], str | None]:
    return lambda: _restart_config(cluster)


def test_delete_collects_the_data_plane_but_not_the_model_servers(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    cluster.add(make_pod(name="llama-0", namespace="inference", labels={"app": "llama"}))
    created = cluster.add(igwc("chat"))
    uid = created["metadata"]["uid"]
    wait_for(lambda: len(owned_by(cluster, uid)) == len(DATA_PLANE_KINDS), what="data plane")
    kind = cluster.store.kind_for(
        api_version="inference.sagemaker.aws.amazon.com/v1alpha1", kind="InferenceGatewayConfig"
    )
    cluster.store.delete(kind, "inference", "chat")
    assert owned_by(cluster, uid) == []
    assert find(cluster, "Pod", "inference", "llama-0") is not None
    assert find(cluster, "Deployment", "inference", "chat-gateway") is None


def test_deleted_child_is_put_back(cluster: FakeKubeApiServer, operator: OperatorThread) -> None:
    cluster.add(igwc("chat"))
    wait_for(lambda: find(cluster, "NetworkPolicy", "inference", "chat-gateway"), what="network policy")
    kind = cluster.store.kind_for(api_version="networking.k8s.io/v1", kind="NetworkPolicy")
    cluster.store.delete(kind, "inference", "chat-gateway")
    wait_for(lambda: find(cluster, "NetworkPolicy", "inference", "chat-gateway"), what="network policy again")


def _edit_served(kube: FakeKubeApiServer, name: str, text: str) -> None:
    """Rewrite the served ConfigMap as ``kubectl edit`` would: its applied-hash annotation stays."""
    kind = kube.store.kind_for(api_version="v1", kind="ConfigMap")

    def edit(stored: dict[str, Any]) -> None:
        stored["data"][CONFIG_KEY] = text
        kube.store.replace(kind, "inference", f"{name}-gateway-config", stored)

    write_latest(kube, "ConfigMap", "inference", f"{name}-gateway-config", edit)


def test_a_rewrite_keeps_the_finalizers_other_controllers_put_on_the_data_plane(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    """The AWS Load Balancer Controller puts ``service.k8s.aws/resources`` on the gateway Service, to
    delete the NLB before the Service goes. The operator's rewrite (a replace, here adding the TLS
    listener) sent no finalizers, so it removed that one: the Service deleted with its config would
    have left the NLB and its target groups behind."""
    cluster.add(igwc("chat"))
    wait_condition(cluster, "chat", "GatewayProgrammed", "True")
    kind = cluster.store.kind_for(api_version="v1", kind="Service")
    finalizer = "service.k8s.aws/resources"

    def add_finalizer(current: dict[str, Any]) -> None:
        current["metadata"]["finalizers"] = [finalizer]
        cluster.store.replace(kind, "inference", "chat-gateway", current)

    write_latest(cluster, "Service", "inference", "chat-gateway", add_finalizer)
    arn = "arn:aws:acm:us-east-1:123456789012:certificate/0e5a8b1c-1111-2222-3333-444455556666"
    update_spec(cluster, "inference", "chat", lambda spec: spec.update(tls={"acmArn": arn}))

    def rewritten() -> dict[str, Any] | None:
        service = find(cluster, "Service", "inference", "chat-gateway")
        annotations = (service or {}).get("metadata", {}).get("annotations") or {}
        return service if arn in annotations.values() else None

    service = wait_for(rewritten, what="the Service with the TLS listener")
    assert service["metadata"].get("finalizers") == [finalizer]


def test_edited_served_config_is_put_back(cluster: FakeKubeApiServer, operator: OperatorThread) -> None:
    """Someone who may edit ConfigMaps strips the JWT requirement from the served config: the operator
    writes the admitted spec back at the next pass (it did not: the applied hash was unchanged)."""
    secured = igwc("chat")
    secured["spec"]["auth"] = jwt_provider("https://idp.example.com/jwks.json")
    cluster.add(secured)
    wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="deployment")
    admitted = _served_spec(cluster, "chat")
    assert "auth" in admitted
    stripped = {**admitted}
    del stripped["auth"]
    document = {
        "apiVersion": secured["apiVersion"],
        "kind": secured["kind"],
        "metadata": {"name": "chat", "namespace": "inference"},
    }
    _edit_served(cluster, "chat", yaml.safe_dump({**document, "spec": stripped}))
    wait_for(lambda: _served_spec(cluster, "chat") == admitted, what="the admitted spec served again")


def test_unreadable_served_config_under_a_refused_spec_is_reported(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    """The pass read the served ConfigMap with no checks: an edited one ended every pass in a
    KeyError traceback, and the status never changed again."""
    cluster.add(igwc("chat"))
    wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="deployment")
    admitted = _served_spec(cluster, "chat")
    # Valid for the CRD (an unknown field would be pruned by any write); only the operator refuses it.
    limit_below_request = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
    update_spec(cluster, "inference", "chat", lambda spec: spec.update(podDefaults=limit_below_request))
    wait_condition(cluster, "chat", "Accepted", "False")
    _edit_served(cluster, "chat", "hacked: true\n")
    programmed = wait_condition(cluster, "chat", "GatewayProgrammed", "False")
    assert programmed["reason"] == "ServedConfigInvalid"
    assert "ConfigMap inference/chat-gateway-config" in programmed["message"]
    update_spec(cluster, "inference", "chat", lambda spec: spec.pop("podDefaults"))
    wait_condition(cluster, "chat", "GatewayProgrammed", "True")
    assert _served_spec(cluster, "chat") == admitted


def test_two_configs_whose_names_give_one_data_plane_name_do_not_fight_over_it(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    """``1abc`` (a leading digit: shortened with its digest) and a config named after that shortened
    stem share ``<stem>-gateway``. Each pass replaced the other's objects: the Deployment's
    generation climbed on every resync (a rollout each time) and the served ConfigMap flipped between
    the two models, while both objects said Programmed. Now the first keeps it, the second is told."""
    stem = base_name("1abc").removesuffix("-gateway")
    cluster.add(igwc("1abc", model="first", app="first"))
    shared = base_name("1abc")
    first = wait_for(lambda: find(cluster, "Deployment", "inference", shared), what="the first data plane")
    cluster.add(igwc(stem, model="second", app="second"))
    refused = wait_condition(cluster, stem, "GatewayProgrammed", "False")
    assert refused["reason"] == "ApplyFailed"
    assert '"1abc"' in refused["message"]
    assert "already exists and is controlled by" in refused["message"]
    wait_condition(cluster, "1abc", "GatewayProgrammed", "True")
    deployment = find(cluster, "Deployment", "inference", shared)
    assert deployment is not None
    assert deployment["metadata"]["generation"] == first["metadata"]["generation"]
    assert deployment["metadata"]["ownerReferences"][0]["name"] == "1abc"
    assert "first" in _served_spec_of(cluster, shared)
    # The refused object does not report the other one's data plane as its own.
    loser = find(cluster, "InferenceGatewayConfig", "inference", stem)
    assert loser is not None
    assert (loser["status"]["models"], loser["status"]["address"]) == ("", "")


def test_an_object_with_a_253_character_name_gets_its_data_plane_status_and_events(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    """The longest name the API server allows: the data plane under the shortened name, and the
    Events (``generateName: <name>.``, which the API server cuts to 58 characters). With the fake
    leaving ``generateName`` uncut, the first Event was refused and every pass ended in a traceback."""
    name = ("team-a.prod." + "llama-3-1-70b-instruct." * 10 + "chat.abcdef")[:253]
    assert len(name) == 253
    cluster.add(igwc(name))
    wait_condition(cluster, name, "GatewayProgrammed", "True")
    assert find(cluster, "Deployment", "inference", base_name(name)) is not None

    def posted() -> set[str] | None:
        reasons = {
            str(obj.get("reason"))
            for obj in cluster.store.iter_all()
            if obj["kind"] == "Event" and obj["involvedObject"]["name"] == name
        }
        return reasons if {"AcceptedValid", "GatewayProgrammedProgrammed"} <= reasons else None

    wait_for(posted, what="the Events of the 253-character object")


def test_an_object_created_outside_the_operator_is_not_taken_over(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    theirs = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "chat-gateway-config", "namespace": "inference"},
        "data": {"config.yaml": "someone else's file\n"},
    }
    cluster.add(theirs)
    cluster.add(igwc("chat"))
    refused = wait_condition(cluster, "chat", "GatewayProgrammed", "False")
    assert refused["reason"] == "ApplyFailed"
    assert "created outside the operator" in refused["message"]
    kept = find(cluster, "ConfigMap", "inference", "chat-gateway-config")
    assert kept is not None
    assert kept["data"] == theirs["data"]
    assert find(cluster, "Deployment", "inference", "chat-gateway") is None


def _passes(kube: FakeKubeApiServer, name: str) -> int:
    """GETs of the object by name: one per reconciliation pass."""
    return sum(
        1
        for method, path, _ in list(kube.requests)
        if method == "GET" and path.endswith(f"/inferencegatewayconfigs/{name}")
    )


def _finalizers(kube: FakeKubeApiServer, name: str) -> list[str]:
    obj = find(kube, "InferenceGatewayConfig", "inference", name)
    assert obj is not None
    return list(obj["metadata"].get("finalizers") or [])


def test_an_orphan_is_adopted_only_by_a_live_config_of_its_name(cluster: FakeKubeApiServer) -> None:
    """``kubectl delete --cascade=orphan`` while a pass for the object is still applying: that pass
    must not adopt the orphans back for the uid just deleted (the garbage collector would then delete
    the whole data plane, the gateway with it); the object applied again adopts them."""
    kube = Kube(cluster.api_client())
    reconciler = Reconciler(kube, DataPlaneSettings())
    cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    gone = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert gone is not None
    igwc_kind = cluster.store.kind_for(api_version=IGWC_API_VERSION, kind="InferenceGatewayConfig")
    cluster.store.delete(igwc_kind, "inference", "chat", propagation="Orphan")
    config_map = next(o for o in desired_objects(gone, DataPlaneSettings()) if o["kind"] == "ConfigMap")
    with pytest.raises(NotOwnedError, match="gone or being deleted"):
        asyncio.run(kube.apply(config_map))
    orphan = find(cluster, "ConfigMap", "inference", "chat-gateway-config")
    assert orphan is not None
    assert "ownerReferences" not in orphan["metadata"]

    reborn = cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert {o["kind"] for o in owned_by(cluster, reborn["metadata"]["uid"])} >= DATA_PLANE_KINDS


def test_a_config_made_again_under_its_name_waits_for_its_old_service_and_says_so(
    cluster: FakeKubeApiServer,
) -> None:
    """Deleted and created again (``kubectl replace --force``, a GitOps re-create), the config met its
    old Service still there while the load balancer controller's finalizer deletes the NLB, and was told
    to "rename one of them or delete that Service" - it is being deleted already. The status says it
    waits, and the next pass once it is gone programs the new object."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    services = cluster.store.kind_for(api_version="v1", kind="Service")

    def finalizers(names: list[str]) -> Callable[[dict[str, Any]], object]:
        def write(body: dict[str, Any]) -> object:
            body["metadata"]["finalizers"] = names
            return cluster.store.replace(services, "inference", "chat-gateway", body)

        return write

    write_latest(cluster, "Service", "inference", "chat-gateway", finalizers(["service.k8s.aws/resources"]))
    igwc_kind = cluster.store.kind_for(api_version=IGWC_API_VERSION, kind="InferenceGatewayConfig")
    cluster.store.delete(igwc_kind, "inference", "chat")
    reborn = cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True

    waiting = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert waiting["reason"] == "ApplyFailed"
    assert "Service inference/chat-gateway of InferenceGatewayConfig" in waiting["message"]
    assert "is being deleted (waiting for service.k8s.aws/resources)" in waiting["message"]
    assert "rename one of them" not in waiting["message"]

    write_latest(cluster, "Service", "inference", "chat-gateway", finalizers([]))  # the NLB is gone
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    programmed = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert programmed["status"] == "True"
    assert {o["kind"] for o in owned_by(cluster, reborn["metadata"]["uid"])} >= DATA_PLANE_KINDS


def test_no_finalizer_so_deleting_never_waits_for_the_operator(
    cluster: FakeKubeApiServer, kubeconfig: Path
) -> None:
    """kopf puts a finalizer on every object a ``kopf.timer`` runs for: with the operator stopped or
    uninstalled, ``kubectl delete igwc`` (and deleting the CRD or the namespace) waited for good,
    although docs/operating.md says no finalizer is involved. The resync is our own loop now, and the
    finalizer an older operator left is removed."""
    left_behind = igwc("legacy", model="legacy", app="legacy")
    left_behind["metadata"]["finalizers"] = [KOPF_FINALIZER]
    cluster.add(left_behind)
    with running_operator(kubeconfig):
        cluster.add(igwc("chat"))
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        wait_for(lambda: _finalizers(cluster, "legacy") == [], what="the old finalizer removed")
        # three more passes (each reads the object first) and still none
        reads = _passes(cluster, "chat")
        wait_for(lambda: _passes(cluster, "chat") >= reads + 3, what="three resync passes")
        assert _finalizers(cluster, "chat") == []
    kind = cluster.store.kind_for(api_version=IGWC_API_VERSION, kind="InferenceGatewayConfig")
    for name in ("chat", "legacy"):
        cluster.store.delete(kind, "inference", name)
        assert find(cluster, "InferenceGatewayConfig", "inference", name) is None


def test_same_model_in_two_configs_is_a_conflict_on_the_newer(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    cluster.add(igwc("first", model="llama"))
    wait_for(lambda: find(cluster, "Deployment", "inference", "first-gateway"), what="first data plane")
    # The older object's own status is written after its data plane (and, by another worker, maybe
    # after the newer one's refusal): wait for it so the check below reads a written status.
    wait_condition(cluster, "first", "Accepted", "True")
    cluster.add(igwc("second", model="llama"))
    refused = wait_condition(cluster, "second", "Accepted")
    assert (refused["status"], refused["reason"]) == ("False", "ModelNameConflict")
    assert '"first"' in refused["message"]
    assert find(cluster, "Deployment", "inference", "second-gateway") is None
    assert (
        condition(find(cluster, "InferenceGatewayConfig", "inference", "first"), "Accepted")["status"]
        == "True"
    )
    # Once the older object is gone, the newer one is admitted at the next pass.
    kind = cluster.store.kind_for(
        api_version="inference.sagemaker.aws.amazon.com/v1alpha1", kind="InferenceGatewayConfig"
    )
    cluster.store.delete(kind, "inference", "first")
    wait_condition(cluster, "second", "Accepted", "True")
    wait_for(lambda: find(cluster, "Deployment", "inference", "second-gateway"), what="second data plane")


def test_a_namespace_list_limits_what_is_reconciled(cluster: FakeKubeApiServer, kubeconfig: Path) -> None:
    for namespace in ("inference", "elsewhere"):
        cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    with running_operator(kubeconfig, namespaces=("inference",)):
        cluster.add(igwc("watched"))
        cluster.add(igwc("ignored", namespace="elsewhere"))
        wait_for(lambda: find(cluster, "Deployment", "inference", "watched-gateway"), what="the watched one")
        # The watched object's whole first pass is done; the other namespace still has nothing.
        wait_condition(cluster, "watched", "Ready")
    assert find(cluster, "Deployment", "elsewhere", "ignored-gateway") is None
    ignored = find(cluster, "InferenceGatewayConfig", "elsewhere", "ignored")
    assert ignored is not None
    assert "status" not in ignored


def test_the_operator_relists_after_410_gone(cluster: FakeKubeApiServer, operator: OperatorThread) -> None:
    cluster.add(igwc("before"))
    wait_condition(cluster, "before", "GatewayProgrammed")
    cluster.expire_watches()
    cluster.add(igwc("after", model="mistral", app="mistral"))
    wait_condition(cluster, "after", "GatewayProgrammed")
    assert find(cluster, "Deployment", "inference", "after-gateway") is not None
    assert cluster.gone_sent >= 1, "the operator's watch should have resumed from a compacted version"


def test_the_resync_forgets_an_object_deleted_while_the_watch_was_away(cluster: FakeKubeApiServer) -> None:
    """A relist after a watch gap shows no DELETED event: the resync passes over what it knows and
    drops what no longer exists, instead of reading it again every pass for good."""
    resync = Resync(Reconciler(Kube(cluster.api_client()), DataPlaneSettings()), interval_s=60)
    cluster.add(igwc("kept"))
    resync.saw("ADDED", igwc("kept"))
    resync.saw("ADDED", igwc("gone"))
    asyncio.run(resync.pass_all())
    assert resync.known == {("inference", "kept")}
    assert find(cluster, "Deployment", "inference", "kept-gateway") is not None


def test_events_the_api_server_refuses_are_logged_and_the_pass_goes_on(
    cluster: FakeKubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Without RBAC for Events (or under a 429, or a quota) every transition is still attempted and
    the pass ends normally; the first refusal used to end it in a traceback (kopf retried the handler
    a minute later) with the remaining transitions never posted."""
    cluster.forbid("events")
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    with caplog.at_level(logging.WARNING, logger="igw.operator"):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert (
        condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")["status"]
        == "True"
    )
    failed = [r.getMessage() for r in caplog.records if "event failed" in r.getMessage()]
    assert len(failed) == 5, failed  # the first pass: every condition type's first transition
    assert all("Forbidden" in message or "403" in message for message in failed), failed


def test_a_refusal_too_long_for_a_condition_still_reaches_the_status(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    """200 broken schedulers give a refusal over the CRD's 32,768-character condition message: the
    fake API server refuses such a status write as the real one does, so the operator must cut it."""

    def break_it(spec: dict[str, object]) -> None:
        spec["schedulers"] = [
            {
                "name": f"s{i}",
                "modelName": "m" * 200,  # quoted in each duplicate's line: far over 32,768 characters
                "modelSelector": {"matchLabels": {"app": "x"}},
            }
            for i in range(200)
        ]

    cluster.add(igwc("chat"))
    # The CRD refuses this spec (the fake API server too): stored as under an older or schema-less CRD,
    # to test the operator's own admission, which must not trust the API server's.
    update_spec(cluster, "inference", "chat", break_it, admit_custom=False)
    refused = wait_condition(cluster, "chat", "Accepted", "False")
    assert refused["reason"] == "InvalidSpec"
    assert len(refused["message"]) <= 32768
    assert refused["message"].endswith("characters in all; igw validate lists every problem)")


def test_specs_of_the_wrong_shape_are_refused_and_spare_their_neighbours(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    """Stored by a cluster without the CRD's schema, these ended every pass in a traceback with no status
    (``spec: [..]``, ``spec.extensions: null``, ``flowControl: "x"``); a list spec also broke the
    model-name conflict check of every other object in its namespace."""
    odd = {
        "as-list": ([1, 2], "spec: expected object, got array"),
        # no `spec.extensions: null`: the API server prunes an undeclared null on every read (the fake
        # too, since s48), so under this CRD the operator never reads one
        "flow-string": ({"extensions": {"flowControl": "x"}}, "spec.extensions.flowControl: expected object"),
    }
    for index, (name, (spec, _)) in enumerate(odd.items()):
        obj = igwc(name, model=f"m{index}", app=f"a{index}")
        if isinstance(spec, dict):
            obj["spec"].update(spec)
        else:
            obj["spec"] = spec
        cluster.add(obj, admit_custom=False)  # the fake, as a real server with the CRD, would refuse it
    cluster.add(igwc("fine", model="fine", app="fine"))
    for name, (_, needle) in odd.items():
        refused = wait_condition(cluster, name, "Accepted", "False")
        assert refused["reason"] == "InvalidSpec"
        assert needle in refused["message"]
    wait_condition(cluster, "fine", "Accepted", "True")
    assert find(cluster, "Deployment", "inference", "fine-gateway") is not None


def test_pod_defaults_with_a_limit_below_its_request_are_refused_before_any_data_plane(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    # Found with kubectl against the fake API server: the spec was Accepted and the operator wrote a
    # Deployment the real API server refuses (limits.cpu 1 < requests.cpu 2).
    doc = igwc("small")
    doc["spec"]["podDefaults"] = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
    cluster.add(doc)
    refused = wait_condition(cluster, "small", "Accepted", "False")
    assert refused["reason"] == "InvalidSpec"
    assert "spec.podDefaults.resources.limits.cpu: must be at least" in refused["message"]
    assert find(cluster, "Deployment", "inference", "small-gateway") is None


def _events(kube: FakeKubeApiServer, name: str) -> list[dict[str, Any]]:
    return [
        obj
        for obj in kube.store.iter_all()
        if obj["kind"] == "Event" and obj["involvedObject"]["name"] == name
    ]


def _served_model(kube: FakeKubeApiServer, name: str) -> str:
    """The ``modelName`` of the first scheduler ``name``'s served ConfigMap holds."""
    config_map = find(kube, "ConfigMap", "inference", f"{name}-gateway-config")
    assert config_map is not None
    return str(yaml.safe_load(config_map["data"][CONFIG_KEY])["spec"]["schedulers"][0]["modelName"])


def test_an_edit_taking_a_served_model_is_refused_on_the_edited_config(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    """The older config edited to take the model a newer one serves: the age rule admitted the edit
    and refused the newer config, whose data plane kept serving that model - two gateways routed to
    the same model servers. The first to serve a model keeps it: the edit is refused, naming the
    field and the config that serves it, with a Warning Event; the older keeps serving its model."""
    cluster.add(igwc("older", model="llama", app="llama"))
    wait_condition(cluster, "older", "GatewayProgrammed", "True")
    cluster.add(igwc("newer", model="mistral", app="mistral"))
    wait_condition(cluster, "newer", "GatewayProgrammed", "True")
    wait_for(
        lambda: (
            (find(cluster, "InferenceGatewayConfig", "inference", "newer") or {})
            .get("status", {})
            .get("models")
            == "mistral"
        ),
        what="newer's status.models",
    )

    def take_mistral(spec: dict[str, Any]) -> None:
        spec["schedulers"][0]["modelName"] = "mistral"

    update_spec(cluster, "inference", "older", take_mistral)
    refused = wait_condition(cluster, "older", "Accepted", "False")
    assert refused["reason"] == "ModelNameConflict"
    assert refused["message"].startswith('spec.schedulers[0].modelName: "mistral" is already served by')
    assert 'InferenceGatewayConfig "newer"' in refused["message"]
    wait_for(
        lambda: any(
            e["reason"] == "AcceptedModelNameConflict" and e["type"] == "Warning"
            for e in _events(cluster, "older")
        ),
        what="the Warning Event on the edited config",
    )
    # A few resync passes later still: the newer keeps its model, the older its previous data plane.
    time.sleep(2.0)
    newer = find(cluster, "InferenceGatewayConfig", "inference", "newer")
    assert condition(newer, "Accepted")["status"] == "True"
    assert _served_model(cluster, "newer") == "mistral"
    assert _served_model(cluster, "older") == "llama"
    older = find(cluster, "InferenceGatewayConfig", "inference", "older")
    assert older is not None
    assert older["status"]["models"] == "llama"
    assert condition(older, "GatewayProgrammed")["status"] == "True"
    # Once the newer one is gone, the edit is admitted.
    kind = cluster.store.kind_for(api_version=IGWC_API_VERSION, kind="InferenceGatewayConfig")
    cluster.store.delete(kind, "inference", "newer")
    wait_condition(cluster, "older", "Accepted", "True")
    wait_for(
        lambda: _served_model(cluster, "older") == "mistral",
        what="the older config serving mistral",
    )


def test_a_refused_configs_data_plane_is_restored_from_the_last_admitted_spec(
    cluster: FakeKubeApiServer, operator: OperatorThread
) -> None:
    """A refused spec keeps the previous data plane serving, but a Deployment or ConfigMap deleted
    meanwhile was never put back, and GatewayProgrammed said no spec had ever been admitted. The
    pass restores them from the last admitted spec (the served ConfigMap, or what this operator
    applied last when that is gone)."""
    cluster.add(igwc("chat"))
    wait_condition(cluster, "chat", "GatewayProgrammed", "True")
    admitted = _served_spec(cluster, "chat")
    limit_below_request = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
    update_spec(cluster, "inference", "chat", lambda spec: spec.update(podDefaults=limit_below_request))
    wait_condition(cluster, "chat", "Accepted", "False")
    deployments = cluster.store.kind_for(api_version="apps/v1", kind="Deployment")

    def scale_to_zero(current: dict[str, Any]) -> None:
        current["spec"]["replicas"] = 0
        cluster.store.replace(deployments, "inference", "chat-gateway", current)

    write_latest(cluster, "Deployment", "inference", "chat-gateway", scale_to_zero)
    wait_for(
        lambda: (find(cluster, "Deployment", "inference", "chat-gateway") or {})["spec"]["replicas"] == 2,
        what="the Deployment scaled back",
    )
    # The served ConfigMap holds the last admitted spec; with it gone, what the operator applied last.
    for kind_name, name in (("Deployment", "chat-gateway"), ("ConfigMap", "chat-gateway-config")):
        api_version = "apps/v1" if kind_name == "Deployment" else "v1"
        kind = cluster.store.kind_for(api_version=api_version, kind=kind_name)
        cluster.store.delete(kind, "inference", name)

        def restored(kind_name: str = kind_name, name: str = name) -> dict[str, Any] | None:
            return find(cluster, kind_name, "inference", name)

        wait_for(restored, what=f"{kind_name} restored")
        programmed = wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        assert programmed["reason"] == "Programmed"
    deployment = find(cluster, "Deployment", "inference", "chat-gateway")
    assert deployment is not None
    resources = deployment["spec"]["template"]["spec"]["containers"][0].get("resources") or {}
    assert resources.get("limits", {}).get("cpu") != "1", "the refused spec must not be applied"
    assert _served_spec(cluster, "chat") == admitted
    assert (
        condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "Accepted")["status"]
        == "False"
    )


@needs_kubectl
def test_a_config_refused_after_a_restart_for_a_model_admitted_just_before_it_keeps_its_data_plane(
    cluster: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """With kubectl: ``later`` is admitted for mistral and served, but the operator stops before its
    status and annotation are written (wiped here). After the restart, ``chat`` (older) applied to take
    mistral was admitted - the new process knew only the statuses - and two gateways served mistral.
    The new process reads the served ConfigMaps first: the edit is refused, and ``chat``'s Deployment,
    deleted meanwhile, is restored from its last admitted spec (llama)."""
    manifest = tmp_path / "igwc.yaml"

    def apply(obj: dict[str, Any]) -> None:
        manifest.write_text(yaml.safe_dump(obj))
        kubectl(kubeconfig, "apply", "-f", str(manifest))

    with running_operator(kubeconfig):
        apply(igwc("chat", model="llama", app="llama"))
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        apply(igwc("later", model="mistral", app="mistral"))
        wait_condition(cluster, "later", "GatewayProgrammed", "True")
    kind = cluster.store.kind_for(api_version=IGWC_API_VERSION, kind="InferenceGatewayConfig")
    later = find(cluster, "InferenceGatewayConfig", "inference", "later")
    assert later is not None
    cluster.store.replace(kind, "inference", "later", {**later, "status": {}}, status_only=True)
    kubectl(kubeconfig, "annotate", "-n", "inference", "igwc", "later", f"{LAST_ADMITTED_ANNOTATION}-")
    apply(igwc("chat", model="mistral", app="mistral"))
    kubectl(kubeconfig, "delete", "-n", "inference", "deployment", "chat-gateway")
    with running_operator(kubeconfig):
        refused = wait_condition(cluster, "chat", "Accepted", "False")
        assert refused["reason"] == "ModelNameConflict"
        assert 'is already served by InferenceGatewayConfig "later"' in refused["message"]
        wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="Deployment restored")
        wait_condition(cluster, "later", "Accepted", "True")
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        time.sleep(1.5)  # a few resync passes: neither config takes the other's model
        shown = kubectl(
            kubeconfig, "get", "-n", "inference", "igwc", "-o", "jsonpath={.items[*].status.models}"
        )
    assert shown.split() == ["llama", "mistral"]
    assert _served_model(cluster, "chat") == "llama"
    assert _served_model(cluster, "later") == "mistral"


@needs_kubectl
def test_a_spec_over_96_kib_applied_with_kubectl_keeps_its_restore_across_a_restart(
    cluster: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """With kubectl: a ~200 KiB spec applied (``kubectl apply`` keeps its own ~200 KiB copy in an
    annotation) got no last-admitted-spec annotation, being over 96 KiB. A later spec refused while the
    operator was down, with the served ConfigMap and Deployment deleted, then had nothing to restore
    from. Kept compressed, both are put back from it, the refused spec not applied."""
    doc = igwc("chat")
    doc["spec"]["schedulers"] = [
        {
            "name": f"s{i}",
            "modelName": f"model-{i}",
            "modelSelector": {"matchLabels": {"app": f"m{i}"}},
            "loraAdapters": [f"adapter-{i}-{j}-" + "finetune-" * 26 for j in range(50)],
        }
        for i in range(16)
    ]
    assert len(json.dumps(doc["spec"])) > 190_000
    manifest = tmp_path / "chat.yaml"

    def apply() -> None:
        manifest.write_text(yaml.safe_dump(doc))
        kubectl(kubeconfig, "apply", "-f", str(manifest))

    with running_operator(kubeconfig):
        apply()
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")

        def kept() -> str | None:
            obj = find(cluster, "InferenceGatewayConfig", "inference", "chat") or {}
            value = ((obj.get("metadata") or {}).get("annotations") or {}).get(LAST_ADMITTED_ANNOTATION)
            return value or None

        annotation = wait_for(kept, what="the last admitted spec kept")
    assert annotation.startswith(LAST_ADMITTED_GZIP)
    admitted = _served_spec_of(cluster, "chat-gateway")
    doc["spec"]["podDefaults"] = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
    apply()
    kubectl(kubeconfig, "delete", "-n", "inference", "configmap", "chat-gateway-config")
    kubectl(kubeconfig, "delete", "-n", "inference", "deployment", "chat-gateway")
    with running_operator(kubeconfig):
        wait_condition(cluster, "chat", "Accepted", "False")
        wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="Deployment restored")
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
    assert _served_spec_of(cluster, "chat-gateway") == admitted
    deployment = find(cluster, "Deployment", "inference", "chat-gateway")
    assert deployment is not None
    resources = deployment["spec"]["template"]["spec"]["containers"][0].get("resources") or {}
    assert resources.get("limits", {}).get("cpu") != "1", "the refused spec must not be applied"
