"""One model-server replica in virtual time: vLLM V1 continuous batching, as routing sees it.

The engine is pure Python with no I/O and no clock of its own: a driver (the DES event loop or the live
server's asyncio task) calls :meth:`Engine.schedule` at virtual time ``t`` to form the next batch and
learn its duration ``d``, then :meth:`Engine.complete` at ``t + d`` to apply it. Requests that arrive
in between wait for the next step, which is exactly continuous batching.

Scheduling follows vLLM V1's scheduler (``vllm/v1/core/sched/scheduler.py``): running requests first
(decodes and continuing prefill chunks) within ``max_num_batched_tokens``; on a block shortage the *newest*
running request is preempted (blocks freed, recomputed later from the front of the waiting queue); then
waiting requests FCFS while the token budget, ``max_num_seqs``, free blocks and ``max_loras`` allow (a
request whose adapter has no slot is skipped, later ones may pass it). Step time is §8.1's formula.

With a :class:`PriorityScheduling` policy the engine follows the two engines' priority schedulers,
reading each request's ``priority`` (:attr:`EngineRequest.priority`):

* **vLLM** ``--scheduling-policy priority``: the waiting queue is ordered by (priority, arrival),
  the lower value first; on a KV-block shortage the running request preempted is the least
  important one (the largest (priority, arrival)), not the newest. A full batch is never emptied
  for a waiting request: it waits for a completion like any other.
* **SGLang** ``--enable-priority-scheduling``: the waiting queue is ordered by priority (the higher
  value first, or the lower one with ``--schedule-low-priority-values-first``), then arrival; and,
  unless ``--disable-priority-preemption``, a waiting request that finds the batch full
  (``max_running_requests``) preempts the least important running request when it outranks it by
  more than ``--priority-scheduling-preemption-threshold`` (default 10). The preempted request is
  retracted to the waiting queue and recomputed later (its output so far is kept and streamed on
  after it resumes), counted in ``preemptions``.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from igw.errors import IgwToolingError
from igw.sim.kv_cache import BlockPool
from igw.sim.presets import Preset


class RequestRejected(IgwToolingError, ValueError):
    """The engine refuses a request outright (too long for the context or the KV cache)."""


class PriorityEngine(StrEnum):
    """Whose priority scheduler the engine follows (see the module docstring)."""

    VLLM = "vllm"
    SGLANG = "sglang"


SGLANG_DEFAULT_PREEMPTION_THRESHOLD: Final = 10
"""SGLang's ``--priority-scheduling-preemption-threshold`` default."""


@dataclass(frozen=True, slots=True)
class PriorityScheduling:
    """An engine's priority scheduling, as its server flags set it."""

    engine: PriorityEngine
    low_values_first: bool = False
    """The lower ``priority`` value is the more important (always so for vLLM; SGLang's
    ``--schedule-low-priority-values-first``)."""
    preempt_for_slot: bool = False
    """A waiting request may preempt a running one for its batch slot (SGLang, unless
    ``--disable-priority-preemption``)."""
    threshold: int = SGLANG_DEFAULT_PREEMPTION_THRESHOLD
    """It must outrank the running request by more than this (SGLang's
    ``--priority-scheduling-preemption-threshold``)."""

    @staticmethod
    def vllm() -> PriorityScheduling:
        """vLLM V1's ``--scheduling-policy priority``."""
        return PriorityScheduling(PriorityEngine.VLLM, low_values_first=True)

    @staticmethod
    def sglang(
        *,
        preemption: bool = True,
        threshold: int = SGLANG_DEFAULT_PREEMPTION_THRESHOLD,
        low_values_first: bool = False,
    ) -> PriorityScheduling:
        """SGLang's ``--enable-priority-scheduling`` with its preemption flags."""
        return PriorityScheduling(
            PriorityEngine.SGLANG,
            low_values_first=low_values_first,
            preempt_for_slot=preemption,
            threshold=threshold,
        )

    def rank(self, priority: int) -> int:
        """``priority`` as a rank where the smaller is served first."""
        return priority if self.low_values_first else -priority


class EngineRequest:
    """One request inside an engine, with the timings the simulator reports."""

    __slots__ = (
        "aborted",
        "adapter",
        "anon",
        "arrival",
        "block_hashes",
        "cached_tokens",
        "capacity",
        "finish_reason",
        "finished_at",
        "first_scheduled_at",
        "first_token_at",
        "held",
        "last_token_at",
        "max_output_tokens",
        "next_hash",
        "nhashes",
        "num_computed",
        "num_tokens",
        "output_tokens",
        "preemptions",
        "priority",
        "prompt_tokens",
        "request_id",
        "sched_n",
        "seq",
    )

    def __init__(
        self,
        *,
        request_id: str,
        prompt_tokens: int,
        max_output_tokens: int,
        block_hashes: tuple[int, ...],
        adapter: str | None,
        arrival: float,
        priority: int = 0,
    ) -> None:
        self.request_id = request_id
        self.priority = priority
        """The body's ``priority``; read only by an engine with :class:`PriorityScheduling`."""
        self.seq = 0
        """Arrival order at the engine (ties between equal priorities)."""
        self.prompt_tokens = prompt_tokens
        self.max_output_tokens = max_output_tokens
        self.block_hashes = block_hashes
        self.nhashes = len(block_hashes)
        self.adapter = adapter
        self.arrival = arrival
        self.num_computed = 0
        self.num_tokens = prompt_tokens
        self.output_tokens = 0
        self.cached_tokens = 0
        self.preemptions = 0
        self.held: list[int] = []
        self.anon = 0
        self.capacity = 0
        """Tokens the request's KV blocks can hold (blocks held x block size)."""
        self.next_hash = 0
        self.sched_n = 0
        self.first_scheduled_at: float | None = None
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.finished_at: float | None = None
        self.finish_reason: str | None = None
        self.aborted = False

    @property
    def mean_itl(self) -> float | None:
        """Mean inter-token latency (seconds per token after the first), or None for < 2 tokens."""
        if self.output_tokens < 2 or self.first_token_at is None or self.last_token_at is None:
            return None
        return (self.last_token_at - self.first_token_at) / (self.output_tokens - 1)


@dataclass(slots=True)
class Batch:
    """The requests scheduled in one step and the step's duration (seconds of virtual time)."""

    requests: list[EngineRequest]
    duration: float
    num_tokens: int


@dataclass(slots=True)
class StepOutput:
    """What one completed step produced: requests that emitted a token, and those that finished."""

    emitted: list[EngineRequest] = field(default_factory=list)
    finished: list[EngineRequest] = field(default_factory=list)


@dataclass(slots=True)
class EngineCounters:
    """Cumulative counters behind the ``/metrics`` page (vLLM names in docs/simulator.md)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    preemptions: int = 0
    steps: int = 0
    finished_by_reason: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})


class Engine:
    """A vLLM-V1-like replica (see module docstring); deterministic for a given ``rng``."""

    def __init__(
        self,
        *,
        preset: Preset,
        rng: random.Random,
        jitter_sigma: float = 0.05,
        prefix_caching: bool = True,
        max_loras: int = 0,
        priority: PriorityScheduling | None = None,
    ) -> None:
        self.preset = preset
        self.priority = priority
        """Priority scheduling (``None``: first come, first served, vLLM's default)."""
        self._arrivals = 0
        self.rng = rng
        self.jitter_sigma = jitter_sigma
        self.block_size = preset.block_size
        self.max_num_seqs = preset.max_num_seqs
        self.max_num_batched_tokens = preset.max_num_batched_tokens
        self.max_loras = max_loras
        self.pool = BlockPool(num_blocks=preset.num_gpu_blocks, prefix_caching=prefix_caching)
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.counters = EngineCounters()
        self.slowdown = 1.0
        """Step-time multiplier (the 'slow down by a factor' fault)."""
        self._running_adapters: dict[str, int] = {}
        self._gpu_loras: dict[str, None] = {}
        """Adapters resident in GPU slots, least recently used first."""
        self._cpu_loras: set[str] = set()
        self._by_id: dict[str, EngineRequest] = {}
        self._jitter_buf: deque[float] = deque()

    # ------------------------------------------------------------------ requests in and out
    def size_error(self, prompt_tokens: int, max_output_tokens: int) -> str | None:
        """Why a request of this size could never run on this replica, or ``None`` if it could.

        Cheap (arithmetic only), so servers call it before building anything sized by the request.
        """
        total = prompt_tokens + max_output_tokens
        window = self.preset.max_model_len
        if prompt_tokens <= 0:
            return "prompt must contain at least one token"
        # vLLM's words (0.10-0.11, ``OpenAIServing._validate_input``): the prompt alone first (it
        # must leave room for one output token), then the output bound on top of it.
        if prompt_tokens >= window:
            return (
                f"This model's maximum context length is {window} tokens. However, your request has "
                f"{prompt_tokens} input tokens. Please reduce the length of the input messages."
            )
        if total > window:
            return (
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_output_tokens}. "
                f"This model's maximum context length is {window} tokens and your request has "
                f"{prompt_tokens} input tokens ({max_output_tokens} > {window} - {prompt_tokens})."
            )
        if -(-total // self.block_size) > self.pool.num_blocks:
            return f"request needs more KV blocks than the cache holds ({self.pool.num_blocks})"
        return None

    def add(self, request: EngineRequest) -> None:
        """Queue a request (FCFS); :class:`RequestRejected` if it could never run on this replica."""
        problem = self.size_error(request.prompt_tokens, request.max_output_tokens)
        if problem is not None:
            raise RequestRejected(problem)
        if request.adapter is not None and self.max_loras <= 0:
            raise RequestRejected("LoRA is not enabled on this server")
        if request.request_id in self._by_id:
            raise RequestRejected(f"duplicate request id {request.request_id!r}")
        self._by_id[request.request_id] = request
        self._arrivals += 1
        request.seq = self._arrivals
        if self.priority is None:
            self.waiting.append(request)
        else:
            self._enqueue(request)

    def _order(self, req: EngineRequest) -> tuple[int, int]:
        """Serving order under priority scheduling: the smaller goes first."""
        assert self.priority is not None
        return self.priority.rank(req.priority), req.seq

    def _enqueue(self, req: EngineRequest) -> None:
        """Insert into the waiting queue by :meth:`_order` (from the back: arrivals mostly go last)."""
        waiting = self.waiting
        key = self._order(req)
        i = len(waiting)
        while i > 0 and self._order(waiting[i - 1]) > key:
            i -= 1
        waiting.insert(i, req)

    def _preempt_for_slots(self) -> None:
        """SGLang's priority preemption: each waiting request (most important first) that finds no
        free batch slot retracts the least important running request it outranks by more than the
        threshold; stops at the first that outranks none."""
        policy = self.priority
        assert policy is not None
        free = self.max_num_seqs - len(self.running)
        victims: list[EngineRequest] = []
        candidates = sorted(self.running, key=self._order, reverse=True)  # least important first
        for head in self.waiting:
            if free > 0:
                free -= 1
                continue
            if not candidates:
                break
            victim = candidates[0]
            if policy.rank(victim.priority) - policy.rank(head.priority) <= policy.threshold:
                break
            victims.append(candidates.pop(0))
        for victim in victims:
            self.running.remove(victim)
            self._preempt(victim)

    def abort(self, request_id: str, *, now: float) -> bool:
        """Abort a request (client disconnect): free its blocks at once. False if unknown or finished."""
        req = self._by_id.pop(request_id, None)
        if req is None:
            return False
        req.aborted = True
        req.sched_n = 0
        req.finish_reason = "abort"
        req.finished_at = now
        self.counters.finished_by_reason["abort"] += 1
        if req in self.running:
            self.running.remove(req)
            self._release(req)
        else:
            self.waiting.remove(req)
        return True

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def running_adapters(self) -> frozenset[str]:
        return frozenset(self._running_adapters)

    def waiting_adapters(self) -> frozenset[str]:
        return frozenset(r.adapter for r in self.waiting if r.adapter is not None)

    # ------------------------------------------------------------------ one step
    def schedule(self, now: float) -> Batch | None:
        """Form the next batch at virtual time ``now``; None when nothing can run."""
        policy = self.priority
        if (
            policy is not None
            and policy.preempt_for_slot
            and self.waiting
            and len(self.running) >= self.max_num_seqs
        ):
            self._preempt_for_slots()
        bs = self.block_size
        pool = self.pool
        running = self.running
        budget = self.max_num_batched_tokens
        sum_ctx = 0
        attn_pairs = 0.0
        preempted = False
        i = 0
        # Hot loop of the DES (once per running request per step): keep it lean.
        while i < len(running) and budget > 0:
            req = running[i]
            nc = req.num_computed
            n = req.num_tokens - nc
            if n > budget:
                n = budget
            if nc + n > req.capacity:
                need = (nc + n + bs - 1) // bs - req.capacity // bs
                self_preempted = False
                while not pool.allocate(need):
                    if policy is None:
                        victim = running.pop()
                    else:  # the least important (then newest) running request, wherever it is
                        victim = max(running, key=self._order)
                        j = running.index(victim)
                        del running[j]
                        if j < i:  # already scheduled in this step: take its tokens back out
                            i -= 1
                            vn, vc = victim.sched_n, victim.num_computed
                            budget += vn
                            if vn == 1 and vc:
                                sum_ctx -= vc
                            else:
                                attn_pairs -= vn * (vc + vn / 2)
                    self._preempt(victim)
                    preempted = True
                    if victim is req:
                        self_preempted = True
                        break
                if self_preempted:
                    if policy is None:
                        break  # FCFS preempts from the back: nothing runs after this request
                    continue  # the least important was this one: the next now sits at index i
                req.anon += need
                req.capacity += need * bs
            req.sched_n = n
            budget -= n
            if n == 1 and nc:
                sum_ctx += nc
            else:
                attn_pairs += n * (nc + n / 2)
            i += 1
        batch = running[:i]
        load_cost = 0.0
        if not preempted or not batch:
            # After a preemption vLLM admits nothing new in that step; but a step left empty (every
            # running request preempted, itself included) would leave the engine idle with work
            # waiting and the blocks just freed, so the waiting queue is admitted then.
            load_cost, admitted_pairs, budget = self._admit(now, batch, budget)
            attn_pairs += admitted_pairs
        if not batch:
            return None
        num_tokens = self.max_num_batched_tokens - budget
        lora_in_batch = bool(self._running_adapters)
        duration = self._step_time(num_tokens, sum_ctx, attn_pairs, lora_in_batch) + load_cost
        self.counters.steps += 1
        return Batch(requests=batch, duration=duration, num_tokens=num_tokens)

    def _admit(self, now: float, batch: list[EngineRequest], budget: int) -> tuple[float, float, int]:
        """Move waiting requests into the batch (FCFS, chunked prefill).

        Returns (LoRA load seconds, prefill attention pairs, token budget left).
        """
        bs = self.block_size
        pool = self.pool
        waiting = self.waiting
        running = self.running
        skipped: list[EngineRequest] = []
        load_cost = 0.0
        attn_pairs = 0.0
        while waiting and budget > 0 and len(running) < self.max_num_seqs:
            req = waiting[0]
            adapter = req.adapter
            if (
                adapter is not None
                and adapter not in self._running_adapters
                and len(self._running_adapters) >= self.max_loras
            ):
                skipped.append(waiting.popleft())
                continue
            hashes = req.block_hashes
            hit = pool.longest_cached_prefix(hashes, max_blocks=(req.num_tokens - 1) // bs)
            cached = hit * bs
            n = req.num_tokens - cached
            if n > budget:
                n = budget
            need = (cached + n + bs - 1) // bs - hit
            pool.acquire_cached(hashes, hit)
            if not pool.allocate(need):
                pool.release(list(hashes[:hit]), 0)
                break
            waiting.popleft()
            running.append(req)
            req.held = list(hashes[:hit])
            req.anon = need
            req.capacity = (hit + need) * bs
            req.num_computed = cached
            req.next_hash = hit
            req.sched_n = n
            counters = self.counters
            counters.prefix_queries += req.num_tokens
            counters.prefix_hits += cached
            if req.first_scheduled_at is None:
                req.first_scheduled_at = now
                req.cached_tokens = cached
            if adapter is not None:
                self._running_adapters[adapter] = self._running_adapters.get(adapter, 0) + 1
                load_cost += self._ensure_lora_loaded(adapter)
            batch.append(req)
            budget -= n
            attn_pairs += n * (cached + n / 2)
        if skipped:
            waiting.extendleft(reversed(skipped))
        return load_cost, attn_pairs, budget

    def _ensure_lora_loaded(self, adapter: str) -> float:
        """Give ``adapter`` a GPU slot (evicting the LRU idle one); returns the load time it costs."""
        slots = self._gpu_loras
        if adapter in slots:
            del slots[adapter]
            slots[adapter] = None
            return 0.0
        cost = self.preset.lora_load_s
        if adapter not in self._cpu_loras:
            self._cpu_loras.add(adapter)
            cost += self.preset.lora_cold_load_s
        if len(slots) >= self.max_loras:
            for name in slots:
                if name not in self._running_adapters or name == adapter:
                    del slots[name]
                    break
        slots[adapter] = None
        return cost

    def step_time_estimate(self, *, num_tokens: int, sum_ctx: int = 0, attn_pairs: float = 0.0) -> float:
        """The §8.1 step time without jitter (slowdown included): what an oracle may predict."""
        return self._base_step_time(num_tokens, sum_ctx, attn_pairs, False) * self.slowdown

    def _step_time(self, num_tokens: int, sum_ctx: int, attn_pairs: float, lora: bool) -> float:
        t = self._base_step_time(num_tokens, sum_ctx, attn_pairs, lora)
        if self.jitter_sigma > 0:
            t *= self.draw_jitter()
        return t * self.slowdown

    def draw_jitter(self) -> float:
        """The next step's jitter factor; draws handed back by :meth:`return_jitter` come first."""
        buf = self._jitter_buf
        if buf:
            return buf.popleft()
        return math.exp(self.rng.gauss(0.0, self.jitter_sigma))

    def return_jitter(self, unused: list[float]) -> None:
        """Give back draws made ahead of time (a cut decode run) so the sequence stays seed-exact."""
        self._jitter_buf.extendleft(reversed(unused))

    def _base_step_time(self, num_tokens: int, sum_ctx: int, attn_pairs: float, lora: bool) -> float:
        """Overhead + pnorm2(weights, compute) + KV reads + prefill attention + AR (docs/simulator.md)."""
        c = self.preset.cost
        t_w = c.t_w0
        model = self.preset.model
        if model.moe_experts:
            coverage = 1.0 - (1.0 - model.moe_top_k / model.moe_experts) ** num_tokens
            t_w += c.t_w_experts * coverage
        t = (
            c.t_ovh
            + math.hypot(t_w, c.c_tok * num_tokens)
            + c.k_kv * sum_ctx
            + c.a_attn * attn_pairs
            + c.t_ar
        )
        if lora:
            t *= 1.0 + self.preset.lora_step_overhead
        return t

    def complete(self, batch: Batch, now: float, *, collect_emitted: bool = True) -> StepOutput:
        """Apply a finished step at virtual time ``now``: advance, cache full blocks, emit and finish.

        ``collect_emitted=False`` leaves ``StepOutput.emitted`` empty (the DES reads timings from the
        requests themselves and saves one list append per token).
        """
        out = StepOutput()
        emitted = out.emitted
        n_emitted = 0
        bs = self.block_size
        pool = self.pool
        counters = self.counters
        any_finished = False
        # Hot loop of the DES (once per scheduled request per step): keep it lean.
        for req in batch.requests:
            n = req.sched_n
            if n == 0:
                continue  # aborted while the step ran
            req.sched_n = 0
            nc = req.num_computed + n
            req.num_computed = nc
            nh = req.next_hash
            if nh < req.nhashes:
                full = nc // bs
                if full > req.nhashes:
                    full = req.nhashes
                if full > nh:
                    hashes = req.block_hashes
                    held = req.held
                    for j in range(nh, full):
                        if pool.register_full_block(hashes[j]):
                            held.append(hashes[j])
                            req.anon -= 1
                    req.next_hash = full
            if nc >= req.num_tokens:
                req.num_tokens += 1
                produced = req.output_tokens + 1
                req.output_tokens = produced
                if req.first_token_at is None:
                    req.first_token_at = now
                    counters.prompt_tokens += req.prompt_tokens
                req.last_token_at = now
                n_emitted += 1
                if collect_emitted:
                    emitted.append(req)
                if produced >= req.max_output_tokens:
                    req.finish_reason = "length"
                    req.finished_at = now
                    counters.finished_by_reason["length"] += 1
                    out.finished.append(req)
                    self._release(req)
                    del self._by_id[req.request_id]
                    any_finished = True
        counters.generation_tokens += n_emitted
        if any_finished:
            self.running = [r for r in self.running if r.finish_reason is None]
        return out

    # ------------------------------------------------------------------ internals
    def _release(self, req: EngineRequest) -> None:
        self.pool.release(req.held, req.anon)
        req.held = []
        req.anon = 0
        req.capacity = 0
        if req.adapter is not None:
            left = self._running_adapters.get(req.adapter, 0) - 1
            if left <= 0:
                self._running_adapters.pop(req.adapter, None)
            else:
                self._running_adapters[req.adapter] = left

    def _preempt(self, req: EngineRequest) -> None:
        """Preemption by recompute: free everything, restart the prompt (and outputs) from the queue front."""
        self._release(req)
        req.num_computed = 0
        req.next_hash = 0
        req.sched_n = 0
        req.preemptions += 1
        self.counters.preemptions += 1
        if self.priority is None:
            self.waiting.appendleft(req)
        else:
            self._enqueue(req)
