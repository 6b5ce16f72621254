"""End-to-end routing decisions (prefix and LoRA affinity), the access log, and the guard seam."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from igw.gateway.guards import GuardDenied, GuardReadiness, Principal
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler


async def test_shared_prefix_sticks_to_one_endpoint(gateway: Any) -> None:
    servers = [FakeModelServer(f"s{i}") for i in range(3)]
    async with (
        running(*servers),
        gateway(config_doc([scheduler("pool", "m")]), {"pool": [s.key for s in servers]}) as gw,
    ):
        system = "You are a meticulous assistant. " * 20
        groups: dict[int, Counter[str]] = {}
        for g in range(3):
            got: Counter[str] = Counter()
            for q in range(5):
                body = {"model": "m", "prompt": f"{system} group {g} " * 3 + f"question {q}"}
                got[(await (await gw.post("/v1/completions", body)).json())["server"]] += 1
            groups[g] = got
        assert all(len(c) == 1 for c in groups.values()), groups  # each prefix group stays on one pod


async def test_cold_prompts_spread_over_the_endpoints(gateway: Any) -> None:
    servers = [FakeModelServer(f"s{i}") for i in range(3)]
    async with (
        running(*servers),
        gateway(config_doc([scheduler("pool", "m")]), {"pool": [s.key for s in servers]}) as gw,
    ):
        chosen: Counter[str] = Counter()
        for i in range(12):
            # No prompt shares a cache block with another: every request is cold on every pod, the
            # pods look alike, so nothing may pull the requests onto one of them.
            body = {"model": "m", "prompt": f"topic {i}: unrelated question number {i * 7919} " * 20}
            chosen[(await (await gw.post("/v1/completions", body)).json())["server"]] += 1
        assert len(chosen) >= 2, chosen  # spread, not herded onto one pod


async def test_lora_request_prefers_endpoint_running_the_adapter(gateway: Any) -> None:
    d = config_doc(
        [scheduler("pool", "base", loraAdapters=["sql"], weights={"prefix": 0, "loraAffinity": 5})]
    )
    with_sql = FakeModelServer("has-sql", max_lora=1, running_adapters="sql")
    full = FakeModelServer("full", max_lora=1, running_adapters="other")
    async with running(with_sql, full), gateway(d, {"pool": [with_sql.key, full.key]}) as gw:
        for _ in range(5):
            resp = await gw.post("/v1/completions", {"model": "sql", "prompt": "x"})
            assert (await resp.json())["server"] == "has-sql"


async def test_access_log_is_json_with_endpoint_and_scores(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="igw.access")
    async with (
        running(FakeModelServer("a")) as (a,),
        gateway(config_doc([scheduler("pool", "m")]), {"pool": [a.key]}) as gw,
    ):
        await (
            await gw.post("/v1/completions", {"model": "m", "prompt": "x"}, headers={"x-request-id": "rid-1"})
        ).read()
    entries = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
    entry = next(e for e in entries if e["request_id"] == "rid-1")
    assert entry["status"] == 200
    assert entry["endpoint"] == a.key
    assert entry["scheduler"] == "pool"
    assert set(entry["scores"][a.key]) >= {
        "queue-scorer",
        "kv-cache-utilization-scorer",
        "prefix-cache-scorer",
        "total",
    }
    assert entry["decision_us"] > 0
    assert entry["completion_tokens"] == 5


class RecordingGuard:
    """A RequestGuard at the security seam that records calls and can refuse."""

    stripped_request_headers = frozenset({"authorization", "x-igw-tenant"})

    def __init__(self, *, deny_model: str | None = None) -> None:
        self.calls: list[str] = []
        self.deny_model = deny_model
        self.accounted: list[tuple[str, int, int]] = []

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        self.calls.append("authenticate")
        if headers.get("authorization") != "Bearer good":
            raise GuardDenied(
                status=401,
                message="bad token",
                error_type="authentication_error",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return Principal(
            subject="u1", tenant="t1", forward_headers={"x-igw-tenant": "t1"}, authenticated=True
        )

    def authorize(self, principal: Principal, *, model: str) -> None:
        self.calls.append("authorize")
        if model == self.deny_model:
            raise GuardDenied(status=403, message=f"not allowed: {model}", error_type="permission_error")

    def may_use(self, principal: Principal, *, model: str) -> bool:
        return model != self.deny_model

    async def admit(self, principal: Principal, *, model: str, est_tokens: int | None) -> None:
        self.calls.append("admit")

    async def account(
        self,
        principal: Principal,
        *,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        reserved_tokens: int = 0,
        reservation: str | None = None,
    ) -> None:
        self.calls.append("account")
        self.accounted.append((model, prompt_tokens, completion_tokens))

    async def settle(self, *, reservation: str, completion_tokens: int) -> None:
        self.calls.append("settle")

    def readiness(self) -> GuardReadiness:
        return GuardReadiness(ready=True, detail="test guard")

    async def start(self) -> None:
        self.calls.append("start")

    async def close(self) -> None:
        self.calls.append("close")


class ForwardOnlyGuard(RecordingGuard):
    """A guard whose principal carries a header (mixed case) that its strip set does not name: the
    gateway itself must still drop the client's copies of it."""

    stripped_request_headers = frozenset({"authorization"})

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        await super().authenticate(headers)  # the 401 for a bad token
        return Principal(tenant="t1", forward_headers={"X-Team": "blue"}, authenticated=True)


async def test_forwarded_identity_headers_replace_client_copies_the_guard_does_not_strip(
    gateway: Any,
) -> None:
    async with (
        running(FakeModelServer("a")) as (a,),
        gateway(config_doc([scheduler("pool", "m")]), {"pool": [a.key]}, guard=ForwardOnlyGuard()) as gw,
    ):
        ok = await gw.post(
            "/v1/completions",
            {"model": "m", "prompt": "x"},
            headers={"authorization": "Bearer good", "x-team": "spoofed", "X-TEAM": "again"},
        )
        assert ok.status == 200
        await ok.read()
        sent = a.received[-1].headers
        assert [v for k, v in sent.items() if k.lower() == "x-team"] == ["blue"]


async def test_guard_is_called_in_order_and_identity_headers_are_replaced(gateway: Any) -> None:
    guard = RecordingGuard(deny_model="secret")
    d = config_doc([scheduler("pool", "m"), scheduler("other", "secret")])
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (a, b),
        gateway(d, {"pool": [a.key], "other": [b.key]}, guard=guard) as gw,
    ):
        bad = await gw.post("/v1/completions", {"model": "m", "prompt": "x"})
        assert bad.status == 401
        assert bad.headers["WWW-Authenticate"] == "Bearer"
        assert (await bad.json())["error"]["type"] == "authentication_error"
        denied = await gw.post(
            "/v1/completions",
            {"model": "secret", "prompt": "x"},
            headers={"authorization": "Bearer good"},
        )
        assert denied.status == 403
        guard.calls.clear()
        ok = await gw.post(
            "/v1/completions",
            {"model": "m", "prompt": "x"},
            headers={"authorization": "Bearer good", "X-IGW-Tenant": "spoofed"},
        )
        assert ok.status == 200
        await ok.read()
        assert guard.calls == ["authenticate", "authorize", "admit", "account"]
        assert guard.accounted == [("m", 7, 5)]
        sent = a.received[-1].headers
        assert "Authorization" not in sent
        assert "authorization" not in sent
        assert [v for k, v in sent.items() if k.lower() == "x-igw-tenant"] == ["t1"]
        assert b.received == []
    assert guard.calls[0] == "authenticate"
    assert guard.calls[-1] == "close"
