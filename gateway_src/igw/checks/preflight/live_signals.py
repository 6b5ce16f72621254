"""IGW-PF014 (``--probe``): each Ready model-server pod's ``/metrics`` carries the signals the gateway needs.

Static checks infer metric names from versions; this one asks the pods. Only live scans can probe;
without ``--probe`` the check is skipped, saying how to enable it.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Missing
from igw.checks.k8s import is_pod_ready, ref
from igw.checks.metrics_probe import evaluate, fetch_pages, metric_names
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.model_servers import ServerGroup, server_groups
from igw.engines import engine as lookup_engine
from igw.gateway.endpoints import endpoint_key

META = CheckMeta(
    id="IGW-PF014",
    title="Live /metrics pages expose queue, running and KV-cache signals",
    command=Command.PREFLIGHT,
    category="model-servers",
    severity=Severity.HIGH,
    description="Fetches http://POD_IP:targetPort/metrics from every Ready pod a scheduler selects and "
    "confirms the engine's metric names are present.",
    remediation="Upgrade vLLM to >= 0.9.2 (vllm:kv_cache_usage_perc), start SGLang with --enable-metrics, "
    "and "
    "do not disable stats logging.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    if ctx.inventory.kube.static:
        yield r.skip("-", Missing("live probing needs a live cluster source"))
        return
    if not ctx.options.probe:
        yield r.skip("-", Missing("not requested: pass --probe to fetch each pod's /metrics"))
        return
    for group in server_groups(ctx):
        if not isinstance(group, ServerGroup):
            continue
        try:
            engine = lookup_engine(group.scheduler.engine_type)
        except ValueError as exc:
            yield r.fail(group.resource, f"engineType: {exc}")
            continue
        targets = []
        for pod in group.pods:
            ip = (pod.get("status") or {}).get("podIP")
            if ip and is_pod_ready(pod):
                targets.append(
                    (pod, f"http://{endpoint_key(ip, group.scheduler.target_port)}{engine.metrics_path}")
                )
        if not targets:
            yield r.skip(group.resource, Missing("no Ready pod with an IP to probe"))
            continue
        fetched = fetch_pages([url for _, url in targets], timeout_s=ctx.options.probe_timeout_s)
        problems: list[str] = []
        warnings: list[str] = []
        for (pod, url), page in zip(targets, fetched, strict=True):
            if page.page is None:
                problems.append(f"{ref(pod)}: {url} unreachable ({page.error})")
                continue
            report = evaluate(engine.name, metric_names(page.page))
            if report.missing:
                problems.append(f"{ref(pod)}: missing {', '.join(report.missing)}")
            if report.fallbacks:
                warnings.append(f"{ref(pod)}: {', '.join(report.fallbacks)}")
        if problems:
            more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
            yield r.fail(
                group.resource,
                f"{len(problems)}/{len(targets)} pod(s) lack signals: {' | '.join(problems[:3])}{more}",
            )
        elif warnings:
            yield r.warn(
                group.resource,
                f"deprecated metric names in use: {' | '.join(warnings[:3])}",
                severity=Severity.MEDIUM,
            )
        else:
            yield r.passed(group.resource, f"{len(targets)} pod(s) expose every signal")


CHECK = FunctionCheck(META, _run)
