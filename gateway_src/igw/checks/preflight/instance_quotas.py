"""IGW-PF031: the account's HyperPod (cluster usage) Service Quotas cover the instances the HyperPod
cluster asks for. GPU types such as ml.p5.48xlarge start at a quota of 0 in most accounts, and a
cluster whose groups exceed it never gets its nodes."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import InstanceQuota, need
from igw.checks.model import CheckMeta, Command, Result, Severity, Status
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


def verdict(item: InstanceQuota) -> tuple[Status, str]:
    """PASS/FAIL/WARN and the message for one instance type (shared with ``cdk.synth_cli``)."""
    if item.quota is None:
        return (
            Status.WARN,
            f"no such quota found; cannot confirm {item.requested} instance(s) of {item.instance_type}",
        )
    if item.quota < item.requested:
        return (
            Status.FAIL,
            f"quota {item.quota:g} is below the {item.requested} instance(s) the groups ask for",
        )
    return Status.PASS, f"quota {item.quota:g} covers {item.requested} instance(s)"


def resource_of(item: InstanceQuota) -> str:
    return f"quota {QUOTA_SERVICE_CODE}/{QUOTA_NAME.format(instance_type=item.instance_type)}"


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for item in need(ctx.inventory.aws.instance_quotas):
        status, message = verdict(item)
        if status is Status.WARN:
            yield r.warn(resource_of(item), message, severity=Severity.MEDIUM)
        elif status is Status.FAIL:
            yield r.fail(resource_of(item), message)
        else:
            yield r.passed(resource_of(item), message)


CHECK = FunctionCheck(META, _run)
