"""The security dashboard and the overview's 429-by-band panels against a live ``igw serve`` that has
answered real 401, 403 and 429s: every series a panel reads exists, labelled by reason, tenant and
band, so no panel of the security dashboard is empty in front of the traffic it is meant to show."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
import yaml
from prometheus_client.parser import text_string_to_metric_families

from igw.addon.dashboards import OVERVIEW, SECURITY
from igw.addon.promql_names import metric_names
from igw.perf.serve_process import serve_process
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler
from tests.security.helpers import AUDIENCE, JwksServer, Keys, TokenFactory

MODEL = "m"
NO_SAMPLES_WITHOUT_A_REDIS_OUTAGE = {"igw_ratelimit_backend_errors_total"}
"""Counted only when the Redis rate-limit backend fails; this gateway uses the local backend."""


def secured_config(jwks: JwksServer) -> dict[str, Any]:
    doc = config_doc([scheduler(MODEL, MODEL), scheduler("secret", "secret")])
    spec = doc["spec"]
    spec["auth"] = {
        "jwt": {
            "provider": {
                "name": "idp",
                "issuer": jwks.issuer,
                "remoteJWKS": {"uri": jwks.jwks_uri},
                "audiences": [AUDIENCE],
            }
        }
    }
    spec["extensions"]["authorization"] = {
        "modelAccess": [{"claim": "tenant", "values": ["team-a"], "models": [MODEL]}]
    }
    spec["extensions"]["rateLimits"] = {"default": {"requestsPerSecond": 0.001, "burst": 4}}
    spec["extensions"]["flowControl"] = {"maxRequests": 1, "pollInterval": "10ms"}
    return doc


async def test_security_panels_read_the_series_401_403_429_traffic_creates(
    tmp_path: Path,
    ca: trustme.CA,
    keys: Keys,
    jwks_server: JwksServer,
    tokens: TokenFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # igw serve trusts the test issuer
    tokens.clock.now = time.time()
    config, endpoints = tmp_path / "igwc.yaml", tmp_path / "endpoints.yaml"
    config.write_text(yaml.safe_dump(secured_config(jwks_server)))
    async with running(FakeModelServer("pod", waiting=9), FakeModelServer("other")) as (pod, other):
        endpoints.write_text(yaml.safe_dump({"schedulers": {MODEL: [pod.key], "secret": [other.key]}}))
        lines: list[str] = []
        async with (
            serve_process(config, endpoints, on_line=lines.append) as gw,
            aiohttp.ClientSession() as http,
        ):

            async def send(token: str | None, *, model: str = MODEL, band: str | None = None) -> int:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                if band:
                    headers["x-gateway-inference-objective"] = band
                body = {"model": model, "prompt": "hi", "max_tokens": 2}
                async with http.post(gw.url + "/v1/completions", json=body, headers=headers) as resp:
                    await resp.read()
                    return resp.status

            team_a = tokens.token()
            assert await send(None) == 401
            assert await send("not-a-jwt") == 401
            jwks_server.mode = "status"  # the issuer fails: an unknown key id makes the gateway refetch
            assert await send(tokens.token(keys.rsa2)) == 401
            jwks_server.mode = "ok"
            assert await send(tokens.token(tenant="team-b")) == 403
            assert await send(team_a, model="secret") == 403

            # Flow control: the pod is saturated, a sheddable request waits, a critical one displaces it.
            sheddable = asyncio.create_task(send(team_a, band="Sheddable"))
            for _ in range(3000):  # until the gateway reports it queued (generous: a loaded machine)
                if 'igw_flow_queue_depth{priority="-1"' in await (await http.get(gw.url + "/metrics")).text():
                    break
                await asyncio.sleep(0.01)
            critical = asyncio.create_task(send(team_a, band="Critical"))
            assert await asyncio.wait_for(sheddable, timeout=30) == 429
            pod.waiting = 0
            assert await asyncio.wait_for(critical, timeout=30) == 200
            statuses = [await send(team_a) for _ in range(4)]  # the burst of 4 runs out: 429
            assert statuses[-1] == 429, statuses
            text = await (await http.get(gw.url + "/metrics")).text()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    def labels_of(name: str) -> list[dict[str, str]]:
        return [s.labels for s in samples if s.name == name and s.value > 0]

    reasons = {d["reason"] for d in labels_of("igw_auth_denied_total")}
    assert reasons == {"missing_token", "not_compact_jws", "no_matching_key"}
    outcomes = {(d["tenant"], d["outcome"]) for d in labels_of("igw_tenant_requests_total")}
    assert {("team-b", "forbidden"), ("team-a", "forbidden"), ("team-a", "limited_requests")} <= outcomes
    (shed,) = labels_of("igw_flow_rejections_total")
    assert (shed["tenant"], shed["priority"], shed["scheduler"]) == ("team-a", "-1", MODEL)
    assert any(d["result"] != "ok" for d in labels_of("igw_jwks_fetch_total")), labels_of(
        "igw_jwks_fetch_total"
    )

    with_samples = {s.name for s in samples}
    read = set().union(
        *(metric_names(q.expr) for _, panels in SECURITY.rows for p in panels for q in p.queries),
        *(
            metric_names(q.expr)
            for title, panels in OVERVIEW.rows
            if "429" in title
            for p in panels
            for q in p.queries
        ),
    )
    assert read - with_samples == NO_SAMPLES_WITHOUT_A_REDIS_OUTAGE
