"""Metric specs (``name{label=value}``) and the ``generic`` engine built from them."""

from __future__ import annotations

import pytest

from igw import engines
from igw.checks import metrics_probe
from igw.gateway.metrics_parser import parse_page

PAGE = (
    "# TYPE my_queue gauge\n"
    'my_queue{model="a",pool="x"} 3\n'
    'my_queue{model="b",pool="x"} 9\n'
    "# TYPE my_running gauge\n"
    'my_running{model="a"} 5\n'
    "my_kv_ratio 0.4\n"
)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("my_queue", ("my_queue", ())),
        ('my_queue{model="a"}', ("my_queue", (("model", "a"),))),
        ("my_queue{model=a, pool=x}", ("my_queue", (("model", "a"), ("pool", "x")))),
        ("ns:metric{}", ("ns:metric", ())),
    ],
)
def test_parse_metric_spec(spec: str, expected: tuple[str, tuple[tuple[str, str], ...]]) -> None:
    assert engines.parse_metric_spec(spec) == expected


@pytest.mark.parametrize("spec", ["", "1abc", "my queue", "q{model}", "q{=a}", 'q{model="a"'])
def test_malformed_metric_specs_are_rejected_naming_the_spec(spec: str) -> None:
    with pytest.raises(ValueError, match="invalid metric spec"):
        engines.parse_metric_spec(spec)


@pytest.mark.parametrize(
    ("queue", "waiting"),
    [
        ("my_queue", 9),
        ('my_queue{model="a"}', 3),
        ('my_queue{model="b",pool="x"}', 9),
        ('my_queue{model="c"}', None),
    ],
)
def test_generic_engine_reads_only_series_with_the_spec_labels(queue: str, waiting: int | None) -> None:
    engine = engines.generic_engine(queue=queue, running='my_running{model="a"}', kv_usage="my_kv_ratio")
    parsed = parse_page(PAGE, engine.families)
    assert parsed.metrics.waiting == waiting  # "max" over the matching series
    assert parsed.metrics.running == 5
    assert parsed.metrics.kv_usage == pytest.approx(0.4)
    assert (queue in parsed.missing) == (waiting is None)


def test_generic_engine_without_kv_spec_reports_nothing_missing_for_it() -> None:
    engine = engines.generic_engine(queue="my_queue", running="my_running")
    parsed = parse_page(PAGE, engine.families)
    assert parsed.metrics.kv_usage is None
    assert parsed.missing == frozenset()
    assert set(engine.signals()) == {"queue", "running"}


def test_generic_engine_rejects_a_bad_spec() -> None:
    with pytest.raises(ValueError, match=r"invalid metric spec 'q\{x\}'"):
        engines.generic_engine(queue="q{x}", running="r")


def test_metrics_probe_knows_tgi_signals() -> None:
    report = metrics_probe.evaluate("tgi", {"tgi_queue_size"})
    assert report.missing == ("running (tgi_batch_current_size)",)
    assert metrics_probe.evaluate("tgi", {"tgi_queue_size", "tgi_batch_current_size"}).missing == ()
