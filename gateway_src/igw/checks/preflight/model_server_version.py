"""IGW-PF011: model-server engine versions and flags meet the gateway's requirements.

Versions come from the image tag; flags from the container's command, args and env, evaluated by
``igw.config.versions.check_model_server`` against the engine catalogue (``igw.engines``)
(vLLM >= 0.9.2; SGLang >= 0.3.5.post1 with --enable-metrics). A version that cannot be read is a
warning that says so - never a pass.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.model_servers import ServerGroup, server_groups
from igw.config.versions import Verdict, check_model_server
from igw.engines import GENERIC

META = CheckMeta(
    id="IGW-PF011",
    title="Model-server engine version and flags supported",
    command=Command.PREFLIGHT,
    category="model-servers",
    severity=Severity.HIGH,
    description="vLLM older than 0.9.2 hides the KV-cache signal under an old name; SGLang older than "
    "0.3.5.post1 or without --enable-metrics exposes no metrics at all.",
    remediation="Use vLLM >= 0.9.2, or SGLang >= 0.3.5.post1 started with --enable-metrics; pin images by a "
    "version tag so the version can be checked.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for group in server_groups(ctx):
        if not isinstance(group, ServerGroup):
            continue
        if group.scheduler.engine_type == GENERIC:
            yield r.passed(group.resource, f"generic engine (metric specs from the config): {group.image}")
            continue
        try:
            check = check_model_server(
                engine=group.scheduler.engine_type, image=group.image, args=group.argv, env=group.env
            )
        except ValueError as exc:
            yield r.fail(group.resource, str(exc))
            continue
        failed = [x.message for x in check.results if x.verdict is Verdict.FAIL]
        unknown = [x.message for x in check.results if x.verdict is Verdict.UNKNOWN]
        if failed:
            yield r.fail(group.resource, f"{group.image}: {'; '.join(failed)}")
        elif unknown:
            yield r.warn(
                group.resource,
                f"{group.image}: version cannot be determined: {unknown[0]}",
                severity=Severity.MEDIUM,
            )
        else:
            yield r.passed(group.resource, f"{check.engine} {check.version} ({group.image})")


CHECK = FunctionCheck(META, _run)
