"""``clusterName`` as EKS allows it (session s48): before, the schema asked for
``^[a-zA-Z][a-zA-Z0-9-]{0,62}$``, and an operator whose existing cluster is ``ml_prod_2``, ``2024-gpu``
or 80 characters long could not use existing-cluster mode at all."""

from __future__ import annotations

import re

import pytest
from aws_cdk import assertions

from cdk import config
from cdk.constructs.hyperpod_cluster import lifecycle_bucket_name
from tests.cdk.support import Synthesized, cfn_lint, example_document, existing_document, synthesize

EKS_NAME = "2024_ML-prod_" + "x" * 87
"""Every freedom EKS gives a name at once: a leading digit, upper case, underscores, 100 characters."""
DASHBOARD_NAME = re.compile(r"[A-Za-z0-9_-]{1,255}")
"""CloudWatch's rule for a dashboard name (``PutDashboard``'s ``DashboardName``)."""
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@pytest.fixture(scope="module")
def eks_named(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The existing-cluster example deploying into a cluster named :data:`EKS_NAME`."""
    document = existing_document()
    document["clusterName"] = EKS_NAME
    return synthesize(document, tmp_path_factory.mktemp("cdk-eks-name.out"))


def test_an_existing_cluster_of_any_eks_name_synthesizes_cfn_lint_clean(eks_named: Synthesized) -> None:
    assert cfn_lint(*eks_named.files.values()) == []
    access = assertions.Template.from_json(eks_named.templates["cluster"])
    access.has_resource_properties("AWS::EKS::AccessEntry", {"ClusterName": EKS_NAME})
    platform = assertions.Template.from_json(eks_named.templates["platform"])
    platform.has_resource_properties("AWS::EKS::PodIdentityAssociation", {"ClusterName": EKS_NAME})
    platform.has_resource_properties(
        "Custom::AWSCDK-EKS-HelmChart",
        {"Values": assertions.Match.serialized_json(assertions.Match.object_like({"clusterName": EKS_NAME}))},
    )
    inference = assertions.Template.from_json(eks_named.templates["inference"])
    (dashboard,) = inference.find_resources("AWS::CloudWatch::Dashboard").values()
    name = dashboard["Properties"]["DashboardName"]
    assert name == f"{EKS_NAME}-us-west-2-inference-gateway"
    assert DASHBOARD_NAME.fullmatch(name), name


def test_the_heartbeat_alarms_watch_a_dns_label_form_of_the_name(eks_named: Synthesized) -> None:
    """``spec.extensions.globalHeartbeat.cluster`` must be a DNS-1123 label, which an EKS name need not
    be: without heartbeats the failed-writes alarms watched the series of ``clusterName`` as given, a
    name no heartbeat can take."""
    label = config.heartbeat_cluster_name(EKS_NAME)
    assert DNS_LABEL.fullmatch(label), label
    inference = assertions.Template.from_json(eks_named.templates["inference"])
    watched = {
        dimension["Value"]
        for alarm in inference.find_resources("AWS::CloudWatch::Alarm").values()
        for metric in alarm["Properties"].get("Metrics", [])
        for dimension in metric.get("MetricStat", {}).get("Metric", {}).get("Dimensions", [])
        if dimension["Name"] == "Cluster"
    }
    assert watched == {label}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("igw-inference", "igw-inference"),  # a DNS label already: as before
        ("ml_prod_2", "ml-prod-2-8d9f6220"),
        ("ML-prod", "ml-prod-00696b36"),
        ("a" * 80, "a" * 54 + "-0f45e858"),
    ],
)
def test_heartbeat_cluster_name(name: str, expected: str) -> None:
    label = config.heartbeat_cluster_name(name)
    assert label == expected
    assert DNS_LABEL.fullmatch(label)


def test_eks_names_that_lower_case_alike_watch_different_heartbeat_series() -> None:
    labels = {config.heartbeat_cluster_name(name) for name in ("ML-prod", "ml-prod", "ml_prod", "ML_PROD")}
    assert len(labels) == 4


@pytest.mark.parametrize("name", ["ml_prod_2", "2024-gpu", "c" * 100])
def test_a_created_cluster_may_take_an_eks_name_with_its_own_hyperpod_name(name: str) -> None:
    document = example_document()
    document["clusterName"] = name
    document["hyperpod"]["clusterName"] = "gpu-pool"
    assert config.parse(document).cluster_name == name


def test_a_default_hyperpod_name_with_an_underscore_is_refused() -> None:
    """HyperPod names allow no underscore: ``ml_prod-hyperpod`` would fail the cluster stack at deploy
    time. The one thing in create mode that needs a stricter clusterName, and only for the default."""
    document = example_document()
    document["clusterName"] = "ml_prod"
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document, source="deploy.yaml")
    assert (
        "hyperpod.clusterName: the default 'ml_prod-hyperpod' is not a HyperPod cluster name (letters, "
        "digits and hyphens only" in str(caught.value)
    )


@pytest.mark.parametrize(
    ("name", "shown"),
    [("ml.prod", "'ml.prod'"), ("-gpu", "'-gpu'"), ("x" * 101, repr("x" * 101)), ("", "''")],
)
def test_a_bad_cluster_name_is_refused_in_words(name: str, shown: str) -> None:
    """The refusal was jsonschema's bare regular expression (``'ml.prod' does not match
    '^[a-zA-Z][a-zA-Z0-9-]{0,62}$'``): it says what is allowed now, and the limit."""
    document = example_document()
    document["clusterName"] = name
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document, source="deploy.yaml")
    (problem,) = caught.value.problems
    assert problem == (
        "clusterName: must be an EKS cluster name: 1 to 100 letters, digits, hyphens (-) and "
        f"underscores (_), starting with a letter or digit; got {shown}"
    )
    assert "^" not in problem


def test_hyperpod_names_that_differ_in_case_get_distinct_lifecycle_buckets() -> None:
    """HyperPod names are case-sensitive (SageMaker's ``CreateCluster`` pattern
    ``^[a-zA-Z0-9](-*[a-zA-Z0-9])*$``; no case-insensitive uniqueness is documented): lower-cased
    alone, ``GPU-Pool`` and ``gpu-pool`` of one account and region were given one bucket, and the
    second deploy failed (bucket names are global)."""
    names = ["GPU-Pool", "gpu-pool", "Gpu-Pool"]
    buckets = [
        lifecycle_bucket_name(hyperpod_name=n, account="111111111111", region="us-west-2") for n in names
    ]
    assert len(set(buckets)) == 3
    assert buckets[1] == "sagemaker-gpu-pool-111111111111-us-west-2"  # lower case: unchanged
    for bucket in buckets:
        assert len(bucket) <= 63
        assert re.fullmatch(r"sagemaker-[a-z0-9][a-z0-9-]*[a-z0-9]", bucket), bucket


@pytest.mark.parametrize("field", ["clusterName", "instanceGroup"])
def test_a_hyperpod_name_over_63_characters_is_refused(field: str) -> None:
    """SageMaker's pattern ``^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$`` bounds the letters and digits, not the
    hyphens: without ``maxLength`` an 81-character ``a-a-...-b`` passed, against the hint's "1 to 63"
    and HyperPod's own limit, failing only at deploy time."""
    document = example_document()
    name = "a-" * 40 + "b"
    if field == "clusterName":
        document["hyperpod"]["clusterName"] = name
        path = "hyperpod.clusterName"
    else:
        document["hyperpod"]["instanceGroups"][0]["name"] = name
        path = "hyperpod.instanceGroups[0].name"
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document, source="deploy.yaml")
    (problem,) = caught.value.problems
    assert problem.startswith(f"{path}: ")
    assert "too long" in problem
