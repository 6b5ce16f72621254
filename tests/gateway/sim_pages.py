"""The simulated pod facts the parser tests render pages for (one place for every parser test)."""

from __future__ import annotations

from packaging.version import Version

from igw.sim.metrics_page import PageContext


def page_context(version: str, *, max_lora: int = 0) -> PageContext:
    """A Llama-3.1-8B pod of ``version`` with prefix caching on."""
    return PageContext(
        model_name="meta-llama/Llama-3.1-8B-Instruct",
        version=Version(version),
        max_model_len=32768,
        gpu_memory_utilization=0.9,
        prefix_caching=True,
        created_unix=1.7e9,
        max_lora=max_lora,
    )
