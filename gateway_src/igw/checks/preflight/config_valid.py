"""IGW-PF009: every ``InferenceGatewayConfig`` passes the same validation ``igw validate`` applies.

Live objects carry server-populated fields (``status``, ``metadata.uid``…); those are dropped
before validation so that only what the user wrote is judged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Manifest, need
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.config.validate import validate_document

USER_METADATA = ("name", "namespace", "labels", "annotations", "generateName")

META = CheckMeta(
    id="IGW-PF009",
    title="InferenceGatewayConfig valid",
    command=Command.PREFLIGHT,
    category="configuration",
    severity=Severity.HIGH,
    description="Each config must satisfy the CRD schema and its admission rules.",
    remediation="Run igw validate on the file and fix every problem it lists.",
)


def user_document(obj: Manifest) -> dict[str, Any]:
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    doc = {k: v for k, v in obj.items() if k != "status"}
    doc["metadata"] = {k: v for k, v in metadata.items() if k in USER_METADATA}
    return doc


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    configs = need(ctx.inventory.kube.of("InferenceGatewayConfig"))
    if not configs:
        yield r.fail(
            "InferenceGatewayConfig",
            "no InferenceGatewayConfig found",
            severity=Severity.MEDIUM,
            remediation="Create one (see examples/) in the namespace of the model deployments.",
        )
        return
    for config in configs:
        problems = validate_document(user_document(config))
        if problems:
            shown = "; ".join(str(p) for p in problems[:5])
            more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
            yield r.fail(ref(config), f"{len(problems)} problem(s): {shown}{more}")
        else:
            yield r.passed(ref(config), "valid")


CHECK = FunctionCheck(META, _run)
