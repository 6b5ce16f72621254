"""What every live-mode router starter receives (:class:`RouterContext`) and the starter's type."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class RouterContext:
    """What a router needs: the pods' URLs and labels, the model, a work directory for its files."""

    pod_urls: tuple[str, ...]
    pod_labels: tuple[Mapping[str, str], ...]
    model: str
    workdir: Path
    weights: Mapping[str, float] | None = None
    lora_adapters: tuple[str, ...] = ()


RouterStarter = Callable[[RouterContext], AbstractAsyncContextManager[str]]
