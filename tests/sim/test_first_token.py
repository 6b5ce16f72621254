"""The DES tells a policy that wants it (``FirstTokenObserver``) of each first token, as a streaming
gateway sees it: once per request, with the request's TTFT, before its completion."""

from __future__ import annotations

from collections.abc import Sequence

from igw.scheduling.types import FirstTokenObserver, RequestOutcome
from igw.sim.des import simulate
from igw.sim.request import SimRequest
from igw.sim.spec import PodSpec
from tests.sim.support import RoundRobin

H100 = PodSpec(preset="llama-3.1-8b/h100", name="h")
A10G = PodSpec(preset="llama-3.1-8b/a10g", name="a")


class HearsFirstTokens(RoundRobin):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str, float | None]] = []

    def on_first_token(self, outcome: RequestOutcome, *, now: float) -> None:
        self.events.append(("first", outcome.request_id, outcome.ttft_s))

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        super().on_complete(outcome, now=now)
        self.events.append(("complete", outcome.request_id, outcome.ttft_s))


def requests(n: int) -> Sequence[SimRequest]:
    return [
        SimRequest(
            request_id=f"r{i}",
            arrival=0.01 * i,
            model="m",
            prompt_text=f"prompt {i} " * (20 + 7 * i),
            prompt_tokens=60 + 21 * i,
            output_tokens=1 + (i % 5) * 20,
        )
        for i in range(n)
    ]


def test_each_request_reports_its_first_token_once_before_completing() -> None:
    policy = HearsFirstTokens()
    assert isinstance(policy, FirstTokenObserver)
    result = simulate(pods=[H100, A10G], requests=requests(24), policy=policy, seed=3)
    by_id = {r.request_id: r for r in result.records}
    firsts = [e for e in policy.events if e[0] == "first"]
    assert sorted(rid for _, rid, _ in firsts) == sorted(by_id)
    for kind, rid, ttft in firsts:
        assert ttft == by_id[rid].ttft, (kind, rid)
        first_at = policy.events.index(("first", rid, ttft))
        assert first_at < policy.events.index(("complete", rid, ttft))


def test_a_policy_without_the_hook_is_not_called() -> None:
    policy = RoundRobin()
    assert not isinstance(policy, FirstTokenObserver)
    result = simulate(pods=[H100], requests=requests(5), policy=policy, seed=3)
    assert all(r.ok for r in result.records)
