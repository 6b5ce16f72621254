"""Grafana dashboards for the gateway, declared as tables and built with grafana-foundation-sdk.

:data:`DASHBOARDS` is the one source: ``igw generate`` writes each to
``addon/chart/inference-gateway/files/dashboards/<uid>.json``, the chart ships them as ConfigMaps
with the Grafana sidecar's label when ``grafanaDashboards.enabled``, and a test checks that every
metric a panel (or a template variable) reads is on a running gateway's ``/metrics`` page.

Dashboards: *overview* (traffic, errors, latency quantiles, tokens, shedding, 429 by flow-control
band, scheduler cost, security), *pool detail* (one pool, chosen by the ``pool`` variable: ready
pods, averages, per-pod KV/queue heat maps, pick shares, scrape health), *security* (401 by reason,
403 and 429 by tenant, 429 by band and tenant, rate-limit backend, JWKS fetches and readiness).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, QueryVariable, Row
from grafana_foundation_sdk.builders.heatmap import Panel as HeatmapPanel
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.stat import Panel as StatPanel
from grafana_foundation_sdk.builders.timeseries import Panel as TimeseriesPanel
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh

DASHBOARDS_DIR: Final = "addon/chart/inference-gateway/files/dashboards"
DATASOURCE: Final = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE: Final = "[$__rate_interval]"


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    kind: str
    """``timeseries``, ``stat`` or ``heatmap`` (one series per pod, drawn as rows)."""
    unit: str
    queries: tuple[Query, ...]
    width: int = 12


@dataclass(frozen=True, slots=True)
class Board:
    uid: str
    title: str
    rows: tuple[tuple[str, tuple[Panel, ...]], ...]
    pool_variable: bool = False
    """Adds the ``pool`` variable (values of :data:`POOL_VARIABLE_METRIC`'s ``name`` label)."""


POOL_VARIABLE_METRIC: Final = "inference_pool_ready_pods"


def _quantiles(histogram: str, by: str = "") -> tuple[Query, ...]:
    group = f"le{', ' + by if by else ''}"
    legend = f"{{{{{by}}}}} " if by else ""
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by ({group}) (rate({histogram}_bucket{RATE})))",
            f"{legend}p{round(q * 100)}",
        )
        for q in (0.5, 0.9, 0.99)
    )


def _rate(metric: str, by: str, selector: str = "") -> Query:
    return Query(f"sum by ({by}) (rate({metric}{selector}{RATE}))", f"{{{{{by}}}}}")


POOL = '{scheduler="$pool"}'

OVERVIEW: Final = Board(
    uid="igw-overview",
    title="Inference gateway / Overview",
    rows=(
        (
            "Traffic",
            (
                Panel(
                    "Requests per second by model",
                    "timeseries",
                    "reqps",
                    (_rate("igw_requests_total", "model"),),
                ),
                Panel(
                    "Error ratio (5xx)",
                    "timeseries",
                    "percentunit",
                    (
                        Query(
                            f'sum(rate(igw_requests_total{{code=~"5.."}}{RATE}))\n'
                            f"/ sum(rate(igw_requests_total{RATE}))",
                            "5xx",
                        ),
                    ),
                ),
                Panel("Responses by status", "timeseries", "reqps", (_rate("igw_requests_total", "code"),)),
                Panel("Tokens per second", "timeseries", "short", (_rate("igw_tokens_total", "direction"),)),
            ),
        ),
        (
            "Latency",
            (
                Panel("Request duration", "timeseries", "s", _quantiles("igw_request_duration_seconds")),
                Panel(
                    "Time to first token", "timeseries", "s", _quantiles("igw_time_to_first_token_seconds")
                ),
                Panel(
                    "Inter-token latency", "timeseries", "s", _quantiles("igw_inter_token_latency_seconds")
                ),
                Panel(
                    "Scheduler decision time", "timeseries", "s", _quantiles("igw_scheduler_decision_seconds")
                ),
            ),
        ),
        (
            "Shedding and resilience",
            (
                Panel(
                    "Rejections by reason", "timeseries", "reqps", (_rate("igw_rejections_total", "reason"),)
                ),
                Panel(
                    "Upstream retries and broken streams",
                    "timeseries",
                    "reqps",
                    (
                        Query(
                            f"sum by (cause) (rate(igw_upstream_retries_total{RATE}))", "retried: {{cause}}"
                        ),
                        Query(f"sum(rate(igw_upstream_retry_overflow_total{RATE}))", "over the retry budget"),
                        Query(f"sum(rate(igw_partial_stream_errors_total{RATE}))", "broken streams"),
                        Query(f"sum(rate(igw_client_disconnects_total{RATE}))", "client disconnects"),
                    ),
                ),
            ),
        ),
        (
            "429 by band (flow control)",
            (
                Panel(
                    "429 by band",
                    "timeseries",
                    "reqps",
                    (
                        Query(
                            f"sum by (priority, reason) (rate(igw_flow_rejections_total{RATE}))",
                            "band {{priority}} {{reason}}",
                        ),
                    ),
                ),
                Panel(
                    "Queued per band",
                    "timeseries",
                    "short",
                    (Query("sum by (priority) (igw_flow_queue_depth)", "band {{priority}}"),),
                ),
            ),
        ),
        (
            "Security",
            (
                Panel("401 by reason", "timeseries", "reqps", (_rate("igw_auth_denied_total", "reason"),)),
                Panel(
                    "Tenant requests by outcome (403, 429)",
                    "timeseries",
                    "reqps",
                    (
                        Query(
                            f"sum by (tenant, outcome) (rate(igw_tenant_requests_total{RATE}))",
                            "{{tenant}} {{outcome}}",
                        ),
                    ),
                ),
                Panel("JWKS keys ready", "stat", "short", (Query("min(igw_jwks_ready)", "ready"),)),
                Panel("JWKS age", "stat", "s", (Query("max(igw_jwks_age_seconds)", "age"),)),
            ),
        ),
    ),
)

POOL_DETAIL: Final = Board(
    uid="igw-pool",
    title="Inference gateway / Pool detail",
    pool_variable=True,
    rows=(
        (
            "Pool",
            (
                Panel(
                    "Ready pods",
                    "stat",
                    "short",
                    (Query('max(inference_pool_ready_pods{name="$pool"})', "ready"),),
                    width=8,
                ),
                Panel(
                    "Average KV-cache use",
                    "stat",
                    "percentunit",
                    (Query('avg(inference_pool_average_kv_cache_utilization{name="$pool"})', "kv"),),
                    width=8,
                ),
                Panel(
                    "Average queue size",
                    "stat",
                    "short",
                    (Query('avg(inference_pool_average_queue_size{name="$pool"})', "queue"),),
                    width=8,
                ),
            ),
        ),
        (
            "Pods",
            (
                Panel(
                    "KV-cache use per pod",
                    "heatmap",
                    "percentunit",
                    (Query(f"max by (endpoint) (igw_endpoint_kv_cache_usage{POOL})", "{{endpoint}}"),),
                ),
                Panel(
                    "Queue depth per pod",
                    "heatmap",
                    "short",
                    (Query(f"max by (endpoint) (igw_endpoint_queue_depth{POOL})", "{{endpoint}}"),),
                ),
                Panel(
                    "Pick share per pod",
                    "timeseries",
                    "percentunit",
                    (
                        Query(
                            f"sum by (endpoint) (rate(igw_endpoint_picks_total{POOL}{RATE}))\n"
                            "/ ignoring(endpoint) group_left\n"
                            f"sum(rate(igw_endpoint_picks_total{POOL}{RATE}))",
                            "{{endpoint}}",
                        ),
                    ),
                ),
                Panel(
                    "Running and in-flight per pod",
                    "timeseries",
                    "short",
                    (
                        Query(
                            f"max by (endpoint) (igw_endpoint_running_requests{POOL})", "{{endpoint}} running"
                        ),
                        # Summed: every gateway replica and every worker of one counts only its own.
                        Query(
                            f"sum by (endpoint) (igw_endpoint_inflight_requests{POOL})",
                            "{{endpoint}} in flight",
                        ),
                    ),
                ),
            ),
        ),
        (
            "Scrape health",
            (
                Panel(
                    "Scrape age per pod",
                    "timeseries",
                    "s",
                    (Query(f"max by (endpoint) (igw_endpoint_scrape_age_seconds{POOL})", "{{endpoint}}"),),
                ),
                Panel(
                    "Failing, frozen or missing a signal",
                    "timeseries",
                    "short",
                    (
                        Query(
                            f"max by (endpoint) (igw_endpoint_scrape_failing{POOL})", "{{endpoint}} failing"
                        ),
                        Query(
                            f"max by (endpoint) (igw_endpoint_metrics_frozen{POOL})", "{{endpoint}} frozen"
                        ),
                        Query(
                            f"max by (endpoint, signal) (igw_endpoint_signal_missing{POOL})",
                            "{{endpoint}} missing {{signal}}",
                        ),
                    ),
                ),
                Panel(
                    # Outlier detection: a pod failing the requests sent to it, however its /metrics
                    # page looks. Every worker of a group holds the group's ejections: max over them.
                    "Ejected for failing requests (seconds left)",
                    "timeseries",
                    "s",
                    (Query(f"max by (endpoint) (igw_endpoint_ejected_seconds{POOL})", "{{endpoint}}"),),
                    width=24,
                ),
                Panel(
                    # Each worker of a --workers group routes on its own copy of worker 0's scrapes:
                    # a worker above the others has a copy that fell behind (IgwWorkerScrapeCopyBehind).
                    "Endpoints routed around as stale, per gateway worker",
                    "timeseries",
                    "short",
                    (
                        Query(
                            f"max by (instance, worker) (igw_pool_stale_endpoints{POOL})",
                            "{{instance}} worker {{worker}}",
                        ),
                    ),
                    width=24,
                ),
                Panel(
                    "Time to first token by model",
                    "timeseries",
                    "s",
                    _quantiles("inference_objective_request_ttft_seconds", by="model_name"),
                    width=24,
                ),
            ),
        ),
    ),
)

TENANT_429: Final = 'outcome=~"limited_.*"'
"""``igw_tenant_requests_total`` outcomes answered 429 (``limited_requests``, ``limited_tokens``)."""

SECURITY: Final = Board(
    uid="igw-security",
    title="Inference gateway / Security",
    rows=(
        (
            "Authentication (401)",
            (
                Panel("401 by reason", "timeseries", "reqps", (_rate("igw_auth_denied_total", "reason"),)),
                Panel(
                    "Verified and refused tokens",
                    "timeseries",
                    "reqps",
                    (
                        Query(f"sum(rate(igw_auth_allowed_total{RATE}))", "verified"),
                        Query(f"sum(rate(igw_auth_denied_total{RATE}))", "refused (401)"),
                    ),
                ),
                Panel(
                    "Authentication on",
                    "stat",
                    "short",
                    (Query("min(igw_auth_enabled)", "enabled"),),
                    width=8,
                ),
                Panel(
                    "Token cache",
                    "timeseries",
                    "reqps",
                    (_rate("igw_auth_token_cache_total", "result"),),
                    width=16,
                ),
            ),
        ),
        (
            "Authorization (403) and rate limits (429) by tenant",
            (
                Panel(
                    "403 by tenant",
                    "timeseries",
                    "reqps",
                    (_rate("igw_tenant_requests_total", "tenant", '{outcome="forbidden"}'),),
                ),
                Panel(
                    "429 rate-limit hits by tenant and limit",
                    "timeseries",
                    "reqps",
                    (
                        Query(
                            "sum by (tenant, outcome) "
                            f"(rate(igw_tenant_requests_total{{{TENANT_429}}}{RATE}))",
                            "{{tenant}} {{outcome}}",
                        ),
                    ),
                ),
                Panel(
                    "429 by band and tenant (flow control)",
                    "timeseries",
                    "reqps",
                    (
                        Query(
                            f"sum by (priority, tenant) (rate(igw_flow_rejections_total{RATE}))",
                            "band {{priority}} {{tenant}}",
                        ),
                    ),
                ),
                Panel(
                    "Rate-limit backend",
                    "timeseries",
                    "short",
                    (
                        Query("min by (backend) (igw_ratelimit_backend_up)", "{{backend}} up"),
                        Query(
                            f"sum by (backend) (rate(igw_ratelimit_backend_errors_total{RATE}))",
                            "{{backend}} errors/s",
                        ),
                    ),
                ),
            ),
        ),
        (
            "JWKS",
            (
                Panel(
                    "JWKS fetches by result (failure: a refresh failed)",
                    "timeseries",
                    "reqps",
                    (_rate("igw_jwks_fetch_total", "result"),),
                ),
                Panel("JWKS keys ready", "stat", "short", (Query("min(igw_jwks_ready)", "ready"),), width=4),
                Panel("Usable keys", "stat", "short", (Query("min(igw_jwks_keys)", "keys"),), width=4),
                Panel("JWKS age", "stat", "s", (Query("max(igw_jwks_age_seconds)", "age"),), width=4),
            ),
        ),
    ),
)

DASHBOARDS: Final = (OVERVIEW, POOL_DETAIL, SECURITY)
"""Every dashboard the chart ships."""


def _panel(panel: Panel, panel_id: int) -> TimeseriesPanel | StatPanel | HeatmapPanel:
    builder: TimeseriesPanel | StatPanel | HeatmapPanel
    if panel.kind == "stat":
        builder = StatPanel()
    elif panel.kind == "heatmap":
        builder = HeatmapPanel()
    else:
        builder = TimeseriesPanel()
    builder = builder.id(panel_id).title(panel.title).unit(panel.unit).span(panel.width).height(8)
    builder = builder.datasource(DATASOURCE)
    for index, query in enumerate(panel.queries):
        target = Dataquery().ref_id(chr(ord("A") + index)).expr(query.expr).legend_format(query.legend)
        builder = builder.with_target(target)
    return builder


def build(board: Board) -> Dashboard:
    """The dashboard builder for one table entry."""
    dashboard = (
        Dashboard(board.title)
        .uid(board.uid)
        .tags(["igw", "inference-gateway"])
        .refresh("30s")
        .time("now-1h", "now")
        .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    )
    if board.pool_variable:
        dashboard = dashboard.with_variable(
            QueryVariable("pool")
            .label("Pool")
            .datasource(DATASOURCE)
            .query(f"label_values({POOL_VARIABLE_METRIC}, name)")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        )
    panel_id = 0
    for title, panels in board.rows:
        panel_id += 1
        dashboard = dashboard.with_row(Row(title).id(panel_id))
        for panel in panels:
            panel_id += 1
            dashboard = dashboard.with_panel(_panel(panel, panel_id))
    return dashboard


def render_dashboard(board: Board) -> str:
    """The dashboard's JSON model, as Grafana imports it."""
    return JSONEncoder(sort_keys=True, indent=2).encode(build(board).build()) + "\n"


def render_overview(_root: Path) -> str:
    """``igw generate`` entry for :data:`OVERVIEW`."""
    return render_dashboard(OVERVIEW)


def render_pool_detail(_root: Path) -> str:
    """``igw generate`` entry for :data:`POOL_DETAIL`."""
    return render_dashboard(POOL_DETAIL)


def render_security(_root: Path) -> str:
    """``igw generate`` entry for :data:`SECURITY`."""
    return render_dashboard(SECURITY)
