"""The heartbeat document a tier-1 gateway publishes and the global router reads (JSON in Redis).

Kept apart from the publisher (:mod:`igw.gateway.heartbeat`) so that both sides share one
definition of the format, and decoding names the field of a malformed document.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import orjson

FORMAT_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class PoolLoad:
    model: str
    endpoints_total: int
    endpoints_fresh: int
    saturation: float
    queue_depth: int


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
        """Parse a published document; ``ValueError`` naming the field when it is malformed."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"heartbeat is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError("heartbeat must be a JSON object")
        try:
            pools = {
                str(name): PoolLoad(
                    model=str(p["model"]),
                    endpoints_total=int(p["endpoints_total"]),
                    endpoints_fresh=int(p["endpoints_fresh"]),
                    saturation=float(p["saturation"]),
                    queue_depth=int(p["queue_depth"]),
                )
                for name, p in dict(data.get("pools") or {}).items()
            }
            return Heartbeat(
                cluster=str(data["cluster"]),
                region=str(data["region"]),
                seq=int(data["seq"]),
                sent_at=float(data["sent_at"]),
                models=tuple(str(m) for m in data["models"]),
                endpoints_total=int(data["endpoints_total"]),
                endpoints_fresh=int(data["endpoints_fresh"]),
                saturation=min(1.0, max(0.0, float(data["saturation"]))),
                queue_depth=int(data["queue_depth"]),
                ttft_p50_s=_opt_float(data.get("ttft_p50_s")),
                ttft_p90_s=_opt_float(data.get("ttft_p90_s")),
                ttft_p99_s=_opt_float(data.get("ttft_p99_s")),
                rate_429_per_s=float(data.get("rate_429_per_s", 0.0)),
                requests_per_s=float(data.get("requests_per_s", 0.0)),
                draining=bool(data.get("draining", False)),
                pools=pools,
                version=int(data.get("version", FORMAT_VERSION)),
            )
        except KeyError as exc:
            raise ValueError(f"heartbeat lacks field {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ValueError(f"heartbeat has a field of the wrong type: {exc}") from exc


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)
