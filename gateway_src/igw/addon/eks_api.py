"""The ONE seam between our code and the EKS add-on API.

moto implements no EKS add-on operation, so every add-on call goes through :class:`EksAddonApi` and
tests drive it with ``botocore.stub.Stubber`` (which checks our parameters and the canned responses
against the real service model). Everything else (clusters, IAM) uses plain boto3 clients that moto
serves. Errors become :class:`AddonApiError` with the AWS error code kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from botocore.exceptions import ClientError

from igw.errors import IgwToolingError
from igw.redaction import redact_value


class AddonApiError(IgwToolingError, RuntimeError):
    """An EKS add-on call failed; ``code`` is AWS's error code (``ResourceNotFoundException`` …)."""

    def __init__(self, operation: str, code: str, message: str) -> None:
        self.operation = operation
        self.code = code
        self.hint = error_hint(code, operation, message, service="eks")
        super().__init__(f"{operation}: {code}: {message}")


THROTTLED: Final = frozenset(
    {"ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded", "ServerException"}
)
"""Errors that say nothing about the request: AWS throttled it or failed itself (EKS's 5xx)."""
EXPIRED: Final = frozenset({"ExpiredTokenException", "ExpiredToken", "RequestExpired"})
REJECTED: Final = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
    }
)


def error_hint(code: str, operation: str, message: str, *, service: str | None = None) -> str | None:
    """What to do about AWS error ``code`` on ``operation`` (``None`` when its message says enough).

    Why: ``igw addon`` printed AWS's error alone. A throttle that outlasted botocore's retries (standard
    mode: 3 attempts with jittered backoff) read like a refusal; an expired session token or a key AWS
    does not know did not say that new credentials are the fix; an ``AccessDeniedException`` whose
    message names no action (``Access denied``: a permissions boundary, an SCP) did not say which IAM
    action the caller lacks."""
    if code in THROTTLED:
        return (
            "AWS throttled or failed the call through botocore's retries with backoff: wait a minute "
            "and run again, or set AWS_MAX_ATTEMPTS=10 to retry longer"
        )
    if code in EXPIRED:
        return "the credentials have expired: refresh them with aws sso login or a new session token"
    if code in REJECTED:
        return "AWS does not accept these credentials; check --profile, AWS_PROFILE and the access key"
    if code.startswith("AccessDenied") and "not authorized to perform" not in message:
        action = f"{service}:{operation}" if service else operation
        return f"the caller's IAM policies must allow {action}"
    return None


def _wrap(operation: str, exc: ClientError) -> AddonApiError:
    """The error with AWS's message redacted: EKS's schema errors for ``--configuration-values``
    quote the offending value, which can hold a token or a password."""
    error = exc.response.get("Error", {})
    message = redact_value(str(error.get("Message", exc)))
    return AddonApiError(operation, str(error.get("Code", "Unknown")), message)


class EksAddonApi:
    """Add-on operations on an ``eks`` boto3 client."""

    def __init__(self, client: Any) -> None:
        self._eks = client

    @property
    def region(self) -> str:
        """The client's region, for messages."""
        return str(getattr(self._eks.meta, "region_name", None) or "this region")

    def describe_addon(self, *, cluster: str, name: str) -> dict[str, Any] | None:
        """The add-on, or ``None`` when it is not installed."""
        try:
            response = self._eks.describe_addon(clusterName=cluster, addonName=name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return None
            raise _wrap("DescribeAddon", exc) from exc
        addon: dict[str, Any] = response["addon"]
        return addon

    def addon_versions(self, *, name: str, kubernetes_version: str | None = None) -> list[dict[str, Any]]:
        """Every published version of ``name`` (all pages), as EKS returns them."""
        kwargs: dict[str, Any] = {"addonName": name}
        if kubernetes_version:
            kwargs["kubernetesVersion"] = kubernetes_version
        versions: list[dict[str, Any]] = []
        while True:
            try:
                response = self._eks.describe_addon_versions(**kwargs)
            except ClientError as exc:
                raise _wrap("DescribeAddonVersions", exc) from exc
            for addon in response.get("addons", []):
                versions.extend(addon.get("addonVersions", []))
            token = response.get("nextToken")
            if not token:
                return versions
            kwargs["nextToken"] = token

    def create_addon(
        self,
        *,
        cluster: str,
        name: str,
        version: str,
        configuration_values: str,
        resolve_conflicts: str,
        pod_identity: Sequence[Mapping[str, str]] = (),
        service_account_role_arn: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "clusterName": cluster,
            "addonName": name,
            "addonVersion": version,
            "resolveConflicts": resolve_conflicts,
            "configurationValues": configuration_values,
        }
        if pod_identity:
            kwargs["podIdentityAssociations"] = [dict(item) for item in pod_identity]
        if service_account_role_arn:
            kwargs["serviceAccountRoleArn"] = service_account_role_arn
        if namespace:
            kwargs["namespaceConfig"] = {"namespace": namespace}
        try:
            response = self._eks.create_addon(**kwargs)
        except ClientError as exc:
            raise _wrap("CreateAddon", exc) from exc
        addon: dict[str, Any] = response["addon"]
        return addon

    def update_addon(
        self,
        *,
        cluster: str,
        name: str,
        version: str | None,
        configuration_values: str | None,
        resolve_conflicts: str,
        service_account_role_arn: str | None = None,
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "clusterName": cluster,
            "addonName": name,
            "resolveConflicts": resolve_conflicts,
        }
        if version:
            kwargs["addonVersion"] = version
        if service_account_role_arn:
            kwargs["serviceAccountRoleArn"] = service_account_role_arn
        if configuration_values is not None:
            kwargs["configurationValues"] = configuration_values
        try:
            response = self._eks.update_addon(**kwargs)
        except ClientError as exc:
            raise _wrap("UpdateAddon", exc) from exc
        update: dict[str, Any] = response["update"]
        return update

    def describe_update(self, *, cluster: str, name: str, update_id: str) -> dict[str, Any]:
        """The ``UpdateAddon`` request ``update_id`` of add-on ``name``: its status (``InProgress``,
        ``Successful``, ``Failed``, ``Cancelled``) and, when it failed, ``errors``. The add-on's own
        status cannot say whether an update worked: one EKS refuses (a conflict) leaves it ACTIVE."""
        try:
            response = self._eks.describe_update(name=cluster, updateId=update_id, addonName=name)
        except ClientError as exc:
            raise _wrap("DescribeUpdate", exc) from exc
        update: dict[str, Any] = response["update"]
        return update

    def delete_addon(self, *, cluster: str, name: str, preserve: bool) -> dict[str, Any]:
        try:
            response = self._eks.delete_addon(clusterName=cluster, addonName=name, preserve=preserve)
        except ClientError as exc:
            raise _wrap("DeleteAddon", exc) from exc
        addon: dict[str, Any] = response["addon"]
        return addon
