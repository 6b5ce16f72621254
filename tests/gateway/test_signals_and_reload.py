"""Missing signals reported loudly; hot reload of the configuration file."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import yaml

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for


async def test_vllm_091_missing_kv_name_is_reported_once_and_fallback_used(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="igw.gateway.scraper")
    async with (
        running(FakeModelServer("old", version="0.9.1", kv=0.42), FakeModelServer("new", kv=0.1)) as (
            old,
            new,
        ),
        gateway(config_doc([scheduler("pool", "m")]), {"pool": [old.key, new.key]}) as gw,
    ):
        await wait_for(lambda: old.scrapes >= 5, what="several scrapes")
        state = gw.state.runtime.schedulers["pool"].pool.states[old.key]
        assert state.metrics is not None
        assert state.metrics.kv_usage == 0.42
        assert state.kv_source == "vllm:gpu_cache_usage_perc"
        warnings = [r.getMessage() for r in caplog.records if "vllm:kv_cache_usage_perc" in r.getMessage()]
        assert len(warnings) == 1
        assert old.key in warnings[0]
        assert "upgrade to vLLM >= 0.9.2" in warnings[0]
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        labels = f'endpoint="{old.key}",scheduler="pool",signal="vllm:kv_cache_usage_perc"'
        assert f"igw_endpoint_signal_missing{{{labels}}} 1.0" in metrics
        assert f'endpoint="{new.key}",scheduler="pool",signal=' not in metrics
        readyz = await (await gw.http.get(gw.url + "/readyz")).json()
        assert readyz["schedulers"]["pool"]["endpoints"][old.key]["missing_signals"] == [
            "vllm:kv_cache_usage_perc"
        ]


async def test_sglang_without_metrics_is_reported_and_excluded(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="igw.gateway.scraper")
    d = config_doc([scheduler("sg", "m", engineType="sglang")])
    async with (
        running(
            FakeModelServer("nometrics", engine="sglang", metrics_status=404),
            FakeModelServer("ok", engine="sglang", waiting=2),
        ) as (bad, ok),
        gateway(d, {"sg": [bad.key, ok.key]}, wait_fresh=False) as gw,
    ):
        await wait_for(lambda: gw.fresh("sg", ok.key) and bad.scrapes >= 3, what="scrapes")
        assert gw.state.runtime.schedulers["sg"].pool.states[ok.key].metrics.waiting == 2
        for _ in range(4):
            assert (await (await gw.post("/v1/completions", {"model": "m", "prompt": "x"})).json())[
                "server"
            ] == "ok"
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert (
            f'igw_endpoint_signal_missing{{endpoint="{bad.key}",scheduler="sg",signal="/metrics"}} 1.0'
            in metrics
        )
        assert any("--enable-metrics" in r.getMessage() for r in caplog.records)


async def test_hot_reload_applies_valid_config_and_rejects_invalid(gateway: Any) -> None:
    d = config_doc([scheduler("pool", "m-old")])
    async with running(FakeModelServer("a")) as (a,), gateway(d, {"pool": [a.key]}, reload=True) as gw:
        assert (await gw.post("/v1/completions", {"model": "m-old", "prompt": "x"})).status == 200
        # a valid change: rename the model, add an adapter
        d2 = config_doc([scheduler("pool", "m-new", loraAdapters=["ad"])])
        gw.config_path.write_text(yaml.safe_dump(d2))
        await wait_for(lambda: gw.state.runtime.router.resolve("m-new") is not None, what="reload applied")
        assert (await gw.post("/v1/completions", {"model": "ad", "prompt": "x"})).status == 200
        assert (await gw.post("/v1/completions", {"model": "m-old", "prompt": "x"})).status == 404
        assert gw.fresh("pool", a.key)  # endpoint state carried over
        # an invalid change: rejected with the validator's message, the running config stays
        bad = config_doc([scheduler("pool", "m-bad", weights={"queue": -1})])
        gw.config_path.write_text(yaml.safe_dump(bad))
        await wait_for(lambda: gw.state.config_error is not None, what="reload rejected")
        assert "spec.schedulers[0].weights.queue" in (gw.state.config_error or "")
        assert (await gw.post("/v1/completions", {"model": "m-new", "prompt": "x"})).status == 200
        readyz = await (await gw.http.get(gw.url + "/readyz")).json()
        assert "weights.queue" in readyz["config_reload_error"]
        # a routing-extension cross-field error is rejected too
        bad2 = config_doc(
            [scheduler("pool", "m-bad")], routing={"scrapeInterval": "2s", "staleThreshold": "1s"}
        )
        gw.config_path.write_text(yaml.safe_dump(bad2))
        await wait_for(lambda: "staleThreshold" in (gw.state.config_error or ""), what="second rejection")
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_config_reloads_total{result="applied"} 1.0' in metrics
        assert 'igw_config_reloads_total{result="rejected"} 2.0' in metrics


async def test_static_endpoints_file_changes_are_picked_up(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (a, b),
        gateway(config_doc([scheduler("pool", "m")]), {"pool": [a.key]}) as gw,
    ):
        gw.endpoints_path.write_text(yaml.safe_dump({"schedulers": {"pool": [b.key]}}))
        await wait_for(
            lambda: gw.fresh("pool", b.key) and a.key not in gw.state.runtime.schedulers["pool"].pool.states
        )
        assert (await (await gw.post("/v1/completions", {"model": "m", "prompt": "x"})).json())[
            "server"
        ] == "b"


async def test_reload_adding_a_scheduler_makes_discovery_follow(gateway: Any) -> None:
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (a, b),
        gateway(config_doc([scheduler("pool", "m")]), {"pool": [a.key]}, reload=True) as gw,
    ):
        gw.config_path.write_text(
            yaml.safe_dump(config_doc([scheduler("pool", "m"), scheduler("second", "m2")]))
        )
        await wait_for(lambda: "second" in gw.state.runtime.schedulers, what="reload applied")
        gw.endpoints_path.write_text(yaml.safe_dump({"schedulers": {"pool": [a.key], "m2": [b.key]}}))
        await wait_for(lambda: gw.fresh("second", b.key), what="new scheduler's endpoint discovered")
        resp = await gw.post("/v1/completions", {"model": "m2", "prompt": "x"})
        assert (await resp.json())["server"] == "b"


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


async def test_hot_reload_survives_files_no_loader_expects(
    gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config nested 100,000 levels deep raised ``RecursionError`` inside the reload task, which
    ended the watch silently: no log, no metric, and later valid changes were never applied."""
    d = config_doc([scheduler("pool", "m-old")])
    async with running(FakeModelServer("a")) as (a,), gateway(d, {"pool": [a.key]}, reload=True) as gw:
        gw.config_path.write_text("spec: " + _nested(100_000) + "\n")
        await wait_for(lambda: gw.state.config_error is not None, what="deep file rejected")
        assert "nested deeper than 64 levels" in (gw.state.config_error or "")
        # an error no loader anticipates is reported the same way, and the watch goes on
        import igw.gateway.reload as reload_module

        def broken(_path: Any) -> Any:
            raise RuntimeError("loader bug")

        monkeypatch.setattr(reload_module, "load_gateway_config", broken)
        gw.config_path.write_text(yaml.safe_dump(config_doc([scheduler("pool", "m-other")])))
        await wait_for(
            lambda: "loader bug" in (gw.state.config_error or ""), what="unexpected error reported"
        )
        assert "unexpected RuntimeError" in (gw.state.config_error or "")
        monkeypatch.undo()
        gw.config_path.write_text(yaml.safe_dump(config_doc([scheduler("pool", "m-new")])))
        await wait_for(lambda: gw.state.runtime.router.resolve("m-new") is not None, what="watch still alive")
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_config_reloads_total{result="rejected"} 2.0' in metrics


async def test_endpoints_watch_survives_a_file_no_loader_expects(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (a, b),
        gateway(config_doc([scheduler("pool", "m")]), {"pool": [a.key]}) as gw,
    ):
        caplog.set_level(logging.ERROR, logger="igw.gateway.discovery")
        gw.endpoints_path.write_text("schedulers: " + _nested(100_000) + "\n")
        await wait_for(lambda: "nested deeper than 64 levels" in caplog.text, what="deep file reported")
        assert a.key in gw.state.runtime.schedulers["pool"].pool.states  # the previous endpoints stay
        gw.endpoints_path.write_text(yaml.safe_dump({"schedulers": {"pool": [b.key]}}))
        await wait_for(lambda: gw.fresh("pool", b.key), what="watch still alive after a deep file")
