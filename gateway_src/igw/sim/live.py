"""The live fleet: every pod of a :class:`FleetSpec` as a real aiohttp server on loopback, plus an admin API.

Usage (tests, the demo, the benchmark's live mode)::

    async with run_fleet(spec) as fleet:
        for pod in fleet.pods:           # pod.key == "127.0.0.1:PORT", pod.labels, pod.engine, pod.preset
            ...
        await fleet.inject("h100-0", FaultSpec(kind=FaultKind.SLOW, factor=3))
        await fleet.clear("h100-0")

The admin HTTP API (``fleet.admin_url``) offers the same over the wire: ``GET /pods``,
``POST /pods/{name-or-key}/faults`` (a FaultSpec JSON object), ``DELETE /pods/{name-or-key}/faults``
(all) or ``.../faults/{kind}``. It is a separate server so a hung or killed pod stays controllable.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson
from aiohttp import web

from igw.sim.server import LivePod
from igw.sim.spec import FaultKind, FaultSpec, FleetSpec, SpecError


@dataclass(frozen=True, slots=True)
class LivePodInfo:
    """What a client needs to know about one running pod."""

    key: str
    name: str
    host: str
    port: int
    labels: dict[str, str]
    engine: str
    engine_version: str
    preset: str
    model: str
    lora_adapters: tuple[str, ...]
    exposes_metrics: bool

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def to_mapping(self) -> dict[str, object]:
        return {
            "key": self.key,
            "name": self.name,
            "url": self.url,
            "labels": self.labels,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "preset": self.preset,
            "model": self.model,
            "lora_adapters": list(self.lora_adapters),
            "exposes_metrics": self.exposes_metrics,
        }


class RunningFleet:
    """Handle on a started fleet (returned by :func:`run_fleet`)."""

    def __init__(self, *, spec: FleetSpec, pods: list[LivePod]) -> None:
        self.spec = spec
        self._pods = pods
        self.admin_url = ""
        self._by_ref: dict[str, LivePod] = {}
        for p in pods:
            self._by_ref[p.spec.name] = p
            self._by_ref[p.key] = p
        self.pods: tuple[LivePodInfo, ...] = tuple(_info(p) for p in pods)

    @property
    def time_scale(self) -> float:
        return self.spec.time_scale

    def pod(self, ref: str) -> LivePod:
        """The live pod by name or ``host:port`` key (KeyError naming the reference otherwise)."""
        try:
            return self._by_ref[ref]
        except KeyError:
            raise KeyError(f"no pod named or keyed {ref!r}") from None

    async def inject(self, ref: str, fault: FaultSpec) -> None:
        """Inject ``fault`` into a pod; a window (``start_s``/``end_s``) counts from now."""
        await self.pod(ref).schedule(fault)

    async def clear(self, ref: str, kind: FaultKind | None = None) -> None:
        await self.pod(ref).clear(kind)

    def describe(self) -> dict[str, object]:
        """JSON-ready description: endpoints, labels, admin URL and the time scale."""
        return {
            "time_scale": self.time_scale,
            "admin_url": self.admin_url,
            "pods": [
                {
                    **i.to_mapping(),
                    "faults": [f.to_mapping() for f in p.faults.values()],
                    "lagged_steps": p.lagged_steps,
                    "max_lag_s": round(p.max_lag_s, 6),
                }
                for i, p in zip(self.pods, self._pods, strict=True)
            ],
        }

    def _admin_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024)
        app.router.add_get("/pods", self._admin_list)
        app.router.add_post("/pods/{ref}/faults", self._admin_inject)
        app.router.add_delete("/pods/{ref}/faults", self._admin_clear)
        app.router.add_delete("/pods/{ref}/faults/{kind}", self._admin_clear)
        return app

    async def _admin_list(self, request: web.Request) -> web.Response:
        return _json(self.describe())

    async def _admin_inject(self, request: web.Request) -> web.Response:
        try:
            pod = self.pod(request.match_info["ref"])
        except KeyError as exc:
            return _json({"error": str(exc.args[0])}, status=404)
        try:
            body = orjson.loads(await request.read())
            fault = FaultSpec.from_mapping(body, path="fault")
        except orjson.JSONDecodeError as exc:
            return _json({"error": f"body is not valid JSON: {exc}"}, status=400)
        except SpecError as exc:
            return _json({"error": str(exc), "field": exc.path}, status=400)
        await pod.schedule(fault)
        return _json({"pod": pod.spec.name, "faults": [f.to_mapping() for f in pod.faults.values()]})

    async def _admin_clear(self, request: web.Request) -> web.Response:
        try:
            pod = self.pod(request.match_info["ref"])
        except KeyError as exc:
            return _json({"error": str(exc.args[0])}, status=404)
        raw_kind = request.match_info.get("kind")
        kind: FaultKind | None = None
        if raw_kind is not None:
            try:
                kind = FaultKind(raw_kind)
            except ValueError:
                return _json({"error": f"unknown fault kind {raw_kind!r}", "field": "kind"}, status=400)
        await pod.clear(kind)
        return _json({"pod": pod.spec.name, "faults": [f.to_mapping() for f in pod.faults.values()]})


def _info(pod: LivePod) -> LivePodInfo:
    s = pod.spec
    return LivePodInfo(
        key=pod.key,
        name=s.name,
        host=pod.host,
        port=pod.port,
        labels=dict(s.labels),
        engine=s.engine.value,
        engine_version=s.engine_version,
        preset=s.preset,
        model=s.model_name,
        lora_adapters=s.lora_adapters,
        exposes_metrics=s.exposes_metrics,
    )


def _json(obj: object, *, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


@contextlib.asynccontextmanager
async def run_fleet(spec: FleetSpec, *, admin: bool = True) -> AsyncIterator[RunningFleet]:
    """Start every pod (ephemeral ports unless the spec fixes one) and the admin API; stop all on exit."""
    pods = [
        LivePod(spec=p, seed=spec.seed * 1_000_003 + i, time_scale=spec.time_scale, host=spec.host)
        for i, p in enumerate(spec.pods)
    ]
    started: list[LivePod] = []
    admin_runner: web.AppRunner | None = None
    try:
        for pod in pods:
            await pod.start()
            started.append(pod)
        fleet = RunningFleet(spec=spec, pods=pods)
        if admin:
            admin_runner = web.AppRunner(fleet._admin_app(), access_log=None)
            await admin_runner.setup()
            site = web.TCPSite(admin_runner, spec.host, 0)
            await site.start()
            server = site._server
            sockets = getattr(server, "sockets", None) or []
            fleet.admin_url = f"http://{spec.host}:{sockets[0].getsockname()[1]}"
        yield fleet
    finally:
        if admin_runner is not None:
            await admin_runner.cleanup()
        await asyncio.gather(*(p.stop() for p in started), return_exceptions=True)
