"""A client's ``X-Request-Id`` names its request in logs and answers, not in the scheduler's state.

Before session s35 the scheduler's per-request state was keyed by the request id, which is the
client's ``X-Request-Id`` when it sends a plausible one: the backlog scorer's dispatches awaiting a
first token, the prefill-collision scorer's queue, the LoRA slot filter's slots in use, the output
affinity's tracked requests. Two requests in flight under one client-chosen id (a client that sends
its session id, a retrying SDK, a caller doing it on purpose) were taken for one retried request:
the second's pick ended the first's dispatch, and the first's outcome was learned as the second's
- its time to first token taught as the other pod's speed."""

from __future__ import annotations

import asyncio
from typing import Any

from igw.scheduling.plugins.backlog_ttft_scorer import BacklogTtftScorer
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler
from tests.gateway.test_openai_apis import CHAT_MODEL

DOC = config_doc([scheduler("llama", CHAT_MODEL)])


def _backlog(gw: Any) -> BacklogTtftScorer:
    plugins = gw.state.runtime.schedulers["llama"].scheduler._plugins
    (found,) = [p for p in plugins if isinstance(p, BacklogTtftScorer)]
    return found


_STREAMED_CHAT = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def _streamed_chat_under(gw: Any, request_id: str) -> tuple[int, str]:
    """A streamed chat completion sent with ``X-Request-Id: request_id``, read to its end; its status
    and the ``X-Request-Id`` the gateway answered with."""
    async with gw.http.post(
        gw.url + "/v1/chat/completions", json=_STREAMED_CHAT, headers={"X-Request-Id": request_id}
    ) as r:
        await r.read()
        return r.status, r.headers["X-Request-Id"]


async def test_requests_sharing_a_client_request_id_are_two_requests_to_the_scheduler(gateway: Any) -> None:
    """Two streamed requests under one client-chosen id, on a slow pod and a fast one: the backlog
    scorer learns each pod's time to first token from its own request (before s35 the fast pod's
    first token ended the slow pod's dispatch, whose sample was then lost)."""
    slow, fast = FakeModelServer("slow", first_token_delay_s=0.5), FakeModelServer("fast")
    pods = [slow, fast]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods]}) as gw:
        backlog = _backlog(gw)
        two = [_streamed_chat_under(gw, "session-7") for _ in range(2)]
        assert list(await asyncio.gather(*two)) == [(200, "session-7")] * 2  # still their name
        assert [len(p.received) for p in pods] == [1, 1]  # one on each pod
        sent = [{k.lower(): v for k, v in p.received[0].headers.items()} for p in pods]
        # the pods get the client's id, each request's made unique (upstream_request_id)
        assert all(h["x-request-id"].startswith("session-7-") for h in sent)
        assert sent[0]["x-request-id"] != sent[1]["x-request-id"]
        fits = backlog.fits
        assert sorted(fits) == sorted(p.key for p in pods)  # each pod's first token learned
        assert fits[slow.key].mean_y > 0.4 > fits[fast.key].mean_y  # ... as its own
        assert sum(backlog.pending.values()) == 0


async def test_two_tenants_requests_under_one_client_id_are_two_ids_to_the_engine(gateway: Any) -> None:
    """vLLM takes ``X-Request-Id`` as the engine's id of a request, and its releases before
    vllm-project/vllm#27987 refuse a second request under an id in flight (400 ``Request id ...
    already running``). Before session s40 the pod got the client's id as it came: two requests
    under one id on one pod (two tenants' callers sending the same id, or one tenant sending the
    id it saw another use) were one engine id. Now each reaches the pod under an id of its own,
    led by the client's, and each client gets back the id it sent."""
    pod = FakeModelServer("only", first_token_delay_s=0.2)
    async with running(pod), gateway(DOC, {"llama": [pod.key]}) as gw:
        two = [_streamed_chat_under(gw, "req-1") for _ in range(2)]
        assert list(await asyncio.gather(*two)) == [(200, "req-1")] * 2
        ids = [{k.lower(): v for k, v in r.headers.items()}["x-request-id"] for r in pod.received]
        assert len(set(ids)) == len(ids) == 2, ids  # two engine ids
        assert all(i.startswith("req-1-") for i in ids)
        # an id the gateway made itself goes to the pod as the client sees it
        async with gw.http.post(gw.url + "/v1/chat/completions", json=_STREAMED_CHAT) as r:
            await r.read()
            last = {k.lower(): v for k, v in pod.received[-1].headers.items()}
            assert last["x-request-id"] == r.headers["X-Request-Id"]
