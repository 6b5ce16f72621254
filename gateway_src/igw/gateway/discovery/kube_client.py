"""One way to build a Kubernetes API client for every igw process that talks to a cluster.

The gateway (pod discovery, its ConfigMap sync), the operator and the pre-flight checks all connect the
same way: an explicit kubeconfig or context when given, in-cluster service-account credentials when the
process runs in a pod, else the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``).
"""

from __future__ import annotations

import os
from typing import Any


def make_api_client(*, kubeconfig: str | None, context: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` for the cluster this process should talk to."""
    # deferred: start-up cost: the kubernetes client is heavy and only cluster-facing paths need it
    import kubernetes

    configuration = kubernetes.client.Configuration()
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    configuration.retries = 1
    return kubernetes.client.ApiClient(configuration)
