"""The heartbeat document a tier-1 gateway publishes and the global router reads (JSON in Redis).

Kept apart from the publisher (:mod:`igw.gateway.heartbeat`) so that both sides share one
definition of the format, and decoding names the field of a malformed document.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final, cast

import orjson

FORMAT_VERSION: Final = 1

MAX_CONTAINERS: Final = 1024
"""The most JSON objects and arrays a document may open (its ``{`` and ``[`` characters, counted before
it is parsed; one inside a string counts too). A gateway's document opens two per pool (the pool and
its adapters) and three more: 203 at the most schedulers a configuration may have (100)."""
MAX_ITEMS: Final = 16384
"""The most separated members and elements a document may hold (its ``,`` characters, counted as
:data:`MAX_CONTAINERS`). A gateway's holds its models (a model and 50 adapters at most per scheduler),
each pool's fields and adapters and 17 fields: 10 717 at the most schedulers a configuration may have.

Both bounds are checked before parsing because parsing builds a Python object per value while the
interpreter is locked, on whichever thread it runs: until session s43 the global router parsed on its
event loop a 1.4 MB document of 60 000 small objects in an unknown field (80-350 ms: the objects set
the garbage collector going) or a 3.8 MB one listing 180 000 models (60-140 ms), at every poll."""


@dataclass(frozen=True, slots=True)
class PoolLoad:
    model: str
    endpoints_total: int
    endpoints_fresh: int
    saturation: float
    queue_depth: int
    adapters: tuple[str, ...] = ()
    """The LoRA adapters the pool serves (its scheduler's ``loraAdapters``): a request naming one of
    them is routed on this pool's figures. Absent from an older gateway's document (routed on the
    cluster's figures then, as before session s40)."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One tier-1 gateway's state as the global router sees it."""

    cluster: str
    region: str
    seq: int
    sent_at: float
    """Publisher's wall clock (informational: staleness is judged on the reader's clock by ``seq``)."""
    models: tuple[str, ...]
    endpoints_total: int
    endpoints_fresh: int
    saturation: float
    """0 (every endpoint has spare capacity) .. 1 (none has: the gateway answers 429 next)."""
    queue_depth: int
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    rate_429_per_s: float = 0.0
    requests_per_s: float = 0.0
    draining: bool = False
    pools: Mapping[str, PoolLoad] = field(default_factory=dict)
    version: int = FORMAT_VERSION

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    @staticmethod
    def decode(raw: bytes | str) -> Heartbeat:
        """Parse a published document; ``ValueError`` naming the field when it is malformed.

        Strict about what routing reads: every field of its type (an ``int`` is not a ``bool``, a
        string is not a list of models), every count and time at least 0 and finite, saturations
        within 0..1, and a format version this reader knows. A value a working gateway cannot
        publish means a broken or foreign writer: taking it as it came gave, for example, a P99 TTFT
        of -0.05 s, which divided the routing weight by zero and failed every request for the model
        at every cluster, or ``"draining": "false"``, which read as draining. Fields this reader
        does not know are ignored (a newer gateway may add some without a new version).

        Written by hand rather than through a JSON Schema validator: every router replica decodes
        every cluster's document at every poll (two a second each), and these checks are a few
        microseconds per document."""
        if (problem := _shape_problem(raw)) is not None:
            raise ValueError(f"heartbeat {problem} (more than a gateway publishes): not parsed")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"heartbeat is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError("heartbeat must be a JSON object")
        doc = _Fields(data, "")
        version = doc.count("version", FORMAT_VERSION)
        if version > FORMAT_VERSION:
            raise ValueError(
                f"heartbeat format version {version} is newer than this router reads ({FORMAT_VERSION}): "
                "upgrade the global router before the gateways"
            )
        if version < 1:
            raise ValueError(f"heartbeat field 'version' must be at least 1, got {version}")
        # Read in the order the fields are declared, so the first problem named is the first field's.
        cluster, region, seq, sent_at = (
            doc.text("cluster"),
            doc.text("region"),
            doc.count("seq"),
            doc.seconds("sent_at"),
        )
        models = doc.texts("models")
        return Heartbeat(
            cluster=cluster,
            region=region,
            seq=seq,
            sent_at=sent_at,
            models=models,
            endpoints_total=doc.count("endpoints_total"),
            endpoints_fresh=doc.count("endpoints_fresh"),
            saturation=doc.share("saturation"),
            queue_depth=doc.count("queue_depth"),
            ttft_p50_s=doc.optional_seconds("ttft_p50_s"),
            ttft_p90_s=doc.optional_seconds("ttft_p90_s"),
            ttft_p99_s=doc.optional_seconds("ttft_p99_s"),
            rate_429_per_s=doc.seconds("rate_429_per_s", 0.0),
            requests_per_s=doc.seconds("requests_per_s", 0.0),
            draining=doc.flag("draining", False),
            pools=_pools(data.get("pools")),
            version=version,
        )


def _shape_problem(raw: bytes | str) -> str | None:
    """What makes ``raw`` too large in shape to parse (:data:`MAX_CONTAINERS`, :data:`MAX_ITEMS`), or
    ``None``."""
    data = raw.encode() if isinstance(raw, str) else raw
    opened = data.count(b"{") + data.count(b"[")
    if opened > MAX_CONTAINERS:
        return f"opens {opened} JSON objects and arrays, more than {MAX_CONTAINERS}"
    items = data.count(b",")
    if items > MAX_ITEMS:
        return f"holds {items} separated values, more than {MAX_ITEMS}"
    return None


def _pools(raw: object) -> dict[str, PoolLoad]:
    """The ``pools`` object of a document (absent or ``null``: none), each pool's fields checked."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"heartbeat field 'pools' must be an object, got {_kind(raw)}")
    pools: dict[str, PoolLoad] = {}
    for name, pool_raw in raw.items():
        if not isinstance(pool_raw, dict):
            # The name quoted as every other field's is (repr): a hostile writer's pool name with a
            # line break would otherwise forge a line of the router's log.
            raise ValueError(f"heartbeat field {'pools.' + name!r} must be an object, got {_kind(pool_raw)}")
        pool = _Fields(pool_raw, f"pools.{name}.")
        pools[name] = PoolLoad(
            model=pool.text("model"),
            endpoints_total=pool.count("endpoints_total"),
            endpoints_fresh=pool.count("endpoints_fresh"),
            saturation=pool.share("saturation"),
            queue_depth=pool.count("queue_depth"),
            adapters=pool.texts("adapters", ()),
        )
    return pools


_MISSING: Final = object()


def _kind(value: object) -> str:
    """How a wrong value reads in a message: its JSON type, and the value itself when short."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    kind = "null" if value is None else names.get(type(value), type(value).__name__)
    shown = repr(value)
    return f"{kind} {shown}" if len(shown) <= 40 else kind


class _Fields:
    """Typed reads of one JSON object's fields, each ``ValueError`` naming the field (``prefix`` +
    its name); a field given a default may be absent (or ``null`` where the read says so)."""

    def __init__(self, data: Mapping[str, Any], prefix: str) -> None:
        self._data = data
        self._prefix = prefix

    def _get(self, name: str, default: object) -> object:
        value = self._data.get(name, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise ValueError(f"heartbeat lacks field {self._prefix + name!r}")
            return default
        return value

    def _wrong(self, name: str, wanted: str, value: object) -> ValueError:
        return ValueError(f"heartbeat field {self._prefix + name!r} must be {wanted}, got {_kind(value)}")

    def text(self, name: str) -> str:
        value = self._get(name, _MISSING)
        if not isinstance(value, str) or not value:
            raise self._wrong(name, "a non-empty string", value)
        return value

    def texts(self, name: str, default: object = _MISSING) -> tuple[str, ...]:
        value = self._get(name, default)
        if isinstance(value, tuple):  # the default
            return value
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._wrong(name, "a list of strings", value)
        return tuple(value)

    def count(self, name: str, default: object = _MISSING) -> int:
        value = self._get(name, default)
        if type(value) is not int or value < 0:
            raise self._wrong(name, "an integer of at least 0", value)
        return value

    def seconds(self, name: str, default: object = _MISSING) -> float:
        """A finite number of at least 0 (a time, a duration or a rate)."""
        value = self._get(name, default)
        if type(value) not in (int, float) or not 0 <= cast(float, value) < math.inf:  # NaN fails it
            raise self._wrong(name, "a finite number of at least 0", value)
        return float(cast(float, value))

    def optional_seconds(self, name: str) -> float | None:
        value = self._get(name, None)
        return None if value is None else self.seconds(name)

    def share(self, name: str) -> float:
        value = self._get(name, _MISSING)
        if type(value) not in (int, float) or not 0 <= cast(float, value) <= 1:  # NaN fails it
            raise self._wrong(name, "a number from 0 to 1", value)
        return float(cast(float, value))

    def flag(self, name: str, default: bool) -> bool:
        value = self._get(name, default)
        if type(value) is not bool:
            raise self._wrong(name, "true or false", value)
        return value
