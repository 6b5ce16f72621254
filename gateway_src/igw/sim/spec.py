"""Typed description of a simulated fleet (``FleetSpec`` / ``PodSpec`` / ``FaultSpec``) and its YAML loader.

The same ``PodSpec`` drives a live pod (:mod:`igw.sim.live`) and a DES pod (:mod:`igw.sim.des`), so
the two modes cannot drift apart. Loading is strict: unknown fields, wrong types and bad values raise
:class:`SpecError` naming the offending field path (``pods[1].engine_version``) and nothing is started.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, TypeVar

from packaging.version import InvalidVersion, Version

from igw import engines
from igw.config.documents import DocumentReadError, SourceDocument, read_documents
from igw.config.jsonpath import parse_path
from igw.errors import IgwToolingError
from igw.sim.engine import SGLANG_DEFAULT_PREEMPTION_THRESHOLD, PriorityScheduling
from igw.sim.presets import GIB, PRESETS, Preset, get_preset

_E = TypeVar("_E", bound=enum.StrEnum)


class SpecError(IgwToolingError, ValueError):
    """A fleet spec is invalid; the message starts with the field path, after ``source`` (the file
    and line, ``fleet.yaml:4``) when the spec was read from a file."""

    def __init__(self, path: str, message: str, *, source: str | None = None) -> None:
        super().__init__(f"{path}: {message}" if source is None else f"{source}: {path}: {message}")
        self.path = path
        self.message = message


class EngineKind(enum.StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"


class SchedulingPolicy(enum.StrEnum):
    """vLLM's ``--scheduling-policy``."""

    FCFS = "fcfs"
    PRIORITY = "priority"


_VLLM_ONLY: Final = ("scheduling_policy",)
DP_SIZE_MAX: Final = 64
"""The most data-parallel ranks one simulated SGLang pod runs (each rank is one engine)."""
_SGLANG_ONLY: Final = (
    "dp_size",
    "enable_priority_scheduling",
    "disable_priority_preemption",
    "priority_scheduling_preemption_threshold",
    "schedule_low_priority_values_first",
)


class FaultKind(enum.StrEnum):
    KILL = "kill"
    """Stop listening: connections are refused; in-flight streams are cut."""
    HANG = "hang"
    """Accept connections and never answer (every endpoint, /metrics and /health included)."""
    FREEZE_METRICS = "freeze_metrics"
    """Serve the /metrics page captured when the fault started (stale values)."""
    SLOW = "slow"
    """Multiply every engine step time by ``factor``."""
    ERROR_RATE = "error_rate"
    """Answer a fraction ``rate`` of inference requests with HTTP ``status``."""
    DIE_MID_STREAM = "die_mid_stream"
    """Cut every streaming response after ``after_tokens`` tokens (``mode``: fin, rst or stall)."""


SLOW_FACTOR_MIN: Final = 0.01
SLOW_FACTOR_MAX: Final = 1000.0
"""The largest ``slow`` factor: a thousand times slower already turns a 7 ms decode step into 7 s
(a pod that looks dead to any client); larger factors only made a fault that outlived its clearing."""


class StreamCut(enum.StrEnum):
    FIN = "fin"
    RST = "rst"
    STALL = "stall"


@dataclass(frozen=True, slots=True)
class FaultSpec:
    kind: FaultKind
    factor: float = 1.0
    rate: float = 0.0
    status: int = 500
    after_tokens: int = 1
    mode: StreamCut = StreamCut.FIN
    start_s: float = 0.0
    """When the fault begins, in simulated seconds: from the fleet's start for a spec fault, from the
    moment of injection for one injected at run time (admin API, ``RunningFleet.inject``)."""
    end_s: float | None = None
    """When it ends (None: never), on the same clock as ``start_s``; a killed pod comes back empty, a
    hung one resumes."""

    def __post_init__(self) -> None:
        if not isinstance(self.kind, FaultKind):
            object.__setattr__(self, "kind", _enum(FaultKind, self.kind, "kind"))
        if not isinstance(self.mode, StreamCut):
            object.__setattr__(self, "mode", _enum(StreamCut, self.mode, "mode"))
        if not SLOW_FACTOR_MIN <= self.factor <= SLOW_FACTOR_MAX:
            raise SpecError("factor", f"must be in [{SLOW_FACTOR_MIN}, {SLOW_FACTOR_MAX}], got {self.factor}")
        if self.start_s < 0:
            raise SpecError("start_s", f"must be >= 0, got {self.start_s}")
        if self.end_s is not None and self.end_s <= self.start_s:
            raise SpecError("end_s", f"must be > start_s ({self.start_s}), got {self.end_s}")

    @classmethod
    def from_mapping(cls, data: object, *, path: str) -> FaultSpec:
        m = _mapping(data, path)
        _only(m, {"kind", "factor", "rate", "status", "after_tokens", "mode", "start_s", "end_s"}, path)
        kind = _enum(FaultKind, _req(m, "kind", path), f"{path}.kind")
        factor = _number(
            m.get("factor", 1.0), f"{path}.factor", minimum=SLOW_FACTOR_MIN, maximum=SLOW_FACTOR_MAX
        )
        rate = _number(m.get("rate", 0.0), f"{path}.rate", minimum=0.0, maximum=1.0)
        status = _int(m.get("status", 500), f"{path}.status", minimum=400, maximum=599)
        after = _int(m.get("after_tokens", 1), f"{path}.after_tokens", minimum=0)
        mode = _enum(StreamCut, m.get("mode", "fin"), f"{path}.mode")
        start = _number(m.get("start_s", 0.0), f"{path}.start_s", minimum=0.0)
        raw_end = m.get("end_s")
        end = None if raw_end is None else _number(raw_end, f"{path}.end_s", minimum=0.0)
        if end is not None and end <= start:
            raise SpecError(f"{path}.end_s", f"must be > start_s ({start}), got {end}")
        return cls(
            kind=kind,
            factor=factor,
            rate=rate,
            status=status,
            after_tokens=after,
            mode=mode,
            start_s=start,
            end_s=end,
        )

    def to_mapping(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "factor": self.factor,
            "rate": self.rate,
            "status": self.status,
            "after_tokens": self.after_tokens,
            "mode": self.mode.value,
            "start_s": self.start_s,
            "end_s": self.end_s,
        }


SGLANG_MIN_METRICS_VERSION: Final = Version(engines.SGLANG.minimum_version)
"""The first SGLang release with a /metrics page (the catalogue's minimum)."""
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_ADAPTER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")


@dataclass(frozen=True, slots=True)
class PodSpec:
    """One simulated model-server pod."""

    preset: str
    name: str = ""
    engine: EngineKind = EngineKind.VLLM
    engine_version: str = "0.10.1"
    enable_metrics: bool = True
    """SGLang's ``--enable-metrics`` (vLLM always serves /metrics)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    lora_adapters: tuple[str, ...] = ()
    max_loras: int = 0
    """GPU LoRA slots; 0 means 1 when adapters are configured (vLLM's default ``--max-loras``)."""
    served_model_name: str = ""
    """Base model name in the API; defaults to the preset's HuggingFace name."""
    port: int = 0
    faults: tuple[FaultSpec, ...] = ()
    jitter_sigma: float = 0.05
    prefix_caching: bool = True
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    scheduling_policy: SchedulingPolicy = SchedulingPolicy.FCFS
    """vLLM's ``--scheduling-policy``: ``priority`` orders the waiting queue by the body's
    ``priority`` (lower first) and preempts the least important request on a KV shortage; ``fcfs``
    refuses a non-zero ``priority`` with 400, as vLLM does."""
    enable_priority_scheduling: bool = False
    """SGLang's ``--enable-priority-scheduling``; without it a request carrying ``priority`` is
    aborted, as SGLang does."""
    disable_priority_preemption: bool = False
    """SGLang's ``--disable-priority-preemption``: order the queue by priority, never preempt."""
    priority_scheduling_preemption_threshold: int = SGLANG_DEFAULT_PREEMPTION_THRESHOLD
    """SGLang's ``--priority-scheduling-preemption-threshold``."""
    schedule_low_priority_values_first: bool = False
    """SGLang's ``--schedule-low-priority-values-first``."""
    dp_size: int = 1
    """SGLang's ``--dp-size``: data-parallel ranks, each a full replica of the preset (its own
    scheduler, waiting queue, running batch and KV pool) behind the pod's round-robin DP controller
    (SGLang's default ``--load-balance-method round_robin``); with more than one, every scheduler
    series on the page carries a ``dp_rank`` label. Live pods only (the DES refuses it)."""

    def priority_scheduling(self) -> PriorityScheduling | None:
        """The engine's priority scheduling as this pod's flags set it (``None``: FCFS)."""
        if self.engine is EngineKind.VLLM and self.scheduling_policy is SchedulingPolicy.PRIORITY:
            return PriorityScheduling.vllm()
        if self.engine is EngineKind.SGLANG and self.enable_priority_scheduling:
            return PriorityScheduling.sglang(
                preemption=not self.disable_priority_preemption,
                threshold=self.priority_scheduling_preemption_threshold,
                low_values_first=self.schedule_low_priority_values_first,
            )
        return None

    def __post_init__(self) -> None:
        """Coerce plain strings/lists (direct construction in Python) to the typed forms."""
        if not isinstance(self.engine, EngineKind):
            object.__setattr__(self, "engine", _enum(EngineKind, self.engine, "engine"))
        if not isinstance(self.scheduling_policy, SchedulingPolicy):
            policy = _enum(SchedulingPolicy, self.scheduling_policy, "scheduling_policy")
            object.__setattr__(self, "scheduling_policy", policy)
        if self.preset not in PRESETS:
            raise SpecError("preset", f"unknown preset {self.preset!r}; known: {', '.join(sorted(PRESETS))}")
        object.__setattr__(self, "lora_adapters", tuple(self.lora_adapters))
        object.__setattr__(self, "faults", tuple(self.faults))
        if isinstance(self.dp_size, bool) or not isinstance(self.dp_size, int):
            raise SpecError("dp_size", f"expected an integer, got {self.dp_size!r}")
        if not 1 <= self.dp_size <= DP_SIZE_MAX:
            raise SpecError("dp_size", f"must be in [1, {DP_SIZE_MAX}], got {self.dp_size}")
        if self.dp_size > 1 and self.engine is not EngineKind.SGLANG:
            raise SpecError("dp_size", f"not a flag of engine {self.engine.value}")
        try:
            Version(self.engine_version)
        except InvalidVersion:
            raise SpecError("engine_version", f"not a valid version: {self.engine_version!r}") from None
        if self.gpu_memory_utilization is not None:
            # the YAML loader's checks, for a PodSpec built in Python too: one built with a share
            # leaving no KV cache was accepted and answered every request with an error (before s49)
            gmu = self.gpu_memory_utilization
            if isinstance(gmu, bool) or not isinstance(gmu, (int, float)) or not 0.05 <= gmu <= 1.0:
                raise SpecError("gpu_memory_utilization", f"must be a number in [0.05, 1], got {gmu!r}")
            _check_kv_cache(self.preset, self.engine, gmu, path="gpu_memory_utilization")

    def resolved_preset(self) -> Preset:
        """The preset with this pod's scheduler overrides applied."""
        preset = get_preset(self.preset)
        changes: dict[str, object] = {}
        if self.max_num_seqs is not None:
            changes["max_num_seqs"] = self.max_num_seqs
        if self.max_num_batched_tokens is not None:
            changes["max_num_batched_tokens"] = self.max_num_batched_tokens
        if self.gpu_memory_utilization is not None:
            changes["gpu_memory_utilization"] = self.gpu_memory_utilization
        return preset.with_overrides(**changes) if changes else preset

    @property
    def model_name(self) -> str:
        return self.served_model_name or get_preset(self.preset).model.served_name

    @property
    def effective_max_loras(self) -> int:
        if not self.lora_adapters:
            return 0
        return self.max_loras if self.max_loras > 0 else 1

    @property
    def version(self) -> Version:
        return Version(self.engine_version)

    @property
    def exposes_metrics(self) -> bool:
        """SGLang serves /metrics only with --enable-metrics and from 0.3.5.post1 on; vLLM and TGI always."""
        if self.engine is not EngineKind.SGLANG:
            return True
        return self.enable_metrics and self.version >= SGLANG_MIN_METRICS_VERSION

    @classmethod
    def from_mapping(cls, data: object, *, path: str) -> PodSpec:
        m = _mapping(data, path)
        allowed = {
            "preset",
            "name",
            "engine",
            "engine_version",
            "enable_metrics",
            "labels",
            "lora_adapters",
            "max_loras",
            "served_model_name",
            "port",
            "faults",
            "jitter_sigma",
            "prefix_caching",
            "max_num_seqs",
            "max_num_batched_tokens",
            "gpu_memory_utilization",
            "replicas",
            *_VLLM_ONLY,
            *_SGLANG_ONLY,
        }
        _only(m, allowed, path)
        engine = _enum(EngineKind, m.get("engine", "vllm"), f"{path}.engine")
        foreign: tuple[str, ...] = _SGLANG_ONLY if engine is not EngineKind.SGLANG else ()
        foreign += _VLLM_ONLY if engine is not EngineKind.VLLM else ()
        for key in foreign:
            if key in m:
                raise SpecError(f"{path}.{key}", f"not a flag of engine {engine.value}")
        preset = _str(_req(m, "preset", path), f"{path}.preset")
        if preset not in PRESETS:
            raise SpecError(
                f"{path}.preset", f"unknown preset {preset!r}; known: {', '.join(sorted(PRESETS))}"
            )
        version = _str(m.get("engine_version", "0.10.1"), f"{path}.engine_version")
        try:
            Version(version)
        except InvalidVersion:
            raise SpecError(f"{path}.engine_version", f"not a valid version: {version!r}") from None
        labels_raw = _mapping(m.get("labels", {}), f"{path}.labels")
        labels: dict[str, str] = {}
        for k, v in labels_raw.items():
            kp = f"{path}.labels.{k}"
            if not isinstance(k, str) or not _LABEL_KEY.fullmatch(k):
                raise SpecError(kp, "not a valid Kubernetes label key")
            value = str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
            if not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value):
                raise SpecError(kp, f"not a valid Kubernetes label value: {v!r}")
            labels[k] = value
        adapters_raw = _list(m.get("lora_adapters", []), f"{path}.lora_adapters")
        adapters: list[str] = []
        for i, a in enumerate(adapters_raw):
            ap = f"{path}.lora_adapters[{i}]"
            if not isinstance(a, str) or not _ADAPTER.fullmatch(a):
                raise SpecError(ap, f"not a valid adapter name: {a!r}")
            if a in adapters:
                raise SpecError(ap, f"duplicate adapter {a!r}")
            adapters.append(a)
        faults = tuple(
            FaultSpec.from_mapping(f, path=f"{path}.faults[{i}]")
            for i, f in enumerate(_list(m.get("faults", []), f"{path}.faults"))
        )
        gmu = m.get("gpu_memory_utilization")
        if gmu is not None:
            gmu = _number(gmu, f"{path}.gpu_memory_utilization", minimum=0.05, maximum=1.0)
            _check_kv_cache(preset, engine, gmu, path=f"{path}.gpu_memory_utilization")
        return cls(
            preset=preset,
            name=_str(m.get("name", ""), f"{path}.name"),
            engine=engine,
            engine_version=version,
            enable_metrics=_bool(m.get("enable_metrics", True), f"{path}.enable_metrics"),
            labels=labels,
            lora_adapters=tuple(adapters),
            max_loras=_int(m.get("max_loras", 0), f"{path}.max_loras", minimum=0, maximum=256),
            served_model_name=_str(m.get("served_model_name", ""), f"{path}.served_model_name"),
            port=_int(m.get("port", 0), f"{path}.port", minimum=0, maximum=65535),
            faults=faults,
            jitter_sigma=_number(
                m.get("jitter_sigma", 0.05), f"{path}.jitter_sigma", minimum=0.0, maximum=1.0
            ),
            prefix_caching=_bool(m.get("prefix_caching", True), f"{path}.prefix_caching"),
            max_num_seqs=_opt_int(m.get("max_num_seqs"), f"{path}.max_num_seqs"),
            max_num_batched_tokens=_opt_int(
                m.get("max_num_batched_tokens"), f"{path}.max_num_batched_tokens"
            ),
            gpu_memory_utilization=gmu,
            scheduling_policy=_enum(
                SchedulingPolicy, m.get("scheduling_policy", "fcfs"), f"{path}.scheduling_policy"
            ),
            enable_priority_scheduling=_bool(
                m.get("enable_priority_scheduling", False), f"{path}.enable_priority_scheduling"
            ),
            disable_priority_preemption=_bool(
                m.get("disable_priority_preemption", False), f"{path}.disable_priority_preemption"
            ),
            priority_scheduling_preemption_threshold=_int(
                m.get("priority_scheduling_preemption_threshold", SGLANG_DEFAULT_PREEMPTION_THRESHOLD),
                f"{path}.priority_scheduling_preemption_threshold",
                minimum=0,
            ),
            schedule_low_priority_values_first=_bool(
                m.get("schedule_low_priority_values_first", False),
                f"{path}.schedule_low_priority_values_first",
            ),
            dp_size=_int(m.get("dp_size", 1), f"{path}.dp_size", minimum=1, maximum=DP_SIZE_MAX),
        )


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """A fleet: pods (``replicas`` already expanded, names unique) plus global knobs."""

    pods: tuple[PodSpec, ...]
    time_scale: float = 1.0
    """Wall seconds per simulated GPU second: 10 runs ten times slower than a GPU, 0.1 ten times faster."""
    seed: int = 0
    host: str = "127.0.0.1"

    @classmethod
    def from_mapping(cls, data: object, *, path: str = "spec") -> FleetSpec:
        m = _mapping(data, path)
        _only(m, {"pods", "time_scale", "seed", "host"}, path)
        raw_pods = _list(_req(m, "pods", path), f"{path}.pods")
        if not raw_pods:
            raise SpecError(f"{path}.pods", "must list at least one pod")
        pods: list[PodSpec] = []
        names: set[str] = set()
        ports: dict[int, str] = {}
        for i, raw in enumerate(raw_pods):
            pp = f"{path}.pods[{i}]"
            pod = PodSpec.from_mapping(raw, path=pp)
            replicas = _int(_mapping(raw, pp).get("replicas", 1), f"{pp}.replicas", minimum=1, maximum=4096)
            if replicas > 1 and pod.port:
                raise SpecError(f"{pp}.port", "a fixed port cannot be combined with replicas > 1")
            if pod.port:
                # every pod listens on the fleet's one host: a second pod on a port would only fail at
                # bind time ("address already in use"), after the first pods had started
                if pod.port in ports:
                    raise SpecError(f"{pp}.port", f"port {pod.port} is already taken by {ports[pod.port]}")
                ports[pod.port] = pp
            base = pod.name or f"pod-{i}"
            for r in range(replicas):
                name = base if replicas == 1 else f"{base}-{r}"
                if name in names:
                    raise SpecError(f"{pp}.name", f"duplicate pod name {name!r}")
                names.add(name)
                pods.append(_with_name(pod, name))
        host = _str(m.get("host", "127.0.0.1"), f"{path}.host")
        return cls(
            pods=tuple(pods),
            time_scale=_number(m.get("time_scale", 1.0), f"{path}.time_scale", minimum=1e-3, maximum=1e3),
            seed=_int(m.get("seed", 0), f"{path}.seed", minimum=0),
            host=host,
        )

    @classmethod
    def from_yaml(cls, path: str | Path) -> FleetSpec:
        p = Path(path)
        try:
            documents = read_documents(p)
        except DocumentReadError as exc:
            raise SpecError(str(p), str(exc).removeprefix(f"{p}: ")) from None
        if len(documents) != 1 or documents[0].content is None:
            found = "none" if not documents or documents[0].content is None else str(len(documents))
            raise SpecError(str(p), f"expected one fleet spec document, found {found}")
        document = documents[0]
        content = document.content
        if isinstance(content, Mapping) and "pods" not in content and isinstance(content.get("kind"), str):
            # a Kubernetes manifest given where the fleet spec goes: "spec.apiVersion: unknown field"
            # said nothing of what was wrong with the file
            raise SpecError(
                "spec",
                f"a Kubernetes manifest (kind {content['kind']}), not a fleet spec (a mapping with a pods: "
                "list, see docs/simulator.md)",
                source=f"{p}:{document.line}",
            )
        try:
            return cls.from_mapping(content, path="spec")
        except SpecError as exc:
            # the field path alone ("spec.pods[0].preset: ...") named no file: `igw bench --fleet` and
            # `igw sim run/fleet --spec` printed it without saying which file was wrong
            raise SpecError(exc.path, exc.message, source=f"{p}:{_line_of(document, exc.path)}") from None


def _check_kv_cache(preset: str, engine: EngineKind, gmu: float, *, path: str) -> None:
    """Raise :class:`SpecError` at ``path`` when ``gmu`` of the GPU memory leaves ``preset`` no KV
    cache, or (vLLM) one smaller than the model's max seq len. Called by :meth:`PodSpec.__post_init__`,
    so a pod built in Python is checked as one loaded from YAML is (which calls it first, to name the
    field's full path)."""
    resolved = get_preset(preset).with_overrides(gpu_memory_utilization=gmu)
    if resolved.num_gpu_blocks == 0:
        # a pod whose weights fill its share of GPU memory had no KV cache and answered every
        # request with an error, the run exiting 0 (vLLM refuses to start: "No available
        # memory for the cache blocks")
        weights = resolved.model.weight_bytes / resolved.tp / GIB
        raise SpecError(
            path,
            f"{gmu:g} of {resolved.gpu.memory_gib:g} GiB per GPU leaves no KV cache for {preset} "
            f"(weights {weights:.1f} GiB and a {resolved.gpu.activation_reserve_gib:g} GiB "
            "activation reserve per GPU); raise it",
        )
    if engine is EngineKind.VLLM and resolved.kv_capacity_tokens < resolved.max_model_len:
        # vLLM checks at start-up that the cache holds one sequence of the model's max length
        # and refuses to start otherwise; the pod was accepted and served (before session s49)
        raise SpecError(
            path,
            f"{gmu:g} leaves a KV cache of {resolved.kv_capacity_tokens} tokens for {preset}, "
            f"less than its max seq len ({resolved.max_model_len}): vLLM refuses to start when "
            "the KV cache cannot hold one request of the model's max seq len; raise it",
        )


def _with_name(pod: PodSpec, name: str) -> PodSpec:
    return replace(pod, name=name)


def _line_of(document: SourceDocument, field_path: str) -> int:
    """The line of ``field_path`` (``spec.pods[0].preset``: ``spec`` is the document itself) in
    ``document``, or of its nearest existing ancestor."""
    try:
        parts = parse_path(field_path)[1:]
    except ValueError:  # a label key such as "bad key!" is not a path parse_path reads back
        return document.line
    return document.line_of(parts)


# ---------------------------------------------------------------------- field readers
def _mapping(v: object, path: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise SpecError(path, f"expected a mapping, got {type(v).__name__}")
    return v


def _list(v: object, path: str) -> Sequence[Any]:
    if not isinstance(v, list):
        raise SpecError(path, f"expected a list, got {type(v).__name__}")
    return v


def _only(m: Mapping[str, Any], allowed: set[str], path: str) -> None:
    for k in m:
        if k not in allowed:
            raise SpecError(f"{path}.{k}", f"unknown field; allowed: {', '.join(sorted(allowed))}")


def _req(m: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in m:
        raise SpecError(f"{path}.{key}", "required field is missing")
    return m[key]


def _str(v: object, path: str) -> str:
    if not isinstance(v, str):
        raise SpecError(path, f"expected a string, got {type(v).__name__}")
    return v


def _bool(v: object, path: str) -> bool:
    if not isinstance(v, bool):
        raise SpecError(path, f"expected true or false, got {v!r}")
    return v


def _int(v: object, path: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(path, f"expected an integer, got {v!r}")
    if minimum is not None and v < minimum:
        raise SpecError(path, f"must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise SpecError(path, f"must be <= {maximum}, got {v}")
    return v


def _opt_int(v: object, path: str) -> int | None:
    return None if v is None else _int(v, path, minimum=1)


def _number(v: object, path: str, *, minimum: float | None = None, maximum: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(path, f"expected a number, got {v!r}")
    f = float(v)
    if f != f:
        raise SpecError(path, "must not be NaN")
    if minimum is not None and f < minimum:
        raise SpecError(path, f"must be >= {minimum}, got {f}")
    if maximum is not None and f > maximum:
        raise SpecError(path, f"must be <= {maximum}, got {f}")
    return f


def _enum(cls: type[_E], v: object, path: str) -> _E:
    if not isinstance(v, str):
        raise SpecError(path, f"expected a string, got {v!r}")
    try:
        return cls(v)
    except ValueError:
        raise SpecError(path, f"must be one of {', '.join(e.value for e in cls)}, got {v!r}") from None
