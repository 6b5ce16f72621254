"""Request body fields and headers no tenant may send to a model server that serves every tenant.

Why: a pool's pods serve every tenant of the gateway, and the engines' request models take
extension fields that reach past the request itself: into code the server runs, into the engine's
own bookkeeping of requests, into another request's state, into where the engine places a request.
Forwarded as they came (before session s39 for the first two, s40 for the rest), any authenticated
tenant could use them against the others. Read in the engines' request models (vLLM's and SGLang's
OpenAI-compatible ones):

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
- ``bootstrap_host``, ``bootstrap_port``, ``bootstrap_room``, ``disagg_prefill_dp_rank`` (SGLang) and
  ``kv_transfer_params`` (vLLM): where a disaggregated (prefill/decode) server fetches or hands over a
  request's KV cache - the prefill server's address, the transfer's room and the prefill rank that
  holds it, or the remote engine, host and block ids. ``ec_transfer_params`` (vLLM, since s40): the
  same for encoder-cache disaggregation (where a multimodal input's encoder output is fetched from,
  peer host and port per input hash). A tenant choosing them points the server at an address of its
  choice or at another request's cache. Ignored by a server that is not disaggregated; a router in
  front of disaggregated servers writes them itself.
- ``routed_dp_rank`` and its deprecated alias ``data_parallel_rank`` (SGLang, since s40): the
  data-parallel rank the request runs on, past the engine's own balancing of every tenant's requests
  over its ranks (SGLang's default dispatch is round robin, blind to load): a tenant pinning its load
  to one rank makes the others' requests dispatched there queue behind all of it, where the pod's
  metrics, which the gateway schedules by, show an average.
- ``routing_key`` (SGLang, since s41): the key of SGLang's ``--schedule-policy routing-key``, which
  sorts the server's waiting queue so that requests whose key is held by the most running requests
  go first, ahead of every request without it. Meant for a router's session affinity; chosen by a
  tenant, it moves that tenant's queued requests ahead of the others' on a pod they share (keep one
  key hot with a few long requests, then send the rest under it), past the ``priority`` the gateway
  writes. SGLang reads it from ``/generate``'s body and, on its OpenAI routes, from the
  ``X-SMG-Routing-Key`` header (:func:`refused_header`).
- ``vllm_xargs`` entries ``kv_transfer_params`` and ``ec_transfer_params``: vLLM copies
  ``vllm_xargs`` into the request's ``extra_args``, where its engine reads the transfer parameters
  (``Request.kv_transfer_params = extra_args.get("kv_transfer_params")``): a second road to the
  fields above. Other ``vllm_xargs`` entries (arguments for extensions the operator installed) pass.

Headers do the same (:func:`refused_header`): vLLM takes a client's ``X-Data-Parallel-Rank`` as the
request's data-parallel rank (``_get_data_parallel_rank``, no flag), as recent SGLang's OpenAI routes
do (over the body's ``routed_dp_rank``), SGLang's OpenAI routes take ``X-SMG-Routing-Key`` as the
request's ``routing_key``,
and SGLang started with ``SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES`` replaces body fields with the
``x-override-*`` headers' values (``x-override-rid``, ``-bootstrap-host``/``-port``/``-room``,
``-routed-dp-rank``, ``-disagg-prefill-dp-rank``, ``-priority``, ``-conversation-id``): a channel for
a router in front of the server that leaves the body opaque, never a client's - and through it the
refused fields, or a ``priority`` over the one the gateway writes (``enginePriority``).

An authenticated request carrying one of them (a field not ``null``) is refused, 400
``invalid_request`` naming the field or header, nothing sent (:mod:`igw.gateway.inference`), unless
``spec.extensions.authorization.allowedEngineFields`` names the field (a deployment whose tenants
are trusted with it: a router of their own in front). Without ``spec.auth`` (no tenants: network
controls only) the request goes as it came, and the model server's own flags decide.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

_RUNS_CODE: Final = "asks the model server to run code the caller supplies"
_KV_TRANSFER: Final = (
    "tells a disaggregated model server where to fetch or hand over a request's KV cache; "
    "the router in front of such servers sets it"
)
_ENCODER_TRANSFER: Final = (
    "tells a model server serving multimodal inputs disaggregated where to fetch or hand over an "
    "input's encoder cache; the router in front of such servers sets it"
)
_DP_RANK: Final = (
    "pins the request to one data-parallel rank of the model server, past the engine's balancing of "
    "every tenant's requests over its ranks"
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
    "disagg_prefill_dp_rank": _KV_TRANSFER,
    "kv_transfer_params": _KV_TRANSFER,
    "ec_transfer_params": _ENCODER_TRANSFER,
    "routed_dp_rank": _DP_RANK,
    "data_parallel_rank": _DP_RANK,
    "routing_key": (
        "moves the request ahead of other callers' in the model server's waiting queue (SGLang's "
        "--schedule-policy routing-key runs first the requests whose key running requests hold), "
        "past the priority the gateway writes"
    ),
}
"""Each refused field and why (the error message's reason); the names
``allowedEngineFields`` may list (its schema's enum is this table's keys, a test holds them equal)."""

XARGS_FIELD: Final = "vllm_xargs"
XARGS_REFUSED: Final = ("kv_transfer_params", "ec_transfer_params")
"""The ``vllm_xargs`` entries vLLM's engine reads as the body fields of those names."""

DP_RANK_HEADER: Final = "x-data-parallel-rank"
ROUTING_KEY_HEADER: Final = "x-smg-routing-key"
"""SGLang's OpenAI routes take it as the request's ``routing_key``; allowed with that field."""
_SCANNED_NAMES: Final = frozenset((*TENANT_REFUSED_FIELDS, XARGS_FIELD))
"""The body keys :func:`engine_fields` looks at."""
OVERRIDE_PREFIX: Final = "x-override-"
_DP_RANK_FIELDS: Final = ("routed_dp_rank", "data_parallel_rank")
"""The fields ``X-Data-Parallel-Rank`` sets (SGLang's and vLLM's name): allowing either allows it."""


def engine_fields(body: Mapping[str, object]) -> tuple[str, ...]:
    """The fields of :data:`TENANT_REFUSED_FIELDS` that the parsed JSON object ``body`` sets (a
    ``null`` asks for nothing), in the table's order, then ``vllm_xargs.<name>`` for each
    :data:`XARGS_REFUSED` entry its ``vllm_xargs`` sets; ``()`` when none (the usual case).

    Run on every request's body: a body naming none of the fields and no ``vllm_xargs`` (the usual
    case) is answered by one set comparison of its keys, not a look-up per table field."""
    if _SCANNED_NAMES.isdisjoint(body.keys()):
        return ()
    found = [name for name in TENANT_REFUSED_FIELDS if body.get(name) is not None]
    xargs = body.get(XARGS_FIELD)
    if isinstance(xargs, dict):
        found.extend(f"{XARGS_FIELD}.{name}" for name in XARGS_REFUSED if xargs.get(name) is not None)
    return tuple(found) if found else ()


def refused_field(fields: Iterable[str], allowed: frozenset[str]) -> str | None:
    """The first of ``fields`` (:func:`engine_fields`) whose table field ``allowed`` does not name
    (``vllm_xargs.kv_transfer_params`` is allowed with ``kv_transfer_params``); ``None``: none."""
    for name in fields:
        if name.rpartition(".")[2] not in allowed:
            return name
    return None


def refused_header(names: Iterable[str], allowed: frozenset[str]) -> str | None:
    """The first of the request's header ``names`` that sets an engine field no tenant may send
    (``X-Data-Parallel-Rank``, ``X-SMG-Routing-Key``, any ``x-override-*``) and ``allowed`` does not
    name, lower-case;
    ``None``: none. An ``x-override-*`` header is allowed when its field is (``x-override-rid``:
    ``rid``); those of fields outside the table (``priority``, ``conversation_id``) never are: the
    body carries them."""
    for name in names:
        if name[:1] not in "xX":  # every refused name starts with "x-" (no other character lowers to "x")
            continue
        lower = name.lower()
        if lower == DP_RANK_HEADER:
            if allowed.isdisjoint(_DP_RANK_FIELDS):
                return lower
        elif lower == ROUTING_KEY_HEADER:
            if "routing_key" not in allowed:
                return lower
        elif lower.startswith(OVERRIDE_PREFIX) and _override_field(lower) not in allowed:
            return lower
    return None


def _override_field(header: str) -> str:
    """The body field an ``x-override-*`` header replaces (``x-override-bootstrap-host``:
    ``bootstrap_host``), as SGLang's table names them."""
    return header[len(OVERRIDE_PREFIX) :].replace("-", "_")


def refusal_message(field: str) -> str:
    """The 400's message for an authenticated request that sets ``field`` (a name
    :func:`engine_fields` returns)."""
    container, _, name = field.rpartition(".")
    reason = TENANT_REFUSED_FIELDS[name]
    if container:
        reason = f"is read by the model server as '{name}', which {reason}"
    return (
        f"'{field}' {reason}; the gateway does not forward it for an authenticated tenant (the model "
        "server's pods serve every tenant)"
    )


def header_refusal_message(header: str) -> str:
    """The 400's message for an authenticated request that sends ``header`` (a name
    :func:`refused_header` returns)."""
    if header == DP_RANK_HEADER:
        why = _DP_RANK
    elif header == ROUTING_KEY_HEADER:
        reason = TENANT_REFUSED_FIELDS["routing_key"]
        why = f"is read by SGLang as the request's 'routing_key', which {reason}"
    else:
        field = _override_field(header)
        why = (
            f"makes a model server that takes header overrides (SGLang with "
            f"SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES) replace the body's '{field}' with its value, "
            "a channel for a router in front of the server"
        )
        if field in TENANT_REFUSED_FIELDS:
            why += f"; '{field}' {TENANT_REFUSED_FIELDS[field]}"
        else:
            why += f"; send '{field}' in the request body"
    return (
        f"header '{header}' {why}; the gateway does not forward it for an authenticated tenant (the "
        "model server's pods serve every tenant)"
    )
