"""The gateway refuses a request as longer than every context window only when it surely is.

The prompt's size is an estimate (4 characters per token); English text runs about 4.5, so a prompt
the model server accepts can be estimated past its window. Before session s39 the estimate itself
decided: such a prompt was answered 400 ``context_length_exceeded`` by the gateway, never reaching
the pod that would have served it."""

from __future__ import annotations

from typing import Any

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for

MODEL = "llama"
DOC = config_doc([scheduler("llama", MODEL)])


async def test_a_prompt_estimated_past_the_window_goes_to_the_pod_and_only_a_sure_overflow_is_refused(
    gateway: Any,
) -> None:
    small, large = (
        FakeModelServer("small", max_model_len=1_000),
        FakeModelServer("large", max_model_len=2_000),
    )
    pods = [small, large]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods]}) as gw:
        pool = gw.state.runtime.schedulers["llama"].pool
        await wait_for(
            lambda: [pool.states[p.key].max_model_len for p in pods] == [1_000, 2_000],
            within=10,
            what="context windows read from /v1/models",
        )

        async def complete(prompt: str, max_tokens: int) -> tuple[int, dict[str, Any]]:
            body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}
            async with gw.http.post(gw.url + "/v1/completions", json=body) as resp:
                return resp.status, await resp.json()

        # ~2,250 tokens estimated (9,000 characters): past both windows, yet 1,800 words of five
        # characters each are fewer tokens than the large pod holds: it decides, and serves it
        status, _ = await complete("word " * 1_800, 16)
        assert status == 200
        assert [len(p.received) for p in pods] == [0, 1]

        # estimated at more than four times the largest window: refused, no pod touched
        status, answer = await complete("w" * 40_000, 16)
        assert status == 400
        error = answer["error"]
        assert error["code"] == "context_length_exceeded"
        assert error["param"] is None  # the prompt is too long, not max_tokens
        assert "2000" in error["message"]
        # an output bound no window holds: refused naming max_tokens
        status, answer = await complete("hello", 2_000)
        assert (status, answer["error"]["param"]) == (400, "max_tokens")
        assert [len(p.received) for p in pods] == [0, 1]
