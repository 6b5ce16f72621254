"""IGW-PF009: every ``InferenceGatewayConfig`` passes the same validation ``igw validate`` applies.

Live objects carry server-populated fields (``status``, ``metadata.uid``…); those are dropped
before validation so that only what the user wrote is judged. In CDK output a value CloudFormation
fills in at deploy time is a placeholder (``${CertificateBDDE2430}``, :mod:`igw.checks.sources.cdk_out`):
a problem with such a value is not the user's (it is said, not failed), so the project's own app's
``spec.tls.acmArn`` (a ``Ref`` to the certificate it creates) no longer fails the check.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Manifest, need
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.sources.cdk_out import SOURCE_PREFIX
from igw.config.errors import Problem
from igw.config.validate import validate_document

USER_METADATA = ("name", "namespace", "labels", "annotations", "generateName")
_DEPLOY_TIME = re.compile(r"\$\{[^{}]+\}")
"""A whole value rendered from a CloudFormation intrinsic (``Ref``, ``Fn::GetAtt``...)."""
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")

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


def _value_at(doc: Any, path: str) -> Any:
    """The value at a problem's path (``spec.schedulers[1].modelName``), ``None`` when there is none."""
    for name, index in _PATH_PART.findall(path):
        if name and isinstance(doc, Mapping):
            doc = doc.get(name)
        elif index and isinstance(doc, list) and int(index) < len(doc):
            doc = doc[int(index)]
        else:
            return None
    return doc


def _deploy_time(doc: Any, problem: Problem, *, cdk: bool) -> bool:
    """Whether ``problem`` is about a placeholder CloudFormation resolves at deploy time (CDK output
    only: in a manifest or a live object ``${X}`` is an unrendered template, a real problem)."""
    if not cdk:
        return False
    value = _value_at(doc, problem.path)
    return isinstance(value, str) and _DEPLOY_TIME.fullmatch(value) is not None


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
    cdk = ctx.inventory.source.startswith(SOURCE_PREFIX)
    for config in configs:
        doc = user_document(config)
        found = validate_document(doc)
        problems = [p for p in found if not _deploy_time(doc, p, cdk=cdk)]
        unresolved = sorted({p.path for p in found if _deploy_time(doc, p, cdk=cdk)})
        later = f"; set at deploy time, not checked: {', '.join(unresolved)}" if unresolved else ""
        if problems:
            shown = "; ".join(str(p) for p in problems[:5])
            more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
            yield r.fail(ref(config), f"{len(problems)} problem(s): {shown}{more}{later}")
        else:
            yield r.passed(ref(config), f"valid{later}")


CHECK = FunctionCheck(META, _run)
