"""Typed reader of our routing extension, ``spec.extensions.routing`` (schema:
``schemas/extensions/routing.schema.json``).

The JSON Schema validates the raw mapping; this module turns it into plain values with the defaults
stated once, here and in the schema (a test keeps the two equal). Durations are Gateway API
durations (``50ms``, ``1s``), parsed with :func:`igw.config.durations.parse_duration`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from igw.config.durations import parse_duration
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.retry_policy import (
    DEFAULT_MIN_RETRY_CONCURRENCY,
    DEFAULT_RETRY_ATTEMPTS,
    DEFAULT_RETRY_BUDGET_PERCENT,
    DEFAULT_RETRY_ON,
    RetryCondition,
    RetryPolicy,
)

EXTENSION_NAME: Final = "routing"
OUTLIERS: Final = "outlierDetection"
"""The extension's object of :class:`OutlierDetection`'s fields."""
RETRY: Final = "retry"
"""The extension's object of :class:`RetryPolicy`'s fields."""

DEFAULT_SCRAPE_INTERVAL: Final = "50ms"
DEFAULT_SCRAPE_TIMEOUT: Final = "500ms"
DEFAULT_STALE_THRESHOLD: Final = "1s"
DEFAULT_QUEUE_DEPTH_THRESHOLD: Final = 5
DEFAULT_KV_CACHE_UTIL_THRESHOLD: Final = 0.8
MIN_KV_CACHE_UTIL_THRESHOLD: Final = 0.01
"""The schema's minimum too: 0 would mark every endpoint saturated (its KV usage is never below 0)."""
DEFAULT_RETRY_AFTER_MIN_SECONDS: Final = 1
DEFAULT_RETRY_AFTER_MAX_SECONDS: Final = 30
DEFAULT_DRAIN_WINDOW: Final = "30s"
DEFAULT_CONNECT_TIMEOUT: Final = "2s"
DEFAULT_STREAM_IDLE_TIMEOUT: Final = "60s"
DEFAULT_RESPONSE_TIMEOUT: Final = "600s"
DEFAULT_UNRESPONSIVE_TIMEOUT: Final = "10s"
DEFAULT_CONFIG_RELOAD_INTERVAL: Final = "1s"
DEFAULT_SSE_KEEPALIVE_INTERVAL: Final = "15s"
DEFAULT_CONSECUTIVE_FAILURES: Final = 5
DEFAULT_BASE_EJECTION_TIME: Final = "30s"
DEFAULT_MAX_EJECTION_TIME: Final = "300s"
DEFAULT_MAX_EJECTION_PERCENT: Final = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class OutlierDetection:
    """``spec.extensions.routing.outlierDetection``: when an endpoint that keeps failing the requests
    sent to it is taken out of scheduling, and for how long (see :mod:`igw.scheduling.outliers`)."""

    consecutive_failures: int = DEFAULT_CONSECUTIVE_FAILURES
    """Failures in a row (5xx answers, broken streams, refused connections) that eject an endpoint;
    0 turns outlier detection off."""
    base_ejection_s: float = 30.0
    """The first ejection's length; the n-th in a row lasts n times this (see ``max_ejection_s``)."""
    max_ejection_s: float = 300.0
    """The longest ejection; an endpoint that stays in this long after returning starts again from
    ``base_ejection_s``."""
    max_ejection_percent: int = DEFAULT_MAX_EJECTION_PERCENT
    """At most this share of a pool's endpoints is left out at once (at least one, never all)."""

    @property
    def enabled(self) -> bool:
        return self.consecutive_failures > 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingSettings:
    """Routing knobs beyond AWS's InferenceGatewayConfig, in seconds where they are durations."""

    scrape_interval_s: float = 0.05
    """How often each endpoint's ``/metrics`` is fetched."""
    scrape_timeout_s: float = 0.5
    """A scrape slower than this counts as failed (the endpoint is then excluded)."""
    stale_threshold_s: float = 1.0
    """Metrics older than this exclude the endpoint from scheduling until fresh ones arrive."""
    queue_depth_threshold: int = DEFAULT_QUEUE_DEPTH_THRESHOLD
    """An endpoint with more waiting requests than this has no spare capacity (saturation)."""
    kv_cache_util_threshold: float = DEFAULT_KV_CACHE_UTIL_THRESHOLD
    """An endpoint with KV-cache utilisation above this fraction has no spare capacity."""
    retry_after_min_s: int = DEFAULT_RETRY_AFTER_MIN_SECONDS
    retry_after_max_s: int = DEFAULT_RETRY_AFTER_MAX_SECONDS
    """Bounds of the computed ``Retry-After`` (whole seconds) on a 429 for a saturated pool."""
    drain_window_s: float = 30.0
    """Completions within this window give the observed drain rate behind ``Retry-After``."""
    connect_timeout_s: float = 2.0
    """Upstream TCP connect timeout; a connect failure is retried on the next-best endpoint (``retry``)."""
    stream_idle_timeout_s: float = 60.0
    """A streaming upstream silent this long is treated as dead (terminal SSE error event)."""
    response_timeout_s: float | None = 600.0
    """A request still waiting for its response head after this long (a non-streamed request: its
    whole answer), or whose non-streamed body stopped arriving for this long, ends with 504
    ``upstream_timeout``; ``None`` (``0s``) = no bound. The OpenAI SDK's
    default client timeout, far above a long generation (8k tokens at 20 tokens/s: under 7 minutes)."""
    unresponsive_timeout_s: float | None = 10.0
    """A request in flight to an endpoint excluded for failing scrapes or a frozen ``/metrics`` page,
    whose connection has been silent this long while the endpoint stayed excluded, ends with 504
    ``upstream_unresponsive``; ``None`` (``0s``) = never."""
    sse_keepalive_interval_s: float = 15.0
    """A silent stream gets an SSE ``: ping`` comment this often (ALB idle timeout is 60 s); 0 = off."""
    config_reload_interval_s: float = 1.0
    """How often ``igw serve`` checks its configuration file for changes."""
    outlier_detection: OutlierDetection = OutlierDetection()
    """Ejection of endpoints that keep failing (``outlierDetection``)."""
    retry: RetryPolicy = RetryPolicy()  # noqa: RUF009 - frozen (immutable), like OutlierDetection()
    """Retries of refused requests on the next-best endpoint (``retry``)."""

    def scheduling_inputs(self) -> RoutingSettings:
        """These settings with the data path's own fields at their defaults: what a scheduler built
        from them depends on. Two settings equal here build the same scheduler, so a reload that
        changes only timeouts, keep-alives, retries or the reload interval keeps the running ones
        (their prefix index and learned speeds). A new field is compared unless named here."""
        return replace(
            self,
            connect_timeout_s=_DEFAULTS.connect_timeout_s,
            stream_idle_timeout_s=_DEFAULTS.stream_idle_timeout_s,
            response_timeout_s=_DEFAULTS.response_timeout_s,
            unresponsive_timeout_s=_DEFAULTS.unresponsive_timeout_s,
            sse_keepalive_interval_s=_DEFAULTS.sse_keepalive_interval_s,
            config_reload_interval_s=_DEFAULTS.config_reload_interval_s,
            retry=_DEFAULTS.retry,
        )

    def problems(self, paths: Mapping[str, str]) -> list[str]:
        """Range problems of the fields named in ``paths`` (field name -> config path for messages).

        One check for both places thresholds come from (``spec.extensions.routing`` and an
        EndpointPickerConfig's ``saturationDetector``), so they accept exactly the same values.
        """
        out: list[str] = []
        if "queue_depth_threshold" in paths and self.queue_depth_threshold < 1:
            out.append(
                f"{paths['queue_depth_threshold']}: must be at least 1, got {self.queue_depth_threshold} "
                "(0 would mark an endpoint saturated whenever one request waits)"
            )
        if (
            "kv_cache_util_threshold" in paths
            and not MIN_KV_CACHE_UTIL_THRESHOLD <= self.kv_cache_util_threshold <= 1
        ):
            out.append(
                f"{paths['kv_cache_util_threshold']}: must be between {MIN_KV_CACHE_UTIL_THRESHOLD} and 1, "
                f"got {self.kv_cache_util_threshold:g} (0 would mark every endpoint saturated)"
            )
        if "stale_threshold_s" in paths and self.stale_threshold_s <= self.scrape_interval_s:
            out.append(
                f"{paths['stale_threshold_s']}: must be longer than scrapeInterval "
                f"({self.scrape_interval_s:g}s), or every endpoint would be stale between two scrapes"
            )
        return out

    @staticmethod
    def from_extension(raw: Mapping[str, Any] | None) -> RoutingSettings:
        """Build from a *schema-validated* ``spec.extensions.routing`` mapping (``None`` = defaults)."""
        raw = raw or {}
        problems: list[str] = []

        def duration(key: str, default: str, *, under: str | None = None) -> float:
            """``key`` of the extension (of its object ``under``), in seconds."""
            source = raw if under is None else raw.get(under, {})
            try:
                return parse_duration(source.get(key, default))
            except ValueError as exc:
                path = key if under is None else f"{under}.{key}"
                problems.append(f"spec.extensions.routing.{path}: {exc}")
                return parse_duration(default)

        saturation = raw.get("saturation", {})
        retry_after = raw.get("retryAfter", {})
        outliers = raw.get(OUTLIERS, {})
        retry = raw.get(RETRY, {})
        retry_on = retry.get("retryOn")
        settings = RoutingSettings(
            scrape_interval_s=duration("scrapeInterval", DEFAULT_SCRAPE_INTERVAL),
            scrape_timeout_s=duration("scrapeTimeout", DEFAULT_SCRAPE_TIMEOUT),
            stale_threshold_s=duration("staleThreshold", DEFAULT_STALE_THRESHOLD),
            queue_depth_threshold=int(saturation.get("queueDepthThreshold", DEFAULT_QUEUE_DEPTH_THRESHOLD)),
            kv_cache_util_threshold=float(
                saturation.get("kvCacheUtilThreshold", DEFAULT_KV_CACHE_UTIL_THRESHOLD)
            ),
            retry_after_min_s=int(retry_after.get("minSeconds", DEFAULT_RETRY_AFTER_MIN_SECONDS)),
            retry_after_max_s=int(retry_after.get("maxSeconds", DEFAULT_RETRY_AFTER_MAX_SECONDS)),
            drain_window_s=duration("drainWindow", DEFAULT_DRAIN_WINDOW),
            connect_timeout_s=duration("connectTimeout", DEFAULT_CONNECT_TIMEOUT),
            stream_idle_timeout_s=duration("streamIdleTimeout", DEFAULT_STREAM_IDLE_TIMEOUT),
            response_timeout_s=duration("responseTimeout", DEFAULT_RESPONSE_TIMEOUT) or None,
            unresponsive_timeout_s=duration("unresponsiveTimeout", DEFAULT_UNRESPONSIVE_TIMEOUT) or None,
            sse_keepalive_interval_s=duration("sseKeepAliveInterval", DEFAULT_SSE_KEEPALIVE_INTERVAL),
            config_reload_interval_s=duration("configReloadInterval", DEFAULT_CONFIG_RELOAD_INTERVAL),
            outlier_detection=OutlierDetection(
                consecutive_failures=int(outliers.get("consecutiveFailures", DEFAULT_CONSECUTIVE_FAILURES)),
                base_ejection_s=duration("baseEjectionTime", DEFAULT_BASE_EJECTION_TIME, under=OUTLIERS),
                max_ejection_s=duration("maxEjectionTime", DEFAULT_MAX_EJECTION_TIME, under=OUTLIERS),
                max_ejection_percent=int(outliers.get("maxEjectionPercent", DEFAULT_MAX_EJECTION_PERCENT)),
            ),
            retry=RetryPolicy(
                attempts=int(retry.get("attempts", DEFAULT_RETRY_ATTEMPTS)),
                retry_on=DEFAULT_RETRY_ON if retry_on is None else frozenset(map(RetryCondition, retry_on)),
                budget_percent=int(retry.get("budgetPercent", DEFAULT_RETRY_BUDGET_PERCENT)),
                min_retry_concurrency=int(retry.get("minRetryConcurrency", DEFAULT_MIN_RETRY_CONCURRENCY)),
            ),
        )
        problems += settings.problems(
            {
                "queue_depth_threshold": "spec.extensions.routing.saturation.queueDepthThreshold",
                "kv_cache_util_threshold": "spec.extensions.routing.saturation.kvCacheUtilThreshold",
                "stale_threshold_s": "spec.extensions.routing.staleThreshold",
            }
        )
        if settings.retry_after_min_s > settings.retry_after_max_s:
            problems.append(
                "spec.extensions.routing.retryAfter: minSeconds "
                f"({settings.retry_after_min_s}) is greater than maxSeconds ({settings.retry_after_max_s})"
            )
        if settings.scrape_interval_s <= 0:
            problems.append("spec.extensions.routing.scrapeInterval: must be greater than 0s")
        if settings.scrape_timeout_s <= 0:
            problems.append("spec.extensions.routing.scrapeTimeout: must be greater than 0s")
        od = settings.outlier_detection  # the same checks as admission rule outlier-ejection-times
        if od.enabled and od.base_ejection_s <= 0:
            problems.append(
                "spec.extensions.routing.outlierDetection.baseEjectionTime: must be greater than 0s "
                "unless consecutiveFailures is 0"
            )
        elif od.enabled and od.max_ejection_s < od.base_ejection_s:
            problems.append(
                "spec.extensions.routing.outlierDetection.maxEjectionTime: must be at least baseEjectionTime "
                f"({od.base_ejection_s:g}s), got {od.max_ejection_s:g}s"
            )
        if problems:
            raise SchedulerConfigError(problems)
        return settings


_DEFAULTS: Final = RoutingSettings()
"""The defaults, for :meth:`RoutingSettings.scheduling_inputs`."""
