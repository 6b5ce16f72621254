"""Which engine each scheduler's pods run: AWS's ``engineType``, or ``spec.extensions.engines``.

AWS's ``engineType`` enum names vLLM and SGLang only and stays exactly as AWS documents it. A
scheduler listed under ``spec.extensions.engines.tgi`` reads its pods as Text Generation Inference;
one listed under ``spec.extensions.engines.generic`` reads them through the metric specs given there
(:func:`igw.engines.generic_engine`). The JSON Schema checks the shape; this module checks what the
schema cannot (each name is a scheduler, listed once) and names the offending path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from igw.config.model import GatewayConfig
from igw.engines import ENGINES, TGI, Engine, generic_engine
from igw.errors import IgwConfigError

EXTENSION_NAME: Final = "engines"


class EngineSelectionError(IgwConfigError, ValueError):
    """``spec.extensions.engines`` names an unknown scheduler, one twice, or a malformed metric spec."""


def scheduler_engines(config: GatewayConfig) -> dict[str, Engine]:
    """Scheduler name -> the engine its pods are read as, for every ``spec.schedulers[]`` entry."""
    chosen: dict[str, Engine] = {s.name: ENGINES[s.engine_type] for s in config.schedulers}
    ext = config.extensions.get(EXTENSION_NAME)
    if not isinstance(ext, Mapping):
        return chosen
    seen: dict[str, str] = {}
    problems: list[str] = []

    def claim(name: Any, path: str) -> bool:
        if name not in chosen:
            problems.append(f"{path}: no scheduler named {name!r} in spec.schedulers")
            return False
        if name in seen:
            problems.append(f"{path}: scheduler {name!r} is already listed at {seen[name]}")
            return False
        seen[name] = path
        return True

    base = f"spec.extensions.{EXTENSION_NAME}"
    for i, name in enumerate(ext.get("tgi", ())):
        if claim(name, f"{base}.tgi[{i}]"):
            chosen[name] = TGI
    for i, entry in enumerate(ext.get("generic", ())):
        path = f"{base}.generic[{i}]"
        if not claim(entry.get("scheduler"), f"{path}.scheduler"):
            continue
        try:
            chosen[entry["scheduler"]] = generic_engine(
                queue=entry["queue"], running=entry["running"], kv_usage=entry.get("kvUsage")
            )
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
    if problems:
        raise EngineSelectionError("; ".join(problems))
    return chosen
