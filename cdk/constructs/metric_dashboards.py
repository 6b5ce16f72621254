"""CloudWatch dashboards and alarms over the metrics the gateway tiers emit as EMF.

Every metric name, dimension and namespace comes from the emitters' own tables
(:mod:`igw.gateway.emf_metrics` for tier 1, :mod:`igw.global_router.emf_metrics` for tier 2):
dashboards draw one widget per table entry, and an alarm names its metric through
:func:`emitted`, which fails synthesis when the emitter no longer has it, so no alarm can watch a
metric nothing writes.

Dashboard widgets use ``SEARCH`` so that every model, pool or cluster that reports appears without
being listed (adapters included). Alarms need fixed series: tier 1 alarms per configured model
and pool (``spec.schedulers``), on the cluster's share of failed heartbeat writes (metric math over
the fixed ``Cluster``, ``Result`` series) and on any unread or misnamed usage (a Metrics Insights
query, one series; since session s46 also on any refused redirect, summed over models); tier 2 on
Metrics Insights queries summed over the whole fleet.

Gateway replicas each write their own documents under the same dimensions; the statistic per
unit (:data:`STATISTIC_BY_UNIT`) makes the replicas' values add up (counts: sum), average
(percentages) or take the worst (latency quantiles: maximum), except for the pool's own state
(:data:`~igw.gateway.emf_metrics.POOL_STATE_METRICS`: ready and ejected pods), which every replica
reports alike (or from its own view of the same pods) and which is taken at its maximum
(:func:`replica_statistic`), in widgets and alarms alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from igw.gateway.emf_metrics import (
    CLUSTER_DIMENSION,
    DEFAULT_NAMESPACE,
    GATEWAY_METRICS,
    HEARTBEAT_METRICS,
    HEARTBEAT_RESULTS,
    MODEL_DIMENSION,
    MODEL_METRICS,
    POOL_DIMENSION,
    POOL_METRICS,
    POOL_STATE_METRICS,
    REASON_DIMENSION,
    RESULT_DIMENSION,
    SCOPE_BUSY,
    SEARCH_REFUSAL_METRICS,
    UPSTREAM_NON_ANSWER_METRICS,
    UPSTREAM_REDIRECT_METRICS,
    USAGE_UNREAD_CLIENT_GONE,
    USAGE_UNREAD_METRICS,
)
from igw.global_router.emf_metrics import DEFAULT_FLEET_NAMESPACE, FLEET_METRICS

PERIOD: Final = cdk.Duration.minutes(1)
"""The emitters' interval (``--emf-interval 60``)."""
STATISTIC_BY_UNIT: Final = {"Count": "Sum", "Percent": "Average", "Milliseconds": "Maximum"}


def replica_statistic(name: str, unit: str) -> str:
    """How the documents of several gateway replicas combine for the metric ``name`` of ``unit``."""
    return "Maximum" if name in POOL_STATE_METRICS else STATISTIC_BY_UNIT[unit]


def emitted(name: str, table: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """``(name, unit)`` of ``name`` in an emitter's table; an unknown name fails synthesis."""
    for entry in table:
        if entry[0] == name:
            return entry
    raise ValueError(f"no emitter writes the CloudWatch metric {name!r} (known: {[n for n, _ in table]})")


def _search(
    namespace: str, dimensions: Sequence[str], name: str, statistic: str
) -> cloudwatch.MathExpression:
    schema = ",".join([f'"{namespace}"', *dimensions])
    return cloudwatch.MathExpression(
        expression=f"SEARCH('{{{schema}}} MetricName=\"{name}\"', '{statistic}', {PERIOD.to_seconds()})",
        label="",
        period=PERIOD,
        using_metrics={},
    )


def _search_widget(namespace: str, dimensions: Sequence[str], name: str, unit: str) -> cloudwatch.GraphWidget:
    """A graph of every series of ``name`` under exactly ``dimensions`` (none: the one series
    without dimensions, the replicas' documents combined)."""
    statistic = replica_statistic(name, unit)
    by = f" by {', '.join(dimensions)}" if dimensions else ""
    return cloudwatch.GraphWidget(
        title=f"{name}{by} ({statistic.lower()}, {unit})",
        left=[_search(namespace, dimensions, name, statistic)],
        width=12,
        height=6,
    )


@dataclass(frozen=True, slots=True)
class GatewayAlarmThresholds:
    """Where the tier-1 alarms fire (the Prometheus alert rules' thresholds, on one-minute data)."""

    error_rate_percent: float = 5.0
    ttft_p99_ms: float = 1000.0
    kv_cache_percent: float = 95.0
    error_minutes: int = 5
    ttft_minutes: int = 10
    kv_cache_minutes: int = 15
    ejected_minutes: int = 15
    """A pool with an endpoint left out by outlier detection every minute this long (an ejection
    lasts 30-300 s, so a pod that keeps failing stays out most of the time)."""
    heartbeat_failed_percent: float = 10.0
    heartbeat_failed_minutes: int = 5
    """The share of the cluster's heartbeat writes that failed (unreachable or refused), every
    minute this long: the Prometheus rule ``IgwHeartbeatWritesFailing``'s 10%, over all replicas."""
    heartbeat_prune_failed_minutes: int = 15
    """The cluster's prunes of stopped replicas' heartbeat fields failed (unreachable or refused) in
    every period for this long: no outage of the heartbeats (they are written), but a store or ACL
    that lets the hash of stale fields grow. A prune runs once a heartbeat TTL (``ttl``, 10 s by
    default), so the period is as many minutes as hold one (:func:`prune_period_minutes`)."""


class GatewayMetricsDashboard(Construct):
    """Tier 1: a dashboard over ``InferenceGateway`` and, per model and pool, the alarms.

    Exposes ``dashboard`` and ``alarms`` (alarm id -> alarm).
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        dashboard_name: str,
        models: Sequence[str],
        pools: Sequence[str],
        heartbeat_cluster: str,
        heartbeat_prune_every_s: float | None = None,
        thresholds: GatewayAlarmThresholds | None = None,
    ) -> None:
        """``heartbeat_cluster``: the cluster this gateway's heartbeats name
        (``spec.extensions.globalHeartbeat.cluster``), whose series alone the failed-writes alarm
        reads (other clusters of the account and region write the same namespace).
        ``heartbeat_prune_every_s``: the longest time between a replica's prunes
        (:attr:`igw.gateway.heartbeat.HeartbeatSettings.prune_every_s` of that extension), which
        sizes the failed-prunes alarm's period; ``None`` without heartbeats (nothing is written)."""
        super().__init__(scope, id_)
        t = thresholds or GatewayAlarmThresholds()
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        for model in models:
            self._alarm(
                f"ErrorRate-{model}",
                _metric(MODEL_DIMENSION, model, emitted("ErrorRate", MODEL_METRICS)),
                threshold=t.error_rate_percent,
                minutes=t.error_minutes,
                description=f"{model}: over {t.error_rate_percent}% of requests answered 5xx",
            )
            self._alarm(
                f"TtftP99-{model}",
                _metric(MODEL_DIMENSION, model, emitted("TtftP99", MODEL_METRICS)),
                threshold=t.ttft_p99_ms,
                minutes=t.ttft_minutes,
                description=f"{model}: P99 time to first token above {t.ttft_p99_ms} ms",
            )
        for pool in pools:
            self._alarm(
                f"KvCacheAverage-{pool}",
                _metric(POOL_DIMENSION, pool, emitted("KvCacheAverage", POOL_METRICS)),
                threshold=t.kv_cache_percent,
                minutes=t.kv_cache_minutes,
                description=f"pool {pool}: average KV-cache use above {t.kv_cache_percent}%",
            )
            self.alarms[f"EjectedPods-{pool}"] = sustained_alarm(
                self,
                alarm_id(f"EjectedPods-{pool}"),
                _metric(POOL_DIMENSION, pool, emitted("EjectedPods", POOL_METRICS)),
                above=1,
                inclusive=True,
                minutes=t.ejected_minutes,
                description=f"pool {pool}: an endpoint ejected for failing requests in a row, "
                f"every minute for {t.ejected_minutes} minutes",
            )
        self.alarms["HeartbeatWritesFailed"] = sustained_alarm(
            self,
            alarm_id("HeartbeatWritesFailed"),
            heartbeat_failed_percent(heartbeat_cluster),
            above=t.heartbeat_failed_percent,
            minutes=t.heartbeat_failed_minutes,
            description=f"cluster {heartbeat_cluster}: over {t.heartbeat_failed_percent}% of the "
            "gateway's heartbeat writes to the "
            f"global router's store failed (unreachable or refused), every minute for "
            f"{t.heartbeat_failed_minutes} minutes: the routers see the cluster's heartbeat age "
            "towards failover",
        )
        unread, _ = emitted("AnswerUsageUnread", USAGE_UNREAD_METRICS)
        self.alarms["AnswerUsageUnread"] = sustained_alarm(
            self,
            alarm_id("AnswerUsageUnread"),
            insights_sum(
                DEFAULT_NAMESPACE,
                unread,
                [MODEL_DIMENSION, REASON_DIMENSION],
                excluding=(REASON_DIMENSION, USAGE_UNREAD_CLIENT_GONE),
            ),
            above=1,
            inclusive=True,
            minutes=1,
            description="a model server sent compressed answers whose usage the gateway could not read "
            "(any model, any reason but a client leaving mid-answer): refused with 502 or relayed "
            "without their tokens charged to the rate limits (the PrometheusRule IgwAnswerUsageUnread)",
        )
        redirects, _ = emitted("UpstreamRedirects", UPSTREAM_REDIRECT_METRICS)
        self.alarms["UpstreamRedirects"] = sustained_alarm(
            self,
            alarm_id("UpstreamRedirects"),
            insights_sum(DEFAULT_NAMESPACE, redirects, [MODEL_DIMENSION]),
            above=1,
            inclusive=True,
            minutes=1,
            description="a model server answered a redirect (3xx), refused with 502 upstream_error and "
            "its Location not relayed (any model; the PrometheusRule IgwUpstreamRedirects)",
        )
        non_answers, _ = emitted("UpstreamNonAnswers", UPSTREAM_NON_ANSWER_METRICS)
        self.alarms["UpstreamNonAnswers"] = sustained_alarm(
            self,
            alarm_id("UpstreamNonAnswers"),
            insights_sum(DEFAULT_NAMESPACE, non_answers, [MODEL_DIMENSION, REASON_DIMENSION]),
            above=1,
            inclusive=True,
            minutes=1,
            description="a model server answered an inference request with what cannot be an answer "
            "(204, 205, 304, an empty body, a success that is no JSON object), refused with 502 "
            "upstream_error, nothing relayed (any model, any reason; the PrometheusRule "
            "IgwUpstreamNonAnswers)",
        )
        self.alarms["ResponseSearchesScopeBusy"] = scope_busy_alarm(
            self,
            alarm_id("ResponseSearchesScopeBusy"),
            DEFAULT_NAMESPACE,
            emitted("ResponseSearchesRefused", SEARCH_REFUSAL_METRICS),
            description=f"the gateway refused {SCOPE_BUSY_SEARCHES} or more searches for stored "
            f"responses in {SCOPE_BUSY_MINUTES} minutes because their caller scope held its share of "
            "the searches in flight, each answered 503 response_search_busy: one tenant looping ids "
            "no pod stores (every replica's summed; the PrometheusRule IgwSearchesScopeBusy)",
        )
        self._any_in_a_minute(
            "UsageMisnamed",
            "a model server answered a retrieval of a stored response with another "
            "response's usage (or none named): not settled by it, the hold kept",
        )
        per = prune_period_minutes(heartbeat_prune_every_s)
        periods = -(-t.heartbeat_prune_failed_minutes // per)
        self.alarms["HeartbeatPrunesFailed"] = cloudwatch.Alarm(
            self,
            alarm_id("HeartbeatPrunesFailed"),
            metric=heartbeat_prunes_failed(heartbeat_cluster, period=cdk.Duration.minutes(per)),
            threshold=1,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"cluster {heartbeat_cluster}: the gateway's prunes of stopped replicas' "
            "heartbeat fields in the global router's store failed (unreachable or refused: an ACL "
            f"granting HSET but not HGETALL/HDEL), in every {per}-minute period for {per * periods} "
            "minutes: the heartbeats are written, the hash of stale fields grows",
        )
        self._any_in_a_minute(
            "RateLimitHoldsRefused",
            "a gateway's local rate-limit buckets did not keep the token bounds held for "
            "background responses (their hold table full of other tenants' holds): each such tenant "
            "stays charged the whole bound until its bucket refills (the PrometheusRule "
            "IgwRatelimitHoldsRefused)",
        )
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=dashboard_name)
        self.dashboard.add_widgets(
            *(_search_widget(DEFAULT_NAMESPACE, [MODEL_DIMENSION], n, u) for n, u in MODEL_METRICS)
        )
        self.dashboard.add_widgets(
            *(_search_widget(DEFAULT_NAMESPACE, [POOL_DIMENSION], n, u) for n, u in POOL_METRICS)
        )
        self.dashboard.add_widgets(
            *(
                _search_widget(DEFAULT_NAMESPACE, [CLUSTER_DIMENSION, RESULT_DIMENSION], n, u)
                for n, u in HEARTBEAT_METRICS
            ),
            *(_search_widget(DEFAULT_NAMESPACE, [], n, u) for n, u in GATEWAY_METRICS),
            *(
                _search_widget(DEFAULT_NAMESPACE, [MODEL_DIMENSION, REASON_DIMENSION], n, u)
                for n, u in USAGE_UNREAD_METRICS
            ),
            *(
                _search_widget(DEFAULT_NAMESPACE, [MODEL_DIMENSION], n, u)
                for n, u in UPSTREAM_REDIRECT_METRICS
            ),
            *(
                _search_widget(DEFAULT_NAMESPACE, [MODEL_DIMENSION, REASON_DIMENSION], n, u)
                for n, u in UPSTREAM_NON_ANSWER_METRICS
            ),
            *(_search_widget(DEFAULT_NAMESPACE, [REASON_DIMENSION], n, u) for n, u in SEARCH_REFUSAL_METRICS),
        )
        if self.alarms:
            self.dashboard.add_widgets(
                cloudwatch.AlarmStatusWidget(
                    title="Gateway alarms", alarms=list(self.alarms.values()), width=24
                )
            )

    def _any_in_a_minute(self, name: str, description: str) -> None:
        """An alarm on any count in a minute of the replica document's ``name`` (no dimensions,
        :data:`~igw.gateway.emf_metrics.GATEWAY_METRICS`), every replica's summed."""
        metric, unit = emitted(name, GATEWAY_METRICS)
        self.alarms[name] = sustained_alarm(
            self,
            alarm_id(name),
            cloudwatch.Metric(
                namespace=DEFAULT_NAMESPACE,
                metric_name=metric,
                statistic=replica_statistic(metric, unit),
                period=PERIOD,
            ),
            above=1,
            inclusive=True,
            minutes=1,
            description=description,
        )

    def _alarm(
        self, key: str, metric: cloudwatch.Metric, *, threshold: float, minutes: int, description: str
    ) -> None:
        self.alarms[key] = sustained_alarm(
            self,
            alarm_id(key),
            metric,
            above=threshold,
            minutes=minutes,
            description=description,
        )


def alarm_id(key: str) -> str:
    """The construct id of the alarm ``key`` (``ErrorRate-<model>``, ``KvCacheAverage-<pool>``, ...):
    a digest of the key, so an alarm keeps its logical id, and with it its CloudWatch alarm and state,
    whatever models or pools are added or removed beside it. Before session s38 the ids were
    positions (``Alarm0``, ``Alarm1``, ...): a model added before others moved every later alarm to
    another model's metric in place, its state and history read as the other model's. The key itself
    holds ``/`` and ``.`` (model names), which a construct id may not: the digest is of the exact key."""
    return f"Alarm{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def sustained_alarm(
    scope: Construct,
    id_: str,
    metric: cloudwatch.IMetric,
    *,
    above: float,
    minutes: int,
    description: str,
    inclusive: bool = False,
) -> cloudwatch.Alarm:
    """An alarm when every one-minute value of ``minutes`` is above ``above`` (or equal, with
    ``inclusive``); no data (no traffic, nothing written) is not a breach."""
    return cloudwatch.Alarm(
        scope,
        id_,
        metric=metric,
        threshold=above,
        evaluation_periods=minutes,
        datapoints_to_alarm=minutes,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        if inclusive
        else cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        alarm_description=description,
    )


SCOPE_BUSY_SEARCHES: Final = 20
"""Searches refused because their caller scope held its share (reason :data:`SCOPE_BUSY`) in
:data:`SCOPE_BUSY_MINUTES` at which the alarms fire: the Prometheus rules ``IgwSearchesScopeBusy`` and
``IgwGlobalSearchesScopeBusy``' threshold."""
SCOPE_BUSY_MINUTES: Final = 15


def scope_busy_alarm(
    scope: Construct, id_: str, namespace: str, metric: tuple[str, str], *, description: str
) -> cloudwatch.Alarm:
    """An alarm on the searches refused for a caller scope held to its share: ``metric``'s one
    series of reason :data:`SCOPE_BUSY` (its only dimension, so a fixed series), every replica's
    summed over :data:`SCOPE_BUSY_MINUTES`, at :data:`SCOPE_BUSY_SEARCHES` or more."""
    name, unit = metric
    return cloudwatch.Alarm(
        scope,
        id_,
        metric=cloudwatch.Metric(
            namespace=namespace,
            metric_name=name,
            dimensions_map={REASON_DIMENSION: SCOPE_BUSY},
            statistic=replica_statistic(name, unit),
            period=cdk.Duration.minutes(SCOPE_BUSY_MINUTES),
        ),
        threshold=SCOPE_BUSY_SEARCHES,
        evaluation_periods=1,
        datapoints_to_alarm=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        alarm_description=description,
    )


def insights_sum(
    namespace: str, name: str, dimensions: Sequence[str], *, excluding: tuple[str, str] | None = None
) -> cloudwatch.MathExpression:
    """A Metrics Insights query summing every series of ``name`` under exactly ``dimensions`` (every
    model and reason, or every cluster, that reports: an alarm on a fixed query, not on each series);
    ``excluding`` ``(dimension, value)``: less the series with that value."""
    schema = ", ".join([f'"{namespace}"', *dimensions])
    where = "" if excluding is None else f" WHERE {excluding[0]} != '{excluding[1]}'"
    return cloudwatch.MathExpression(
        expression=f"SELECT SUM({name}) FROM SCHEMA({schema}){where}",
        label=name,
        period=PERIOD,
        using_metrics={},
    )


def heartbeat_failed_percent(cluster: str) -> cloudwatch.MathExpression:
    """The percentage of the interval's heartbeat writes of ``cluster`` that did not succeed: every
    result but ``ok`` over all (:data:`~igw.gateway.emf_metrics.HEARTBEAT_RESULTS`, summed over
    replicas). Per cluster since session s45: before, the series had no cluster, and a failing cluster
    among healthy ones of the same account and region was a fraction of the sum (one in ten: 10%,
    which the alarm's "above 10%" never reached).

    A result's document is written only in an interval it moved, so each series is filled with 0:
    a minute of failures alone is 100%, not missing. A minute with no write at all (no heartbeat
    configured, or no gateway running) is no value (``IF`` without an else), not a division by 0,
    and the alarm does not count a missing value as a breach."""
    name, unit = emitted("HeartbeatWrites", HEARTBEAT_METRICS)
    series = {
        result: cloudwatch.Metric(
            namespace=DEFAULT_NAMESPACE,
            metric_name=name,
            dimensions_map={CLUSTER_DIMENSION: cluster, RESULT_DIMENSION: result},
            statistic=replica_statistic(name, unit),
            period=PERIOD,
        )
        for result in HEARTBEAT_RESULTS
    }
    filled = {result: f"FILL({result}, 0)" for result in series}
    failed = " + ".join(f for result, f in filled.items() if result != "ok")
    total = " + ".join(filled.values())
    return cloudwatch.MathExpression(
        expression=f"IF(({total}) > 0, 100 * ({failed}) / ({total}))",
        using_metrics=dict(series),
        label="failed heartbeat writes (%)",
        period=PERIOD,
    )


def prune_period_minutes(prune_every_s: float | None) -> int:
    """The failed-prunes alarm's period in whole minutes: longer than the longest time between a
    replica's prunes (``prune_every_s``; ``None``: no heartbeats, one minute), so that every period
    holds at least one prune's count whatever the phase of the one-minute EMF documents (``n``
    documents cover ``n`` minutes back to back). Until session s46 the period was one minute: with a
    TTL of a minute or more some minutes held no prune, read 0 (each series filled with 0), and an
    alarm asking for a failure in every minute never fired however long the prunes failed."""
    return 1 if prune_every_s is None else int(prune_every_s // 60) + 1


def heartbeat_prunes_failed(cluster: str, *, period: cdk.Duration = PERIOD) -> cloudwatch.MathExpression:
    """The failed prunes of ``cluster``'s heartbeat fields in ``period``: ``HeartbeatPrunes`` of
    every result but ``ok`` (:data:`~igw.gateway.emf_metrics.HEARTBEAT_RESULTS`), summed over
    replicas, each filled with 0 (a result's document is written only in an interval it moved)."""
    name, unit = emitted("HeartbeatPrunes", HEARTBEAT_METRICS)
    series = {
        result: cloudwatch.Metric(
            namespace=DEFAULT_NAMESPACE,
            metric_name=name,
            dimensions_map={CLUSTER_DIMENSION: cluster, RESULT_DIMENSION: result},
            statistic=replica_statistic(name, unit),
            period=period,
        )
        for result in HEARTBEAT_RESULTS
        if result != "ok"
    }
    return cloudwatch.MathExpression(
        expression=" + ".join(f"FILL({result}, 0)" for result in series),
        using_metrics=dict(series),
        label="failed heartbeat prunes",
        period=period,
    )


def _metric(dimension: str, value: str, metric: tuple[str, str]) -> cloudwatch.Metric:
    name, unit = metric
    return cloudwatch.Metric(
        namespace=DEFAULT_NAMESPACE,
        metric_name=name,
        dimensions_map={dimension: value},
        statistic=replica_statistic(name, unit),
        period=PERIOD,
    )


FLEET_ANY_IN_A_MINUTE: Final[tuple[tuple[str, str], ...]] = (
    (
        "AnswerUsageUnread",
        "a cluster sent compressed answers whose usage the router could not read "
        "(any cluster, any reason): sent on to the next cluster or relayed uncharged",
    ),
    (
        "UsageMisnamed",
        "a cluster answered a poll of a stored response with another response's "
        "usage (or none named): not settled by it, the hold kept",
    ),
    (
        "RateLimitHoldsRefused",
        "the router's local rate-limit buckets did not keep the token bounds held "
        "for background responses (their hold table full): each such tenant stays charged the "
        "whole bound until its bucket refills",
    ),
    (
        "UpstreamRedirects",
        "a cluster answered a redirect (3xx), refused with 502 upstream_error (tried "
        "at the next cluster), its Location not relayed (the rule IgwGlobalUpstreamRedirects)",
    ),
    (
        "UpstreamNonAnswers",
        "a cluster answered an inference request with what cannot be an answer (204, 205, 304, "
        "an empty body, a success that is no JSON object), refused with 502 upstream_error (tried "
        "at the next cluster), nothing relayed (the rule IgwGlobalUpstreamNonAnswers)",
    ),
    (
        "UpstreamAuthRefused",
        "a cluster answered 401/407 to callers the router verified and whose token it "
        "does not forward: refused with 502 upstream_auth_misconfigured, tried at the next "
        "cluster (the rule IgwGlobalUpstreamAuthMisconfigured)",
    ),
)
"""Tier-2 alarms on any count in a minute, fleet-wide: ``(metric, description)``, each the alarm
``<metric>`` of :attr:`FleetMetricsDashboard.alarms` with the construct id ``<metric>Alarm`` (kept
from when each was written out, so the deployed alarms keep their logical ids). One table, so an
alarm added for a new counter is one entry, not another copy of the call."""


@dataclass(frozen=True, slots=True)
class FleetAlarmThresholds:
    """Where the tier-2 alarms fire: any failover; rate-limit refusals per minute across the fleet."""

    failovers_per_minute: float = 1.0
    heartbeat_outages_per_minute: float = 1.0
    """Any outage of the heartbeat store (the counter counts each outage once, when it starts: a
    sustained outage is one count, so the alarm cannot ask for one every minute)."""
    rate_limit_hits_per_minute: float = 100.0
    rate_limit_minutes: int = 5


class FleetMetricsDashboard(Construct):
    """Tier 2: a dashboard over ``InferenceGateway/Global`` and fleet-wide alarms.

    Exposes ``dashboard`` and ``alarms`` (alarm id -> alarm).
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        dashboard_name: str,
        thresholds: FleetAlarmThresholds | None = None,
    ) -> None:
        super().__init__(scope, id_)
        t = thresholds or FleetAlarmThresholds()
        table = [(m.name, "Count") for m in FLEET_METRICS]
        self.alarms = {
            "FailoverEvents": self._alarm(
                "FailoverAlarm",
                emitted("FailoverEvents", table)[0],
                threshold=t.failovers_per_minute,
                minutes=1,
                description="the global router drained a cluster (stale heartbeat, gone, draining, failures)",
            ),
            "HeartbeatSourceOutages": self._alarm(
                "HeartbeatOutageAlarm",
                emitted("HeartbeatSourceOutages", table)[0],
                threshold=t.heartbeat_outages_per_minute,
                minutes=1,
                description="the global router could not read the heartbeat store (unreachable, or its "
                "credentials refused): every cluster's heartbeat ages towards failover",
            ),
            **{
                name: self._alarm(
                    f"{name}Alarm", emitted(name, table)[0], threshold=1, minutes=1, description=description
                )
                for name, description in FLEET_ANY_IN_A_MINUTE
            },
            "ResponseSearchesScopeBusy": scope_busy_alarm(
                self,
                "ResponseSearchesScopeBusyAlarm",
                DEFAULT_FLEET_NAMESPACE,
                emitted("ResponseSearchesRefused", table),
                description=f"the router refused {SCOPE_BUSY_SEARCHES} or more searches for stored "
                f"responses in {SCOPE_BUSY_MINUTES} minutes because their caller scope held its share "
                "of the searches in flight, each answered 429 response_searches_busy (every replica's "
                "summed; the rule IgwGlobalSearchesScopeBusy)",
            ),
            "RateLimitHits": self._alarm(
                "RateLimitAlarm",
                emitted("RateLimitHits", table)[0],
                threshold=t.rate_limit_hits_per_minute,
                minutes=t.rate_limit_minutes,
                description=f"over {t.rate_limit_hits_per_minute} requests a minute refused by global limits",
            ),
        }
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=dashboard_name)
        self.dashboard.add_widgets(
            *(
                _search_widget(DEFAULT_FLEET_NAMESPACE, [d for _, d in m.dimensions], m.name, "Count")
                for m in FLEET_METRICS
            )
        )
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Fleet alarms", alarms=list(self.alarms.values()), width=24)
        )

    def _alarm(
        self, id_: str, name: str, *, threshold: float, minutes: int, description: str
    ) -> cloudwatch.Alarm:
        (dimensions,) = [m.dimensions for m in FLEET_METRICS if m.name == name][:1]
        query = insights_sum(DEFAULT_FLEET_NAMESPACE, name, [d for _, d in dimensions])
        return sustained_alarm(
            self, id_, query, above=threshold, minutes=minutes, description=description, inclusive=True
        )
