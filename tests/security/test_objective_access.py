"""Who may put a request in a high band: ``objectiveAccess`` and ``headerPriorityLimit``.

``x-gateway-inference-objective`` is chosen by the client, so without limits any client can mark its
batch traffic ``Critical`` and defeat the bands. These tests pin the limits: the table for the rule
itself, then the whole path with real JWTs, where only the authenticated tenant claim may unlock an
objective (the client-chosen fairness header never does).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Any

import pytest

from igw.scheduling.flow_control import (
    FlowControlError,
    FlowControlSettings,
    header_objective_allowed,
    priority_for,
)
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.security.helpers import DELETE, GuardMaker, TokenFactory, bearer

FLOW = {
    "pollInterval": "10ms",
    "headerPriorityLimit": 0,
    "objectives": [
        {"name": "chat", "priority": 10},
        {"name": "reports", "priority": 5},
        {"name": "batch", "priority": -5},
        {"name": "bound-by-crd", "priority": 20},  # as the operator merges an InferenceObjective object
    ],
    "objectiveAccess": [
        {"objective": "chat", "tenants": ["team-chat"]},
        {"objective": "Critical", "tenants": ["oncall"]},
        {"objective": "bound-by-crd", "tenants": ["team-chat"]},
    ],
}
SETTINGS = FlowControlSettings.from_extension(FLOW)


@pytest.mark.parametrize(
    ("objective", "tenant", "allowed"),
    [
        ("chat", "team-chat", True),  # listed: may exceed the limit
        ("chat", "team-batch", False),  # not listed
        ("chat", None, False),  # anonymous: never listed
        ("reports", "team-chat", False),  # above the limit, not reserved for anyone
        ("Critical", "oncall", True),  # a named band reserved for a tenant
        ("bound-by-crd", "team-chat", True),  # reserved by name, defined by the operator's merge
        ("bound-by-crd", "team-batch", False),
        ("Critical", "team-chat", False),  # the named bands obey the limit too
        ("Standard", None, True),  # at the limit
        ("Sheddable", None, True),  # below it
        ("batch", "team-batch", True),
        ("no-such-objective", None, True),  # unknown: counts as absent anyway
    ],
)
def test_header_objective_table(objective: str, tenant: str | None, allowed: bool) -> None:
    assert header_objective_allowed(objective, SETTINGS, authenticated_tenant=tenant) is allowed


def test_an_objective_reserved_twice_is_refused_naming_the_path() -> None:
    twice = {
        "objectiveAccess": [{"objective": "chat", "tenants": ["a"]}, {"objective": "chat", "tenants": ["b"]}]
    }
    with pytest.raises(
        FlowControlError, match=r"flowControl\.objectiveAccess\[1\]\.objective: 'chat' is listed twice"
    ):
        FlowControlSettings.from_extension(twice)


def test_without_limits_every_client_may_name_every_objective() -> None:
    """The reference's behaviour stays the default."""
    open_settings = FlowControlSettings.from_extension({"objectives": [{"name": "chat", "priority": 10}]})
    assert open_settings.header_priority_limit is None
    for objective in ("chat", "Critical", "Sheddable"):
        assert header_objective_allowed(objective, open_settings, authenticated_tenant=None)
    assert priority_for("Critical", open_settings.objectives) == 1


async def test_only_the_authenticated_tenant_unlocks_an_objective(
    gateway: Callable[..., Any], make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    guard = await make_guard(extensions={"authorization": {"tenantClaim": "tenant"}}, real_clock=True)
    now = int(time.time())
    chat = bearer(tokens.token(tenant="team-chat", iat=now, exp=now + 600))
    batch = bearer(tokens.token(tenant="team-batch", iat=now, exp=now + 600))
    doc = config_doc([scheduler("pool", "m1")])
    doc["spec"]["extensions"]["flowControl"] = FLOW

    async with (
        running(FakeModelServer("a", waiting=9)) as (pod,),  # saturated: every request queues
        gateway(doc, {"pool": [pod.key]}, guard=guard) as gw,
    ):

        async def send(auth: dict[str, str], objective: str, fairness: str | None = None) -> int:
            headers = {**auth, "x-gateway-inference-objective": objective}
            if fairness is not None:
                headers["x-gateway-inference-fairness-id"] = fairness
            body = {"model": "m1", "prompt": "x", "max_tokens": 2}
            resp = await gw.post("/v1/completions", body, headers=headers)
            await resp.read()
            status: int = resp.status
            return status

        sent = [
            asyncio.create_task(send(batch, "Critical")),  # above the limit: Standard
            asyncio.create_task(send(batch, "chat", fairness="team-chat")),  # the header is no identity
            asyncio.create_task(send(chat, "chat")),  # listed: 10
            asyncio.create_task(send(batch, "Sheddable")),  # below the limit: -1
        ]
        await wait_for(
            lambda: gw.state.flow.depths("pool") == {0: 2, 10: 1, -1: 1}, within=10, what="classified"
        )
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_flow_objective_denied_total{objective="Critical",scheduler="pool"} 1.0' in metrics
        assert 'igw_flow_objective_denied_total{objective="chat",scheduler="pool"} 1.0' in metrics
        pod.waiting = 0
        assert await asyncio.wait_for(asyncio.gather(*sent), timeout=20) == [200, 200, 200, 200]


async def test_a_caller_without_a_tenant_claim_cannot_mint_tenants_to_push_out_queued_requests(
    gateway: Callable[..., Any], make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    """With authentication on, a token without the tenant claim named its tenant by fairness header:
    a new name per request was a new tenant, and each arrival in a full band pushed out another of
    the authenticated tenant's queued requests (429, ``fair_share``), three of four here. Now such
    callers share one tenant, which gets its fair share and no more: two of four."""
    guard = await make_guard(extensions={"authorization": {"tenantClaim": "tenant"}}, real_clock=True)
    now = int(time.time())
    victim = bearer(tokens.token(tenant="victim", iat=now, exp=now + 600))
    unclaimed = bearer(tokens.token(tenant=DELETE, iat=now, exp=now + 600))
    doc = config_doc([scheduler("pool", "m1")])
    doc["spec"]["extensions"]["flowControl"] = {
        "pollInterval": "10ms",
        "bands": [{"priority": 0, "maxRequests": 4}],
    }

    async with (
        running(FakeModelServer("a", waiting=9)) as (pod,),  # saturated: every request queues
        gateway(doc, {"pool": [pod.key]}, guard=guard) as gw,
    ):

        async def send(auth: dict[str, str], fairness: str | None = None) -> tuple[int, str | None]:
            headers = dict(auth)
            if fairness is not None:
                headers["x-gateway-inference-fairness-id"] = fairness
            resp = await gw.post(
                "/v1/completions", {"model": "m1", "prompt": "x", "max_tokens": 2}, headers=headers
            )
            body = await resp.json()
            return resp.status, (body.get("error") or {}).get("code")

        victims = []
        for i in range(4):
            victims.append(asyncio.create_task(send(victim)))
            await wait_for(functools.partial(_queued, gw, i + 1), within=10, what="queued")
        others = []
        for i in range(3):
            others.append(asyncio.create_task(send(unclaimed, fairness=f"made-up-{i}")))
            await asyncio.sleep(0.3)  # each arrival is placed (or refused) before the next
        pod.waiting = 0
        victim_results = await asyncio.wait_for(asyncio.gather(*victims), timeout=20)
        other_results = await asyncio.wait_for(asyncio.gather(*others), timeout=20)
    shed = (429, "request_shed")
    assert sorted(victim_results) == [(200, None), (200, None), shed, shed]  # before: three shed
    assert sorted(other_results) == [(200, None), (200, None), shed]  # the third found its share taken


def _queued(gw: Any, count: int) -> bool:
    """Whether ``count`` requests wait in the pool's band 0."""
    depths: dict[int, int] = gw.state.flow.depths("pool")
    return depths == {0: count}
