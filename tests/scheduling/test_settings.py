from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from igw.config.durations import parse_duration
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.retry_policy import RetryCondition, RetryPolicy
from igw.scheduling.settings import RoutingSettings

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "extensions" / "routing.schema.json"


def schema() -> dict[str, Any]:
    return dict(json.loads(SCHEMA_PATH.read_text()))


def test_schema_is_closed_and_valid() -> None:
    s = schema()
    jsonschema.Draft202012Validator.check_schema(s)
    assert s["additionalProperties"] is False
    assert s["properties"]["saturation"]["additionalProperties"] is False
    with pytest.raises(jsonschema.ValidationError, match="'scrapeIntervall' was unexpected"):
        jsonschema.validate({"scrapeIntervall": "50ms"}, s)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"staleThreshold": "1.5s"}, s)


def test_schema_defaults_equal_the_code_defaults() -> None:
    s = schema()["properties"]
    code = RoutingSettings()
    assert RoutingSettings.from_extension(None) == code
    durations = {
        "scrapeInterval": code.scrape_interval_s,
        "scrapeTimeout": code.scrape_timeout_s,
        "staleThreshold": code.stale_threshold_s,
        "drainWindow": code.drain_window_s,
        "connectTimeout": code.connect_timeout_s,
        "streamIdleTimeout": code.stream_idle_timeout_s,
        "configReloadInterval": code.config_reload_interval_s,
        "sseKeepAliveInterval": code.sse_keepalive_interval_s,
        "responseTimeout": code.response_timeout_s,
        "unresponsiveTimeout": code.unresponsive_timeout_s,
    }
    for key, seconds in durations.items():
        assert parse_duration(s[key]["default"]) == pytest.approx(seconds), key
    assert s["saturation"]["properties"]["queueDepthThreshold"]["default"] == code.queue_depth_threshold
    assert s["saturation"]["properties"]["kvCacheUtilThreshold"]["default"] == code.kv_cache_util_threshold
    assert s["retryAfter"]["properties"]["minSeconds"]["default"] == code.retry_after_min_s
    assert s["retryAfter"]["properties"]["maxSeconds"]["default"] == code.retry_after_max_s
    outliers = s["outlierDetection"]["properties"]
    od = code.outlier_detection
    assert outliers["consecutiveFailures"]["default"] == od.consecutive_failures
    assert parse_duration(outliers["baseEjectionTime"]["default"]) == od.base_ejection_s
    assert parse_duration(outliers["maxEjectionTime"]["default"]) == od.max_ejection_s
    assert outliers["maxEjectionPercent"]["default"] == od.max_ejection_percent
    retry = s["retry"]["properties"]
    policy = code.retry
    assert retry["attempts"]["default"] == policy.attempts
    assert frozenset(retry["retryOn"]["default"]) == policy.retry_on
    assert set(retry["retryOn"]["items"]["enum"]) == {c.value for c in RetryCondition}
    assert retry["budgetPercent"]["default"] == policy.budget_percent
    assert retry["minRetryConcurrency"]["default"] == policy.min_retry_concurrency
    assert code.stale_threshold_s <= 1.0


def test_values_are_read() -> None:
    raw = {
        "scrapeInterval": "20ms",
        "staleThreshold": "300ms",
        "saturation": {"queueDepthThreshold": 2, "kvCacheUtilThreshold": 0.5},
        "retryAfter": {"minSeconds": 2, "maxSeconds": 9},
        "outlierDetection": {
            "consecutiveFailures": 7,
            "baseEjectionTime": "5s",
            "maxEjectionTime": "1m",
            "maxEjectionPercent": 20,
        },
    }
    jsonschema.validate(raw, schema())
    got = RoutingSettings.from_extension(raw)
    od = got.outlier_detection
    assert (od.consecutive_failures, od.base_ejection_s, od.max_ejection_s, od.max_ejection_percent) == (
        7,
        5,
        60,
        20,
    )
    assert (got.scrape_interval_s, got.stale_threshold_s) == pytest.approx((0.02, 0.3))
    assert (got.queue_depth_threshold, got.kv_cache_util_threshold) == (2, 0.5)
    assert (got.retry_after_min_s, got.retry_after_max_s) == (2, 9)


def test_zero_response_and_unresponsive_timeouts_mean_no_bound() -> None:
    raw = {"responseTimeout": "0s", "unresponsiveTimeout": "0s"}
    jsonschema.validate(raw, schema())
    got = RoutingSettings.from_extension(raw)
    assert (got.response_timeout_s, got.unresponsive_timeout_s) == (None, None)
    longer = RoutingSettings.from_extension({"responseTimeout": "30m", "unresponsiveTimeout": "30s"})
    assert (longer.response_timeout_s, longer.unresponsive_timeout_s) == (1800, 30)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        pytest.param(
            {"retryAfter": {"minSeconds": 10, "maxSeconds": 5}}, "retryAfter: minSeconds (10)", id="bounds"
        ),
        pytest.param(
            {"scrapeInterval": "2s"}, "staleThreshold: must be longer than scrapeInterval", id="stale"
        ),
        pytest.param({"scrapeTimeout": "0s"}, "scrapeTimeout: must be greater than 0s", id="timeout"),
        pytest.param(
            {"outlierDetection": {"baseEjectionTime": "0s"}},
            "spec.extensions.routing.outlierDetection.baseEjectionTime: must be greater than 0s",
            id="no-ejection-time",
        ),
        pytest.param(
            {"outlierDetection": {"baseEjectionTime": "1m", "maxEjectionTime": "30s"}},
            "outlierDetection.maxEjectionTime: must be at least baseEjectionTime (60s)",
            id="max-under-base",
        ),
    ],
)
def test_cross_field_rules(raw: dict[str, Any], problem: str) -> None:
    with pytest.raises(SchedulerConfigError) as err:
        RoutingSettings.from_extension(raw)
    assert any(problem in p for p in err.value.problems)


def test_outlier_detection_can_be_turned_off_whatever_its_times() -> None:
    raw = {"outlierDetection": {"consecutiveFailures": 0, "baseEjectionTime": "0s", "maxEjectionTime": "0s"}}
    jsonschema.validate(raw, schema())
    assert not RoutingSettings.from_extension(raw).outlier_detection.enabled
    for bad in ({"maxEjectionPercent": 101}, {"consecutiveFailures": -1}, {"ejectionTime": "1s"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"outlierDetection": bad}, schema())


def test_the_retry_policy_is_read() -> None:
    raw = {
        "retry": {
            "attempts": 3,
            "retryOn": ["5xx", "model-missing"],
            "budgetPercent": 50,
            "minRetryConcurrency": 1,
        }
    }
    jsonschema.validate(raw, schema())
    assert RoutingSettings.from_extension(raw).retry == RetryPolicy(
        attempts=3,
        retry_on=frozenset({RetryCondition.ANY_5XX, RetryCondition.MODEL_MISSING}),
        budget_percent=50,
        min_retry_concurrency=1,
    )
    assert RoutingSettings.from_extension({"retry": {"retryOn": []}}).retry.retry_on == frozenset()
    for bad in ({"attempts": 0}, {"retryOn": ["timeout"]}, {"budgetPercent": 101}, {"retries": 2}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"retry": bad}, schema())
