"""The gateway's Prometheus alert rules as a table, rendered into the chart's PrometheusRule.

:data:`ALERTS` is the one source: ``igw generate`` writes it to
``addon/chart/inference-gateway/files/alert-rules.yaml`` (the chart embeds that file when
``prometheusRule.enabled``), and a test checks that every metric an expression reads is on a
running gateway's ``/metrics`` page, so a renamed metric cannot leave a dead alert. Metrics that
other components publish (cert-manager's certificate expiry) are listed in
:data:`EXTERNAL_METRICS` with their source, and are the only exemption.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

from igw.gateway.emf_metrics import USAGE_UNREAD_CLIENT_GONE

ALERT_RULES_FILE: Final = "addon/chart/inference-gateway/files/alert-rules.yaml"

RUNBOOK_DOC: Final = "docs/runbook.md"
"""Where each alert's entry lives (a heading named after the alert, under "Alerts"): the on-call
engineer's first stop, linked from every rule's ``runbook_url`` annotation."""

EXTERNAL_METRICS: Final = {
    "certmanager_certificate_expiration_timestamp_seconds": "cert-manager's controller metrics",
}
"""Metrics an alert reads that the gateway does not export, and who does."""

ROUTER_MARKER: Final = "igw_global_heartbeat_source_up"
"""The series only a global router's page has (always one sample): a tier-1 alert on a family both
tiers export reads it to leave the routers out (``unless on(instance)``), a router alert to keep
only the routers (``and on(instance)``); not on a gateway's page, the one name a tier-1 alert may
read that the gateway does not export besides :data:`EXTERNAL_METRICS`."""

SEARCH_TIMEOUT_CAUSE: Final = "search-timeout"
"""The ``cause`` both tiers' retry counters give an upstream a search for a stored response stopped
waiting for (:data:`igw.gateway.response_search.SEARCH_TIMEOUT`,
:data:`igw.global_router.server.SEARCH_TIMEOUT`; a test holds them equal)."""

_NOT_ROUTER = f"unless on(instance) {ROUTER_MARKER}"
"""Leaves a router's series out of a tier-1 alert on a family both tiers export, for a Prometheus
that scrapes both (since session s46)."""

TTFT_SLO_SECONDS: Final = 1.0
"""TTFT objective: requests whose first token arrives within this many seconds are good (must be a
boundary of the gateway's TTFT histogram buckets: the burn rate reads that bucket)."""
TTFT_SLO_TARGET: Final = 0.99
"""Fraction of requests that must meet :data:`TTFT_SLO_SECONDS` (the P99 objective)."""


CANARY_ERROR_SHARE: Final = 0.05
"""A canary target's 5xx share over 10 minutes above which :data:`ALERTS`' ``IgwCanaryVersionErrors``
may fire (absolute; it must also be :data:`CANARY_ERROR_FACTOR` times the rule's other targets')."""
CANARY_ERROR_FACTOR: Final = 2
"""How many times the rule's other targets' 5xx share a target's must be for the alert."""
CANARY_MIN_RPS: Final = 0.1
"""The request rate a target must exceed (over 10 minutes: 60 requests) for its error share to page:
a target with a handful of requests is one unlucky error from any share."""

TENANT_FOLDS_PER_HOUR: Final = 10
"""Distinct tenants one gateway process may fold into ``tenant="other"`` in an hour before
:data:`ALERTS`' ``IgwTenantLabelsFolding`` may fire: a handful once is a budget a little short, ten
an hour for 30 minutes is new tenants arriving steadily (a ``tenantClaim`` per user, or a caller
minting fairness ids)."""

_REWRITES = "igw_model_rewrite_requests_total"


def _rewrite_rate(by: str, *, errors: bool = False) -> str:
    """The per-``by`` request rate of the canary rules' targets over 10 minutes (5xx only with
    ``errors``), summed over the gateway replicas."""
    selector = f'{_REWRITES}{{code=~"5.."}}' if errors else _REWRITES
    return f"sum by ({by}) (rate({selector}[10m]))"


def _others_rate(*, errors: bool = False) -> str:
    """Per (rule, target): the rate of the rule's *other* targets (the rule's total less the
    target's own; ``group_right`` keeps the target's labels)."""
    return (
        f"({_rewrite_rate('rule', errors=errors)}\n"
        f"  - on(rule) group_right {_rewrite_rate('rule, target', errors=errors)})"
    )


def _canary_version_errors() -> str:
    """A target whose 5xx share is over :data:`CANARY_ERROR_SHARE`, over
    :data:`CANARY_ERROR_FACTOR` times its rule's other targets' together, with over
    :data:`CANARY_MIN_RPS` requests a second. A rule whose other targets took no request in the window
    compares with NaN and stays quiet (nothing to compare with: IgwHigh5xxRatio watches the whole)."""
    share = f"({_rewrite_rate('rule, target', errors=True)}\n/ {_rewrite_rate('rule, target')})"
    others = f"({_others_rate(errors=True)}\n/ {_others_rate()})"
    return (
        f"{share} > {CANARY_ERROR_SHARE}\n"
        f"and {share}\n> {CANARY_ERROR_FACTOR} * {others}\n"
        f"and {_rewrite_rate('rule, target')} > {CANARY_MIN_RPS}"
    )


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str


def _go_float(value: float) -> str:
    """A bucket boundary as the ``le`` label value the Prometheus client writes (``1.0``, ``0.25``)."""
    return repr(float(value))


def _ttft_bad_ratio(window: str) -> str:
    le = _go_float(TTFT_SLO_SECONDS)
    return (
        f'(1 - sum(rate(igw_time_to_first_token_seconds_bucket{{le="{le}"}}[{window}]))'
        f" / sum(rate(igw_time_to_first_token_seconds_count[{window}])))"
    )


def _burn(long: str, short: str, factor: float) -> str:
    budget = round(1 - TTFT_SLO_TARGET, 6)
    threshold = f"({factor} * {budget})"
    return f"{_ttft_bad_ratio(long)} > {threshold}\nand\n{_ttft_bad_ratio(short)} > {threshold}"


ALERTS: Final[tuple[Alert, ...]] = (
    Alert(
        # "shed": the same overload with spec.extensions.flowControl on, answered from its queue
        # (429 request_shed) instead of at once (429 pool_saturated); read since session s39.
        "IgwPoolSaturated",
        'sum by (model) (rate(igw_rejections_total{reason=~"saturated|shed"}[5m])) > 0',
        "10m",
        "warning",
        "Model {{ $labels.model }} has been shedding requests (429 pool_saturated or request_shed) "
        "for 10 minutes.",
        "Every endpoint of the pool is over its saturation thresholds; add replicas or raise "
        "spec.extensions.routing.saturation.queueDepthThreshold / kvCacheUtilThreshold.",
    ),
    Alert(
        "IgwPoolKvCacheNearlyFull",
        "inference_pool_average_kv_cache_utilization > 0.95",
        "15m",
        "warning",
        "Pool {{ $labels.name }} averages over 95% KV-cache use.",
        "Sustained KV-cache pressure causes preemption and rising latency; scale the pool.",
    ),
    Alert(
        "IgwEndpointScrapeFailing",
        "igw_endpoint_scrape_failing == 1",
        "2m",
        "warning",
        "Endpoint {{ $labels.endpoint }} of {{ $labels.scheduler }}: metrics scrape failing.",
        "The gateway routes without this endpoint's load signals; check the model server's /metrics.",
    ),
    Alert(
        "IgwEndpointMetricsStale",
        "igw_endpoint_scrape_age_seconds > 30",
        "2m",
        "warning",
        "Endpoint {{ $labels.endpoint }} of {{ $labels.scheduler }}: metrics older than 30 s.",
        "Stale metrics make load-aware routing blind for this endpoint.",
    ),
    Alert(
        "IgwWorkerScrapeCopyBehind",
        "max by (instance, scheduler) (igw_pool_stale_endpoints)\n"
        "> min by (instance, scheduler) (igw_pool_stale_endpoints)",
        "5m",
        "warning",
        "A worker of gateway {{ $labels.instance }} routes around more stale endpoints of "
        "{{ $labels.scheduler }} than another worker.",
        "With --workers every worker routes on a relayed copy of worker 0's scrapes; a copy that falls "
        "behind leaves that worker's requests without load signals. Check the gateway's log for "
        "'scrape channel' warnings.",
    ),
    Alert(
        "IgwEndpointMetricsFrozen",
        "igw_endpoint_metrics_frozen == 1",
        "5m",
        "warning",
        "Endpoint {{ $labels.endpoint }}: /metrics no longer changes although it receives traffic.",
        "A frozen metrics page usually means a hung metrics exporter in the model server.",
    ),
    Alert(
        "IgwEndpointEjectedRepeatedly",
        "sum by (scheduler, endpoint) (increase(igw_endpoint_ejections_total[15m])) >= 3",
        "0m",
        "warning",
        "Endpoint {{ $labels.endpoint }} of {{ $labels.scheduler }} was ejected 3 times or more "
        "in 15 minutes.",
        "Its inference API keeps failing requests (5xx, broken streams, refused connections) while its "
        "/metrics page may look healthy; outlier detection routes around it between ejections. Check the "
        "model server's log and the gateway access log's error field for this endpoint.",
    ),
    Alert(
        "IgwEndpointSignalMissing",
        "igw_endpoint_signal_missing == 1",
        "10m",
        "warning",
        "Endpoint {{ $labels.endpoint }} does not publish {{ $labels.signal }}.",
        "Routing falls back for this signal; check the engine version and its metric names.",
    ),
    Alert(
        "IgwHigh5xxRatio",
        'sum(rate(igw_requests_total{code=~"5.."}[5m])) / sum(rate(igw_requests_total[5m])) > 0.05',
        "5m",
        "critical",
        "More than 5% of inference requests fail with a 5xx status.",
        "Check the gateway access log's error field and the model servers.",
    ),
    Alert(
        "IgwTraceExportFailing",
        "sum(rate(igw_trace_export_failed_batches_total[5m])) > 0",
        "10m",
        "warning",
        "The gateway's OTLP trace export has been failing for 10 minutes; spans are being dropped.",
        "Check the collector's endpoint, its NetworkPolicy egress and its health.",
    ),
    Alert(
        # Spans the exporter never got (its queue full) are counted apart from failed batches since
        # session s39: a collector that accepts every batch but too slowly for the span volume left
        # no failed batch, and the traces full of holes raised no alert. While batches fail too,
        # IgwTraceExportFailing says so (the queue fills behind the retries): this one stays quiet.
        "IgwTraceSpansDropped",
        'sum(rate(igw_trace_export_spans_total{result="dropped"}[5m])) > 0\n'
        "unless sum(rate(igw_trace_export_failed_batches_total[5m])) > 0",
        "10m",
        "warning",
        "The gateway has been dropping spans for 10 minutes: its OTLP export queue is full.",
        "The exporter cannot ship spans as fast as they end (a slow collector, or more spans than one "
        "exporter sends): traces have holes. Lower --otel-sample-ratio, raise OTEL_BSP_MAX_QUEUE_SIZE / "
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE, or scale the collector.",
    ),
    Alert(
        "IgwTtftSloFastBurn",
        _burn("1h", "5m", 14.4),
        "2m",
        "critical",
        "TTFT SLO (P99 under 1 s) error budget burning 14.4x too fast (1h and 5m windows).",
        "At this rate a 30-day error budget is spent in about two days.",
    ),
    Alert(
        "IgwTtftSloSlowBurn",
        _burn("6h", "30m", 6.0),
        "15m",
        "warning",
        "TTFT SLO (P99 under 1 s) error budget burning 6x too fast (6h and 30m windows).",
        "At this rate a 30-day error budget is spent in five days.",
    ),
    Alert(
        # since session s46 without a router's fetches (IgwGlobalJwksRefreshFailing): a router with
        # spec.auth exports the same counter, and its failures fired this alert, its successes hid
        # a gateway's failures. Per gateway (instance) since s46 too, as the router's: one sum over
        # every gateway let one replica's successes hide another's failures.
        "IgwJwksRefreshFailing",
        f'sum by (instance) (increase(igw_jwks_fetch_total{{result="failure"}}[15m]) {_NOT_ROUTER}) > 0\n'
        f"unless sum by (instance) "
        f'(increase(igw_jwks_fetch_total{{result="success"}}[15m]) {_NOT_ROUTER}) > 0',
        "5m",
        "warning",
        "Gateway {{ $labels.instance }} cannot refresh the JWKS of its token issuer.",
        "Its cached keys keep verifying until they are too stale; then it refuses every request with "
        "401, while replicas whose fetches succeed keep serving.",
    ),
    Alert(
        # since session s46 not for a router's keys (IgwGlobalJwksNotReady): both tiers export them
        "IgwJwksNotReady",
        f"igw_jwks_ready == 0 and on(instance) igw_auth_enabled == 1\n{_NOT_ROUTER}",
        "5m",
        "critical",
        "Authentication is on but the gateway has no usable JWKS keys.",
        "Every inference request is refused with 401 until the issuer's JWKS can be fetched.",
    ),
    Alert(
        "IgwConfigReloadRejected",
        "igw_config_last_reload_successful == 0",
        "10m",
        "warning",
        "The gateway serves an older configuration than its file: the last change was rejected.",
        "The running configuration stays; /readyz names the reason (config_reload_error).",
    ),
    Alert(
        "IgwCertificateExpiringSoon",
        "certmanager_certificate_expiration_timestamp_seconds - time() < 14 * 86400",
        "1h",
        "warning",
        "Certificate {{ $labels.name }} in {{ $labels.namespace }} expires within 14 days.",
        "cert-manager should have renewed it; check the Certificate's status and its issuer.",
    ),
    Alert(
        "IgwServedCertificateExpiringSoon",
        "igw_tls_certificate_expiry_timestamp_seconds - time() < 7 * 86400",
        "10m",
        "warning",
        "Gateway {{ $labels.pod }} serves a TLS certificate that expires within 7 days (or has expired).",
        "What the gateway loaded, not what the Secret holds: a renewal the gateway did not pick up "
        "(its log: 'TLS certificate reload failed') or a certificate cert-manager does not manage. "
        "Clients refuse an expired certificate.",
    ),
    Alert(
        # since session s46 not for a router's drops (IgwGlobalLogLinesDropped): both tiers export it
        "IgwLogLinesDropped",
        f"increase(igw_log_lines_dropped_total[10m]) > 0\n{_NOT_ROUTER}",
        "1m",
        "warning",
        "Gateway {{ $labels.pod }} dropped {{ $labels.stream }} log lines in the last 10 minutes.",
        "The stream took no lines (a stalled log shipper, a full or closed pipe) while 40 MiB of lines "
        "waited: access, EMF or diagnostic lines are lost, so dashboards and audits built on them "
        "undercount. The gateway keeps serving.",
    ),
    Alert(
        # since session s44: before it no series counted a failed write, and the log holds back
        # a flapping store's failures (igw.gateway.outage_log), so a flapping store showed nowhere
        "IgwHeartbeatWritesFailing",
        'sum by (pod) (increase(igw_heartbeat_writes_total{result!="ok"}[10m]))\n'
        "/ sum by (pod) (increase(igw_heartbeat_writes_total[10m])) > 0.1",
        "5m",
        "warning",
        "Gateway {{ $labels.pod }} failed more than 10% of its heartbeat writes in the last 10 minutes.",
        "The global routers judge the cluster by its heartbeats: failed writes make it look stale "
        "(drained once they outlast heartbeatStalenessSeconds), and a flapping store's failures are "
        "counted in the log, not each logged. Check the heartbeat store (Redis): reachability, memory, "
        "role, the gateway's credentials.",
    ),
    Alert(
        # since session s44: before it a WARNING or a 502's access-log line alone said so
        "IgwAnswerUsageUnread",
        "sum by (model, reason) "
        f'(increase(igw_answer_usage_unread_total{{reason!="{USAGE_UNREAD_CLIENT_GONE}"}}[10m])) > 0',
        "0m",
        "warning",
        "Model {{ $labels.model }}'s pods sent compressed answers whose usage the gateway could not "
        "read ({{ $labels.reason }}).",
        "A pod compresses though the gateway asks for identity (a compressing proxy, or a hostile pod): "
        "such answers are refused with 502 or relayed without their tokens charged to the rate limits "
        "(a client leaving such an answer before its usage, reason client_gone, is counted, not alerted).",
    ),
    Alert(
        # since session s45: the counter (s44) had a CloudWatch metric, but no alert, here or there
        "IgwUsageMisnamed",
        "sum by (pod) (increase(igw_usage_misnamed_total[10m])) > 0",
        "0m",
        "warning",
        "Gateway {{ $labels.pod }} withheld model-server answers to stored-response retrievals that "
        "named another response.",
        "A model server answered a retrieval or cancel of a stored response (whole, streamed or large) "
        "with another response's object: never relayed (the client gets 404 response_not_found), the "
        "pod no longer remembered as the holder, and no usage settled (or it showed usage naming no "
        "response): the polled response's token bound stays charged. A misbehaving or hostile pod, or "
        "a store shared between model servers.",
    ),
    Alert(
        # since session s46: the counter (s46) was on /metrics only
        "IgwUpstreamRedirects",
        "sum by (pod, model) (increase(igw_upstream_redirects_total[10m])) > 0",
        "0m",
        "warning",
        "Gateway {{ $labels.pod }} refused redirects (3xx) that model {{ $labels.model }}'s pods answered.",
        "No inference API redirects: each such answer was refused with 502 upstream_error, its Location "
        "not relayed (retried on the next pod where retry.retryOn covers 5xx). A misconfigured pod (an "
        "HTTP-to-HTTPS redirect of a proxy in front of the model server) or a hostile one pointing "
        "clients at another address.",
    ),
    Alert(
        # since session s50: the counter (s50) was on /metrics only
        "IgwUpstreamNonAnswers",
        "sum by (pod, model, reason) (increase(igw_upstream_non_answers_total[10m])) > 0",
        "0m",
        "warning",
        "Gateway {{ $labels.pod }} refused answers of model {{ $labels.model }}'s pods that cannot be "
        "one ({{ $labels.reason }}).",
        "A pod answered an inference POST with 204, 205 or 304 (bodiless_status), an empty body "
        "(empty_body) or a success that is no JSON object (not_json_object): each refused with 502 "
        "upstream_error, nothing of it relayed (retried on the next pod where retry.retryOn covers "
        "5xx). A model server that is not the one configured (a health or default backend behind "
        "the port), a broken proxy in front of it, or a hostile pod.",
    ),
    Alert(
        # since session s46: a pod frozen for retrievals is passed by each search after 2 s; outlier
        # detection counts the timeout as a failure, but ejects only after failures in a row, which
        # the pod's other answers (inference requests it still serves) keep breaking
        "IgwUpstreamSearchTimeouts",
        "sum by (pod, scheduler) "
        f'(increase(igw_upstream_retries_total{{cause="{SEARCH_TIMEOUT_CAUSE}"}}[15m])) >= 3',
        "5m",
        "warning",
        "Gateway {{ $labels.pod }}'s searches for stored responses stopped waiting for pods of "
        "{{ $labels.scheduler }} 3 times or more in 15 minutes.",
        "A pod did not answer a retrieval's head within the search timeout (2 s): a frozen or "
        "overloaded model server. Each search waits that long before asking the next pod, and the "
        "responses stored on that pod are not found (404) while it stays frozen.",
    ),
    Alert(
        # since session s47: tier 1 counted none of its refused searches before
        "IgwSearchesScopeBusy",
        'sum by (pod) (increase(igw_response_searches_refused_total{reason="scope_busy"}[15m])) >= 20',
        "5m",
        "warning",
        "Gateway {{ $labels.pod }} refused 20 or more searches for stored responses in 15 minutes "
        "because their caller scope already had its share of the searches in flight.",
        "Each was answered 503 response_search_busy without asking a pod: one tenant (or subject) keeps "
        "more than 4 searches in flight on the gateway process, looping ids no pod stores (made up, or "
        "gone) or continuing and polling responses whose pod the replica does not know. Its own "
        "searches wait; other tenants' still run.",
    ),
    Alert(
        # since session s45: a hold the local buckets' full table refused was silent before
        "IgwRatelimitHoldsRefused",
        "sum by (pod) (increase(igw_ratelimit_holds_refused_total[10m])) > 0",
        "0m",
        "warning",
        "Gateway {{ $labels.pod }} did not keep the token bounds held for some background responses.",
        "Its local rate-limit buckets' hold table is full of other tenants' holds, one each (many tenant "
        "ids with unpolled background responses: a flood, or tenantClaim sub): a refused hold is never "
        "settled, so its tenant stays charged the whole bound until its bucket refills.",
    ),
    Alert(
        # since session s48: the per-target split and codes (igw_model_rewrite_requests_total) were
        # on /metrics and the canary dashboard only. 5xx only: a 429 is load (a canary pool sized for
        # its share sheds as IgwPoolSaturated says) or a tenant's limit, not a broken version.
        "IgwCanaryVersionErrors",
        _canary_version_errors(),
        "5m",
        "critical",
        "Canary rule {{ $labels.rule }}: target {{ $labels.target }} fails {{ $value | humanizePercentage }} "
        "of its requests with a 5xx, over twice the rule's other targets.",
        "The version this rule sends part of the traffic to fails more than 5% of its requests (10 "
        "minutes, over 0.1 requests a second), more than twice as often as the rule's other targets "
        "together: a bad rollout, not a bad day for the model. Set its weight to 0 "
        "(spec.extensions.modelRewrites) to roll it back, then read its pods' logs.",
    ),
    Alert(
        # since session s48 (round 3): the refusals (igw_body_budget_refusals_total) were on /metrics only
        "IgwBodyBudgetRefusals",
        f"sum by (pod) (increase(igw_body_budget_refusals_total[5m]) {_NOT_ROUTER}) > 0",
        "0m",
        "warning",
        "Gateway {{ $labels.pod }} refused requests with 503 server_busy: the request bodies it held "
        "reached serverLimits.maxBodyBytesHeld.",
        "Bodies being read and not yet queued or forwarded filled the process's budget (igw_body_bytes_held "
        "against igw_body_bytes_held_limit); clients are told to retry after 1-2 s. Raise "
        "spec.extensions.serverLimits.maxBodyBytesHeld together with the container's memory limit "
        "(resident memory grows about twice the counted bytes), or add replicas.",
    ),
    Alert(
        # since session s48 (round 3): held bytes near the budget before the refusals start
        "IgwBodyBytesHeldNearLimit",
        f"igw_body_bytes_held / igw_body_bytes_held_limit > 0.8\n{_NOT_ROUTER}",
        "10m",
        "warning",
        "Gateway {{ $labels.pod }} has held over 80% of its request-body budget for 10 minutes.",
        "Uploads in progress keep the process near serverLimits.maxBodyBytesHeld: a little more load and "
        "requests are refused 503 server_busy (IgwBodyBudgetRefusals). Size the field and the memory "
        "limit for the concurrent uploads (docs/runbook.md).",
    ),
    Alert(
        # since session s48: a target with no usable endpoint hands its draw to the rule's others
        "IgwCanaryTargetFallingBack",
        "sum by (rule, from) (rate(igw_model_rewrite_fallbacks_total[5m])) > 0",
        "5m",
        "warning",
        "Canary rule {{ $labels.rule }}: target {{ $labels.from }} has had no usable endpoint for 5 "
        "minutes; its share goes to the rule's other targets.",
        "Its pool has no fresh, ready endpoint (scaled to zero, crash-looping, metrics stale or every "
        "pod ejected), so the observed split is not the configured one and the version is not being "
        "tested. igw_model_rewrite_fallbacks_total{to} says where its draws go.",
    ),
    Alert(
        # since session s49: igw_tenant_labels_folded_total (s48) was on /metrics only. max over a
        # pod's processes: each worker has its own label budget and counts its own folds.
        "IgwTenantLabelsFolding",
        f"max by (pod) (increase(igw_tenant_labels_folded_total[1h]) {_NOT_ROUTER})\n"
        f"> {TENANT_FOLDS_PER_HOUR}",
        "30m",
        "warning",
        "Gateway {{ $labels.pod }} counted {{ $value | humanize }} new tenants as tenant=other in the "
        "last hour: its tenant label budget is taken.",
        "New tenants keep arriving after the first maxTenantLabels were given a label, so their rate "
        "limits, rejections and requests are summed as tenant=other. Raise maxTenantLabels "
        "(rateLimits.metrics, flowControl.metrics; at most 1,000) if they are real callers; "
        "a caller minting tenant or fairness ids is abuse.",
    ),
)
"""Every alert the chart ships."""


GLOBAL_ALERT_RULES_FILE: Final = "addon/prometheus/igw-global-router-rules.yaml"
"""The global router's (tier 2, ``igw global serve``) rules: a plain Prometheus rule file (``groups:``),
for a Prometheus's ``rule_files``, an Amazon Managed Service for Prometheus rule groups namespace, or
the ``spec`` of a PrometheusRule. Not in the chart: the router runs outside the tier-1 clusters (the
CDK stack runs it on ECS)."""

GLOBAL_RUNBOOK_SECTION: Final = "Global router alerts"
"""The runbook section (in :data:`RUNBOOK_DOC`) with one entry per :data:`GLOBAL_ALERTS` alert."""

_ROUTER = f"and on(instance) {ROUTER_MARKER}"
"""Keeps a series the router shares with tier 1 (the request guard's ``igw_ratelimit_*``) to the
routers' targets: only a router's page has ``igw_global_heartbeat_source_up`` (always one sample)."""

GLOBAL_ALERTS: Final[tuple[Alert, ...]] = (
    Alert(
        "IgwGlobalNoClusterAvailable",
        "max by (instance) (igw_global_cluster_available) == 0",
        "1m",
        "critical",
        "Global router {{ $labels.instance }} has no available cluster: every request fails.",
        "Every cluster is drained (stale or unread heartbeats, draining, failures): the router answers "
        "503. Check the clusters' gateways and the heartbeat store.",
    ),
    Alert(
        "IgwGlobalClusterUnavailable",
        "igw_global_cluster_available == 0",
        "5m",
        "warning",
        "Cluster {{ $labels.cluster }} ({{ $labels.region }}) has been drained for 5 minutes at "
        "router {{ $labels.instance }}.",
        "Its traffic goes to the other clusters. igw_global_failover_events_total{cluster} says why "
        "(stale, gone, draining, malformed, failures); /readyz on the router's management port too.",
    ),
    Alert(
        "IgwGlobalHeartbeatUnread",
        "igw_global_heartbeat_unread == 1",
        "5m",
        "warning",
        "Router {{ $labels.instance }} cannot read cluster {{ $labels.cluster }}'s heartbeat key.",
        "The key is over its bounds, of another type, or the largest of a read over its budget: the "
        "cluster is drained as malformed although its gateway may be healthy.",
    ),
    Alert(
        "IgwGlobalHeartbeatSourceDown",
        "igw_global_heartbeat_source_up == 0",
        "2m",
        "critical",
        "Router {{ $labels.instance }} cannot read the heartbeat store (Redis).",
        "The router sees no cluster's heartbeat: it suspends staleness and routes on the last state it "
        "read and on request outcomes, so a cluster that dies meanwhile is drained only by its failures.",
    ),
    Alert(
        "IgwGlobalHeartbeatSourceOutages",
        "sum by (instance, reason) (increase(igw_global_heartbeat_source_outages_total[10m])) > 0",
        "0m",
        "warning",
        "Router {{ $labels.instance }} lost the heartbeat store ({{ $labels.reason }}) in the last "
        "10 minutes.",
        "Counts the outages (and flaps between scrapes) that igw_global_heartbeat_source_up cannot show; "
        "refused means the router's credentials.",
    ),
    Alert(
        "IgwGlobalHigh5xxRatio",
        'sum by (instance) (rate(igw_global_requests_total{code=~"5.."}[5m]))\n'
        "/ sum by (instance) (rate(igw_global_requests_total[5m])) > 0.05",
        "5m",
        "critical",
        "More than 5% of router {{ $labels.instance }}'s answers are 5xx.",
        "Every attempted cluster failed, or none was available; "
        "igw_global_upstream_retries_total{cluster,cause} names the clusters and causes.",
    ),
    Alert(
        "IgwGlobalRateLimitBackendDown",
        f"igw_ratelimit_backend_up == 0\n{_ROUTER}",
        "2m",
        "warning",
        "Router {{ $labels.instance }} cannot reach its rate-limit store ({{ $labels.backend }}).",
        "spec.rateLimits.onRedisUnavailable applies: local buckets (each replica admits the whole "
        "limit), allow (no limit) or deny (429 for every tenant).",
    ),
    Alert(
        "IgwGlobalAnswerUsageUnread",
        "sum by (cluster, reason) (increase(igw_global_answer_usage_unread_total[10m])) > 0",
        "0m",
        "warning",
        "Cluster {{ $labels.cluster }} sent compressed answers whose usage the router could not read "
        "({{ $labels.reason }}).",
        "Refused with 502 (tried at the next cluster) or relayed without their tokens charged to the "
        "global limits: something at that cluster compresses though the router asks for identity.",
    ),
    Alert(
        "IgwGlobalUsageMisnamed",
        "sum by (cluster) (increase(igw_global_usage_misnamed_total[10m])) > 0",
        "0m",
        "warning",
        "Cluster {{ $labels.cluster }} answered retrievals of stored responses with another response.",
        "Such an answer (whole, streamed or large) is never relayed (404 response_not_found unless "
        "another cluster has the response), the cluster is no longer remembered as the holder, and it "
        "settles nothing: the polled response's hold stays charged. A misbehaving or hostile pod, or a "
        "store shared between model servers, at that cluster.",
    ),
    Alert(
        # since session s46: the counter (s46) was on /metrics only
        "IgwGlobalUpstreamRedirects",
        "sum by (instance, cluster) (increase(igw_global_upstream_redirects_total[10m])) > 0",
        "0m",
        "warning",
        "Router {{ $labels.instance }} refused redirects (3xx) that cluster {{ $labels.cluster }} answered.",
        "Each was refused with 502 upstream_error, its Location not relayed, and tried at the next "
        "cluster: something in front of that cluster's gateway redirects (an HTTP-to-HTTPS listener "
        "rule of its load balancer, a wrong endpoint URL) or is hostile.",
    ),
    Alert(
        # since session s50: the counter (s50) was on /metrics only
        "IgwGlobalUpstreamNonAnswers",
        "sum by (instance, cluster, reason) (increase(igw_global_upstream_non_answers_total[10m])) > 0",
        "0m",
        "warning",
        "Router {{ $labels.instance }} refused answers of cluster {{ $labels.cluster }} that cannot be "
        "one ({{ $labels.reason }}).",
        "The cluster answered an inference POST with 204, 205 or 304 (bodiless_status), an empty body "
        "(empty_body) or a success that is no JSON object (not_json_object): each refused with 502 "
        "upstream_error, nothing of it relayed, and tried at the next cluster. Something in front of "
        "that cluster's gateway answers in its place (a load balancer's default action or health "
        "page, a wrong endpoint URL) or is hostile; its own gateway's IgwUpstreamNonAnswers says "
        "whether its pods did.",
    ),
    Alert(
        # since session s47: before, the cluster's 401 was relayed to every verified caller
        "IgwGlobalUpstreamAuthMisconfigured",
        "sum by (instance, cluster) (increase(igw_global_upstream_auth_refused_total[10m])) > 0",
        "0m",
        "critical",
        "Cluster {{ $labels.cluster }} refused (401/407) callers router {{ $labels.instance }} verified "
        "and whose token it does not forward.",
        "The cluster's gateway authenticates callers (its spec.auth) but the router does not forward "
        "their token (spec.authorization.forwardAuthorization false): every verified caller's request "
        "there is refused with 502 upstream_auth_misconfigured and tried at the next cluster, and the "
        "cluster is drained for its failures. Forward the token (tier 1 verifying the same issuer) or "
        "turn off that gateway's authentication.",
    ),
    Alert(
        # since session s46: a search timeout does not count against the cluster (it is not drained
        # for it), so a cluster frozen for retrievals while serving inference showed nowhere else.
        # Per cluster over every replica since session s48: per replica, a cluster frozen for
        # retrievals stayed quiet while the load balancer spread its timeouts (four replicas, two
        # each in 15 minutes: none fired)
        "IgwGlobalSearchTimeouts",
        "sum by (cluster) "
        f'(increase(igw_global_upstream_retries_total{{cause="{SEARCH_TIMEOUT_CAUSE}"}}[15m])) >= 3',
        "5m",
        "warning",
        "The routers' searches for stored responses stopped waiting for cluster {{ $labels.cluster }} "
        "3 times or more in 15 minutes.",
        "The cluster's gateway did not answer a retrieval within the router's search timeout (5 s, "
        "its head and whole body): each search waits that long before asking the next cluster, and the "
        "responses stored there are not found while it stays so. The cluster is not drained for it and "
        "goes on serving inference, so no failover alert says so.",
    ),
    Alert(
        # since session s47: the refusals (s46) were on /metrics only
        "IgwGlobalSearchesScopeBusy",
        "sum by (instance) "
        '(increase(igw_global_response_searches_refused_total{reason="scope_busy"}[15m])) >= 20',
        "5m",
        "warning",
        "Router {{ $labels.instance }} refused 20 or more searches for stored responses in 15 minutes "
        "because their caller scope already had its share of the searches in flight.",
        "Each was answered 429 response_searches_busy without asking a cluster: one tenant (or "
        "subject) keeps more than 4 searches in flight on the replica, looping ids no cluster stores "
        "(made up, or gone) or polling many of its responses through a replica that does not know "
        "them. Its own searches wait; other tenants' still run.",
    ),
    Alert(
        # since session s48 (round 3): the refusals (igw_body_budget_refusals_total) were on /metrics only
        "IgwGlobalBodyBudgetRefusals",
        f"sum by (instance) (increase(igw_body_budget_refusals_total[5m]) {_ROUTER}) > 0",
        "0m",
        "warning",
        "Router {{ $labels.instance }} refused requests with 503 server_busy: the request bodies it "
        "held reached spec.serverLimits.maxBodyBytesHeld.",
        "The router holds each body until its request is answered (streams until they end), so the "
        "budget bounds concurrent requests x prompt size. Raise spec.serverLimits.maxBodyBytesHeld "
        "together with the task's memory (resident memory grows about twice the counted bytes), or "
        "add replicas.",
    ),
    Alert(
        # since session s48 (round 3): held bytes near the budget before the refusals start
        "IgwGlobalBodyBytesHeldNearLimit",
        f"igw_body_bytes_held / igw_body_bytes_held_limit > 0.8\n{_ROUTER}",
        "10m",
        "warning",
        "Router {{ $labels.instance }} has held over 80% of its request-body budget for 10 minutes.",
        "Concurrent requests (long streams with large prompts) keep the router near "
        "spec.serverLimits.maxBodyBytesHeld: a little more and requests are refused 503 server_busy "
        "(IgwGlobalBodyBudgetRefusals). Size the field and the task's memory (docs/runbook.md).",
    ),
    Alert(
        # since session s50 (the router's hot reload): tier 1's IgwConfigReloadRejected, for a router
        "IgwGlobalConfigReloadRejected",
        "igw_global_config_last_reload_successful == 0",
        "10m",
        "warning",
        "Router {{ $labels.instance }} serves an older configuration than its file: the last change "
        "was rejected.",
        "The running configuration stays; the router's /readyz names the reason (config_reload_error), "
        "as does its log (configuration reload rejected).",
    ),
    Alert(
        # since session s46: before, tier 1's IgwJwksRefreshFailing fired for a router it scraped too
        "IgwGlobalJwksRefreshFailing",
        f'sum by (instance) (increase(igw_jwks_fetch_total{{result="failure"}}[15m]) {_ROUTER}) > 0\n'
        f'unless sum by (instance) (increase(igw_jwks_fetch_total{{result="success"}}[15m]) {_ROUTER}) > 0',
        "5m",
        "warning",
        "Router {{ $labels.instance }} cannot refresh the JWKS of its token issuer.",
        "Its cached keys keep verifying until they are too stale; then the router refuses every request "
        "with 401 (spec.auth), whatever the clusters behind it could serve.",
    ),
    Alert(
        # since session s46: before, tier 1's IgwJwksNotReady fired for a router it scraped too
        "IgwGlobalJwksNotReady",
        f"igw_jwks_ready == 0 and on(instance) igw_auth_enabled == 1\n{_ROUTER}",
        "5m",
        "critical",
        "Router {{ $labels.instance }} has authentication on but no usable JWKS keys.",
        "It refuses every request with 401 and its /readyz answers 503 (the load balancer takes it out) "
        "until the issuer's JWKS can be fetched; replicas with keys keep serving.",
    ),
    Alert(
        # since session s46: before, tier 1's IgwLogLinesDropped fired for a router it scraped too
        "IgwGlobalLogLinesDropped",
        f"increase(igw_log_lines_dropped_total[10m]) > 0\n{_ROUTER}",
        "1m",
        "warning",
        "Router {{ $labels.instance }} dropped {{ $labels.stream }} log lines in the last 10 minutes.",
        "The stream took no lines (a stalled log driver, a full or closed pipe) while 40 MiB of lines "
        "waited: access, EMF or diagnostic lines are lost, so the CloudWatch metrics and log queries "
        "built on them undercount. The router keeps serving.",
    ),
    Alert(
        # since session s49: routers export igw_tenant_labels_folded_total too (their
        # igw_global_ratelimit_hits_total tenant label), read by tier 1's alert only, which leaves
        # the routers' targets out
        "IgwGlobalTenantLabelsFolding",
        f"max by (instance) (increase(igw_tenant_labels_folded_total[1h]) {_ROUTER})\n"
        f"> {TENANT_FOLDS_PER_HOUR}",
        "30m",
        "warning",
        "Router {{ $labels.instance }} counted {{ $value | humanize }} new tenants as tenant=other in the "
        "last hour: its tenant label budget is taken.",
        "New tenants keep arriving after the first rateLimits.metrics.maxTenantLabels were given a "
        "label, so their rate-limit refusals (igw_global_ratelimit_hits_total) are summed as "
        "tenant=other. Raise maxTenantLabels if they are real callers; a caller minting tenant ids "
        "is abuse.",
    ),
)
"""Every alert of the global router's rule file."""


def runbook_url(alert: Alert) -> str:
    """The repository path and anchor of ``alert``'s runbook entry (a Markdown heading's anchor is
    its text in lower case)."""
    return f"{RUNBOOK_DOC}#{alert.name.lower()}"


def rule_groups(alerts: tuple[Alert, ...] = ALERTS, group: str = "igw-gateway") -> dict[str, object]:
    """The ``spec`` of the PrometheusRule (or a Prometheus rule file): one group with ``alerts``."""
    rules = [
        {
            "alert": a.name,
            "expr": a.expr,
            "for": a.for_,
            "labels": {"severity": a.severity},
            "annotations": {
                "summary": a.summary,
                "description": a.description,
                "runbook_url": runbook_url(a),
            },
        }
        for a in alerts
    ]
    return {"groups": [{"name": group, "rules": rules}]}


def render_alert_rules(_root: Path) -> str:
    """The file the chart embeds (``igw generate`` entry)."""
    header = "# Generated by `igw generate` from igw/addon/alert_rules.py; do not edit.\n"
    return header + yaml.safe_dump(rule_groups(), sort_keys=False, width=200)


def render_global_alert_rules(_root: Path) -> str:
    """The global router's rule file (``igw generate`` entry)."""
    header = (
        "# Generated by `igw generate` from igw/addon/alert_rules.py (GLOBAL_ALERTS); do not edit.\n"
        "# Prometheus rules for `igw global serve` (tier 2): load with rule_files, or as an Amazon\n"
        "# Managed Service for Prometheus rule groups namespace. docs/observability.md.\n"
    )
    return header + yaml.safe_dump(
        rule_groups(GLOBAL_ALERTS, "igw-global-router"), sort_keys=False, width=200
    )
