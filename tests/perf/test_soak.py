"""``igw perf soak`` end to end, shortened to seconds: every phase runs and is reported; the RSS
baseline waits for the prefix index to reach steady state."""

from __future__ import annotations

import re

import orjson
import pytest

from igw.cli.main import main
from igw.perf.soak import (
    STEADY_FILL,
    PhaseReport,
    PrefixFill,
    RssSample,
    Tally,
    served_by,
)
from igw.sim.presets import get_preset


def test_short_soak_reports_every_phase_without_lost_requests(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["perf", "soak", "--minutes", "0.1", "--calibrate-seconds", "3", "--settle-seconds", "1"]
    code = main([*argv, "--pods", "1", "--concurrency", "8", "--time-scale", "2"])
    out = capsys.readouterr().out
    rows = {
        m.group(1): m.group(2).split("|")
        for m in re.finditer(r"^\| (calibrate|steady 80%|overload 150%) \|(.*)$", out, re.M)
    }
    assert set(rows) == {"calibrate", "steady 80%", "overload 150%"}
    for name, cells in rows.items():
        sent, ok, rejected, lost = (int(c) for c in cells[2:6])
        assert sent > 0, name
        assert ok + rejected + lost == sent, name
        assert lost == 0, name
        fill_start, fill_end = (float(x) for x in re.findall(r"([\d.]+)x", cells[8]))
        assert 0 <= fill_start <= fill_end, name
        if name != "calibrate":
            assert fill_end > 0, name  # answers were attributed to the pod
    for name in ("steady 80%", "overload 150%"):
        assert re.search(
            rf"^{name}: RSS MiB @ prefix fill / requests in flight, each tenth of the phase:"
            rf"( [\d.]+@[\d.]+x/\d+){{11}}$",
            out,
            re.M,
        )
    # Seconds of load cannot fill an H100's index twice: the verdict says so instead of a growth figure.
    assert "prefix index never reached steady state" in out
    assert code == 1


def test_the_pod_is_read_from_streamed_and_whole_answers() -> None:
    whole = orjson.dumps({"id": "cmpl-h100-1-42", "choices": []})
    streamed = b'data: {"id": "cmpl-h100-0-7", "choices": []}\n\ndata: [DONE]\n\n'
    assert served_by(whole, stream=False) == "h100-1"
    assert served_by(streamed, stream=True) == "h100-0"
    assert served_by(b"data: [DONE]\n\n", stream=True) is None
    assert served_by(b"not json", stream=False) is None


def test_fill_counts_prompt_blocks_per_pod_against_its_kv_capacity() -> None:
    preset = get_preset("llama-3.1-8b/h100")
    fill = PrefixFill.for_fleet(("a", "b"), "llama-3.1-8b/h100")
    assert fill.capacity == preset.num_gpu_blocks
    prompt = "x" * (fill.block_chars * 10 + 5)  # the trailing partial block does not count
    fill.record(orjson.dumps({"id": "cmpl-a-1"}), stream=False, prompt=prompt)
    assert fill.sent == {"a": 10}
    assert fill.level() == 0.0  # pod b has not been sent anything
    fill.record(orjson.dumps({"id": "cmpl-b-2"}), stream=False, prompt=prompt * 100)
    assert fill.sent["b"] == 256  # at most maxPrefixBlocksToMatch blocks per prompt
    assert fill.level() == 10 / fill.capacity


def test_rss_growth_is_measured_from_the_first_steady_sample_after_warm_up() -> None:
    samples = [
        RssSample(10, 100_000, 0.5),
        RssSample(30, 120_000, 1.5),  # warm, but the index is still filling
        RssSample(50, 130_000, STEADY_FILL),  # baseline
        RssSample(90, 132_000, 4.0),
    ]
    report = PhaseReport("steady 80%", 1.0, 100, Tally(), samples, 10, 10, (0.0, 0.0, 0.0))
    assert report.warm.at_s == 30
    assert report.baseline == samples[2]
    assert report.rss_growth == pytest.approx(2_000 / 130_000)
    filling = PhaseReport("steady 80%", 1.0, 100, Tally(), samples[:2], 10, 10, (0.0, 0.0, 0.0))
    assert filling.baseline is None
    assert filling.rss_growth == pytest.approx(0.0)  # from the warm sample, flagged as not steady


def test_a_calibration_that_answers_nothing_ends_the_soak_with_a_reason(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway that refuses every request gave a capacity of 0, and the steady phase ended in a
    ZeroDivisionError traceback (``expovariate(0)``) after the calibration: now exit 1, saying why."""
    import contextlib
    import os
    from collections.abc import AsyncIterator
    from pathlib import Path

    from aiohttp import web

    from igw.perf import soak

    async def refuse(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"error": {"message": "down"}}, status=503)

    @contextlib.asynccontextmanager
    async def no_fleet(spec: object, workdir: Path) -> AsyncIterator[list[str]]:
        yield []

    @contextlib.asynccontextmanager
    async def refusing_gateway(
        workdir: Path, endpoints: list[str], log_path: Path
    ) -> AsyncIterator[tuple[str, int]]:
        app = web.Application()
        app.router.add_post("/v1/completions", refuse)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            yield f"http://127.0.0.1:{port}", os.getpid()
        finally:
            await runner.cleanup()

    monkeypatch.setattr(soak, "fleet_process", no_fleet)
    monkeypatch.setattr(soak, "gateway_process", refusing_gateway)
    argv = ["perf", "soak", "--minutes", "0.1", "--calibrate-seconds", "1", "--settle-seconds", "0"]
    assert main([*argv, "--pods", "1", "--concurrency", "2"]) == 1
    err = capsys.readouterr().err
    assert "igw perf soak: no request answered in the 1 s calibration: " in err, err
    assert "(HTTP 503: " in err, err
    assert "Traceback" not in err
