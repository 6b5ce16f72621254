"""The CloudWatch metrics the global router emits as EMF: namespace, and per metric the counter it
comes from and its dimensions.

The one table, read by the emitter (:mod:`igw.global_router.emf`) and by the CDK global router
stack's CloudWatch dashboard and alarms. Imports nothing, so the CDK app reads it without the
router's server stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DEFAULT_FLEET_NAMESPACE: Final = "InferenceGateway/Global"


@dataclass(frozen=True, slots=True)
class FleetMetric:
    """One EMF metric (unit ``Count``): the interval delta of ``family`` summed per dimension set."""

    name: str
    family: str
    """Attribute of :class:`igw.global_router.metrics.FleetMetrics` holding the counter."""
    dimensions: tuple[tuple[str, str], ...]
    """``(counter label, CloudWatch dimension)`` pairs; other labels are summed away."""


FLEET_METRICS: Final = (
    FleetMetric(
        "RoutingDecisions",
        "decisions",
        (("cluster", "Cluster"), ("region", "Region"), ("reason", "Reason")),
    ),
    FleetMetric("FailoverEvents", "failovers", (("cluster", "Cluster"), ("reason", "Reason"))),
    FleetMetric("RecoveryEvents", "recoveries", (("cluster", "Cluster"),)),
    FleetMetric("RateLimitHits", "ratelimit_hits", (("model", "Model"), ("limit", "Limit"))),
    FleetMetric("ClusterErrors", "retries", (("cluster", "Cluster"), ("cause", "Cause"))),
    FleetMetric("ClusterRequests", "decisions", (("cluster", "Cluster"),)),
    FleetMetric("HeartbeatSourceOutages", "heartbeat_source_outages", (("reason", "Reason"),)),
    FleetMetric("AnswerUsageUnread", "answer_usage_unread", (("cluster", "Cluster"), ("reason", "Reason"))),
    FleetMetric("UsageMisnamed", "usage_misnamed", (("cluster", "Cluster"),)),
    FleetMetric("RateLimitHoldsRefused", "ratelimit_holds_refused", ()),
    FleetMetric("UpstreamRedirects", "upstream_redirects", (("cluster", "Cluster"),)),
    FleetMetric("UpstreamNonAnswers", "upstream_non_answers", (("cluster", "Cluster"), ("reason", "Reason"))),
    FleetMetric("UpstreamAuthRefused", "upstream_auth_refused", (("cluster", "Cluster"),)),
    FleetMetric("ResponseSearchesRefused", "searches_refused", (("reason", "Reason"),)),
)
"""Every fleet metric, in the order the documents are written. ``HeartbeatSourceOutages``,
``AnswerUsageUnread`` and ``UsageMisnamed`` since session s44 (before, their counters were on
``/metrics`` only, and the stack's CloudWatch alarms read none of them). ``RateLimitHoldsRefused``
(``igw_global_ratelimit_holds_refused_total``: token bounds of background responses the router's
local buckets' full hold table did not keep) since session s45, without dimensions as its counter
has none. ``UpstreamRedirects`` (``igw_global_upstream_redirects_total``: clusters' redirects refused
with a 502) since session s46. ``UpstreamAuthRefused`` (``igw_global_upstream_auth_refused_total``:
clusters' 401/407 to callers the router verified, refused with a 502 ``upstream_auth_misconfigured``)
and ``ResponseSearchesRefused`` (``igw_global_response_searches_refused_total``: requests about a
stored response answered without asking a cluster, by reason ``unfound``, ``busy``, ``scope_busy``)
since session s47 (before, on ``/metrics`` only). ``UpstreamNonAnswers``
(``igw_global_upstream_non_answers_total``: clusters' answers to an inference ``POST`` that cannot be
one, refused with a 502, by cluster and reason) since session s50."""
