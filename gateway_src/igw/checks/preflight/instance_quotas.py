"""IGW-PF031: the account's HyperPod (cluster usage) Service Quotas cover the instances the HyperPod
cluster asks for. GPU types such as ml.p5.48xlarge start at a quota of 0 in most accounts, and a
cluster whose groups exceed it never gets its nodes."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import need
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.sources.aws_api import QUOTA_NAME, QUOTA_SERVICE_CODE

META = CheckMeta(
    id="IGW-PF031",
    title="HyperPod instance quotas cover the instance groups",
    command=Command.PREFLIGHT,
    category="capacity",
    severity=Severity.HIGH,
    description="For each instance type of the HyperPod cluster, the Service Quotas value "
    "'<type> for cluster usage' (service sagemaker) must be at least the instances requested.",
    remediation="Request an increase: aws service-quotas request-service-quota-increase --service-code "
    "sagemaker --quota-code <code of '<type> for cluster usage'> --desired-value N",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for item in need(ctx.inventory.aws.instance_quotas):
        resource = f"quota {QUOTA_SERVICE_CODE}/{QUOTA_NAME.format(instance_type=item.instance_type)}"
        if item.quota is None:
            yield r.warn(
                resource,
                f"no such quota found; cannot confirm {item.requested} instance(s) of {item.instance_type}",
                severity=Severity.MEDIUM,
            )
        elif item.quota < item.requested:
            yield r.fail(
                resource, f"quota {item.quota:g} is below the {item.requested} instance(s) the groups ask for"
            )
        else:
            yield r.passed(resource, f"quota {item.quota:g} covers {item.requested} instance(s)")


CHECK = FunctionCheck(META, _run)
