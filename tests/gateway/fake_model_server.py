"""A minimal real model server (aiohttp on loopback) for gateway integration tests.

It speaks the OpenAI completions/chat API (SSE or JSON), the embeddings API, the Responses API and
the Anthropic Messages API (JSON, or SSE events named as vLLM's ``/v1/responses`` and
``/v1/messages`` send them), vLLM's rerank and score APIs, serves a ``/metrics`` page with the exact
family names of the engine and version it impersonates, records every request it receives, and can
be told to misbehave: die mid-stream, hang before the first token, refuse /metrics, answer slowly.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from igw.gateway.stream_usage import RELAY_USAGE, RELAY_USAGE_HEADER


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    nodelay: bool
    peer_port: int


PROMPT_TOKENS = 7
"""The prompt length every answer reports (the fake does not tokenize)."""


@dataclass
class FakeModelServer:
    name: str
    engine: str = "vllm"
    version: str = "0.12.0"
    host: str = "127.0.0.1"
    waiting: int = 0
    running: int = 0
    kv: float = 0.1
    running_adapters: str = ""
    waiting_adapters: str = ""
    max_lora: int = 0
    block_size: int = 16
    num_gpu_blocks: int = 10_000
    metrics_status: int = 200
    metrics_frozen: bool = False
    tokens: int = 5
    tokens_per_event: int = 1
    """Tokens each streamed completion event carries (speculative decoding sends every token a step
    accepted in one event); the usage chunk, sent when the body asks for it as vLLM's, counts them all."""
    token_delay_s: float = 0.0
    usage_chunk: bool = True
    """False: a stream never ends with the usage chunk, asked for or not (an engine without
    ``stream_options``)."""
    split_event_pause_s: float | None = None
    """Not None: each streamed completion event is written in two halves this many seconds apart (an
    event split across the gateway's reads, as a large event or a slow peer splits one); with
    ``die_after`` the connection is cut after the first half of that event."""
    first_token_delay_s: float = 0.0
    die_after: int | None = None
    infer_status: int = 200
    """Not 200: every inference request is refused with this status and an OpenAI-shaped JSON error
    (after ``first_token_delay_s``), as a model server's HTTP layer refuses one (vLLM's 404 for a
    model it does not serve, a 503 while its engine is unavailable)."""
    poison: bytes | None = None
    """A completion request whose body contains these bytes is answered 500, as an engine whose
    request processing fails on one input (a poison request: its fault, not the pod's)."""
    reported: dict[str, int] | None = None
    """Not None: the usage a completion's answer and its stream's usage chunk report, in place of the
    true counts (an engine that lies: a broken or compromised model server)."""
    infer_reset: bool = False
    """Every inference request is read, then its connection closed with no answer (an engine crash)."""
    received: list[Received] = field(default_factory=list)
    stored_responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Ids of the responses this server stored (``/v1/responses`` with ``store``, the default): a
    request continuing another one (``previous_response_id``) is answered 404, as vLLM does."""
    made_responses: list[str] = field(default_factory=list)
    """Ids of every response this server made, stored or not, deleted or not (which pod made one)."""
    replay_first: bytes = b""
    """SSE events a replay (``GET /v1/responses/{id}?stream=true``) sends before the stored
    response's (a resumed replay's deltas, which name no response), then waits for
    :attr:`replay_release` before the rest (a response still generating)."""
    replay_release: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by a test to let a replay with :attr:`replay_first` go on to its events naming the response."""
    stored_delay_s: float = 0.0
    """Seconds each request about a stored response (retrieve, delete, cancel, its items) waits
    before its answer."""
    deleted_late_s: float = 0.0
    """Seconds a deletion's answer waits after the response was deleted (a pod that applies it, then
    answers late)."""
    stored_stall_s: float = 0.0
    """Seconds a whole (not streamed) answer about a stored response - its 404 too - stalls after its
    head and the first half of its body, before the rest (a pod that freezes mid-answer)."""
    stored_trickle_s: float = 0.0
    """Seconds between the bytes of a whole answer about a stored response, each written alone (a pod
    that is never silent long, yet never finishes: no silence bound ends it)."""
    stored_answer: tuple[int, bytes] | None = None
    """Not None: every request about a stored response is answered with this status and JSON body,
    whatever the id (a pod answering oddly: a cut or id-less body, a huge one)."""
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    scrapes: int = 0
    prompt_tokens_total: int = 0
    """Activity counters on the page, moved by every request served, as a live engine's are: without
    them the page stayed byte-identical while requests were dispatched, and tests longer than
    ``staleThreshold`` saw the gateway exclude the pod as frozen."""
    generation_tokens_total: int = 0
    max_model_len: int | None = None
    """Not None: ``GET /v1/models`` lists one model with this context window, as vLLM's does (the
    gateway reads it); None: no such route (a window the gateway cannot know)."""
    answer_fields: tuple[tuple[str, str], ...] = ()
    """Header fields added to every answer but ``/metrics``'s, repeated names kept (a model server
    behind a framework or proxy that sets cookies, HSTS, ``Alt-Svc``)."""
    port: int = 0
    _runner: web.AppRunner | None = None

    async def _add_answer_fields(self, request: web.Request, response: web.StreamResponse) -> None:
        if request.path != "/metrics":
            for name, value in self.answer_fields:
                response.headers.add(name, value)

    @property
    def key(self) -> str:
        return f"{self.host}:{self.port}"

    # ---- /metrics ---------------------------------------------------------------------------------
    def page(self) -> str:
        if self.engine == "sglang":
            lab = 'engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"'
            return "".join(
                f"# HELP {n} x\n# TYPE {n} gauge\n{n}{{{lab}}} {v}\n"
                for n, v in (
                    ("sglang:num_running_reqs", float(self.running)),
                    ("sglang:num_queue_reqs", float(self.waiting)),
                    ("sglang:token_usage", self.kv),
                    ("sglang:prompt_tokens_total", float(self.prompt_tokens_total)),
                    ("sglang:generation_tokens_total", float(self.generation_tokens_total)),
                )
            )
        lab = 'engine="0",model_name="m"'
        lines = [
            "# HELP python_gc_objects_collected_total Objects collected during gc",
            "# TYPE python_gc_objects_collected_total counter",
            'python_gc_objects_collected_total{generation="0"} 1.0',
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} {float(self.running)}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lab}}} {float(self.waiting)}",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{lab}}} {float(self.prompt_tokens_total)}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lab}}} {float(self.generation_tokens_total)}",
        ]
        parts = tuple(int(p) for p in self.version.split(".")[:3])
        if parts >= (0, 9, 2):
            lines += ["# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lab}}} {self.kv}"]
        if parts < (0, 11, 0):
            lines += [
                "# TYPE vllm:gpu_cache_usage_perc gauge",
                f"vllm:gpu_cache_usage_perc{{{lab}}} {self.kv}",
            ]
        if self.max_lora:
            lines += [
                "# TYPE vllm:lora_requests_info gauge",
                f'vllm:lora_requests_info{{max_lora="{self.max_lora}",running_lora_adapters="{self.running_adapters}",'
                f'waiting_lora_adapters="{self.waiting_adapters}"}} 1.7e+09',
            ]
        lines += [
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{self.block_size}",engine="0",'
            f'num_gpu_blocks="{self.num_gpu_blocks}"}} 1.0',
        ]
        return "\n".join(lines) + "\n"

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        self.scrapes += 1
        if self.metrics_frozen:
            await asyncio.sleep(3600)
        if self.metrics_status != 200:
            return web.Response(status=self.metrics_status, text="no metrics")
        return web.Response(text=self.page(), content_type="text/plain")

    # ---- inference --------------------------------------------------------------------------------
    async def _infer(self, request: web.Request) -> web.StreamResponse:
        sock = request.transport.get_extra_info("socket") if request.transport else None
        nodelay = bool(sock and sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        body = await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.received.append(
            Received(request.path, dict(request.headers), body, nodelay, peer[1] if peer else 0)
        )
        data: dict[str, Any] = orjson.loads(body)
        self.prompt_tokens_total += PROMPT_TOKENS
        self.generation_tokens_total += self.tokens
        try:
            if self.infer_reset:
                assert request.transport is not None
                request.transport.abort()
                return web.Response()
            if self.infer_status != 200:
                if self.first_token_delay_s:
                    await asyncio.sleep(self.first_token_delay_s)
                return self._refusal()
            if self.poison is not None and self.poison in body:
                error = {"message": "EngineCore failed", "type": "InternalServerError", "code": 500}
                return web.json_response({"error": error, "server": self.name}, status=500)
            if not data.get("stream"):
                if self.first_token_delay_s:
                    await asyncio.sleep(self.first_token_delay_s)
                return web.json_response(
                    {
                        "id": "cmpl-1",
                        "object": "text_completion",
                        "server": self.name,
                        "model": data.get("model"),
                        "choices": [{"index": 0, "text": "t" * self.tokens, "finish_reason": "length"}],
                        "usage": self._usage(),
                    }
                )
            resp = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            await resp.prepare(request)
            if self.first_token_delay_s:  # like vLLM: headers at once, then the prefill
                await asyncio.sleep(self.first_token_delay_s)
            for i in range(0, self.tokens, self.tokens_per_event):
                text = "".join(f"tok{j}" for j in range(i, min(i + self.tokens_per_event, self.tokens)))
                event = {"id": "cmpl-1", "server": self.name, "choices": [{"index": 0, "text": text}]}
                encoded = b"data: " + orjson.dumps(event) + b"\n\n"
                if self.split_event_pause_s is not None:
                    await resp.write(encoded[: len(encoded) // 2])
                    await asyncio.sleep(self.split_event_pause_s)
                    encoded = encoded[len(encoded) // 2 :]
                if self._dies_at(request, i):
                    return resp
                await resp.write(encoded)
                if self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
            options = data.get("stream_options")
            # The tier-2 router's request for the usage chunk, honoured as the cluster's gateway
            # does in front of a vLLM pod (this fake stands for a whole cluster in tier-2 tests).
            relayed = request.headers.get(RELAY_USAGE_HEADER) == RELAY_USAGE
            asked = relayed or (isinstance(options, dict) and options.get("include_usage") is True)
            if asked and self.usage_chunk:
                chunk = {"id": "cmpl-1", "object": "text_completion", "choices": [], "usage": self._usage()}
                await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    def _dies_at(self, request: web.Request, token: int) -> bool:
        """Whether the stream dies before ``token`` (``die_after``): its connection is then aborted."""
        if self.die_after is None or token != self.die_after:
            return False
        assert request.transport is not None
        request.transport.abort()
        return True

    def _refusal(self) -> web.Response:
        """``infer_status``'s OpenAI-shaped error, as a model server's HTTP layer refuses a request."""
        error = {"message": f"refused by {self.name}", "type": "Error", "code": self.infer_status}
        return web.json_response({"error": error, "server": self.name}, status=self.infer_status)

    async def _received_json(self, request: web.Request) -> dict[str, Any]:
        """The request's JSON body, the request recorded."""
        body = await request.read()
        self.received.append(Received(request.path, dict(request.headers), body, False, 0))
        data: dict[str, Any] = orjson.loads(body)
        return data

    async def _embed(self, request: web.Request) -> web.StreamResponse:
        """``/v1/embeddings``: one vector of 4 numbers per input (a string or a list of them)."""
        data = await self._received_json(request)
        if self.infer_status != 200:
            return self._refusal()
        inputs = data["input"] if isinstance(data["input"], list) else [data["input"]]
        self.prompt_tokens_total += PROMPT_TOKENS * len(inputs)
        vectors = [
            {"object": "embedding", "index": i, "embedding": [0.5, 0.25, 0.125, i]}
            for i in range(len(inputs))
        ]
        tokens = PROMPT_TOKENS * len(inputs)
        return web.json_response(
            {
                "object": "list",
                "model": data.get("model"),
                "server": self.name,
                "data": vectors,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _rerank(self, request: web.Request) -> web.StreamResponse:
        """vLLM's rerank (``query``, ``documents``) and score (``text_1``, ``text_2``) APIs: each
        document scored by its position, ``PROMPT_TOKENS`` per pair; rerank reports its usage as
        ``total_tokens`` alone, as vLLM does."""
        data = await self._received_json(request)
        if self.infer_status != 200:
            return self._refusal()
        rerank = "query" in data
        documents = data["documents"] if rerank else data["text_2"]
        documents = documents if isinstance(documents, list) else [documents]
        tokens = PROMPT_TOKENS * len(documents)
        self.prompt_tokens_total += tokens
        if rerank:
            results = [{"index": i, "relevance_score": 1 / (i + 1)} for i in range(len(documents))]
            body = {"id": f"rerank-{self.name}", "model": data.get("model"), "results": results}
            body["usage"] = {"total_tokens": tokens}
        else:
            scores = [{"index": i, "object": "score", "score": 1 / (i + 1)} for i in range(len(documents))]
            body = {"id": f"score-{self.name}", "object": "list", "model": data.get("model"), "data": scores}
            body["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}
        return web.json_response({**body, "server": self.name})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        """vLLM's Anthropic Messages API (``/v1/messages``): ``tokens`` output tokens, whole or as the
        named events (``message_start`` with the input tokens and ``content_block_start`` before the
        prefill, a ``ping``, one ``content_block_delta`` per token, ``message_delta`` with the
        output tokens, ``message_stop``)."""
        data = await self._received_json(request)
        if self.infer_status != 200:
            return self._refusal()
        self.prompt_tokens_total += PROMPT_TOKENS
        self.generation_tokens_total += self.tokens
        text = "".join(f"tok{i}" for i in range(self.tokens))
        message: dict[str, Any] = {
            "id": f"msg_{self.name}_{len(self.received)}",
            "type": "message",
            "role": "assistant",
            "model": data.get("model"),
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": self.tokens},
        }
        if not data.get("stream"):
            return web.json_response(message)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)

        async def send(kind: str, **fields: Any) -> None:
            await resp.write(
                b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
            )

        opening = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": 0},
        }
        await send("message_start", message=opening)
        await send("content_block_start", index=0, content_block={"type": "text", "text": ""})
        await send("ping")
        if self.first_token_delay_s:
            await asyncio.sleep(self.first_token_delay_s)
        for i in range(self.tokens):
            if self._dies_at(request, i):
                return resp
            await send("content_block_delta", index=0, delta={"type": "text_delta", "text": f"tok{i}"})
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
        await send("content_block_stop", index=0)
        await send(
            "message_delta",
            delta={"stop_reason": "end_turn", "stop_sequence": None},
            usage={"output_tokens": self.tokens},
        )
        await send("message_stop")
        await resp.write_eof()
        return resp

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        """vLLM's ``/v1/messages/count_tokens``: the conversation's input tokens, nothing generated
        (``PROMPT_TOKENS``; not added to the page's prompt-token counter, as vLLM's tokenizer-only
        path adds nothing to its own)."""
        await self._received_json(request)
        if self.infer_status != 200:
            return self._refusal()
        if self.first_token_delay_s:
            await asyncio.sleep(self.first_token_delay_s)
        return web.json_response({"input_tokens": PROMPT_TOKENS})

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        """``/v1/responses``: a response of ``tokens`` output tokens, whole or as the Responses API's
        event stream in OpenAI's and vLLM's order (``response.created`` and ``response.in_progress``
        before the prefill; the message's ``output_item.added`` and ``content_part.added``; one
        ``response.output_text.delta`` per token; the text's, part's and item's ``...done`` events;
        ``response.completed`` with the usage), its id the body's ``request_id`` (as vLLM's), else
        ``resp_<server>_<n>``; the object names the server that made it (``server``). Why the whole
        sequence: the SDK's ``client.responses.stream`` builds the response from it and raised on the
        created/deltas/completed subset sent before session s48 (a delta before its output item)."""
        data = await self._received_json(request)
        if self.infer_status != 200:
            return self._refusal()
        previous = data.get("previous_response_id")
        if previous is not None and previous not in self.stored_responses:
            # vLLM's answer: its store is the serving process's memory
            error = {
                "message": f"Response with id '{previous}' not found.",
                "type": "invalid_request_error",
                "code": 404,
            }
            return web.json_response({"error": error, "server": self.name}, status=404)
        self.prompt_tokens_total += PROMPT_TOKENS
        self.generation_tokens_total += self.tokens
        # vLLM's ResponsesRequest: the stored response's id is the body's request_id when set
        rid = data.get("request_id") or f"resp_{self.name}_{len(self.received)}"
        self.made_responses.append(rid)
        stored = bool(data.get("store", True))
        usage = {
            "input_tokens": PROMPT_TOKENS,
            "output_tokens": self.tokens,
            "total_tokens": PROMPT_TOKENS + self.tokens,
        }
        text = "".join(f"tok{i}" for i in range(self.tokens))
        message = {
            "id": f"msg_{rid}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        done: dict[str, Any] = {
            "id": rid,
            "object": "response",
            "created_at": 0,
            "model": data.get("model"),
            "status": "completed",
            "output": [message],
            "usage": usage,
            "store": bool(data.get("store", True)),
            "server": self.name,
        }
        if stored:
            self.stored_responses[rid] = done
        if data.get("background") is True and not data.get("stream"):
            # vLLM's background mode: answered at once, queued, no usage yet (stored as done here)
            return web.json_response({**done, "status": "queued", "output": [], "usage": None})
        if not data.get("stream"):
            return web.json_response(done)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        seq = 0

        async def send(kind: str, **fields: Any) -> None:
            nonlocal seq
            event = {"type": kind, "sequence_number": seq, **fields}
            seq += 1
            await resp.write(b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n")

        created = {**done, "status": "in_progress", "output": [], "usage": None}
        await send("response.created", response=created)
        await send("response.in_progress", response=created)
        if self.first_token_delay_s:
            await asyncio.sleep(self.first_token_delay_s)
        where = {"item_id": message["id"], "output_index": 0, "content_index": 0}
        opened = {**message, "status": "in_progress", "content": []}
        await send("response.output_item.added", output_index=0, item=opened)
        part = {"type": "output_text", "text": "", "annotations": []}
        await send("response.content_part.added", **where, part=part)
        for i in range(self.tokens):
            if self._dies_at(request, i):
                return resp
            await send("response.output_text.delta", **where, delta=f"tok{i}", logprobs=[])
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
        await send("response.output_text.done", **where, text=text, logprobs=[])
        await send("response.content_part.done", **where, part={**part, "text": text})
        await send("response.output_item.done", output_index=0, item=message)
        await send("response.completed", response=done)
        await resp.write_eof()
        return resp

    async def _stored(self, request: web.Request) -> web.StreamResponse:
        """A stored response: retrieved (``GET``; with ``?stream=true`` as one completed event),
        deleted, cancelled, or its input items listed; 404 for one not stored here, as vLLM."""
        self.received.append(Received(request.path, dict(request.headers), await request.read(), False, 0))
        if self.stored_delay_s:
            await asyncio.sleep(self.stored_delay_s)
        rid = request.match_info["rid"]
        if self.stored_answer is not None:
            status, odd = self.stored_answer
            return web.Response(status=status, body=odd, content_type="application/json")
        done = self.stored_responses.get(rid)
        if done is None:
            error = {
                "message": f"Response with id '{rid}' not found.",
                "type": "invalid_request_error",
                "code": 404,
            }
            return await self._whole(request, {"error": error}, status=404)
        if request.method == "DELETE":
            del self.stored_responses[rid]
            if self.deleted_late_s:
                await asyncio.sleep(self.deleted_late_s)
            return web.json_response({"id": rid, "object": "response.deleted", "deleted": True})
        if request.path.endswith("/input_items"):
            return web.json_response({"object": "list", "data": [], "has_more": False})
        if request.path.endswith("/cancel"):
            return web.json_response({**done, "status": "cancelled"})
        if request.query.get("stream") == "true":
            event = {"type": "response.completed", "sequence_number": 0, "response": done}
            body = b"event: response.completed\ndata: " + orjson.dumps(event) + b"\n\n"
            if not self.replay_first:
                return web.Response(body=body, content_type="text/event-stream")
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(self.replay_first)
            await self.replay_release.wait()
            await resp.write(body)
            await resp.write_eof()
            return resp
        return await self._whole(request, done)

    async def _whole(
        self, request: web.Request, doc: dict[str, Any], *, status: int = 200
    ) -> web.StreamResponse:
        """``doc`` answered as JSON, stalled mid-body (:attr:`stored_stall_s`) or trickled
        (:attr:`stored_trickle_s`) when asked to."""
        if not self.stored_stall_s and not self.stored_trickle_s:
            return web.json_response(doc, status=status)
        body = orjson.dumps(doc)
        resp = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
        resp.content_length = len(body)
        await resp.prepare(request)
        if self.stored_trickle_s:
            for index in range(len(body)):
                await resp.write(body[index : index + 1])
                await asyncio.sleep(self.stored_trickle_s)
        else:
            await resp.write(body[: len(body) // 2])
            await asyncio.sleep(self.stored_stall_s)
            await resp.write(body[len(body) // 2 :])
        await resp.write_eof()
        return resp

    async def _models(self, request: web.Request) -> web.StreamResponse:
        entry = {"id": self.name, "object": "model", "max_model_len": self.max_model_len}
        return web.json_response({"object": "list", "data": [entry]})

    async def start(self) -> FakeModelServer:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/completions", self._infer)
        app.router.add_post("/v1/chat/completions", self._infer)
        app.router.add_post("/v1/embeddings", self._embed)
        app.router.add_post("/v1/responses", self._respond)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        for path in ("/rerank", "/v1/rerank", "/v2/rerank", "/score", "/v1/score"):
            app.router.add_post(path, self._rerank)
        app.router.add_get("/v1/responses/{rid}", self._stored)
        app.router.add_delete("/v1/responses/{rid}", self._stored)
        app.router.add_post("/v1/responses/{rid}/cancel", self._stored)
        app.router.add_get("/v1/responses/{rid}/input_items", self._stored)
        if self.max_model_len is not None:
            app.router.add_get("/v1/models", self._models)
        if self.answer_fields:
            app.on_response_prepare.append(self._add_answer_fields)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server: Any = site._server
        self.port = server.sockets[0].getsockname()[1]
        return self

    def _usage(self) -> dict[str, int]:
        """A completion's usage: :attr:`reported` when set, else the true counts."""
        if self.reported is not None:
            return dict(self.reported)
        return {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": self.tokens,
            "total_tokens": PROMPT_TOKENS + self.tokens,
        }

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@contextlib.asynccontextmanager
async def running(*servers: FakeModelServer) -> AsyncIterator[tuple[FakeModelServer, ...]]:
    for s in servers:
        await s.start()
    try:
        yield servers
    finally:
        for s in servers:
            await s.stop()


def closed_port() -> int:
    """A loopback port with nothing listening (connect -> refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
