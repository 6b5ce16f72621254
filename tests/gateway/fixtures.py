"""Shared fixtures for gateway integration tests (registered by this folder's conftest.py, importable by
other folders): write an InferenceGatewayConfig, start the gateway on an
ephemeral port in front of real loopback model servers, and wait for conditions without sleeping
blindly."""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from igw.config.loader import load_gateway_config
from igw.gateway.app import create_app
from igw.gateway.discovery.static_file import StaticFileDiscovery
from igw.gateway.guards import RequestGuard
from igw.gateway.inference import STATE_KEY
from igw.gateway.serving import serve_app
from igw.gateway.state import GatewayState
from igw.gateway.tracing import Tracing
from tests.gateway.support import wait_for


@dataclass
class Gateway:
    url: str
    state: GatewayState
    config_path: Path
    endpoints_path: Path
    http: aiohttp.ClientSession

    async def post(self, path: str, body: Any, **kw: Any) -> aiohttp.ClientResponse:
        if isinstance(body, bytes):
            return await self.http.post(self.url + path, data=body, **kw)
        return await self.http.post(self.url + path, json=body, **kw)

    def fresh(self, scheduler: str, key: str) -> bool:
        sr = self.state.runtime.schedulers[scheduler]
        st = sr.pool.states.get(key)
        return st is not None and sr.scheduler.is_fresh(st.view(), self.state.clock())


@pytest.fixture
def gateway(tmp_path: Path) -> Callable[..., Any]:
    @contextlib.asynccontextmanager
    async def start(
        doc: dict[str, Any],
        endpoints: Mapping[str, list[Any]],
        *,
        guard: RequestGuard | None = None,
        wait_fresh: bool = True,
        reload: bool = False,
        services: Mapping[str, list[str]] | None = None,
        tracing: Tracing | None = None,
        emf_interval_s: float | None = None,
    ) -> AsyncIterator[Gateway]:
        config_path = tmp_path / "igwc.yaml"
        config_path.write_text(yaml.safe_dump(doc))
        endpoints_path = tmp_path / "endpoints.yaml"
        endpoints_doc: dict[str, Any] = {"schedulers": dict(endpoints)}
        if services is not None:
            endpoints_doc["services"] = dict(services)
        endpoints_path.write_text(yaml.safe_dump(endpoints_doc))
        config = load_gateway_config(config_path)
        app = create_app(
            config,
            guard=guard,
            discovery=StaticFileDiscovery.for_schedulers(
                endpoints_path, config.schedulers, poll_interval_s=0.05
            ),
            rng=random.Random(42),
            config_path=config_path if reload else None,
            tracing=tracing,
            emf_interval_s=emf_interval_s,
        )
        async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:
            gw = Gateway(
                url=url,
                state=app[STATE_KEY],
                config_path=config_path,
                endpoints_path=endpoints_path,
                http=http,
            )
            if wait_fresh:
                for name, entries in endpoints.items():
                    for e in entries:
                        key = e if isinstance(e, str) else e["address"]
                        await wait_for(functools.partial(gw.fresh, name, key), what=f"{key} scraped")
            yield gw

    return start
