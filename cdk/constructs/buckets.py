"""S3 buckets the stacks create, all with the same baseline: S3-managed encryption, public access
blocked, TLS-only access, versioning, and server access logs into a sibling bucket. Each is retained
when its stack is deleted, or emptied and deleted for a dev stack (:mod:`cdk.constructs.removal`)."""

from __future__ import annotations

from typing import Any, Final

from aws_cdk import aws_s3 as s3
from constructs import Construct

from cdk.constructs import checkov_ack
from cdk.constructs.nag_ack import acknowledge
from cdk.constructs.removal import bucket_removal

BASELINE: Final[dict[str, Any]] = {
    "encryption": s3.BucketEncryption.S3_MANAGED,
    "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
    "enforce_ssl": True,
    "versioned": True,
}


def access_log_bucket(scope: Construct, id_: str, *, logs_of: str) -> s3.Bucket:
    """The bucket receiving ``logs_of``'s server access logs (it cannot log into itself)."""
    bucket = s3.Bucket(
        scope,
        id_,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
        **BASELINE,
        **bucket_removal(scope),
    )
    reason = f"this is the server-access-log bucket of the {logs_of}; logging it into itself would loop"
    checkov_ack.acknowledge(bucket, "CKV_AWS_18", reason=reason)
    acknowledge(bucket, "AwsSolutions-S1", reason=reason)
    return bucket


def logged_bucket(
    scope: Construct, id_: str, *, access_logs: s3.IBucket, log_prefix: str, **extra: Any
) -> s3.Bucket:
    """A bucket with the baseline, logging into ``access_logs`` under ``log_prefix``; ``extra`` may
    override the removal policy (:func:`~cdk.constructs.removal.bucket_removal` otherwise)."""
    bucket = s3.Bucket(
        scope,
        id_,
        server_access_logs_bucket=access_logs,
        server_access_logs_prefix=log_prefix,
        **BASELINE,
        **{**bucket_removal(scope), **extra},
    )
    return bucket
