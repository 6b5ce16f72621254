"""The Lambda layer with ``kubectl`` and ``helm`` that CDK's kubectl handler runs, matched to the cluster.

Every manifest and Helm chart the stacks apply goes through CDK's kubectl handler, which runs the
``kubectl`` and ``helm`` of the layer it is given. kubectl supports a control plane one minor version
older or newer than itself; a single layer for every version the deployment config accepts (the app
used kubectl 1.34 for all of 1.31-1.34) put a 1.31 or 1.32 cluster outside that skew. So each
supported Kubernetes version gets the layer package of its own minor version
(``aws-cdk.lambda-layer-kubectl-vNN``, declared for each in ``pyproject.toml``'s ``cdk`` extra).
"""

from __future__ import annotations

import importlib
from typing import Final

from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from igw.addon import pins

PACKAGE_PREFIX: Final = "aws-cdk.lambda-layer-kubectl-v"
"""The PyPI name of a version's layer package is this prefix and the minor version (``...-v34``)."""


def minor_of(kubernetes_version: str) -> str:
    """``"1.34"`` -> ``"34"``."""
    major, _, minor = kubernetes_version.partition(".")
    if major != "1" or not minor.isdigit():
        raise ValueError(f"not a Kubernetes 1.x version: {kubernetes_version!r}")
    return minor


def layer_package(kubernetes_version: str) -> str:
    """The PyPI package of the layer for ``kubernetes_version``."""
    return f"{PACKAGE_PREFIX}{minor_of(kubernetes_version)}"


def kubectl_layer(scope: Construct, id_: str, *, kubernetes_version: str) -> lambda_.ILayerVersion:
    """A layer whose kubectl and helm match ``kubernetes_version`` (one of the supported versions)."""
    if kubernetes_version not in pins.SUPPORTED_KUBERNETES_VERSIONS:
        raise ValueError(
            f"Kubernetes {kubernetes_version} is not supported (supported: "
            f"{', '.join(pins.SUPPORTED_KUBERNETES_VERSIONS)})"
        )
    minor = minor_of(kubernetes_version)
    module_name = f"aws_cdk.lambda_layer_kubectl_v{minor}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"Kubernetes {kubernetes_version} needs the kubectl layer package "
            f"{layer_package(kubernetes_version)} (pip install -e '.[cdk]')"
        ) from exc
    layer: lambda_.ILayerVersion = getattr(module, f"KubectlV{minor}Layer")(scope, id_)
    return layer
