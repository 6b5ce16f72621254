"""A pool's engine-side priority: the band written into the forwarded body's ``priority``.

The gateway cannot empty a running batch slot; the model server can. Both vLLM and SGLang read a
request's ``priority`` from its JSON body when started with their priority scheduler:

* **vLLM** ``--scheduling-policy priority``: the waiting queue is ordered by (priority, arrival),
  the **lower** value first; a running request is preempted (the least important one) only when
  KV blocks run out, never for a batch slot. A vLLM server without the flag answers 400 to a
  request with a non-zero priority, so the gateway writes it only where configured.
* **SGLang** ``--enable-priority-scheduling``: the waiting queue is ordered by priority, the
  **higher** value first (the lower with ``--schedule-low-priority-values-first``); a waiting
  request that finds the batch full preempts the least important running request when it
  outranks it by more than ``--priority-scheduling-preemption-threshold`` (default 10), unless
  ``--disable-priority-preemption``. A request without a priority is the least important of all.

``spec.extensions.flowControl.enginePriority`` names, per scheduler, how a band's priority maps to
the engine's value (:meth:`EnginePriority.value`): an explicit ``values`` table first, else the
band times ``scale``, negated where the lower value is the more important. The SGLang default scale
is the threshold plus one, so neighbouring bands (Critical 1, Standard 0, Sheddable -1) differ by
more than the threshold and each preempts the ones below it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from igw.errors import IgwSchedulingError

EXTENSION_FIELD: Final = "enginePriority"
SGLANG_DEFAULT_THRESHOLD: Final = 10
"""SGLang's ``--priority-scheduling-preemption-threshold`` default."""


class EnginePriorityError(IgwSchedulingError, ValueError):
    """An ``enginePriority`` entry that cannot work; the message names its path."""


class PriorityEngine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"


ENGINE_FLAGS: Final[Mapping[PriorityEngine, str]] = {
    PriorityEngine.VLLM: "--scheduling-policy priority",
    PriorityEngine.SGLANG: "--enable-priority-scheduling",
}
"""The model-server flag each engine needs for the gateway's ``priority`` to be accepted and used."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EnginePriority:
    """How one pool's engine reads ``priority`` and what the gateway writes there."""

    engine: PriorityEngine
    scale: int
    """A band's value is its priority times this (negated where lower values come first)."""
    low_values_first: bool
    """The engine serves the lower value first (vLLM always; SGLang's ``lowValuesFirst``)."""
    preemption_threshold: int | None
    """SGLang preempts a running request for a batch slot when the waiting one outranks it by more
    than this; ``None``: the engine never preempts for a slot (vLLM; SGLang with ``preemption: false``)."""
    values: Mapping[int, int] = field(default_factory=dict)
    """Band priority -> engine value, taking precedence over ``scale``."""

    @staticmethod
    def vllm(*, scale: int = 1, values: Mapping[int, int] | None = None) -> EnginePriority:
        return EnginePriority(
            engine=PriorityEngine.VLLM,
            scale=scale,
            low_values_first=True,
            preemption_threshold=None,
            values=dict(values or {}),
        )

    @staticmethod
    def sglang(
        *,
        threshold: int = SGLANG_DEFAULT_THRESHOLD,
        preemption: bool = True,
        scale: int | None = None,
        low_values_first: bool = False,
        values: Mapping[int, int] | None = None,
    ) -> EnginePriority:
        return EnginePriority(
            engine=PriorityEngine.SGLANG,
            scale=threshold + 1 if scale is None else scale,
            low_values_first=low_values_first,
            preemption_threshold=threshold if preemption else None,
            values=dict(values or {}),
        )

    @property
    def flag(self) -> str:
        """The server flag this setting needs (for pre-flight checks and error messages)."""
        return ENGINE_FLAGS[self.engine]

    @property
    def preempts_for_slot(self) -> bool:
        """Whether the engine empties a running batch slot for a more important request."""
        return self.preemption_threshold is not None

    def value(self, priority: int) -> int:
        """The engine ``priority`` for a request of band ``priority``."""
        explicit = self.values.get(priority)
        if explicit is not None:
            return explicit
        return -priority * self.scale if self.low_values_first else priority * self.scale

    def _rank(self, value: int) -> int:
        """An engine value as a rank where the smaller is served first."""
        return value if self.low_values_first else -value

    def preempts(self, higher: int, lower: int) -> bool:
        """Whether a request of band ``higher`` takes the batch slot of a running one of band ``lower``."""
        threshold = self.preemption_threshold
        if threshold is None:
            return False
        return self._rank(self.value(lower)) - self._rank(self.value(higher)) > threshold

    @staticmethod
    def from_entry(raw: Mapping[str, Any], *, engine: str | None, where: str) -> EnginePriority:
        """Build from one schema-validated ``enginePriority`` entry; ``engine`` is the scheduler's
        engine when the entry names none (``None``: the scheduler is unknown here, vLLM assumed)."""
        name = raw.get("engine", engine or PriorityEngine.VLLM.value)
        if name not in {e.value for e in PriorityEngine}:
            raise EnginePriorityError(
                f"{where}.engine: scheduler {raw.get('scheduler')!r} runs {name!r}, which reads no request "
                "priority; set engine: vllm or sglang if its servers are one of those"
            )
        chosen = PriorityEngine(name)
        values: dict[int, int] = {}
        for j, item in enumerate(raw.get("values", ())):
            band = int(item["priority"])
            if band in values:
                raise EnginePriorityError(f"{where}.values[{j}].priority: {band} is listed twice")
            values[band] = int(item["value"])
        scale = int(raw["scale"]) if "scale" in raw else None
        if chosen is PriorityEngine.VLLM:
            for key in ("preemptionThreshold", "preemption", "lowValuesFirst"):
                if key in raw:
                    raise EnginePriorityError(
                        f"{where}.{key}: an SGLang setting; vLLM's priority policy serves lower values "
                        "first and preempts only on a KV-cache shortage"
                    )
            return EnginePriority.vllm(scale=1 if scale is None else scale, values=values)
        return EnginePriority.sglang(
            threshold=int(raw.get("preemptionThreshold", SGLANG_DEFAULT_THRESHOLD)),
            preemption=bool(raw.get("preemption", True)),
            scale=scale,
            low_values_first=bool(raw.get("lowValuesFirst", False)),
            values=values,
        )


def engine_priorities(
    raw: Any, *, scheduler_engines: Mapping[str, str] | None, where: str
) -> dict[str, EnginePriority]:
    """Scheduler name -> its :class:`EnginePriority`, from the ``enginePriority`` list.

    ``scheduler_engines`` (scheduler name -> the engine its pods run) checks each name and gives the
    default engine; without it (a settings object built without its configuration) names are not
    checked and an entry without ``engine`` is taken as vLLM.
    """
    out: dict[str, EnginePriority] = {}
    for i, entry in enumerate(raw or ()):
        path = f"{where}[{i}]"
        scheduler = str(entry["scheduler"])
        if scheduler in out:
            raise EnginePriorityError(f"{path}.scheduler: {scheduler!r} is listed twice")
        engine: str | None = None
        if scheduler_engines is not None:
            if scheduler not in scheduler_engines:
                raise EnginePriorityError(
                    f"{path}.scheduler: no scheduler named {scheduler!r} in spec.schedulers"
                )
            engine = scheduler_engines[scheduler]
        out[scheduler] = EnginePriority.from_entry(entry, engine=engine, where=path)
    return out
