"""Deployment presets: a model on a GPU type at a tensor-parallel degree, with every number's source.

Every number carries its source in the preset (``igw sim presets --json``): model shapes from the
models' configurations, memory arithmetic and scheduler defaults from vLLM, step-time parameters from
published measurements, each tagged [M] measured, [C] read from source or [D] derived. KV capacity
is *derived* here from GPU memory, weights, reserve and ``gpu_memory_utilization`` (not copied), so
changing the utilisation changes the block count as vLLM would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Final

GIB: Final = 1024**3


@dataclass(frozen=True, slots=True)
class ModelShape:
    """Architecture numbers that set KV bytes and weight bytes (the models' configurations [C])."""

    name: str
    served_name: str
    n_layers: int
    n_kv_heads: int
    head_dim: int
    weight_bytes: float
    kv_dtype_bytes: int = 2
    moe_experts: int = 0
    moe_top_k: int = 0

    def kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        """``2 (K,V) * layers * kv_heads/GPU * head_dim * dtype``; heads are replicated when TP > kv_heads."""
        heads_per_gpu = max(1.0, self.n_kv_heads / tp)
        return 2 * self.n_layers * heads_per_gpu * self.head_dim * self.kv_dtype_bytes


@dataclass(frozen=True, slots=True)
class GpuType:
    """Device numbers (memory 'as reported' by the driver; docs/simulator.md, Presets)."""

    name: str
    memory_gib: float
    activation_reserve_gib: float
    """Activation / CUDA-graph / NCCL reserve at the preset's batched-token budget (§2.2 [D])."""


@dataclass(frozen=True, slots=True)
class StepCost:
    """Step-time parameters of the formula in docs/simulator.md, Engine model (seconds)."""

    t_ovh: float
    t_w0: float
    """Weight-streaming floor per step (dense) or the shared part for MoE."""
    c_tok: float
    k_kv: float
    a_attn: float
    t_ar: float
    t_w_experts: float = 0.0
    """MoE only: expert weight streaming when every expert is touched."""


@dataclass(frozen=True, slots=True)
class Preset:
    """One deployment: model x GPU x TP with vLLM V1 scheduler defaults."""

    key: str
    model: ModelShape
    gpu: GpuType
    tp: int
    cost: StepCost
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    lora_load_s: float = 0.003
    """CPU->GPU adapter copy (§4, pinned memory, [D/?])."""
    lora_cold_load_s: float = 0.1
    """Disk->CPU the first time a pod uses an adapter (§4 [D/?])."""
    lora_step_overhead: float = 0.10
    """+10% step time when any LoRA request is in the batch (§8.4)."""
    sources: tuple[str, ...] = ()

    @property
    def kv_bytes_per_gpu(self) -> float:
        weights_per_gpu = self.model.weight_bytes / self.tp
        usable = self.gpu_memory_utilization * self.gpu.memory_gib * GIB
        return usable - weights_per_gpu - self.gpu.activation_reserve_gib * GIB

    @property
    def num_gpu_blocks(self) -> int:
        per_block = self.block_size * self.model.kv_bytes_per_token_per_gpu(self.tp)
        return max(0, math.floor(self.kv_bytes_per_gpu / per_block))

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    def with_overrides(self, **changes: object) -> Preset:
        """A copy with scheduler knobs changed (``max_num_seqs``, ``gpu_memory_utilization``...)."""
        return replace(self, **changes)  # type: ignore[arg-type]


_US: Final = 1e-6
_MS: Final = 1e-3
_NS: Final = 1e-9

LLAMA_8B = ModelShape(
    name="llama-3.1-8b",
    served_name="meta-llama/Llama-3.1-8B-Instruct",
    n_layers=32,
    n_kv_heads=8,
    head_dim=128,
    weight_bytes=16.06e9,
)
LLAMA_70B = ModelShape(
    name="llama-3.1-70b",
    served_name="meta-llama/Llama-3.1-70B-Instruct",
    n_layers=80,
    n_kv_heads=8,
    head_dim=128,
    weight_bytes=141e9,
)
QWEN3_32B = ModelShape(
    name="qwen3-32b",
    served_name="Qwen/Qwen3-32B",
    n_layers=64,
    n_kv_heads=8,
    head_dim=128,
    weight_bytes=65.6e9,
)
QWEN3_235B_FP8 = ModelShape(
    name="qwen3-235b-fp8",
    served_name="Qwen/Qwen3-235B-A22B-FP8",
    n_layers=94,
    n_kv_heads=4,
    head_dim=128,
    weight_bytes=235e9,
    moe_experts=128,
    moe_top_k=8,
)

H100 = GpuType(name="h100", memory_gib=79.6, activation_reserve_gib=3.0)
A10G = GpuType(name="a10g", memory_gib=22.5, activation_reserve_gib=1.2)
A100 = GpuType(name="a100", memory_gib=79.2, activation_reserve_gib=2.0)
"""A100-80GB SXM: 2.04 TB/s, 312 TFLOPS BF16; vLLM gives it the 2048/256 batch defaults."""
H200 = GpuType(name="h200", memory_gib=139.8, activation_reserve_gib=3.0)
"""H100's compute with 141 GB of HBM3e at 4.8 TB/s."""

_SRC_STEP = "docs/simulator.md, Presets (step-time parameters and their derivation)"
_SRC_KV = "model configurations [C] and vLLM memory arithmetic [D] (KV bytes/token, capacity)"
_SRC_SCHED = "vLLM EngineArgs.get_batch_defaults [C]: >=70 GiB GPUs 8192/1024, else 2048/256"
_SRC_A100 = (
    "A100 Llama-3-8B token compute 67 us/tok (Vidur profile; GIE simulator 67.7 us) [M]; "
    "T_w0 at 2.04 TB/s x 0.77 [D]"
)
_SRC_H200 = "H200: H100 compute, weights and KV streamed at 4.8 TB/s (x 0.77 / x 0.7) [D]"

PRESETS: Final[dict[str, Preset]] = {
    p.key: p
    for p in (
        Preset(
            key="llama-3.1-8b/h100",
            model=LLAMA_8B,
            gpu=H100,
            tp=1,
            cost=StepCost(
                t_ovh=0.4 * _MS, t_w0=6.2 * _MS, c_tok=25 * _US, k_kv=0.056 * _US, a_attn=1.1 * _NS, t_ar=0.0
            ),
            max_num_seqs=1024,
            max_num_batched_tokens=8192,
            max_model_len=131072,
            sources=(
                _SRC_STEP,
                _SRC_KV,
                _SRC_SCHED,
                "anchor: H100 TPOT p50 6.48 ms at c=1 (yobitelcomm) [M]",
            ),
        ),
        Preset(
            key="llama-3.1-8b/a10g",
            model=LLAMA_8B,
            gpu=A10G,
            tp=1,
            cost=StepCost(
                t_ovh=0.5 * _MS, t_w0=35 * _MS, c_tok=300 * _US, k_kv=0.31 * _US, a_attn=15 * _NS, t_ar=0.0
            ),
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            max_model_len=16384,
            sources=(_SRC_STEP, _SRC_KV, _SRC_SCHED, "A10G c_tok is the least certain number (§1.3, [D/?])"),
        ),
        Preset(
            key="llama-3.1-8b/a100",
            model=LLAMA_8B,
            gpu=A100,
            tp=1,
            cost=StepCost(
                t_ovh=0.4 * _MS, t_w0=10.2 * _MS, c_tok=67 * _US, k_kv=0.092 * _US, a_attn=3.5 * _NS, t_ar=0.0
            ),
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            max_model_len=131072,
            sources=(_SRC_STEP, _SRC_KV, _SRC_SCHED, _SRC_A100),
        ),
        Preset(
            key="llama-3.1-8b/h200",
            model=LLAMA_8B,
            gpu=H200,
            tp=1,
            cost=StepCost(
                t_ovh=0.4 * _MS, t_w0=4.35 * _MS, c_tok=25 * _US, k_kv=0.039 * _US, a_attn=1.1 * _NS, t_ar=0.0
            ),
            max_num_seqs=1024,
            max_num_batched_tokens=8192,
            max_model_len=131072,
            sources=(_SRC_STEP, _SRC_KV, _SRC_SCHED, _SRC_H200),
        ),
        Preset(
            key="qwen3-32b/2xh100",
            model=QWEN3_32B,
            gpu=H100,
            tp=2,
            cost=StepCost(
                t_ovh=0.5 * _MS,
                t_w0=12.7 * _MS,
                c_tok=60 * _US,
                k_kv=0.056 * _US,
                a_attn=2.4 * _NS,
                t_ar=1.5 * _MS,
            ),
            max_num_seqs=1024,
            max_num_batched_tokens=8192,
            max_model_len=40960,
            sources=(_SRC_STEP, _SRC_KV, _SRC_SCHED),
        ),
        Preset(
            key="qwen3-32b/4xa10g",
            model=QWEN3_32B,
            gpu=A10G,
            tp=4,
            cost=StepCost(
                t_ovh=0.8 * _MS,
                t_w0=35.5 * _MS,
                c_tok=650 * _US,
                k_kv=0.16 * _US,
                a_attn=17 * _NS,
                t_ar=5 * _MS,
            ),
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            max_model_len=32768,
            sources=(
                _SRC_STEP,
                _SRC_KV,
                _SRC_SCHED,
                "c_tok = 450 us compute + 200 us PCIe all-reduce (§8.2)",
            ),
        ),
        Preset(
            key="qwen3-32b/2xa100",
            model=QWEN3_32B,
            gpu=A100,
            tp=2,
            cost=StepCost(
                t_ovh=0.5 * _MS,
                t_w0=20.9 * _MS,
                c_tok=160 * _US,
                k_kv=0.092 * _US,
                a_attn=7.7 * _NS,
                t_ar=2 * _MS,
            ),
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            max_model_len=40960,
            sources=(
                _SRC_STEP,
                _SRC_KV,
                _SRC_SCHED,
                _SRC_A100,
                "c_tok = 2xH100's 60 us x the A100/H100 token-compute ratio 67/25 [D]",
            ),
        ),
        Preset(
            key="qwen3-32b/h200",
            model=QWEN3_32B,
            gpu=H200,
            tp=1,
            cost=StepCost(
                t_ovh=0.5 * _MS,
                t_w0=17.7 * _MS,
                c_tok=102 * _US,
                k_kv=0.078 * _US,
                a_attn=4.8 * _NS,
                t_ar=0.0,
            ),
            max_num_seqs=1024,
            max_num_batched_tokens=8192,
            max_model_len=40960,
            sources=(
                _SRC_STEP,
                _SRC_KV,
                _SRC_SCHED,
                _SRC_H200,
                "c_tok = 2 x 32.8e9 params / (989 TFLOPS x MFU 0.65), one GPU: no all-reduce [D]",
            ),
        ),
        Preset(
            key="llama-3.1-70b/8xh100",
            model=LLAMA_70B,
            gpu=H100,
            tp=8,
            cost=StepCost(
                t_ovh=0.8 * _MS,
                t_w0=6.8 * _MS,
                c_tok=55 * _US,
                k_kv=0.017 * _US,
                a_attn=0.8 * _NS,
                t_ar=2.5 * _MS,
            ),
            max_num_seqs=1024,
            max_num_batched_tokens=8192,
            max_model_len=131072,
            sources=(
                _SRC_STEP,
                _SRC_KV,
                _SRC_SCHED,
                "c_tok = 40 us compute + 15 us NVLink all-reduce (§8.2)",
            ),
        ),
        Preset(
            key="qwen3-235b-fp8/8xh100",
            model=QWEN3_235B_FP8,
            gpu=H100,
            tp=8,
            cost=StepCost(
                t_ovh=1.5 * _MS,
                t_w0=0.4 * _MS,
                t_w_experts=11 * _MS,
                c_tok=25 * _US,
                k_kv=0.021 * _US,
                a_attn=1.0 * _NS,
                t_ar=3 * _MS,
            ),
            max_num_seqs=1024,
            max_num_batched_tokens=8192,
            max_model_len=40960,
            sources=(
                _SRC_STEP,
                _SRC_KV,
                _SRC_SCHED,
                "MoE expert coverage 1-(1-k/E)^B, analytic only (§8.1, §9.3)",
            ),
        ),
    )
}


def get_preset(key: str) -> Preset:
    """The preset named ``key`` (e.g. ``llama-3.1-8b/h100``); a clear error lists the known keys."""
    try:
        return PRESETS[key]
    except KeyError:
        known = ", ".join(sorted(PRESETS))
        raise KeyError(f"unknown preset {key!r}; known presets: {known}") from None
