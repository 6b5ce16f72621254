"""Publishing the chart for ``aws eks create-addon``-style installs: the packaged chart pushed to an ECR
OCI repository, with the add-on configuration schema written beside the archive.

ECR is the AWS seam (``ecr`` boto3 client: the repository is created when missing, with scan-on-push
and immutable tags, an existing one with mutable tags is refused, and ``GetAuthorizationToken`` gives
the registry login); the push itself is Helm's
own OCI client (helm-python-sdk), injected as :class:`ChartPusher` so tests never reach a registry.
"""

from __future__ import annotations

import base64
import fnmatch
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from botocore.exceptions import ClientError

from igw.addon import chart, pins, schemas
from igw.config import paths
from igw.errors import IgwToolingError


class PublishError(IgwToolingError, RuntimeError):
    """The chart could not be published; the message names the failing step."""


class ChartPusher(Protocol):
    def __call__(self, archive: Path, remote: str, *, host: str, username: str, password: str) -> None: ...


def helm_push(archive: Path, remote: str, *, host: str, username: str, password: str) -> None:
    """Log in to ``host`` and push ``archive`` to ``remote`` with Helm's registry client."""
    # deferred: start-up cost: Helm's Go SDK loads only when a chart is pushed
    import helm_python as helm

    client = helm.RegistryClient()
    try:
        client.login(host, username, password)
        helm.push(str(archive), remote, client=client)
    except helm.HelmError as exc:
        raise PublishError(f"helm push to {remote}: {exc}") from exc
    finally:
        client.close()


@dataclass(frozen=True, slots=True)
class Published:
    archive: Path
    schema: Path
    remote: str | None
    """``oci://<registry>/<namespace>`` the chart was pushed to (``None`` without ``--push``)."""

    @property
    def reference(self) -> str | None:
        if self.remote is None:
            return None
        return f"{self.remote}/{pins.CHART_NAME}:{pins.CHART_VERSION}"


def _tag_is_mutable(repository: dict[str, Any], tag: str) -> bool:
    """Whether a push of ``tag`` to ``repository`` (as ``DescribeRepositories`` shows it) may replace an
    image already there: MUTABLE, or an ``*_WITH_EXCLUSION`` setting whose exclusions (wildcard
    filters) make ``tag`` the opposite of the rule."""
    mutability = str(repository.get("imageTagMutability", "MUTABLE"))
    excluded = any(
        fnmatch.fnmatchcase(tag, str(item.get("filter", "")))
        for item in repository.get("imageTagMutabilityExclusionFilters", [])
    )
    if mutability == "IMMUTABLE":
        return False
    if mutability == "IMMUTABLE_WITH_EXCLUSION":
        return excluded
    if mutability == "MUTABLE_WITH_EXCLUSION":
        return not excluded
    return True


def _refuse_a_pushed_version(ecr: Any, name: str, tag: str) -> None:
    """:class:`PublishError` when ``name:tag`` is already in ECR: the repository's tags are immutable, so
    the push would fail at the registry (ImageTagAlreadyExistsException / ``tag invalid``) after the
    login, in Helm's words; said here first, with what is there and what to do."""
    try:
        images = ecr.describe_images(repositoryName=name, imageIds=[{"imageTag": tag}]).get(
            "imageDetails", []
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ImageNotFoundException":
            return
        raise PublishError(f"ecr:DescribeImages {name}:{tag}: {exc}") from exc
    if images:
        pushed = images[0].get("imagePushedAt")
        when = f" on {pushed:%Y-%m-%d %H:%M} UTC" if pushed is not None else ""
        raise PublishError(
            f"{name}:{tag} is already in ECR (pushed{when}, {images[0].get('imageDigest', '?')}) and its "
            f"tags are immutable: publish a change under a new chart version"
        )


def _ensure_repository(ecr: Any, name: str, tag: str = pins.CHART_VERSION) -> None:
    """The repository, created when missing (immutable tags); an existing one whose tags are mutable
    for ``tag`` is refused: a push of a chart version already published would replace the chart that
    installed add-ons of that version point at, silently (the repository was taken as it was); in an
    existing immutable one, a chart version already pushed is refused (:func:`_refuse_a_pushed_version`)."""
    try:
        found = ecr.describe_repositories(repositoryNames=[name]).get("repositories", [])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "RepositoryNotFoundException":
            raise PublishError(f"ecr:DescribeRepositories {name}: {exc}") from exc
    else:
        if found and _tag_is_mutable(found[0], tag):
            raise PublishError(
                f"ECR repository {name} lets tag {tag} be overwritten (imageTagMutability "
                f"{found[0].get('imageTagMutability', 'MUTABLE')}): a push would replace a published chart "
                f"version in place; make it immutable (aws ecr put-image-tag-mutability --repository-name "
                f"{name} --image-tag-mutability IMMUTABLE)"
            )
        if found:
            _refuse_a_pushed_version(ecr, name, tag)
        return
    try:
        ecr.create_repository(
            repositoryName=name,
            imageTagMutability="IMMUTABLE",
            imageScanningConfiguration={"scanOnPush": True},
            encryptionConfiguration={"encryptionType": "AES256"},
        )
    except ClientError as exc:
        raise PublishError(f"ecr:CreateRepository {name}: {exc}") from exc


def _login(ecr: Any) -> tuple[str, str, str]:
    """(registry host, user name, password) from ``GetAuthorizationToken``."""
    try:
        data = ecr.get_authorization_token()["authorizationData"][0]
    except (ClientError, KeyError, IndexError) as exc:
        raise PublishError(f"ecr:GetAuthorizationToken: {exc}") from exc
    username, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    host = str(data["proxyEndpoint"]).removeprefix("https://").rstrip("/")
    return host, username, password


def publish(
    *,
    destination: Path,
    ecr: Any | None = None,
    namespace: str = "igw-charts",
    pusher: ChartPusher = helm_push,
    progress: Callable[[str], None] = lambda _line: None,
) -> Published:
    """Package the chart into ``destination`` with its configuration schema; with ``ecr``, push it to
    ``oci://<account registry>/<namespace>`` (repository ``<namespace>/<chart>``)."""
    archive = chart.package(destination=destination)
    schema = destination / f"{pins.CHART_NAME}-{pins.CHART_VERSION}.configuration-schema.json"
    shutil.copyfile(paths.REPO_ROOT / schemas.CONFIGURATION_SCHEMA_FILE, schema)
    progress(f"packaged {archive} (configuration schema: {schema})")
    if ecr is None:
        return Published(archive=archive, schema=schema, remote=None)
    _ensure_repository(ecr, f"{namespace}/{pins.CHART_NAME}")
    host, username, password = _login(ecr)
    remote = f"oci://{host}/{namespace}"
    pusher(archive, remote, host=host, username=username, password=password)
    progress(f"pushed {remote}/{pins.CHART_NAME}:{pins.CHART_VERSION}")
    return Published(archive=archive, schema=schema, remote=remote)
