"""The status write lands on the object the pass read, never on one made anew under its name.

A pass reads its InferenceGatewayConfig, applies the data plane and writes the status. A plain merge
patch of ``/status`` is conditional on nothing: when the object was deleted and created again under
the same name while the pass ran (``kubectl replace --force``, a GitOps re-create, ``kubectl delete``
then ``apply``), the old object's status - its conditions, ``observedGeneration``, models, address,
even ``status.tls`` naming the old object's ACM import - was written onto the new one. Putting
``metadata.uid`` into that merge patch would not help on a real cluster: the custom resource status
strategy keeps only the patched ``status`` (the fake does the same, see
``test_fake_kube_server.py::test_a_uid_in_a_write_is_a_precondition_only_where_the_api_server_makes_it_one``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from igw.operator.dataplane import DataPlaneSettings
from igw.operator.kube import IGWC_API_VERSION, Kube, merged_status
from igw.operator.reconcile import Reconciler
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import condition, find, igwc, owned_by


def test_a_config_made_anew_while_its_pass_runs_gets_none_of_the_old_one_s_status(
    cluster: FakeKubeApiServer,
) -> None:
    """The config is deleted and created again (another model) while the pass writes its data plane:
    the new object kept the old one's status (``models: llama``, ``GatewayProgrammed=True`` for a
    spec never applied). Now the old pass writes nothing and the new object's own pass reports it."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    old_uid = cluster.add(igwc("chat"))["metadata"]["uid"]
    kind = cluster.store.kind_for(api_version=IGWC_API_VERSION, kind="InferenceGatewayConfig")
    made_anew: list[str] = []

    def recreate_during_the_first_real_write(
        operation: str, written: Any, obj: Mapping[str, Any], old: Mapping[str, Any] | None, dry_run: bool
    ) -> None:
        if not dry_run and not made_anew and written.plural == "configmaps":
            cluster.store.delete(kind, "inference", "chat")
            made_anew.append(cluster.add(igwc("chat", model="mistral"))["metadata"]["uid"])

    cluster.store.validators.append(recreate_during_the_first_real_write)
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert made_anew
    assert made_anew[0] != old_uid
    new = find(cluster, "InferenceGatewayConfig", "inference", "chat") or {}
    assert new["metadata"]["uid"] == made_anew[0]
    assert new.get("status") is None, new.get("status")

    cluster.store.validators.remove(recreate_during_the_first_real_write)
    for dangling in owned_by(cluster, old_uid):  # the garbage collector's part: their owner is gone
        meta = dangling["metadata"]
        dependent = cluster.store.kind_for(api_version=dangling["apiVersion"], kind=dangling["kind"])
        cluster.store.delete(dependent, meta["namespace"], meta["name"])
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    new = find(cluster, "InferenceGatewayConfig", "inference", "chat") or {}
    assert new["status"]["models"] == "mistral"
    assert condition(new, "GatewayProgrammed")["status"] == "True"


def test_the_status_write_is_a_merge_onto_the_status_read_and_only_onto_that_object(
    cluster: FakeKubeApiServer,
) -> None:
    """``Kube.write_status`` gives the stored status a merge patch would (``None`` removes a key,
    mappings merge), and writes nothing, answering ``False``, once the name holds another object or
    none (the InferenceObjective / InferenceModelRewrite verdicts go through it too)."""
    kube = Kube(cluster.api_client())
    first = cluster.add(igwc("chat"))
    assert asyncio.run(
        kube.write_status(
            first, {"models": "a", "tls": {"acmArn": "arn:1", "issuedAt": "2026-12-06T10:00:00Z"}}
        )
    )
    read = find(cluster, "InferenceGatewayConfig", "inference", "chat") or {}
    assert asyncio.run(kube.write_status(read, {"tls": None, "address": "x", "schedulers": []}))
    stored = find(cluster, "InferenceGatewayConfig", "inference", "chat") or {}
    assert stored["status"] == {"models": "a", "address": "x", "schedulers": []}
    assert merged_status({"a": {"b": 1, "c": 2}, "d": 1}, {"a": {"c": None, "e": 3}, "d": None}) == {
        "a": {"b": 1, "e": 3}
    }

    kind = cluster.store.kind_for(api_version=IGWC_API_VERSION, kind="InferenceGatewayConfig")
    cluster.store.delete(kind, "inference", "chat")
    assert asyncio.run(kube.write_status(stored, {"models": "stale"})) is False
    second = cluster.add(igwc("chat"))
    assert asyncio.run(kube.write_status(stored, {"models": "stale"})) is False
    assert (find(cluster, "InferenceGatewayConfig", "inference", "chat") or {}).get("status") is None
    assert asyncio.run(kube.write_status(second, {"models": "b"})) is True
    assert (find(cluster, "InferenceGatewayConfig", "inference", "chat") or {})["status"] == {"models": "b"}
