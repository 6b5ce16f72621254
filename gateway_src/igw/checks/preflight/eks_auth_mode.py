"""IGW-PF001: the EKS cluster uses access entries (authentication mode ``API`` or ``API_AND_CONFIG_MAP``).

HyperPod with EKS orchestration rejects ``CONFIG_MAP``-only clusters; the EKS API and CloudFormation
default to ``CONFIG_MAP`` when the mode is not set, so an unset mode in a template fails too.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import need
from igw.checks.model import CheckMeta, Command, Result, Severity

ACCEPTED = ("API", "API_AND_CONFIG_MAP")

META = CheckMeta(
    id="IGW-PF001",
    title="EKS authentication mode supports access entries",
    command=Command.PREFLIGHT,
    category="cluster",
    severity=Severity.HIGH,
    description="HyperPod inference needs the cluster's authentication mode to be API or API_AND_CONFIG_MAP.",
    remediation="aws eks update-cluster-config --name CLUSTER --access-config "
    "authenticationMode=API_AND_CONFIG_MAP "
    "(or set AccessConfig.AuthenticationMode in the stack).",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    cluster = need(ctx.inventory.aws.cluster)
    resource = f"EKS cluster {cluster.name}"
    mode = cluster.authentication_mode
    if mode in ACCEPTED:
        yield r.passed(resource, f"authentication mode {mode}")
    elif mode is None:
        yield r.fail(
            resource, "authentication mode not set; EKS then defaults to CONFIG_MAP, which HyperPod rejects"
        )
    else:
        yield r.fail(resource, f"authentication mode {mode}; HyperPod needs one of {', '.join(ACCEPTED)}")


CHECK = FunctionCheck(META, _run)
