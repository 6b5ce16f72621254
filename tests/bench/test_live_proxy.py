"""Round-robin proxy and load generator over real HTTP against the simulated fleet on loopback."""

from __future__ import annotations

import socket
from collections import Counter

from igw.bench.loadgen import LiveRequest, drive
from igw.bench.rr_proxy import BACKEND_HEADER, RoundRobinProxy
from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec, PodSpec


def _fleet(n: int) -> FleetSpec:
    return FleetSpec(
        pods=tuple(PodSpec(preset="llama-3.1-8b/h100", name=f"h100-{i}") for i in range(n)), time_scale=0.05
    )


def _requests(n: int, model: str) -> list[LiveRequest]:
    return [
        LiveRequest(at_s=0.01 * i, model=model, prompt=f"question {i} " * 40, max_tokens=8, prompt_tokens=120)
        for i in range(n)
    ]


async def test_proxy_alternates_backends_and_streams_every_token() -> None:
    async with run_fleet(_fleet(2), admin=False) as fleet:
        backends = [p.url for p in fleet.pods]
        async with RoundRobinProxy(backends=backends) as proxy:
            samples = await drive(
                base_url=proxy.url,
                requests=_requests(6, fleet.pods[0].model),
                endpoint_headers=[BACKEND_HEADER],
            )
    assert all(s.ok for s in samples)
    assert Counter(s.endpoint for s in samples) == {backends[0]: 3, backends[1]: 3}
    assert proxy.dispatched == {backends[0]: 3, backends[1]: 3}
    for s in samples:
        assert s.output_tokens == 8
        assert s.ttft_s is not None
        assert s.e2e_s is not None
        assert 0 < s.ttft_s <= s.e2e_s
        assert s.itl_s is not None
        assert s.itl_s > 0
        assert s.prompt_tokens > 0


async def test_unreachable_backend_is_a_failed_sample_not_a_crash() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with RoundRobinProxy(backends=[dead]) as proxy:
        samples = await drive(
            base_url=proxy.url, requests=_requests(2, "m"), endpoint_headers=[BACKEND_HEADER]
        )
    assert [s.ok for s in samples] == [False, False]
    assert {s.endpoint for s in samples} == {dead}
    assert all(s.ttft_s is None and s.output_tokens == 0 for s in samples)
