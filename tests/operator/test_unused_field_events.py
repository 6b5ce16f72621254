"""The operator names AWS's fields an InferenceGatewayConfig sets that igw accepts without effect.

``igw validate`` prints a note for each; a user who applies the YAML with kubectl never runs it, and
the operator said nothing: ``logLevel: 4`` was accepted, served, and without effect, with no word
anywhere in the cluster. It posts one Warning Event (``FieldsWithoutEffect``) per generation of the
object - not one per reconciliation pass (a resync runs every few seconds), and not again for the same
generation after the operator restarts.
"""

from __future__ import annotations

import asyncio
from typing import Any

from igw.operator.dataplane import DataPlaneSettings
from igw.operator.kube import Kube
from igw.operator.reconcile import NOTES_REASON, Reconciler
from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import find, igwc, update_spec


def _notes_events(cluster: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.store.iter_all()
        if e["kind"] == "Event" and e["involvedObject"]["name"] == "chat" and e["reason"] == NOTES_REASON
    ]


def _passes(reconciler: Reconciler, count: int) -> None:
    for _ in range(count):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True


def test_one_warning_event_per_generation_names_each_field_without_effect(
    cluster: FakeKubeApiServer,
) -> None:
    doc = igwc("chat")
    doc["spec"]["bbr"]["replicas"] = 3
    doc["spec"]["schedulers"][0]["logLevel"] = 4
    cluster.add(doc)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    _passes(reconciler, 3)
    [event] = _notes_events(cluster)
    assert event["type"] == "Warning"
    message = event["message"]
    assert message.startswith("2 field(s) accepted (AWS's) but without effect in igw: ")
    assert "spec.bbr.replicas: body-based routing runs inside the gateway pods" in message
    assert "spec.schedulers[0].logLevel: one gateway process serves every scheduler" in message
    obj = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert obj is not None
    assert event["involvedObject"]["uid"] == obj["metadata"]["uid"]

    # a new generation: one more Event, naming what this one sets
    def edit(spec: dict[str, Any]) -> None:
        del spec["bbr"]["replicas"]
        spec["schedulers"][0]["envFrom"] = [{"configMapRef": {"name": "x"}}]

    update_spec(cluster, "inference", "chat", edit)
    _passes(reconciler, 3)
    first, second = _notes_events(cluster)
    assert first == event
    assert second["message"].startswith("2 field(s) accepted")
    assert "spec.schedulers[0].envFrom" in second["message"]
    assert "spec.bbr.replicas" not in second["message"]

    # another operator process (a restart, a new leader) does not post the same generation again
    _passes(Reconciler(Kube(cluster.api_client()), DataPlaneSettings()), 2)
    assert len(_notes_events(cluster)) == 2


def test_a_value_the_api_server_defaulted_gets_no_event(cluster: FakeKubeApiServer) -> None:
    """The API server writes the CRD's defaults into the stored object (``bbr.replicas: 2``): the
    operator cannot tell such a value from one the user wrote, and naming it put a Warning on every
    object with ``bbr`` (every object: the field is required)."""
    doc = igwc("chat")
    doc["spec"]["observability"] = {"metrics": {}}
    cluster.add(doc)
    stored = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert stored is not None
    assert stored["spec"]["bbr"]["replicas"] == 2  # the CRD's default, written by the API server
    assert stored["spec"]["observability"]["metrics"]["enabled"] is True
    _passes(Reconciler(Kube(cluster.api_client()), DataPlaneSettings()), 2)
    assert _notes_events(cluster) == []
