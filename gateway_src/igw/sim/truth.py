"""The exact instantaneous state of a simulated pod, for the DES's oracle hook.

A policy that defines ``bind_oracle(lookup)`` is handed ``lookup: Callable[[EndpointKey], PodTruth]``
before the run. A :class:`PodTruth` is a *live view*: every attribute reads the engine at the moment it
is accessed (no copy, no scrape delay), so a policy sees the state at its ``pick`` time.
"""

from __future__ import annotations

from igw.sim.engine import Engine
from igw.sim.presets import Preset, StepCost
from igw.sim.spec import PodSpec
from igw.sim.tokens import block_hashes


class PodTruth:
    """Live, exact view of one simulated pod (see module docstring)."""

    __slots__ = ("engine", "key", "spec")

    def __init__(self, *, key: str, spec: PodSpec, engine: Engine) -> None:
        self.key = key
        self.spec = spec
        self.engine = engine
        """The engine itself, for oracles that need more than the properties below (read-only use)."""

    @property
    def preset(self) -> Preset:
        return self.engine.preset

    @property
    def cost(self) -> StepCost:
        """Step-time parameters (docs/simulator.md); multiply by :attr:`slowdown` for the pod's speed."""
        return self.engine.preset.cost

    @property
    def slowdown(self) -> float:
        return self.engine.slowdown

    @property
    def waiting(self) -> int:
        return self.engine.num_waiting

    @property
    def running(self) -> int:
        return self.engine.num_running

    @property
    def kv_usage(self) -> float:
        return self.engine.pool.usage

    @property
    def num_gpu_blocks(self) -> int:
        return self.engine.pool.num_blocks

    @property
    def free_blocks(self) -> int:
        """Blocks an allocation could use now (free plus cached-but-unreferenced)."""
        return self.engine.pool.num_free

    @property
    def block_size(self) -> int:
        return self.engine.block_size

    @property
    def running_adapters(self) -> frozenset[str]:
        return self.engine.running_adapters()

    @property
    def waiting_adapters(self) -> frozenset[str]:
        return self.engine.waiting_adapters()

    @property
    def resident_adapters(self) -> frozenset[str]:
        """Adapters holding a GPU slot now (no load cost to use)."""
        return frozenset(self.engine._gpu_loras)

    @property
    def queued_prefill_tokens(self) -> int:
        """Uncomputed prompt (and recompute) tokens of every waiting and running request."""
        return sum(r.num_tokens - r.num_computed for r in self.engine.waiting) + sum(
            r.num_tokens - r.num_computed for r in self.engine.running if r.num_computed < r.num_tokens - 1
        )

    def cached_prefix_tokens(self, prefix_text: str, *, adapter: str | None = None) -> int:
        """Tokens of ``prefix_text`` this pod would serve from its prefix cache right now."""
        bs = self.engine.block_size
        hashes = block_hashes(prefix_text, block_size=bs, salt=adapter or "")
        return self.engine.pool.longest_cached_prefix(hashes, max_blocks=len(hashes)) * bs

    def is_block_cached(self, block_hash: int) -> bool:
        return self.engine.pool.is_cached(block_hash)

    def step_time(self, *, num_tokens: int, decode_context_tokens: int = 0) -> float:
        """Predicted step time without jitter (docs/simulator.md, Engine model; slowdown included)."""
        return self.engine.step_time_estimate(num_tokens=num_tokens, sum_ctx=decode_context_tokens)
