"""An existing cluster's ``installedAddons`` run with the roles they were installed with: the app makes
no role for them.

Before session s43 an existing cluster listing ``aws-fsx-csi-driver`` there still got an IRSA role with
``AmazonFSxFullAccess`` trusted by that driver's service account, and one listing the Mountpoint S3 CSI
driver a role reading ``platform.modelBuckets``: both attached to nothing, the buckets silently never
reaching the driver that runs.
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from cdk import config
from cdk.constructs.dependency_addons import FSX_CSI_ADDON, FSX_POLICY, DependencyAddons
from igw.addon import pins
from tests.cdk.support import existing_document

OIDC = "arn:aws:iam::111111111111:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/X"


def _addons(skip: tuple[str, ...]) -> tuple[Template, DependencyAddons]:
    stack = cdk.Stack(cdk.App(), "Test", env=cdk.Environment(account="111111111111", region="us-west-2"))
    addons = DependencyAddons(
        stack,
        "DependencyAddons",
        cluster=eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="igw"),
        identity="irsa",
        model_buckets=["my-model-weights"],
        oidc_provider=eks.OidcProviderNative.from_oidc_provider_arn(stack, "Oidc", OIDC),
        skip=skip,
    )
    return Template.from_stack(stack), addons


def test_installed_csi_drivers_get_no_role_of_ours() -> None:
    template, addons = _addons((config.S3_CSI_ADDON, FSX_CSI_ADDON))

    assert template.find_resources("AWS::IAM::Role") == {}
    assert template.find_resources("AWS::IAM::Policy") == {}
    assert FSX_POLICY not in str(template.to_json())
    assert (addons.s3_csi_role, addons.fsx_csi_role) == (None, None)
    assert sorted(addons.addons) == sorted(
        d.name for d in pins.DEPENDENCY_ADDONS if d.name not in (config.S3_CSI_ADDON, FSX_CSI_ADDON)
    )


def test_the_drivers_the_app_installs_get_their_roles() -> None:
    template, addons = _addons(())

    assert FSX_POLICY in str(template.to_json())
    assert "my-model-weights" in str(template.find_resources("AWS::IAM::Policy"))
    assert addons.s3_csi_role is not None
    assert addons.fsx_csi_role is not None
    for name in (config.S3_CSI_ADDON, FSX_CSI_ADDON):
        assert addons.addons[name].service_account_role_arn is not None


def test_model_buckets_beside_an_installed_s3_csi_driver_are_refused() -> None:
    document = existing_document()
    document["existingCluster"]["installedAddons"] = [config.S3_CSI_ADDON]
    document["platform"]["modelBuckets"] = ["my-model-weights"]

    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document)

    (problem,) = caught.value.problems
    assert problem.startswith("platform.modelBuckets: the Mountpoint S3 CSI driver is in ")


@pytest.mark.parametrize("installed", [[], [FSX_CSI_ADDON]])
def test_model_buckets_for_a_driver_the_app_installs_are_accepted(installed: list[str]) -> None:
    document = existing_document()
    document["existingCluster"]["installedAddons"] = installed
    document["platform"]["modelBuckets"] = ["my-model-weights"]

    assert config.parse(document).platform.model_buckets == ("my-model-weights",)
