"""What the tests of a tier-1 search for a stored response share (``test_response_search_*.py``):
pods that store a response or freeze, the search's bounds shortened, a remembered holder, and a
request whose answer is checked for its status within a bound (a frozen pod must never hold a test)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.test_response_search import DOC, LLAMA

FROZEN_S = 3600.0
"""A frozen pod's delay before it answers anything about a stored response (it never does in a test)."""


def frozen(names: str) -> list[FakeModelServer]:
    """One frozen pod per letter of ``names``: each accepts a request about a stored response and
    never answers it."""
    return [FakeModelServer(name, stored_delay_s=FROZEN_S) for name in names]


def pools(pods: list[FakeModelServer]) -> dict[str, list[str]]:
    """``pods`` as the one pool ``llama`` (the gateway fixture's endpoints)."""
    return {"llama": [pod.key for pod in pods]}


def stored(pod: FakeModelServer, rid: str, **extra: Any) -> None:
    """``pod`` stores the response ``rid``."""
    pod.stored_responses[rid] = {"id": rid, "object": "response", "output": [], **extra}


def open_to(gw: Any, pods: list[FakeModelServer]) -> int:
    """The gateway's upstream connections still open to ``pods``."""
    ports = {pod.port for pod in pods}
    return sum(1 for conn in gw.state.upstream._open if conn.origin.port in ports)


def bounded(
    gw: Any, *, timeout_s: float, deadline_s: float | None = None, hedge_s: float | None = None
) -> Any:
    """The gateway's search bounds shortened (``None``: left as shipped); its searches returned."""
    searches = gw.state.response_searches
    searches.search_timeout_s = timeout_s
    if deadline_s is not None:
        searches.search_deadline_s = deadline_s
    if hedge_s is not None:
        searches.hedge_delay_s = hedge_s
    return searches


def remember(gw: Any, rid: str, pod: FakeModelServer) -> Any:
    """The ``llama`` scheduler remembers ``pod`` as storing ``rid``; its response memory returned."""
    sr = gw.state.runtime.schedulers["llama"]
    sr.scheduler.remember_response(rid, pod.key, now=gw.state.clock())
    return sr.scheduler.responses


async def answered(gw: Any, method: str, path: str, *, status: int, within_s: float = 10.0) -> Any:
    """``method path`` asked of the gateway, answered with ``status`` within ``within_s``: its JSON
    (an error answer's ``error`` object)."""
    async with asyncio.timeout(within_s):
        answer = await gw.http.request(method, gw.url + path)
        assert answer.status == status, await answer.text()
        doc = await answer.json()
    return doc["error"] if status >= 400 else doc


@dataclass
class FrozenHolder:
    """A running gateway whose ``llama`` scheduler remembers the frozen pod ``stuck`` as holding
    ``resp_1``, with one other pod ``other``; the gateway's searches and response memory."""

    gw: Any
    stuck: FakeModelServer
    other: FakeModelServer
    searches: Any
    responses: Any

    def asked(self) -> list[int]:
        """How many requests the frozen holder and the other pod have received."""
        return [len(self.stuck.received), len(self.other.received)]

    def assert_given_up(self, error: dict[str, Any]) -> None:
        """``error`` is the holder's 504 at the search timeout (0.5 s), each pod asked once (the
        holder not again), the holder still remembered and asked last, the id not listed as found
        nowhere, no search place held."""
        assert error["code"] == "upstream_timeout"
        assert error["message"] == "the model server sent no response within 0.5s"
        assert self.asked() == [1, 1]
        assert self.responses.endpoint_of("resp_1") == self.stuck.key
        assert set(self.searches._slow) == {self.stuck.key}
        assert not self.searches.recently_unfound("resp_1", now=self.gw.state.clock(), within=LLAMA)
        assert self.searches.in_flight == 0


@asynccontextmanager
async def frozen_holder(
    gateway: Callable[..., AbstractAsyncContextManager[Any]],
    *,
    stores: str = "a",
    timeout_s: float | None = 0.5,
    deadline_s: float | None = 1.4,
    hedge_s: float | None = None,
) -> AsyncIterator[FrozenHolder]:
    """A frozen pod ``a`` and a pod ``b`` (each storing ``resp_1`` when named in ``stores``) behind a
    gateway whose search bounds are shortened (``timeout_s=None``: left as shipped) and which
    remembers ``a`` as the holder of ``resp_1``."""
    (stuck,) = frozen("a")
    other = FakeModelServer("b")
    for pod in (stuck, other):
        if pod.name in stores:
            stored(pod, "resp_1")
    async with running(stuck, other), gateway(DOC, pools([stuck, other])) as gw:
        if timeout_s is None:
            searches = gw.state.response_searches
        else:
            searches = bounded(gw, timeout_s=timeout_s, deadline_s=deadline_s, hedge_s=hedge_s)
        responses = remember(gw, "resp_1", stuck)
        yield FrozenHolder(gw, stuck, other, searches, responses)
