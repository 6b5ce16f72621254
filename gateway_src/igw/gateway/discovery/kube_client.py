"""One way to build a Kubernetes API client for every igw process that talks to a cluster.

The gateway (pod discovery, its ConfigMap sync), the operator and the pre-flight checks all connect the
same way: an explicit kubeconfig or context when given, in-cluster service-account credentials when the
process runs in a pod, else the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``).
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from igw.errors import IgwGatewayError


class KubeClientError(IgwGatewayError):
    """No usable cluster credentials: a missing or invalid kubeconfig or context, or in-cluster
    configuration without its service-account files. Commands print it as one line and exit."""


def make_api_client(*, kubeconfig: str | None, context: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` for the cluster this process should talk to.

    Raises :class:`KubeClientError` (never the client library's own exceptions) when no
    credentials can be loaded, so every command reports it the same way.
    """
    # deferred: start-up cost: the kubernetes client is heavy and only cluster-facing paths need it
    import kubernetes

    configuration = kubernetes.client.Configuration()
    if kubeconfig is not None and not os.path.exists(kubeconfig):
        # the client library says "Invalid kube-config file. No configuration found." for a path
        # that does not exist, which sends people looking at the file's contents
        raise KubeClientError(f"cannot load kubeconfig {kubeconfig}: no such file")
    in_cluster = kubeconfig is None and context is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    default = os.path.expanduser(kubernetes.config.KUBE_CONFIG_DEFAULT_LOCATION)
    if (
        kubeconfig is None
        and not in_cluster
        and not os.environ.get("KUBECONFIG")
        and not os.path.exists(default)
    ):
        # the library's words for this are the same "Invalid kube-config file. No configuration found."
        raise KubeClientError(
            f"cannot load cluster credentials: not running in a pod and no kubeconfig at {default} "
            "($KUBECONFIG is not set): pass --kubeconfig FILE"
        )
    try:
        if in_cluster:
            kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
    except (kubernetes.config.ConfigException, OSError) as exc:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "cluster credentials"
        raise KubeClientError(f"cannot load {where}: {exc}") from exc
    except (ValueError, yaml.YAMLError, TypeError, AttributeError, KeyError) as exc:
        # The client library reads the file with no check of its own: a file that is not UTF-8, not
        # YAML, or YAML of another shape (a list, a string) ended igw operator and igw serve
        # --in-cluster in a UnicodeDecodeError, ParserError or TypeError traceback.
        where = kubeconfig or os.environ.get("KUBECONFIG") or default
        raise KubeClientError(f"cannot load kubeconfig {where}: {_not_a_kubeconfig(exc)}") from exc
    configuration.retries = 1
    return kubernetes.client.ApiClient(configuration)


def _not_a_kubeconfig(exc: Exception) -> str:
    """Why a kubeconfig file could not be used, quoting none of its contents (it holds credentials)."""
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        return f"not valid YAML (line {exc.problem_mark.line + 1}, column {exc.problem_mark.column + 1})"
    if isinstance(exc, yaml.YAMLError):
        return "not valid YAML"
    return "not a kubeconfig (expected a mapping with clusters, contexts, users and current-context)"


def unreachable_reason(exc: BaseException) -> str:
    """Why a request got no answer from the API server, in a few words: urllib3's ``MaxRetryError``
    repeats the pool, URL and connection object around the reason (``[Errno 111] Connection
    refused``), which is what an operator needs."""
    reason: BaseException = getattr(exc, "reason", None) or exc
    text = str(reason)
    cause = text.rsplit(": ", 1)[-1].rstrip(")\"'") if "Failed to establish" in text else text
    return cause or type(exc).__name__
