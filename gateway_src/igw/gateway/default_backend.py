"""``spec.bbr.defaultBackend``: where a request goes when its model matches no scheduler.

AWS's BBR sets ``X-Gateway-Model-Name`` and lets the HTTPRoute pick an InferencePool by it; a request
no rule matches (unknown model, or no ``model`` at all, which BBR passes through unchanged) falls to
the route's default backend, the Service ``defaultBackend: {name, port}`` (port default 8000). We do
the same inside the gateway:

- **no ``defaultBackend``** (or no ``name``): such requests get the documented 404;
- **set**: they are proxied, unscheduled, to the backend: the ``services`` entry of that name in the
  static endpoints file (round-robin over its addresses) when there is one; else the host name
  ``name.<namespace>.svc:port`` in-cluster (the Service's cluster DNS name; kube-proxy balances) or
  ``name:port`` in local mode.

The request still passes the guard (authentication, authorization of the requested model, rate
limits), its body is forwarded byte for byte with ``X-Gateway-Model-Name`` set when a model was given,
and a connect failure is a 502 (there is no next-best endpoint to retry on).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from igw.config.model import DefaultBackend

DEFAULT_BACKEND_SCHEDULER = "(default-backend)"
"""The ``scheduler`` field of the access log for requests sent to the default backend."""


class DefaultBackendResolver:
    """Turns the configured default backend into a ``host:port`` for one request."""

    def __init__(self, *, service_domain: str | None) -> None:
        self.service_domain = service_domain
        """``<namespace>.svc`` in-cluster (cluster DNS), ``None`` locally."""
        self.services: dict[str, list[str]] = {}
        """Named backends from the static endpoints file's ``services`` section."""
        self._turn = itertools.count()

    def apply_services(self, services: Mapping[str, Sequence[str]]) -> None:
        self.services = {name: list(addresses) for name, addresses in services.items()}

    def address(self, spec: DefaultBackend | None) -> str | None:
        """Where to send an unmatched request now; ``None`` = no default backend (404)."""
        if spec is None or not spec.name:
            return None
        listed = self.services.get(spec.name)
        if listed:
            return listed[next(self._turn) % len(listed)]
        host = f"{spec.name}.{self.service_domain}" if self.service_domain else spec.name
        return f"{host}:{spec.port}"
