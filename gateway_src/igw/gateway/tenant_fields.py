"""Request body fields no tenant may send to a model server that serves every tenant.

Why: a pool's pods serve every tenant of the gateway, and the engines' request models take
extension fields that reach past the request itself: into code the server runs, into the engine's
own bookkeeping of requests, into another request's state. Forwarded as they came (before session
s39 for the first two, s40 for the rest), any authenticated tenant could use them against the
others. Read in the engines' request models (vLLM's and SGLang's OpenAI-compatible ones):

- ``custom_logit_processor`` (SGLang: a serialized Python callable, unpickled and run when the
  server was started with ``--enable-custom-logit-processor``) and ``logits_processors`` (vLLM:
  classes loaded by qualified name where ``--logits-processor-pattern`` allows): code the caller
  chose, run in the process that holds every tenant's prompts and answers.
- ``rid`` (SGLang): the engine's id for the request, which keys its in-flight state and its aborts
  (``/abort_request`` takes it) and is the answer's ``id``. A second request under an id in flight
  is refused by recent SGLang (``Duplicate request ID detected``); older releases replaced the first
  request's state, so its output went to the second caller. A tenant naming another's id could so
  make that tenant's requests fail or, on older servers, read their output.
- ``session_params`` (SGLang): continues a session opened on the server (``/open_session``, which
  the gateway does not route): the request is appended to the session's earlier requests, their
  prompts and answers, so a tenant naming another's session id generates from that conversation.
- ``bootstrap_host``, ``bootstrap_port``, ``bootstrap_room`` (SGLang) and ``kv_transfer_params``
  (vLLM): where a disaggregated (prefill/decode) server fetches or hands over a request's KV cache -
  the prefill server's address and the transfer's room, or the remote engine, host and block ids.
  A tenant choosing them points the server at an address of its choice or at another request's
  cache. Ignored by a server that is not disaggregated; a router in front of disaggregated servers
  writes them itself.

An authenticated request carrying one of them (not ``null``) is refused, 400 ``invalid_request``
naming the field, nothing sent (:mod:`igw.gateway.inference`). Without ``spec.auth`` (no tenants:
network controls only) the body goes as it came, and the model server's own flags decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

_RUNS_CODE: Final = "asks the model server to run code the caller supplies"
_KV_TRANSFER: Final = (
    "tells a disaggregated model server where to fetch or hand over a request's KV cache; "
    "the router in front of such servers sets it"
)

TENANT_REFUSED_FIELDS: Final[Mapping[str, str]] = {
    "custom_logit_processor": _RUNS_CODE,
    "logits_processors": _RUNS_CODE,
    "rid": (
        "chooses the model server's own id for the request, under which another caller's request "
        "may be in flight; send an X-Request-Id header to name a request"
    ),
    "session_params": (
        "continues a session stored on the model server, whose earlier prompts and answers "
        "the request would extend"
    ),
    "bootstrap_host": _KV_TRANSFER,
    "bootstrap_port": _KV_TRANSFER,
    "bootstrap_room": _KV_TRANSFER,
    "kv_transfer_params": _KV_TRANSFER,
}
"""Each refused field and why (the error message's reason)."""


def refused_field(body: Mapping[str, object]) -> str | None:
    """The first of :data:`TENANT_REFUSED_FIELDS` that the parsed JSON object ``body`` sets (a
    ``null`` asks for nothing); ``None`` when it sets none."""
    for name in TENANT_REFUSED_FIELDS:
        if body.get(name) is not None:
            return name
    return None


def refusal_message(field: str) -> str:
    """The 400's message for an authenticated request that sets ``field``."""
    return (
        f"'{field}' {TENANT_REFUSED_FIELDS[field]}; the gateway does not forward it for an "
        "authenticated tenant (the model server's pods serve every tenant)"
    )
