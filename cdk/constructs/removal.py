"""What happens to the stateful resources (S3 buckets, CloudWatch log groups, KMS keys, the global
router's Redis) when their stack is deleted or they are replaced: kept by default, deleted for a dev stack.

By default every such resource is ``RETAIN`` (the Redis ``SNAPSHOT``): deleting a production stack must
not lose access logs, flow logs, the EKS secrets key or the TLS certificates. A dev stack deployed with
``cdk deploy -c destroyData=true`` instead gets ``DESTROY`` on each of them, and its buckets are emptied
first (CDK's ``autoDeleteObjects``), so ``cdk destroy`` leaves nothing behind. Before session s45 only the
global router's Redis had such a flag (``globalRouterDestroyData``), so a dev stack's buckets, log groups
and key were always left over; that name still works, for the global router stack only (the per-cluster
stacks never read it, so a command line that set it for the router does not start deleting their data).

Exceptions kept on purpose: the HyperPod lifecycle bucket and the Redis AUTH token are always deleted
(``DELETED_WITH_THE_STACK`` in ``tests/cdk/test_service_trust_and_removal.py`` says why).
"""

from __future__ import annotations

from typing import Any, Final

import aws_cdk as cdk
from constructs import Construct

DESTROY_DATA_CONTEXT: Final = "destroyData"
"""The context flag (``-c destroyData=true``): delete every stateful resource with its stack."""
ROUTER_DESTROY_DATA_CONTEXT: Final = "globalRouterDestroyData"
"""Its name before session s45, still read by the global router stack (``legacy=True``)."""


class DestroyDataContextError(ValueError):
    """A destroy-data context value that is not true or false, or two names that disagree."""


def _flag(scope: Construct, key: str) -> bool | None:
    value = scope.node.try_get_context(key)
    if value is None:
        return None
    if value is False or value == "false":
        return False
    if value is True or value == "true":
        return True
    raise DestroyDataContextError(f"context {key}: expected true or false, got {value!r}")


def destroys_data(scope: Construct, *, legacy: bool = False) -> bool:
    """Whether :data:`DESTROY_DATA_CONTEXT` (or, with ``legacy``, :data:`ROUTER_DESTROY_DATA_CONTEXT`)
    is true. A value other than true/false, or the two names set to different values, is refused:
    guessing would either keep a dev stack's data or delete a production one's."""
    flag = _flag(scope, DESTROY_DATA_CONTEXT)
    if not legacy:
        return bool(flag)
    old = _flag(scope, ROUTER_DESTROY_DATA_CONTEXT)
    if flag is not None and old is not None and flag != old:
        raise DestroyDataContextError(
            f"context {DESTROY_DATA_CONTEXT}={str(flag).lower()} and {ROUTER_DESTROY_DATA_CONTEXT}="
            f"{str(old).lower()} disagree; set {DESTROY_DATA_CONTEXT} alone"
        )
    return bool(flag if flag is not None else old)


def removal_policy(
    scope: Construct, *, kept: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN, legacy: bool = False
) -> cdk.RemovalPolicy:
    """``DESTROY`` for a dev stack (:func:`destroys_data`), else ``kept``."""
    return cdk.RemovalPolicy.DESTROY if destroys_data(scope, legacy=legacy) else kept


def bucket_removal(scope: Construct, *, legacy: bool = False) -> dict[str, Any]:
    """``s3.Bucket`` keyword arguments: ``RETAIN``, or for a dev stack ``DESTROY`` with the objects
    deleted first (CloudFormation cannot delete a bucket that is not empty)."""
    if destroys_data(scope, legacy=legacy):
        return {"removal_policy": cdk.RemovalPolicy.DESTROY, "auto_delete_objects": True}
    return {"removal_policy": cdk.RemovalPolicy.RETAIN}
