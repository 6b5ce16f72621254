"""The unit of simulated traffic shared by workloads, the DES and the live load generators."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request of a workload.

    ``prompt_text`` is real text so prefix hashing works identically in the DES and over HTTP (send it as
    the ``prompt`` of ``/v1/completions``); ``prompt_tokens`` must equal ``count_tokens(prompt_text)``
    for generated workloads (trace replay may carry a count without matching text). ``output_tokens`` is
    exactly how many tokens the engine generates (``max_tokens`` with EOS ignored, as benchmarks do).
    """

    request_id: str
    arrival: float
    """Seconds from the start of the run."""
    prompt_text: str
    prompt_tokens: int
    output_tokens: int
    model: str
    """What the client asks for: the base model name or a LoRA adapter name."""
    adapter: str | None = None
    """The LoRA adapter when ``model`` names one, else None."""
    priority: int = 0
    tenant: str | None = None
    group: str | None = None
    """Workload group (shared-prefix group, session...) for per-group analysis."""
