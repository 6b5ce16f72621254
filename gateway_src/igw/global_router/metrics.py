"""Fleet metrics of the global router (Prometheus; ``/metrics`` of ``igw global serve``).

Label values are bounded: clusters, regions and models come from the configuration; reasons and
causes are fixed sets; tenants come from verified tokens (or the anonymous tenant).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from igw.gateway.log_metrics import LogDropStats
from igw.gateway.metrics_render import MetricsPage
from igw.gateway.telemetry import LATENCY_BUCKETS, TTFT_BUCKETS, searches_refused_counter
from igw.security.metrics import HOLDS_REFUSED_HELP

PREFIX: Final = "igw_global"


class FleetMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        r.register(LogDropStats())  # igw_log_lines_dropped_total{stream}: as at tier 1
        self.decisions = Counter(
            f"{PREFIX}_routing_decisions",
            "Requests sent to a cluster, by cluster, its region and why it was chosen "
            "(same-region, cross-region, cost-within-slo, over-slo, saturated, slow-start).",
            ["cluster", "region", "reason"],
            registry=r,
        )
        self.retries = Counter(
            f"{PREFIX}_upstream_retries",
            "Attempts that moved on to the next cluster, by the cluster left and the cause "
            "(connect, 429, 503, 5xx; response-search: a cluster asked for a stored response it does "
            "not have; search-timeout: a cluster a retrieval's search stopped waiting for).",
            ["cluster", "cause"],
            registry=r,
        )
        self.failovers = Counter(
            f"{PREFIX}_failover_events",
            "Clusters drained, by reason (stale, gone, draining, malformed, failures).",
            ["cluster", "reason"],
            registry=r,
        )
        self.failover_refused = Counter(
            f"{PREFIX}_failover_refused",
            "Clusters that failed failover.failureThreshold requests in a row but were not drained: "
            "failover.maxEjectionPercent of the clusters were out for failures already, or it was the "
            "last available cluster serving one of its models.",
            ["cluster"],
            registry=r,
        )
        self.request_faults = Counter(
            f"{PREFIX}_request_faults",
            "Request bodies that failed (a 500) at two clusters within a minute: taken for the "
            "request's fault, their failures counted at no cluster.",
            registry=r,
        )
        self.recoveries = Counter(
            f"{PREFIX}_recovery_events",
            "Drained clusters that became available again (for every model, or for the one model "
            "they were drained for).",
            ["cluster"],
            registry=r,
        )
        self.large_error_answers = Counter(
            f"{PREFIX}_upstream_large_error_answers",
            "Clusters' JSON error answers over 1 MiB (ERROR_ANSWER_BUFFER_BYTES), relayed as they "
            "arrived and so not retried, by cluster, however their relay ended (their WARNING is "
            "logged at most once a minute).",
            ["cluster"],
            registry=r,
        )
        self.upstream_redirects = Counter(
            f"{PREFIX}_upstream_redirects",
            "Clusters' redirects (3xx but 304), refused with a 502 upstream_error (retried at the next "
            "cluster), Location not relayed, by cluster.",
            ["cluster"],
            registry=r,
        )
        self.upstream_non_answers = Counter(
            f"{PREFIX}_upstream_non_answers",
            "Clusters' answers to an inference POST that cannot be one, refused with a 502 "
            "upstream_error (tried at the next cluster), nothing relayed, by cluster and reason: "
            "bodiless_status (204, 205, 304), empty_body, not_json_object (a whole success).",
            ["cluster", "reason"],
            registry=r,
        )
        self.upstream_auth_refused = Counter(
            f"{PREFIX}_upstream_auth_refused",
            "Clusters' 401 and 407 answers to callers this router verified itself and whose token it "
            "does not forward (spec.authorization.forwardAuthorization false): the cluster's gateway "
            "authenticates callers the router cannot make it see; refused with a 502 "
            "upstream_auth_misconfigured, tried at the next cluster, by cluster (the WARNING "
            "igw.global_router.upstream_auth is logged once a minute per cluster).",
            ["cluster"],
            registry=r,
        )
        self.answer_usage_unread = Counter(
            f"{PREFIX}_answer_usage_unread",
            "Clusters' answers compressed though the router asked for none whose usage it could not "
            "read (so the token limits did not charge it), by cluster and reason: unknown_coding, "
            "decode_error, truncated, bomb_bound (refused with 502, or relayed uncharged), coded_stream "
            "(a compressed event stream, refused); each attempt's, however its relay ended.",
            ["cluster", "reason"],
            registry=r,
        )
        self.usage_misnamed = Counter(
            f"{PREFIX}_usage_misnamed",
            "Answers to a poll of a stored response (a retrieval below 400 showing usage) that named "
            "another response's id, or none: not settled by them, the response's hold kept; by "
            "cluster (the WARNING igw.global_router.misnamed_usage is logged once a minute per cluster).",
            ["cluster"],
            registry=r,
        )
        self.searches_refused = searches_refused_counter(
            f"{PREFIX}_response_searches_refused",
            "Requests about a stored response this replica does not know answered without asking any "
            "cluster, by reason: unfound (404: the caller's search for the id found it nowhere moments "
            "ago), busy (429: the replica's searches all in flight), scope_busy (429: the caller "
            "scope's share of them in flight).",
            r,
        )
        self.ratelimit_holds_refused = Counter(
            f"{PREFIX}_ratelimit_holds_refused", HOLDS_REFUSED_HELP, registry=r
        )
        """Handed to the router's request guard (``SecurityMetrics(holds_refused=...)``)."""
        self.available = Gauge(
            f"{PREFIX}_cluster_available",
            "1 while the cluster receives traffic.",
            ["cluster", "region"],
            registry=r,
        )
        self.ramp = Gauge(
            f"{PREFIX}_cluster_ramp",
            "Share of full traffic a cluster may take (slow start after a return; 0 drained).",
            ["cluster"],
            registry=r,
        )
        self.heartbeat_age = Gauge(
            f"{PREFIX}_heartbeat_age_seconds",
            "Seconds since this router saw a new heartbeat from the cluster (since it started, for a "
            "cluster it has seen none from).",
            ["cluster"],
            registry=r,
        )
        self.heartbeat_unread = Gauge(
            f"{PREFIX}_heartbeat_unread",
            "1 while the cluster's heartbeat key is not read (and the cluster drained as malformed): "
            "over a key's bounds, of another type, or the largest key of a read over its budget.",
            ["cluster"],
            registry=r,
        )
        self.heartbeat_source_up = Gauge(
            f"{PREFIX}_heartbeat_source_up", "1 while the heartbeat store (Redis) answers.", registry=r
        )
        self.heartbeat_source_outages = Counter(
            f"{PREFIX}_heartbeat_source_outages",
            "Outages of the heartbeat store (a failed read after a good one, or the first read), by "
            "reason (unreachable; refused: the router's credentials): counts the flaps between scrapes "
            "that igw_global_heartbeat_source_up cannot show.",
            ["reason"],
            registry=r,
        )
        self.ratelimit_hits = Counter(
            f"{PREFIX}_ratelimit_hits",
            "Requests refused by a global rate limit, by tenant, model and limit (requests, tokens).",
            ["tenant", "model", "limit"],
            registry=r,
        )
        self.config_reloads = Counter(
            f"{PREFIX}_config_reloads",
            "Changes of the configuration file seen by the router's hot reload, by result (applied; "
            "rejected: the running configuration stays, the reason logged).",
            ["result"],
            registry=r,
        )
        for result in ("applied", "rejected"):
            self.config_reloads.labels(result)
        self.config_reload_ok = Gauge(
            f"{PREFIX}_config_last_reload_successful",
            "1 while the router serves its configuration file as it is (unchanged since start, or its "
            "last change applied); 0 from a rejected reload until a reload is applied.",
            registry=r,
        )
        """Tier 1's ``igw_config_last_reload_successful``: what the counter cannot say, whether the
        running configuration is the file's *now* (an alert on the counter's increase forgets a
        rejection once its window passes)."""
        self.config_reload_ok.set(1)
        self.requests = Counter(
            f"{PREFIX}_requests",
            "Requests answered, by model and HTTP status.",
            ["model", "code"],
            registry=r,
        )
        self.duration = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "Time from request received to response complete, by serving region and locality "
            "(same-region, cross-region: the added latency of a regional failover shows here).",
            ["model", "region", "locality"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            f"{PREFIX}_time_to_first_token_seconds",
            "Time from request received to the first streamed bytes, by serving region and locality.",
            ["model", "region", "locality"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.page = MetricsPage(r)
        """``/metrics``, formatted on a worker thread (:mod:`igw.gateway.metrics_render`): the
        duration and TTFT histograms are one series per model, region and locality, so at a fleet of
        100 clusters in 10 regions serving 100 models the page is megabytes and ``generate_latest``
        on the event loop stalled every routed request and stream for hundreds of milliseconds
        (until session s42)."""
