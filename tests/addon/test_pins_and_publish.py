"""`igw addon versions --check-pins` (DescribeAddonVersions through the Stubber, in the service's
response shape) and `igw addon package --push` (ECR through the Stubber, the OCI push faked)."""

from __future__ import annotations

import argparse
import base64
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from igw.addon import pin_check, pins, publish
from igw.addon.eks_api import EksAddonApi
from igw.cli import addon as addon_cli

K8S = "1.34"


def _version(name: str, *, default: bool = False, cluster: str = K8S) -> dict[str, object]:
    return {
        "addonVersion": name,
        "architecture": ["amd64", "arm64"],
        "computeTypes": ["ec2"],
        "compatibilities": [
            {"clusterVersion": cluster, "platformVersions": ["*"], "defaultVersion": default}
        ],
        "requiresConfiguration": False,
        "requiresIamPermissions": False,
    }


def _page(name: str, versions: list[dict[str, object]]) -> dict[str, object]:
    return {
        "addons": [
            {
                "addonName": name,
                "type": "networking",
                "publisher": "eks",
                "owner": "aws",
                "addonVersions": versions,
            }
        ]
    }


def _published(pinned: str) -> list[dict[str, object]]:
    """What EKS lists for a pin: the pin itself and a newer default."""
    major, rest = pinned.split("-eksbuild.")
    return [_version(f"{major}-eksbuild.{int(rest) + 1}", default=True), _version(pinned)]


@pytest.fixture
def stubbed() -> Iterator[tuple[EksAddonApi, Stubber]]:
    client = boto3.client("eks", region_name="us-west-2")
    stubber = Stubber(client)
    with stubber:
        yield EksAddonApi(client), stubber
    stubber.assert_no_pending_responses()


def test_every_pin_is_checked_for_the_kubernetes_version(stubbed: tuple[EksAddonApi, Stubber]) -> None:
    api, stubber = stubbed
    for name, version in pins.pinned_addons():
        stubber.add_response(
            "describe_addon_versions",
            _page(name, _published(version)),
            {"addonName": name, "kubernetesVersion": K8S},
        )
    statuses = pin_check.check_pins(
        pins.pinned_addons(),
        lambda name: api.addon_versions(name=name, kubernetes_version=K8S),
        kubernetes_version=K8S,
    )
    assert [s.name for s in statuses] == [name for name, _ in pins.pinned_addons()]
    assert {s.verdict for s in statuses} == {"behind"}
    assert "EKS's default is now" in statuses[0].message


def test_unpublished_pin_names_the_newest_compatible(stubbed: tuple[EksAddonApi, Stubber]) -> None:
    api, stubber = stubbed
    stubber.add_response(
        "describe_addon_versions",
        _page("vpc-cni", [_version("v1.20.4-eksbuild.2", default=True), _version("v1.19.6-eksbuild.7")]),
        {"addonName": "vpc-cni", "kubernetesVersion": K8S},
    )
    (status,) = pin_check.check_pins(
        [("vpc-cni", "v1.19.2-eksbuild.1")],
        lambda name: api.addon_versions(name=name, kubernetes_version=K8S),
        kubernetes_version=K8S,
    )
    assert status.verdict == "unpublished"
    assert status.message == (
        "vpc-cni v1.19.2-eksbuild.1 is not published for this Kubernetes version; newest compatible is "
        "v1.20.4-eksbuild.2"
    )


def test_compatibility_with_another_kubernetes_version_does_not_count() -> None:
    status = pin_check.status_of(
        "metrics-server",
        "v0.7.2-eksbuild.4",
        [_version("v0.7.2-eksbuild.4", cluster="1.30")],
        kubernetes_version=K8S,
    )
    assert status.verdict == "unpublished"
    assert status.newest is None


def test_cli_check_pins_exits_1_on_an_unpublished_pin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = boto3.client("eks", region_name="us-west-2")
    stubber = Stubber(client)
    for name, version in pins.pinned_addons():
        versions = (
            _published(version) if name != "metrics-server" else [_version("v0.8.0-eksbuild.1", default=True)]
        )
        stubber.add_response(
            "describe_addon_versions", _page(name, versions), {"addonName": name, "kubernetesVersion": K8S}
        )
    stubber.activate()
    args = argparse.Namespace(check_pins=True, kubernetes_version=K8S, addon_name=None)
    assert addon_cli._versions(args, EksAddonApi(client)) == 1
    out = capsys.readouterr().out
    assert "UNPUBLISHED metrics-server v0.7.2-eksbuild.4 is not published" in out
    assert out.count("\n") == len(pins.pinned_addons())
    stubber.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("kubernetes", "says"),
    [
        (None, "igw addon: no version of nope is published in us-west-2\n"),
        (K8S, f"igw addon: no version of nope is published for Kubernetes {K8S} in us-west-2\n"),
    ],
)
def test_versions_of_an_addon_not_offered_here_say_so_and_exit_1(
    stubbed: tuple[EksAddonApi, Stubber],
    capsys: pytest.CaptureFixture[str],
    kubernetes: str | None,
    says: str,
) -> None:
    """EKS can answer for a name it does not offer (a misspelling, a region without the add-on) with an empty
    list over two pages here; ``igw addon versions`` printed nothing and exited 0."""
    addons, stubber = stubbed
    query = {"addonName": "nope", **({"kubernetesVersion": kubernetes} if kubernetes else {})}
    stubber.add_response("describe_addon_versions", {"addons": [], "nextToken": "n"}, query)
    stubber.add_response("describe_addon_versions", {"addons": []}, {**query, "nextToken": "n"})
    args = argparse.Namespace(check_pins=False, kubernetes_version=kubernetes, addon_name="nope")
    assert addon_cli._versions(args, addons) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", says)


class RecordingPusher:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, str, str]] = []

    def __call__(self, archive: Path, remote: str, *, host: str, username: str, password: str) -> None:
        self.calls.append((archive.name, remote, host, username, password))


def test_package_push_creates_the_repository_and_pushes_with_ecr_credentials(tmp_path: Path) -> None:
    ecr = boto3.client("ecr", region_name="us-west-2")
    stubber = Stubber(ecr)
    repository = f"igw-charts/{pins.CHART_NAME}"
    stubber.add_client_error(
        "describe_repositories",
        "RepositoryNotFoundException",
        "not found",
        400,
        expected_params={"repositoryNames": [repository]},
    )
    stubber.add_response(
        "create_repository",
        {"repository": {"repositoryName": repository}},
        {
            "repositoryName": repository,
            "imageTagMutability": "IMMUTABLE",
            "imageScanningConfiguration": {"scanOnPush": True},
            "encryptionConfiguration": {"encryptionType": "AES256"},
        },
    )
    token = base64.b64encode(b"AWS:secret-password").decode()
    registry = "111111111111.dkr.ecr.us-west-2.amazonaws.com"
    stubber.add_response(
        "get_authorization_token",
        {"authorizationData": [{"authorizationToken": token, "proxyEndpoint": f"https://{registry}"}]},
        {},
    )
    pusher = RecordingPusher()
    with stubber:
        published = publish.publish(destination=tmp_path, ecr=ecr, pusher=pusher)
    stubber.assert_no_pending_responses()
    archive = f"{pins.CHART_NAME}-{pins.CHART_VERSION}.tgz"
    assert pusher.calls == [(archive, f"oci://{registry}/igw-charts", registry, "AWS", "secret-password")]
    assert published.reference == f"oci://{registry}/igw-charts/{pins.CHART_NAME}:{pins.CHART_VERSION}"
    assert published.schema.is_file()


def _repository(mutability: str, *exclusions: str) -> dict[str, object]:
    """Our chart's ECR repository as ``DescribeRepositories`` shows it."""
    name = f"igw-charts/{pins.CHART_NAME}"
    repository: dict[str, object] = {
        "repositoryName": name,
        "repositoryUri": f"111111111111.dkr.ecr.us-west-2.amazonaws.com/{name}",
        "imageTagMutability": mutability,
    }
    if exclusions:  # the service model wants at least one filter when the list is there
        repository["imageTagMutabilityExclusionFilters"] = [
            {"filterType": "WILDCARD", "filter": f} for f in exclusions
        ]
    return repository


IMAGE = {"repositoryName": f"igw-charts/{pins.CHART_NAME}", "imageIds": [{"imageTag": pins.CHART_VERSION}]}
"""``DescribeImages`` for the chart version about to be pushed."""


def _not_pushed_yet(stubber: Stubber) -> None:
    stubber.add_client_error(
        "describe_images",
        "ImageNotFoundException",
        f"The image with imageId {{imageTag:'{pins.CHART_VERSION}'}} does not exist within the repository",
        400,
        expected_params=IMAGE,
    )


def test_package_push_of_a_chart_version_already_in_ecr_says_so_before_logging_in(tmp_path: Path) -> None:
    """The repository's tags are immutable, so pushing a version already there failed at the registry
    (ImageTagAlreadyExistsException) after the login, in Helm's words; it is named before, with when it
    was pushed and what to do."""
    import datetime

    ecr = boto3.client("ecr", region_name="us-west-2")
    stubber = Stubber(ecr)
    stubber.add_response(
        "describe_repositories",
        {"repositories": [_repository("IMMUTABLE")]},
        {"repositoryNames": [f"igw-charts/{pins.CHART_NAME}"]},
    )
    digest = "sha256:" + "ab" * 32
    pushed = datetime.datetime(2026, 12, 1, 9, 30, tzinfo=datetime.UTC)
    detail = {"imageDigest": digest, "imageTags": [pins.CHART_VERSION], "imagePushedAt": pushed}
    stubber.add_response("describe_images", {"imageDetails": [detail]}, IMAGE)
    pusher = RecordingPusher()
    with stubber, pytest.raises(publish.PublishError) as caught:
        publish.publish(destination=tmp_path, ecr=ecr, pusher=pusher)
    stubber.assert_no_pending_responses()
    assert str(caught.value) == (
        f"igw-charts/{pins.CHART_NAME}:{pins.CHART_VERSION} is already in ECR (pushed on 2026-12-01 "
        f"09:30 UTC, {digest}) and its tags are immutable: publish a change under a new chart version"
    )
    assert pusher.calls == []


@pytest.mark.parametrize(
    ("mutability", "exclusions", "refused"),
    [
        ("MUTABLE", (), True),
        ("IMMUTABLE", (), False),
        ("IMMUTABLE_WITH_EXCLUSION", ("0.*",), True),  # the chart's version is an exclusion: mutable
        ("IMMUTABLE_WITH_EXCLUSION", ("dev-*",), False),
        ("MUTABLE_WITH_EXCLUSION", ("dev-*",), True),
        ("MUTABLE_WITH_EXCLUSION", ("*.*.*",), False),  # versions excluded from mutability
    ],
)
def test_package_push_refuses_a_repository_that_lets_the_chart_version_be_overwritten(
    tmp_path: Path, mutability: str, exclusions: tuple[str, ...], refused: bool
) -> None:
    """An existing repository was taken as it was: with mutable tags a second push of a chart version
    replaced the chart installed add-ons of that version point at. Only the repository ``--push``
    creates itself was immutable."""
    assert pins.CHART_VERSION.startswith("0.")
    ecr = boto3.client("ecr", region_name="us-west-2")
    stubber = Stubber(ecr)
    stubber.add_response(
        "describe_repositories",
        {"repositories": [_repository(mutability, *exclusions)]},
        {"repositoryNames": [f"igw-charts/{pins.CHART_NAME}"]},
    )
    if not refused:
        _not_pushed_yet(stubber)
        token = base64.b64encode(b"AWS:pw").decode()
        stubber.add_response(
            "get_authorization_token",
            {"authorizationData": [{"authorizationToken": token, "proxyEndpoint": "https://r.example"}]},
            {},
        )
    pusher = RecordingPusher()
    with stubber:
        if refused:
            with pytest.raises(publish.PublishError) as caught:
                publish.publish(destination=tmp_path, ecr=ecr, pusher=pusher)
            assert f"lets tag {pins.CHART_VERSION} be overwritten (imageTagMutability {mutability})" in str(
                caught.value
            )
            assert "put-image-tag-mutability" in str(caught.value)
        else:
            publish.publish(destination=tmp_path, ecr=ecr, pusher=pusher)
    stubber.assert_no_pending_responses()
    assert len(pusher.calls) == (0 if refused else 1)


def test_package_push_reports_a_denied_token(tmp_path: Path) -> None:
    ecr = boto3.client("ecr", region_name="us-west-2")
    stubber = Stubber(ecr)
    stubber.add_response(
        "describe_repositories",
        {"repositories": [_repository("IMMUTABLE")]},
        {"repositoryNames": [f"igw-charts/{pins.CHART_NAME}"]},
    )
    _not_pushed_yet(stubber)
    stubber.add_client_error("get_authorization_token", "AccessDeniedException", "denied", 400)
    pusher = RecordingPusher()
    with stubber, pytest.raises(publish.PublishError, match="ecr:GetAuthorizationToken"):
        publish.publish(destination=tmp_path, ecr=ecr, pusher=pusher)
    assert pusher.calls == []


def test_chart_names_our_addon_not_awss() -> None:
    import yaml

    from igw.addon import chart

    metadata = yaml.safe_load((chart.chart_dir() / "Chart.yaml").read_text())
    assert metadata["annotations"]["igw.io/eks-addon-name"] == pins.IGW_ADDON_NAME
    assert metadata["annotations"]["igw.io/eks-addon-name"] != pins.AWS_ADDON_NAME
