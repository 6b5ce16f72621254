"""One model, two configs, in a race: the operator's own record of what it admitted decides.

Driven through the reconciler directly: the race (a neighbour's ``status.models`` not yet written when
another config's pass admits) cannot be timed through kubectl, but a resync's namespace listing, taken
once for every pass of the resync, is read before a watch-triggered pass writes that status."""

from __future__ import annotations

import asyncio
import base64
import copy
import gzip
import json
import random
from typing import Any, cast

import kopf
import pytest
import yaml

from igw.operator.dataplane import CONFIG_KEY, DataPlaneSettings
from igw.operator.handlers import KOPF_PREFIX, build_settings
from igw.operator.kube import Kube, OperatorStopping
from igw.operator.reconcile import (
    LAST_ADMITTED_ANNOTATION,
    LAST_ADMITTED_GZIP,
    LAST_ADMITTED_MAX_SPEC_BYTES,
    NOT_KEPT_REASON,
    RESTORED_REASON,
    UNREADABLE_REASON,
    Reconciler,
    last_admitted_spec,
    last_admitted_text,
    read_last_admitted,
)
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import condition, find, igwc, update_spec


def _served_models(cluster: FakeKubeApiServer, name: str) -> list[str]:
    config_map = find(cluster, "ConfigMap", "inference", f"{name}-gateway-config")
    if config_map is None:
        return []
    spec = yaml.safe_load(config_map["data"][CONFIG_KEY])["spec"]
    return [str(s["modelName"]) for s in spec["schedulers"]]


def _take(model: str) -> Any:
    def edit(spec: dict[str, Any]) -> None:
        spec["schedulers"][0]["modelName"] = model
        spec["schedulers"][0]["modelSelector"] = {"matchLabels": {"app": model}}

    return edit


def _condition(cluster: FakeKubeApiServer, name: str, kind: str = "Accepted") -> dict[str, Any]:
    """The condition ``kind`` of the config ``name`` in ``inference``."""
    return condition(find(cluster, "InferenceGatewayConfig", "inference", name), kind)


async def _passes(reconciler: Reconciler, names: tuple[str, ...], times: int) -> None:
    """``times`` rounds of one pass for each config of ``names``, in order; each must succeed."""
    for _ in range(times):
        for name in names:
            assert await reconciler.reconcile("inference", name)


LIMIT_BELOW_REQUEST = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
"""``podDefaults`` a spec is refused for (a CPU limit below its request)."""


def _admit_then_refuse(cluster: FakeKubeApiServer, settings: DataPlaneSettings, doc: dict[str, Any]) -> None:
    """``doc`` (named ``chat``) admitted, then edited to :data:`LIMIT_BELOW_REQUEST` and refused:
    its admitted spec is the one kept (ConfigMap, annotation)."""

    async def passes() -> None:
        reconciler = Reconciler(Kube(cluster.api_client()), settings)
        cluster.add(doc)
        assert await reconciler.reconcile("inference", "chat")
        update_spec(cluster, "inference", "chat", lambda spec: spec.update(podDefaults=LIMIT_BELOW_REQUEST))
        assert await reconciler.reconcile("inference", "chat")

    asyncio.run(passes())


def _pass_after_restart(cluster: FakeKubeApiServer, settings: DataPlaneSettings, name: str = "chat") -> None:
    """One pass over ``name`` by a fresh reconciler (an operator restarted: nothing in memory)."""

    async def one() -> None:
        assert await Reconciler(Kube(cluster.api_client()), settings).reconcile("inference", name)

    asyncio.run(one())


def _events(cluster: FakeKubeApiServer, reason: str, name: str = "chat") -> list[dict[str, Any]]:
    """The Events of ``reason`` about the config ``name``, oldest first."""
    return [
        e
        for e in cluster.store.iter_all()
        if e["kind"] == "Event" and e["reason"] == reason and e["involvedObject"]["name"] == name
    ]


def test_an_edit_racing_a_new_configs_first_pass_does_not_serve_its_model_twice(
    cluster: FakeKubeApiServer,
) -> None:
    """``later`` is applied and admitted for mistral; before its ``status.models`` reaches the pass
    that admits ``chat`` (a resync's listing taken earlier), ``chat`` is edited to take mistral. By
    status alone neither served it, so the older object kept it: both data planes served mistral (and
    ``later``, refused at its next pass, kept serving it too). The operator's record of what it
    admitted refuses the edit."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(network_policy=False))

    async def scenario() -> None:
        cluster.add(igwc("chat", model="llama", app="llama"))
        assert await reconciler.reconcile("inference", "chat")
        cluster.add(igwc("later", model="mistral", app="mistral"))
        listed = await reconciler.listing("inference")  # the resync's lists: newer has no status yet
        assert await reconciler.reconcile("inference", "later")
        update_spec(cluster, "inference", "chat", _take("mistral"))
        assert await reconciler.reconcile("inference", "chat", listed=listed)
        await _passes(reconciler, ("chat", "later"), 2)  # later passes, with fresh lists

    asyncio.run(scenario())
    serving = [name for name in ("chat", "later") if "mistral" in _served_models(cluster, name)]
    assert serving == ["later"]
    assert _served_models(cluster, "chat") == ["llama"]
    refused = _condition(cluster, "chat")
    assert (refused["status"], refused["reason"]) == ("False", "ModelNameConflict")
    assert 'is already served by InferenceGatewayConfig "later"' in refused["message"]
    assert _condition(cluster, "later")["status"] == "True"


def test_two_configs_naming_one_model_in_concurrent_passes_are_not_both_admitted(
    cluster: FakeKubeApiServer,
) -> None:
    """Two new configs naming one model, their first passes running together (kopf runs each object's
    handler concurrently): each pass's list may predate the other object, so neither saw the other and
    both were admitted. The first pass to admit the model records it; the other is refused."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(network_policy=False))

    async def scenario() -> None:
        listed = await reconciler.listing("inference")  # taken before either exists
        cluster.add(igwc("second", model="llama"))
        cluster.add(igwc("first", model="llama"))
        await asyncio.gather(
            reconciler.reconcile("inference", "second", listed=listed),
            reconciler.reconcile("inference", "first", listed=listed),
        )
        await _passes(reconciler, ("first", "second"), 2)

    asyncio.run(scenario())
    serving = [name for name in ("first", "second") if "llama" in _served_models(cluster, name)]
    assert len(serving) == 1, serving
    accepted = [name for name in ("first", "second") if _condition(cluster, name)["status"] == "True"]
    assert accepted == serving


def test_a_refused_configs_data_plane_is_restored_after_a_restart_with_its_config_map_gone(
    cluster: FakeKubeApiServer,
) -> None:
    """A refused config keeps serving its last admitted spec, put back from its served ConfigMap or
    the operator's memory. After an operator restart with that ConfigMap deleted there was neither:
    nothing was restored. The operator keeps that spec in an annotation on the config itself."""
    settings = DataPlaneSettings(network_policy=False)
    _admit_then_refuse(cluster, settings, igwc("chat"))
    admitted = find(cluster, "ConfigMap", "inference", "chat-gateway-config")
    assert admitted is not None
    for kind_name, api_version, name in (
        ("ConfigMap", "v1", "chat-gateway-config"),
        ("Deployment", "apps/v1", "chat-gateway"),
    ):
        cluster.store.delete(
            cluster.store.kind_for(api_version=api_version, kind=kind_name), "inference", name
        )

    _pass_after_restart(cluster, settings)
    restored = find(cluster, "ConfigMap", "inference", "chat-gateway-config")
    assert restored is not None
    assert restored["data"] == admitted["data"]
    deployment = find(cluster, "Deployment", "inference", "chat-gateway")
    assert deployment is not None
    resources = deployment["spec"]["template"]["spec"]["containers"][0].get("resources") or {}
    assert resources.get("limits", {}).get("cpu") != "1", "the refused spec must not be applied"
    chat = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert condition(chat, "Accepted")["status"] == "False"
    assert condition(chat, "GatewayProgrammed")["status"] == "True"


def test_an_annotation_edited_into_an_invalid_spec_is_not_restored(cluster: FakeKubeApiServer) -> None:
    """The annotation is editable by whoever may edit the config, as the served ConfigMap is: what it
    holds is checked as a spec before anything is applied from it (here the refused spec itself,
    copied into it, which would otherwise be applied)."""
    settings = DataPlaneSettings(network_policy=False)

    async def scenario() -> None:
        reconciler = Reconciler(Kube(cluster.api_client()), settings)
        cluster.add(igwc("chat"))
        assert await reconciler.reconcile("inference", "chat")
        kind = cluster.store.kind_for(
            api_version="inference.sagemaker.aws.amazon.com/v1alpha1", kind="InferenceGatewayConfig"
        )
        current = find(cluster, "InferenceGatewayConfig", "inference", "chat")
        assert current is not None
        assert current["metadata"]["annotations"][LAST_ADMITTED_ANNOTATION]
        current["spec"]["podDefaults"] = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
        current["metadata"]["annotations"][LAST_ADMITTED_ANNOTATION] = json.dumps(current["spec"])
        cluster.store.replace(kind, "inference", "chat", current)
        cluster.store.delete(
            cluster.store.kind_for(api_version="v1", kind="ConfigMap"), "inference", "chat-gateway-config"
        )
        assert await Reconciler(Kube(cluster.api_client()), settings).reconcile("inference", "chat")

    asyncio.run(scenario())
    assert find(cluster, "ConfigMap", "inference", "chat-gateway-config") is None


IGWC_KIND = ("inference.sagemaker.aws.amazon.com/v1alpha1", "InferenceGatewayConfig")
LIMITS = {
    "backend": "redis",
    "redis": {"url": "rediss://cache:6379/0", "passwordEnv": "IGW_REDIS_PASSWORD"},
    "default": {"requestsPerSecond": 10},
}
"""Rate limits whose Redis password comes from a variable no ``spec.podDefaults`` gives the pods."""


def _rewrite_config(cluster: FakeKubeApiServer, name: str, edit: Any) -> None:
    """``edit(current)`` on the InferenceGatewayConfig ``name``, then written (status left as it is)."""
    kind = cluster.store.kind_for(api_version=IGWC_KIND[0], kind=IGWC_KIND[1])
    current = find(cluster, "InferenceGatewayConfig", "inference", name)
    assert current is not None
    edit(current)
    cluster.store.replace(kind, "inference", name, current)


def _delete(cluster: FakeKubeApiServer, api_version: str, kind_name: str, name: str) -> None:
    cluster.store.delete(cluster.store.kind_for(api_version=api_version, kind=kind_name), "inference", name)


@pytest.mark.parametrize("left", ["config-map", "annotation"])
def test_a_model_admitted_just_before_a_restart_is_claimed_without_its_status(
    cluster: FakeKubeApiServer, left: str
) -> None:
    """``later`` is admitted for mistral and applied; the operator stops before its status (and, for
    ``config-map``, its annotation) is written. The new process's record started from the statuses:
    ``later`` looked to serve nothing and, being newer, to keep nothing, so the older ``chat`` edited to
    take mistral was admitted - two data planes on one model. The record starts from what is served:
    the served ConfigMaps (one list), else the last-admitted-spec annotation."""
    settings = DataPlaneSettings(network_policy=False)

    async def before_restart() -> None:
        reconciler = Reconciler(Kube(cluster.api_client()), settings)
        cluster.add(igwc("chat", model="llama", app="llama"))
        assert await reconciler.reconcile("inference", "chat")
        cluster.add(igwc("later", model="mistral", app="mistral"))
        assert await reconciler.reconcile("inference", "later")

    asyncio.run(before_restart())
    assert _served_models(cluster, "later") == ["mistral"]
    kind = cluster.store.kind_for(api_version=IGWC_KIND[0], kind=IGWC_KIND[1])
    later = find(cluster, "InferenceGatewayConfig", "inference", "later")
    assert later is not None
    cluster.store.replace(kind, "inference", "later", {**later, "status": {}}, status_only=True)
    if left == "config-map":
        _rewrite_config(
            cluster, "later", lambda o: o["metadata"]["annotations"].pop(LAST_ADMITTED_ANNOTATION)
        )
    else:  # the ConfigMap deleted: the pods keep serving what they mounted
        _delete(cluster, "v1", "ConfigMap", "later-gateway-config")
    update_spec(cluster, "inference", "chat", _take("mistral"))

    _pass_after_restart(cluster, settings)
    refused = _condition(cluster, "chat")
    assert (refused["status"], refused["reason"]) == ("False", "ModelNameConflict")
    assert 'InferenceGatewayConfig "later"' in refused["message"]
    assert _served_models(cluster, "chat") == ["llama"]


@pytest.mark.parametrize("source", ["config-map", "annotation"])
def test_a_restored_spec_whose_pods_would_lack_a_password_variable_is_not_applied(
    cluster: FakeKubeApiServer, source: str
) -> None:
    """A refused config's data plane is restored from the last admitted spec (its served ConfigMap,
    else its annotation, after a restart). That spec was checked as a document only, not for the
    ``redis.passwordEnv`` its pods would lack (a new spec is refused for it): rewritten to hold one
    (or written by an operator before the rule), it was applied - pods that exit at start. It is
    checked as a new spec is, and not applied."""
    settings = DataPlaneSettings(network_policy=False)

    async def first() -> None:
        cluster.add(igwc("chat"))
        assert await Reconciler(Kube(cluster.api_client()), settings).reconcile("inference", "chat")

    asyncio.run(first())
    update_spec(cluster, "inference", "chat", lambda spec: spec.update(podDefaults=LIMIT_BELOW_REQUEST))
    if source == "config-map":
        config_map = find(cluster, "ConfigMap", "inference", "chat-gateway-config")
        assert config_map is not None
        document = yaml.safe_load(config_map["data"][CONFIG_KEY])
        document["spec"]["extensions"] = {"rateLimits": LIMITS}
        config_map["data"][CONFIG_KEY] = yaml.safe_dump(document)
        cluster.store.replace(
            cluster.store.kind_for(api_version="v1", kind="ConfigMap"),
            "inference",
            "chat-gateway-config",
            config_map,
        )
        # the only source left (a ConfigMap differing from the annotation is not restored from)
        _rewrite_config(cluster, "chat", lambda o: o["metadata"]["annotations"].pop(LAST_ADMITTED_ANNOTATION))
    else:

        def annotate(current: dict[str, Any]) -> None:
            spec = json.loads(current["metadata"]["annotations"][LAST_ADMITTED_ANNOTATION])
            spec["extensions"] = {"rateLimits": LIMITS}
            current["metadata"]["annotations"][LAST_ADMITTED_ANNOTATION] = json.dumps(spec)

        _rewrite_config(cluster, "chat", annotate)
        _delete(cluster, "v1", "ConfigMap", "chat-gateway-config")
    _delete(cluster, "apps/v1", "Deployment", "chat-gateway")

    _pass_after_restart(cluster, settings)
    assert find(cluster, "Deployment", "inference", "chat-gateway") is None
    chat = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert condition(chat, "Accepted")["status"] == "False"
    assert condition(chat, "GatewayProgrammed")["status"] == "False"


def test_the_annotation_write_is_not_a_change_kopf_reconciles_again() -> None:
    """kopf runs the update handler when an object's essence (spec, labels, annotations) changes; the
    operator's write of the last admitted spec would be one, so every admitted change would run a
    second pass. Annotations under the operator's kopf prefix, once kopf has marked it
    (``<prefix>/kopf-managed``, with its first write), are not in the essence: kept under that prefix,
    the write changes nothing kopf compares."""
    assert LAST_ADMITTED_ANNOTATION.startswith(f"{KOPF_PREFIX}/")
    storage = build_settings().persistence.diffbase_storage
    body = igwc("chat")
    body["metadata"]["annotations"] = {f"{KOPF_PREFIX}/kopf-managed": "yes"}
    before = storage.build(body=kopf.Body(cast(kopf.RawBody, copy.deepcopy(body))))
    body["metadata"]["annotations"][LAST_ADMITTED_ANNOTATION] = json.dumps(body["spec"])
    assert storage.build(body=kopf.Body(cast(kopf.RawBody, body))) == before


def _large_spec(spec: dict[str, Any], adapter: Any) -> None:
    """Sixteen schedulers of fifty LoRA adapters each, named by ``adapter(i, j)``."""
    spec["schedulers"] = [
        {
            "name": f"s{i}",
            "modelName": f"model-{i}",
            "modelSelector": {"matchLabels": {"app": f"m{i}"}},
            "loraAdapters": [adapter(i, j) for j in range(50)],
        }
        for i in range(16)
    ]


def test_a_spec_over_96_kib_is_kept_compressed_and_restored_after_a_restart(
    cluster: FakeKubeApiServer,
) -> None:
    """A spec over 96 KiB of JSON got no last-admitted annotation: after an operator restart with its
    served ConfigMap deleted, a refused later spec had nothing to restore. It is kept gzip-compressed."""
    settings = DataPlaneSettings(network_policy=False)
    doc = igwc("chat")
    _large_spec(doc["spec"], lambda i, j: f"adapter-{i}-{j}-" + "finetune-" * 26)
    assert len(json.dumps(doc["spec"])) > 190_000
    _admit_then_refuse(cluster, settings, doc)
    chat = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert chat is not None
    kept = chat["metadata"]["annotations"][LAST_ADMITTED_ANNOTATION]
    assert kept.startswith(LAST_ADMITTED_GZIP)
    assert len(kept) < 96 * 1024
    admitted = find(cluster, "ConfigMap", "inference", "chat-gateway-config")
    assert admitted is not None
    _delete(cluster, "v1", "ConfigMap", "chat-gateway-config")
    _delete(cluster, "apps/v1", "Deployment", "chat-gateway")

    _pass_after_restart(cluster, settings)
    restored = find(cluster, "ConfigMap", "inference", "chat-gateway-config")
    assert restored is not None
    assert restored["data"] == admitted["data"]
    assert find(cluster, "Deployment", "inference", "chat-gateway") is not None
    assert _condition(cluster, "chat", "GatewayProgrammed")["status"] == "True"


def test_a_spec_that_does_not_fit_even_compressed_is_reported_not_dropped_silently(
    cluster: FakeKubeApiServer,
) -> None:
    """Random adapter names barely compress: the annotation is emptied (no older spec restored in its
    place) and one Warning Event per generation says why, with the sizes (an INFO line said it before)."""
    settings = DataPlaneSettings(network_policy=False)
    rng = random.Random(47)
    doc = igwc("chat")
    _large_spec(doc["spec"], lambda i, j: f"a{i}-{j}-" + "".join(rng.choices("0123456789abcdef", k=200)))
    reconciler = Reconciler(Kube(cluster.api_client()), settings)

    async def passes() -> None:
        cluster.add(doc)
        for _ in range(3):
            assert await reconciler.reconcile("inference", "chat")

    asyncio.run(passes())
    chat = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert chat is not None
    assert chat["metadata"].get("annotations", {}).get(LAST_ADMITTED_ANNOTATION, "") == ""
    events = _events(cluster, NOT_KEPT_REASON)
    assert len(events) == 1, events
    assert events[0]["type"] == "Warning"
    message = events[0]["message"]
    assert f"annotation {LAST_ADMITTED_ANNOTATION}" in message
    assert "ConfigMap inference/chat-gateway-config" in message
    assert "compressed" in message


def test_a_compressed_annotation_that_inflates_without_bound_is_not_read() -> None:
    """The annotation is anyone's who may edit the object: a small value inflating to gigabytes would
    take the operator's memory. Inflating stops at a bound; either form of a real spec reads back."""
    spec = igwc("chat")["spec"]
    assert last_admitted_spec(json.dumps(spec)) == spec  # the plain JSON older operators wrote
    big = {**spec, "note": "x" * 40_000}
    text = last_admitted_text(big)
    assert text.startswith(LAST_ADMITTED_GZIP)
    assert last_admitted_spec(text) == big
    bomb = gzip.compress(b'{"a":"' + b"0" * (64 * 1024 * 1024) + b'"}', mtime=0)
    assert last_admitted_spec(LAST_ADMITTED_GZIP + base64.b64encode(bomb).decode()) is None
    assert last_admitted_spec(LAST_ADMITTED_GZIP + "not base64!") is None


def test_a_refused_configs_config_map_edited_to_take_a_neighbours_model_is_not_restored_as_is(
    cluster: FakeKubeApiServer,
) -> None:
    """``chat`` (older, llama) is edited to take ``later``'s mistral and refused. Its served ConfigMap,
    rewritten by hand to mistral, was taken as the last admitted spec: restored, served and claimed, so
    ``chat`` was then admitted and ``later`` refused for the model it had served first - two gateways
    on mistral. The spec this process admitted (or the annotation) is put back instead."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(network_policy=False))

    def hand_edit(config_map: dict[str, Any]) -> None:
        document = yaml.safe_load(config_map["data"][CONFIG_KEY])
        _take("mistral")(document["spec"])
        config_map["data"][CONFIG_KEY] = yaml.safe_dump(document)

    async def scenario() -> None:
        cluster.add(igwc("chat", model="llama", app="llama"))
        assert await reconciler.reconcile("inference", "chat")
        cluster.add(igwc("later", model="mistral", app="mistral"))
        assert await reconciler.reconcile("inference", "later")
        update_spec(cluster, "inference", "chat", _take("mistral"))
        assert await reconciler.reconcile("inference", "chat")
        config_map = find(cluster, "ConfigMap", "inference", "chat-gateway-config")
        assert config_map is not None
        hand_edit(config_map)
        kind = cluster.store.kind_for(api_version="v1", kind="ConfigMap")
        cluster.store.replace(kind, "inference", "chat-gateway-config", config_map)
        await _passes(reconciler, ("chat", "later"), 3)

    asyncio.run(scenario())
    assert _served_models(cluster, "chat") == ["llama"]
    assert _served_models(cluster, "later") == ["mistral"]
    refused = _condition(cluster, "chat")
    assert (refused["status"], refused["reason"]) == ("False", "ModelNameConflict")
    admitted = _condition(cluster, "later")
    assert admitted["status"] == "True"


class _StopsBetweenWrites(Kube):
    """A client whose process stops (:meth:`Kube.quiesce`: every later call raises
    ``OperatorStopping``, as on SIGTERM or a lost Lease) right after ``stop_after`` once armed."""

    def __init__(self, cluster: FakeKubeApiServer, stop_after: str) -> None:
        super().__init__(cluster.api_client())
        self.stop_after = stop_after
        self.armed = False

    def _stop_here(self, call: str) -> None:
        if self.armed and call == self.stop_after:
            self.quiesce(5)

    async def apply_all(self, objects: Any, **options: Any) -> tuple[str, ...]:
        written = await super().apply_all(objects, **options)
        self._stop_here("apply_all")
        return written

    async def annotate(self, obj: Any, key: str, value: str | None, **where: Any) -> bool:
        kept = await super().annotate(obj, key, value, **where)
        self._stop_here("annotate")
        return kept


def _stopped_pass(cluster: FakeKubeApiServer, kube: _StopsBetweenWrites, name: str) -> None:
    """One pass of ``name`` by a process that stops at ``kube.stop_after``."""
    reconciler = Reconciler(kube, DataPlaneSettings(network_policy=False))
    kube.armed = True
    with pytest.raises(OperatorStopping):
        asyncio.run(reconciler.reconcile("inference", name))


def test_a_restart_between_applying_a_spec_and_keeping_it_does_not_restore_the_older_spec(
    cluster: FakeKubeApiServer,
) -> None:
    """``chat`` gives mistral up for llama; the operator stopped after applying that spec, before
    writing its annotation (then written second). After the restart ``later`` takes mistral and
    ``chat``'s next spec is refused: the annotation, one spec behind the ConfigMap, made the ConfigMap
    look hand-edited, and the older spec was restored - ``chat`` served mistral again and ``later`` was
    refused for the model ``chat`` had given up. The annotation is written before the apply."""
    settings = DataPlaneSettings(network_policy=False)
    cluster.add(igwc("chat", model="mistral", app="mistral"))
    asyncio.run(Reconciler(Kube(cluster.api_client()), settings).reconcile("inference", "chat"))
    update_spec(cluster, "inference", "chat", _take("llama"))
    _stopped_pass(cluster, _StopsBetweenWrites(cluster, "apply_all"), "chat")
    assert _served_models(cluster, "chat") == ["llama"]

    async def after_restart() -> None:
        reconciler = Reconciler(Kube(cluster.api_client()), settings)
        cluster.add(igwc("later", model="mistral", app="mistral"))
        update_spec(cluster, "inference", "chat", lambda spec: spec.update(podDefaults=LIMIT_BELOW_REQUEST))
        await _passes(reconciler, ("later", "chat"), 3)

    asyncio.run(after_restart())
    assert _served_models(cluster, "chat") == ["llama"]
    assert _served_models(cluster, "later") == ["mistral"]
    assert _condition(cluster, "chat")["reason"] == "InvalidSpec"
    assert _condition(cluster, "later")["status"] == "True"


def test_a_restart_between_keeping_a_spec_and_applying_it_claims_the_models_it_keeps(
    cluster: FakeKubeApiServer,
) -> None:
    """``chat`` takes mistral; the operator stopped after writing its annotation, before the apply.
    After the restart the older ``alpha`` is edited to take mistral: by the ConfigMap alone ``chat``
    served llama, so ``alpha``, older, was admitted; ``chat``'s next spec refused then restored the
    annotation's (mistral): two gateways on one model. The record starts from both."""
    settings = DataPlaneSettings(network_policy=False)

    async def before() -> None:
        reconciler = Reconciler(Kube(cluster.api_client()), settings)
        cluster.add(igwc("alpha", model="qwen", app="qwen"))
        cluster.add(igwc("chat", model="llama", app="llama"))
        for name in ("alpha", "chat"):
            assert await reconciler.reconcile("inference", name)

    asyncio.run(before())
    update_spec(cluster, "inference", "chat", _take("mistral"))
    _stopped_pass(cluster, _StopsBetweenWrites(cluster, "annotate"), "chat")
    assert _served_models(cluster, "chat") == ["llama"]

    async def after_restart() -> None:
        reconciler = Reconciler(Kube(cluster.api_client()), settings)
        update_spec(cluster, "inference", "alpha", _take("mistral"))
        assert await reconciler.reconcile("inference", "alpha")
        update_spec(cluster, "inference", "chat", lambda spec: spec.update(podDefaults=LIMIT_BELOW_REQUEST))
        await _passes(reconciler, ("alpha", "chat"), 3)

    asyncio.run(after_restart())
    serving = [name for name in ("alpha", "chat") if "mistral" in _served_models(cluster, name)]
    assert len(serving) == 1, serving
    refused = _condition(cluster, "alpha")
    assert (refused["status"], refused["reason"]) == ("False", "ModelNameConflict")


MARKER = "hunter2-not-for-logs"
"""Text put in a broken annotation: no log line or Event may quote it."""
BROKEN_ANNOTATIONS = {
    "not-json": ("{" + MARKER, "not valid JSON"),
    "not-an-object": (json.dumps([MARKER]), "its JSON is an array, not an object"),
    "bad-base64": (LAST_ADMITTED_GZIP + MARKER + "!", "not valid base64"),
    "bad-gzip": (LAST_ADMITTED_GZIP + base64.b64encode(MARKER.encode()).decode(), "not hold valid gzip"),
    "over-the-bound": (
        LAST_ADMITTED_GZIP
        + base64.b64encode(gzip.compress(b"0" * (LAST_ADMITTED_MAX_SPEC_BYTES + 1), mtime=0)).decode(),
        f"inflates past {LAST_ADMITTED_MAX_SPEC_BYTES} bytes",
    ),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_ANNOTATIONS))
def test_a_broken_annotation_is_reported_once_per_generation_without_its_content(
    cluster: FakeKubeApiServer, caplog: pytest.LogCaptureFixture, broken: str
) -> None:
    """A last-admitted annotation edited into something unreadable was skipped silently: a refused
    spec's data plane was then restored from the ConfigMap alone (or not at all) with nothing saying
    why. A WARNING line and a Warning Event name the object and the reason (never the value), once
    per generation, not once per pass."""
    value, reason = BROKEN_ANNOTATIONS[broken]
    assert read_last_admitted(value)[0] is None
    assert reason in str(read_last_admitted(value)[1])
    assert read_last_admitted("") == (None, None)  # emptied on purpose (too large): not a fault
    settings = DataPlaneSettings(network_policy=False)
    cluster.add(igwc("chat"))
    asyncio.run(Reconciler(Kube(cluster.api_client()), settings).reconcile("inference", "chat"))
    _rewrite_config(
        cluster, "chat", lambda o: o["metadata"]["annotations"].update({LAST_ADMITTED_ANNOTATION: value})
    )
    update_spec(cluster, "inference", "chat", lambda spec: spec.update(podDefaults=LIMIT_BELOW_REQUEST))

    async def passes(reconciler: Reconciler) -> None:
        for _ in range(3):
            assert await reconciler.reconcile("inference", "chat")

    reconciler = Reconciler(Kube(cluster.api_client()), settings)  # after a restart: no memory
    with caplog.at_level("WARNING", logger="igw.operator"):
        asyncio.run(passes(reconciler))
    assert len(_events(cluster, UNREADABLE_REASON)) == 1, _events(cluster, UNREADABLE_REASON)
    assert _events(cluster, UNREADABLE_REASON)[0]["type"] == "Warning"
    message = _events(cluster, UNREADABLE_REASON)[0]["message"]
    assert message.startswith(f"annotation {LAST_ADMITTED_ANNOTATION} is ignored: ")
    assert reason in message
    assert "ConfigMap inference/chat-gateway-config" in message
    lines = [
        r.getMessage()
        for r in caplog.records
        if UNREADABLE_REASON in r.getMessage() or "is ignored" in r.getMessage()
    ]
    assert lines == [f"inference/chat: {message}"]
    assert not any(MARKER in r.getMessage() for r in caplog.records)
    assert not any(MARKER in e["message"] for e in _events(cluster, UNREADABLE_REASON))
    update_spec(
        cluster,
        "inference",
        "chat",
        lambda spec: spec.update(podDefaults={**LIMIT_BELOW_REQUEST}, bbr={"enabled": False}),
    )
    asyncio.run(passes(reconciler))
    assert len(_events(cluster, UNREADABLE_REASON)) == 2


RESTORE_SOURCES = {
    "config-map": "ConfigMap inference/chat-gateway-config",
    "memory": "this operator's memory",
    "annotation": f"annotation {LAST_ADMITTED_ANNOTATION}",
}


@pytest.mark.parametrize("source", list(RESTORE_SOURCES))
def test_a_restore_after_a_refusal_posts_one_event_per_generation_naming_its_source(
    cluster: FakeKubeApiServer, source: str
) -> None:
    """A refused spec's pass that put objects of the previous data plane back said so in INFO lines
    only: ``kubectl describe`` showed the refusal, not the restore. A Normal ``RestoredLastAdmitted``
    Event names the objects put back and where the last admitted spec was read (never its content),
    once per generation, however many passes put objects back."""
    settings = DataPlaneSettings(network_policy=False)
    doc = igwc("chat")
    doc["spec"]["schedulers"][0]["modelName"] = MARKER  # spec content: no Event may quote it
    cluster.add(doc)
    first = Reconciler(Kube(cluster.api_client()), settings)
    asyncio.run(first.reconcile("inference", "chat"))
    update_spec(cluster, "inference", "chat", lambda spec: spec.update(podDefaults=LIMIT_BELOW_REQUEST))
    # after a restart (no memory) when the annotation is the source
    reconciler = Reconciler(Kube(cluster.api_client()), settings) if source == "annotation" else first

    async def passes() -> None:
        for _ in range(3):
            _delete(cluster, "apps/v1", "Deployment", "chat-gateway")
            if source != "config-map":
                _delete(cluster, "v1", "ConfigMap", "chat-gateway-config")
            assert await reconciler.reconcile("inference", "chat")
            assert find(cluster, "Deployment", "inference", "chat-gateway") is not None

    asyncio.run(passes())
    assert len(_events(cluster, RESTORED_REASON)) == 1, _events(cluster, RESTORED_REASON)
    event = _events(cluster, RESTORED_REASON)[0]
    assert event["type"] == "Normal"
    assert event["message"].startswith("the spec is not accepted (InvalidSpec), so the last admitted spec ")
    assert "Deployment inference/chat-gateway" in event["message"]
    assert event["message"].endswith(f" from {RESTORE_SOURCES[source]}")
    assert MARKER not in event["message"]

    update_spec(cluster, "inference", "chat", lambda spec: spec.update(bbr={"enabled": False}))
    asyncio.run(passes())
    assert len(_events(cluster, RESTORED_REASON)) == 2
