"""The Responses API ids the gateway chooses (:mod:`igw.gateway.response_ids`): their shape, the
owner they are bound to, and which pools get them (the through-the-gateway checks with tokens are in
tests/security/test_response_ownership.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from igw.gateway.guards import ANONYMOUS, Principal, caller_scope
from igw.gateway.response_ids import MINTED_LENGTH, logged_id, logged_url, mint, minted_for
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler


def test_a_minted_id_is_an_engine_shaped_id_bound_to_its_owner() -> None:
    rid = mint("tenant:team-a")
    assert rid.startswith("resp_")  # what vLLM and SGLang require of a continued id
    assert len(rid) == MINTED_LENGTH
    assert all(c in "0123456789abcdef" for c in rid[5:])
    assert minted_for(rid, "tenant:team-a") is True
    assert minted_for(rid, "tenant:team-b") is False
    assert minted_for(rid, "") is False
    assert mint("tenant:team-a") != rid  # a new nonce each time
    # one changed digit of the nonce or of the tag: no longer the owner's
    for i in (5, MINTED_LENGTH - 1):
        changed = rid[:i] + ("0" if rid[i] != "0" else "1") + rid[i + 1 :]
        assert minted_for(changed, "tenant:team-a") is False


@pytest.mark.parametrize(
    "other",
    [
        "resp_a_1",
        "resp_" + "0" * 32,  # an engine's own resp_<uuid4 hex>
        "resp_" + "A" * 56,  # the length, not the digits
        "chat_" + "0" * 56,
        "resp_" + "0" * 57,
        "",
    ],
)
def test_an_id_of_another_shape_is_not_judged(other: str) -> None:
    assert minted_for(other, "tenant:team-a") is None


def test_the_owner_is_the_tenant_else_the_subject_else_nobody_in_particular() -> None:
    assert caller_scope(Principal(subject="alice", tenant="team-a", authenticated=True)) == "tenant:team-a"
    assert caller_scope(Principal(subject="alice", authenticated=True)) == "subject:alice"
    assert caller_scope(Principal(authenticated=True)) == ""
    assert caller_scope(ANONYMOUS) == ""
    # a tenant and a subject of the same name are different owners
    assert minted_for(mint("tenant:x"), "subject:x") is False


def engines_doc(**routing: Any) -> dict[str, Any]:
    """Three pools: models ``v`` (vLLM), ``s`` (SGLang) and ``g`` (a generic engine read through
    metric specs), for what the gateway writes into the bodies of some engines' pools only."""
    doc = config_doc(
        [
            scheduler("vllm-pool", "v"),
            scheduler("sglang-pool", "s", engineType="sglang"),
            scheduler("generic-pool", "g"),
        ],
        routing=routing or None,
    )
    generic = {
        "scheduler": "generic-pool",
        "queue": "vllm:num_requests_waiting",
        "running": "vllm:num_requests_running",
    }
    doc["spec"].setdefault("extensions", {})["engines"] = {"generic": [generic]}
    return doc


async def test_pools_whose_engine_stores_under_request_id_get_a_minted_one(gateway: Any) -> None:
    """vLLM and SGLang take the stored response's id from ``request_id``; another engine gets the
    client's body unchanged (one that refuses unknown fields would refuse the request): here a
    generic engine read through metric specs."""
    pods = {"v": FakeModelServer("v"), "s": FakeModelServer("s", engine="sglang"), "g": FakeModelServer("g")}
    pools = {"v": "vllm-pool", "s": "sglang-pool", "g": "generic-pool"}
    async with running(*pods.values()):
        endpoints = {pools[model]: [pod.key] for model, pod in pods.items()}  # bound: their ports
        async with gateway(engines_doc(), endpoints) as gw:
            for model, pod in pods.items():
                sent = {"model": model, "input": "hi"}
                answer = await gw.post("/v1/responses", sent)
                assert answer.status == 200, model
                forwarded = orjson.loads(pod.received[-1].body)
                if model == "g":
                    assert forwarded == sent
                else:
                    assert minted_for(forwarded["request_id"], "") is True
                    assert (await answer.json())["id"] == forwarded["request_id"]
                    assert {k: v for k, v in forwarded.items() if k != "request_id"} == sent
            refused = await gw.post("/v1/responses", {"model": "v", "input": "x", "request_id": "resp_mine"})
            assert refused.status == 400
            assert (await refused.json())["error"]["param"] == "request_id"


def test_a_redirect_s_location_names_a_stored_response_by_its_reference() -> None:
    """A ``Location`` (:func:`logged_url`) keeps host and path but no stored response's id: the one
    after ``/v1/responses/`` and the asked one wherever it stands; a path naming none is kept."""
    asked = "resp_3fa85f64-5717-4562-b3fc-2c963f66afa6"
    ref = logged_id(asked)
    assert logged_url(f"http://pod:8000/v1/responses/{asked}/", f"/v1/responses/{asked}") == (
        f"http://pod:8000/v1/responses/{ref}/"
    )
    assert logged_url(f"/store/{asked}?x=1", f"/v1/responses/{asked}/cancel") == f"/store/{ref}?x=1"
    assert logged_url("/v1/responses/resp_other", "/v1/completions") == (
        f"/v1/responses/{logged_id('resp_other')}"
    )
    assert logged_url("https://h/v1/models", "/v1/completions") == "https://h/v1/models"
