"""IGW-PF006: the ``InferenceGatewayConfig`` CRD is installed and serves a version we understand."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import need
from igw.checks.k8s import name_of, spec
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.config.model import API_GROUP, API_VERSION

CRD_NAME = f"inferencegatewayconfigs.{API_GROUP}"
KNOWN_VERSIONS = (API_VERSION,)

META = CheckMeta(
    id="IGW-PF006",
    title="InferenceGatewayConfig CRD present at a known version",
    command=Command.PREFLIGHT,
    category="cluster",
    severity=Severity.CRITICAL,
    description=f"CRD {CRD_NAME} must exist and serve {', '.join(KNOWN_VERSIONS)}; if it is missing the "
    "add-on is older than the gateway release.",
    remediation="Install or upgrade the inference add-on to v2.0.0-eksbuild.2 or newer (it installs the "
    "CRD).",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    crds = need(ctx.inventory.kube.of("CustomResourceDefinition"))
    crd = next((c for c in crds if name_of(c) == CRD_NAME), None)
    resource = f"CustomResourceDefinition {CRD_NAME}"
    if crd is None:
        yield r.fail(resource, "not installed")
        return
    served = [
        str(v.get("name"))
        for v in spec(crd).get("versions") or []
        if isinstance(v, dict) and v.get("served", True)
    ]
    known = [v for v in served if v in KNOWN_VERSIONS]
    if known:
        yield r.passed(resource, f"serves {', '.join(served)}")
    else:
        yield r.warn(
            resource,
            f"serves {', '.join(served) or 'no version'}; this igw understands {', '.join(KNOWN_VERSIONS)}",
            severity=Severity.HIGH,
        )


CHECK = FunctionCheck(META, _run)
