"""Source: a live cluster - Kubernetes through the ``kubernetes`` client, AWS through :class:`AwsAccount`.

AWS facts are read only when a cluster name is given (``--cluster-name``); otherwise they are
``Missing`` (not-applicable) and the AWS-side checks say how to enable them.
"""

from __future__ import annotations

from typing import Any

from igw.checks.inventory import AwsView, Inventory
from igw.checks.sources.aws_api import AwsAccount, aws_view
from igw.checks.sources.live_kube import live_kube_view, service_account_roles


def load_live(
    *,
    api_client: Any,
    cluster_name: str | None,
    account: AwsAccount | None = None,
    gateway_role_arn: str | None = None,
) -> Inventory:
    host = getattr(getattr(api_client, "configuration", None), "host", "?")
    source = f"cluster {cluster_name or host}"
    kube = live_kube_view(api_client, source=source)
    if cluster_name is None:
        aws = AwsView.absent(
            "AWS side not scanned: pass --cluster-name (and --region) to check EKS, IAM, subnets, LBs"
        )
    else:
        roles = [gateway_role_arn] if gateway_role_arn else []
        roles += service_account_roles(kube.objects)
        aws = aws_view(account or AwsAccount(), cluster_name=cluster_name, extra_role_arns=roles)
    return Inventory(kube=kube, aws=aws, source=source, errors=list(aws.problems))
