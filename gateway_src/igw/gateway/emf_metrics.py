"""The CloudWatch metrics the gateway emits as EMF: namespace, dimensions, metric names and units.

The one table, read by the emitter (:mod:`igw.gateway.emf`) and by the CDK app's CloudWatch dashboard
and alarms, so a renamed metric cannot leave an alarm watching nothing. Imports nothing, so the CDK
app reads it without the gateway's server stack.
"""

from __future__ import annotations

from typing import Final

DEFAULT_NAMESPACE: Final = "InferenceGateway"
MODEL_DIMENSION: Final = "Model"
"""The gateway's ``model`` label: a configured model or adapter name."""
POOL_DIMENSION: Final = "Pool"
"""A scheduler (``spec.schedulers[].name``)."""
RESULT_DIMENSION: Final = "Result"
"""A heartbeat write's result, one of :data:`HEARTBEAT_RESULTS`."""
CLUSTER_DIMENSION: Final = "Cluster"
"""The cluster a gateway's heartbeats name (``spec.extensions.globalHeartbeat.cluster``): clusters of
one account and region write to one namespace, so a series without it was every cluster's at once."""
HEARTBEAT_EXTENSION: Final = "globalHeartbeat"
"""The extension whose ``cluster`` is :data:`CLUSTER_DIMENSION`'s value (:mod:`igw.gateway.heartbeat`
reads its settings there; the CDK app reads the cluster its alarm watches)."""
REASON_DIMENSION: Final = "Reason"
"""Why an answer's usage went unread: ``unknown_coding``, ``decode_error``, ``truncated``,
``bomb_bound``, ``coded_stream``; why a search for a stored response was refused
(:data:`SEARCH_REFUSAL_METRICS`): ``unfound``, ``busy``, ``scope_busy``."""
SCOPE_BUSY: Final = "scope_busy"
"""The refusal reason of a search whose caller scope held its share of the searches in flight: the
one the CloudWatch alarms (and the Prometheus alerts) on refused searches watch."""
HEARTBEAT_RESULTS: Final = ("ok", "unreachable", "refused")
"""Every result a heartbeat write counts (``igw_heartbeat_writes_total{result}``): the heartbeat
publisher labels its writes with these and the CDK app's failed-writes alarm sums every one but
``ok``, so a result added here is counted by both."""

MODEL_METRICS: Final = (
    ("Requests", "Count"),
    ("ErrorRate", "Percent"),
    ("LatencyP99", "Milliseconds"),
    ("TtftP99", "Milliseconds"),
)
"""``(name, unit)`` of the per-model document (dimension :data:`MODEL_DIMENSION`)."""
POOL_METRICS: Final = (
    ("KvCacheAverage", "Percent"),
    ("ReadyPods", "Count"),
    ("EjectedPods", "Count"),
    ("Retries", "Count"),
)
"""``(name, unit)`` of the per-pool document (dimension :data:`POOL_DIMENSION`). ``EjectedPods``: the
pool's endpoints the replica's outlier detection leaves out for failing requests in a row.
``Retries``: the replica's attempts retried on the next-best pod in the interval (every cause of
``spec.extensions.routing.retry``), summed over replicas like requests."""
POOL_STATE_METRICS: Final = frozenset({"ReadyPods", "EjectedPods"})
"""Metrics that describe the pool, not one gateway's traffic: every gateway replica reports the same
value for it (or, for ejected pods, its own view of the same pods), so a view of several replicas
takes their maximum; a sum (what a ``Count`` of requests takes) counted every pod once per replica."""
HEARTBEAT_METRICS: Final = (("HeartbeatWrites", "Count"), ("HeartbeatPrunes", "Count"))
"""``(name, unit)`` of the per-result document (dimensions :data:`CLUSTER_DIMENSION`,
:data:`RESULT_DIMENSION`): the replica's heartbeat writes to the global router's store in the
interval (``igw_heartbeat_writes_total``) and its prunes of stopped replicas' fields
(``HeartbeatPrunes``, ``igw_heartbeat_prunes_total``, since session s45: before, on ``/metrics``
only), one document per result where either moved, naming those that did. Writes since session s44;
by cluster since s45 (before, ``Result`` alone: the clusters of one account and region shared each
series, and the CDK app's alarm on the share that failed read one failing cluster among healthy
ones as a fraction of the whole)."""
GATEWAY_METRICS: Final = (("UsageMisnamed", "Count"), ("RateLimitHoldsRefused", "Count"))
"""``(name, unit)`` of the replica's document without dimensions, written in an interval where one
moved, naming those that did: ``UsageMisnamed``, retrievals whose answer named another response
(``igw_usage_misnamed_total``, since session s44); ``RateLimitHoldsRefused``, token bounds of
background responses the local rate-limit buckets' full hold table did not keep
(``igw_ratelimit_holds_refused_total``, since session s45; before, on ``/metrics`` only)."""
USAGE_UNREAD_CLIENT_GONE: Final = "client_gone"
"""The unread-usage reason of a compressed answer whose client left before its usage passed (since
session s45): the client's doing, not the pod's - counted, but left out of the alert and the alarm
on unread usage, which say a pod compresses (clients leave mid-answer every day)."""
USAGE_UNREAD_METRICS: Final = (("AnswerUsageUnread", "Count"),)
"""``(name, unit)`` of the per-(model, reason) document (dimensions :data:`MODEL_DIMENSION`,
:data:`REASON_DIMENSION`): answers a model server compressed though asked for none whose usage the
gateway could not read, so no token limit charged them (``igw_answer_usage_unread_total``), one
document per (model, reason) that moved. Its own document, not a member of the model's: that one is
not written in an interval without requests, and an answer counted here may be a retried attempt's
(the interval's requests not moving with it). The tier-2 counterpart is ``AnswerUsageUnread`` by
``Cluster``, ``Reason``. Since session s44."""
UPSTREAM_REDIRECT_METRICS: Final = (("UpstreamRedirects", "Count"),)
"""``(name, unit)`` of the per-model document (dimension :data:`MODEL_DIMENSION`): the model's pods'
redirects (3xx) refused with a 502 in the interval (``igw_upstream_redirects_total``), one document per
model that moved; its own document, as :data:`USAGE_UNREAD_METRICS`' (each attempt's, a retried one's
too). The tier-2 counterpart is ``UpstreamRedirects`` by ``Cluster``. Since session s46."""
UPSTREAM_NON_ANSWER_METRICS: Final = (("UpstreamNonAnswers", "Count"),)
"""``(name, unit)`` of the per-(model, reason) document (dimensions :data:`MODEL_DIMENSION`,
:data:`REASON_DIMENSION`): the model's pods' answers to an inference ``POST`` that cannot be one (204,
205, 304; an empty body; a success that is no JSON object), refused with a 502 in the interval
(``igw_upstream_non_answers_total``, reasons ``bodiless_status``, ``empty_body``,
``not_json_object``), one document per (model, reason) that moved; its own document, as
:data:`UPSTREAM_REDIRECT_METRICS`' (each attempt's, a retried one's too). The tier-2 counterpart is
``UpstreamNonAnswers`` by ``Cluster``, ``Reason``. Since session s50 (before, on ``/metrics`` only)."""
SEARCH_REFUSAL_METRICS: Final = (("ResponseSearchesRefused", "Count"),)
"""``(name, unit)`` of the per-reason document (dimension :data:`REASON_DIMENSION`): requests about a
stored response answered without searching the pods (``igw_response_searches_refused_total``: 404 for
an id the caller's search found nowhere moments ago, 503 ``response_search_busy`` when the process's
searches, or the caller scope's share of them, are in flight), one document per reason that moved.
The tier-2 counterpart is ``ResponseSearchesRefused`` by ``Reason``. Since session s47."""
