"""Response ids the gateway chooses for the Responses API, bound to the caller that made them.

Why: vLLM and SGLang take a stored response's id from the request body's ``request_id`` (an
extension field, default ``resp_<random>``) and keep the response, and the conversation a
continuation extends, under that id in the serving process's memory. Before session s35 the gateway
forwarded whatever the client sent, and asked no question of who reads a stored response:

- **A caller chose its response's id.** A request with ``request_id`` set to another tenant's
  response id overwrote that response and its conversation on the pod (the next turn of the
  victim's conversation continued the attacker's text), and taught the gateway's response affinity
  to send the victim's id to the attacker's pod (its continuations then failed with 404).
- **Any caller allowed the pool's model read, continued, cancelled or deleted any stored
  response** whose id it learned (a log line, a shared trace, a screenshot).

So the gateway refuses a client's ``request_id`` on ``POST /v1/responses`` (400, ``param:
request_id``) and writes its own (:func:`mint`): ``resp_`` + 32 hex digits of nonce + 24 hex digits
of tag, the tag a BLAKE2b digest of the caller's scope (:func:`igw.gateway.guards.caller_scope`)
and the nonce. A stored
response's retrieval, deletion, cancellation, input items and a continuation naming it are answered
404 ``response_not_found`` when the id is one of these and its tag is not the caller's
(:func:`minted_for`), before any pod is asked. The check needs no state, so it holds across gateway
replicas, workers and restarts.

The scope (:func:`~igw.gateway.guards.caller_scope`) is the caller's tenant
(``authorization.tenantClaim``) when the token carries one: the responses of a tenant are its
subjects' together, as an OpenAI project's are. A token without a tenant is scoped to its subject
(``sub``); callers the gateway knows nothing of (no authentication, or a token with neither claim)
share one scope.

What it does not do:

- The tag binds, it does not hide: it is unkeyed, so whoever holds an id can test whether a
  candidate tenant made it. A keyed tag would need one secret on every replica of every cluster
  (tier 2 sends a conversation's turns to any of them); the binding does not depend on it.
- An id of another shape (a response made before this check existed, made at a pod directly, or by
  an engine that ignores ``request_id``) is not checked: it is relayed as before.

The id a model server's answer reports is not taken on trust (:func:`believed`): the gateway
remembers which pod stores a response (:mod:`igw.scheduling.response_affinity`) by the id the pod's
answer names, and before session s40 any id was believed. A compromised pod that learnt another
tenant's id (a search for a stored response asks every candidate pod for it) named it in its answer
to any request, and the gateway then sent that tenant's continuations and retrievals of the response
to it. Now an answer to a request the gateway minted an id for is believed only when it names that id,
and an answer to any other request never names one of the minted shape (only a gateway makes those:
it can only be another request's).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Final

PREFIX: Final = "resp_"
"""What vLLM and SGLang require of a continued response's id (SGLang refuses another prefix)."""

NONCE_HEX: Final = 32
"""Hex digits of the random part: 128 bits, as the engines' own ``resp_<uuid4 hex>`` ids."""

TAG_HEX: Final = 24
"""Hex digits of the owner's tag: 96 bits, beyond guessing."""

MINTED_LENGTH: Final = len(PREFIX) + NONCE_HEX + TAG_HEX

MINTING_ENGINES: Final = frozenset({"vllm", "sglang"})
"""Engines whose stored response takes the body's ``request_id`` as its id (read in their sources:
``ResponsesRequest.request_id``). A pool of another engine gets the client's body as it was: one
that refuses unknown fields would refuse the request."""

_HEX: Final = frozenset("0123456789abcdef")

_PERSON: Final = b"igw-response-id"
"""BLAKE2b's personalisation: the digest is of this use only."""


def _tag(owner: str, nonce: str) -> str:
    data = owner.encode() + b"\x00" + nonce.encode("ascii")
    return hashlib.blake2b(data, digest_size=TAG_HEX // 2, person=_PERSON).hexdigest()


def mint(owner: str) -> str:
    """A new response id bound to ``owner`` (a :func:`~igw.gateway.guards.caller_scope`)."""
    nonce = secrets.token_hex(NONCE_HEX // 2)
    return PREFIX + nonce + _tag(owner, nonce)


def _minted_shape(response_id: str) -> bool:
    """Whether ``response_id`` has the shape :func:`mint` gives (``resp_``, then hex digits only)."""
    return (
        len(response_id) == MINTED_LENGTH
        and response_id.startswith(PREFIX)
        and _HEX.issuperset(response_id[len(PREFIX) :])
    )


def minted_for(response_id: str, owner: str) -> bool | None:
    """Whether ``response_id`` was minted for ``owner``; ``None`` for an id of another shape (not
    minted by a gateway: not checked, the module docstring)."""
    if not _minted_shape(response_id):
        return None
    nonce = response_id[len(PREFIX) : len(PREFIX) + NONCE_HEX]
    tag = response_id[len(PREFIX) + NONCE_HEX :]
    return secrets.compare_digest(tag, _tag(owner, nonce))


def believed(reported: str | None, minted: str | None) -> str | None:
    """The stored response's id a model server's answer ``reported``, as far as the gateway believes
    it (the module docstring): ``minted``, the id the gateway wrote into the request, when the answer
    names it; none when the answer names another; for a request the gateway minted no id for, the
    reported one unless it has the minted shape (another request's, claimed)."""
    if reported is None or minted is not None:
        return reported if reported == minted else None
    return None if _minted_shape(reported) else reported


REF_HEX: Final = 16
"""Hex digits of a stored response's reference in logs and spans (:func:`logged_path`): 64 bits."""
_REF_PERSON: Final = b"igw-response-ref"
_STORED_PREFIX: Final = "/v1/responses/"


def response_ref(response_id: str) -> str:
    """The reference logs and spans name a stored response by: a BLAKE2b digest of its id, the same
    at both tiers (a router line, the cluster's line and both tiers' spans join on it)."""
    digest = hashlib.blake2b(response_id.encode(), digest_size=REF_HEX // 2, person=_REF_PERSON)
    return digest.hexdigest()


def logged_id(response_id: str) -> str:
    """A stored response's id as every log line, span and logged error message writes it:
    ``{response_id:<ref>}`` (:func:`response_ref`), as in :func:`logged_path`. Why: the id reads,
    cancels and deletes the response (:func:`logged_path`); an answer to the caller who sent it may
    name it, a text that is also logged (the access line's ``error``, a span's status) may not.
    Until session s50 a tier-1 search that ran out of time wrote the id into its access line's
    ``error`` and its span's status."""
    return f"{{response_id:{response_ref(response_id)}}}"


def logged_path(path: str) -> str:
    """``path`` as an access line or a span writes it: a stored response's id
    (``/v1/responses/{id}``, its ``/cancel`` and ``/input_items``) replaced by
    ``{response_id:<ref>}`` (:func:`response_ref`); any other path as it is.

    Why: the id is what reads, cancels and deletes the response for every caller of its scope
    (and, for an id not minted here, for any caller), and logs and traces reach people and systems
    that are not callers (a log pipeline, a tracing vendor). Until session s50 the access lines of
    both tiers and the router's span (``url.path``) carried it whole. The digest is one-way: it
    joins the lines and spans about one response, and a given id's is computed to find them."""
    named = _named(path)
    if named is None:
        return path
    response_id, tail = named
    return f"{_STORED_PREFIX}{logged_id(response_id)}{tail}"


def _named(path: str) -> tuple[str, str] | None:
    """The stored response's id ``path`` names (:func:`logged_path`) and what follows it
    (``/cancel``, ``/input_items`` or nothing); ``None`` for a path naming none."""
    if not path.startswith(_STORED_PREFIX) or len(path) == len(_STORED_PREFIX):
        return None
    rest = path[len(_STORED_PREFIX) :]
    for suffix in ("/cancel", "/input_items"):
        if rest.endswith(suffix) and len(rest) > len(suffix):
            return rest[: -len(suffix)], suffix
    return rest, ""


_STORED_IN_URL: Final = re.compile(r"/v1/responses/([^/?#]+)")
"""A stored response's id in a URL (absolute or a path), wherever its ``/v1/responses/`` is."""


def logged_url(url: str, asked_path: str) -> str:
    """``url``, a URL an upstream answered with (a redirect's ``Location``), with each stored
    response's id it names written as :func:`logged_id` writes it: the id after any
    ``/v1/responses/`` in it, and the id ``asked_path`` (the request's path) names wherever else it
    stands. Why: a pod or cluster redirecting ``GET /v1/responses/<id>`` points at the id again
    (``/v1/responses/<id>/``, a framework's trailing-slash redirect), and until session s50 the
    redirect's WARNING and the access line's ``error`` wrote that ``Location`` with the id whole,
    beside an access line's path naming it by its reference. Masking credentials is not done
    here (:func:`igw.redaction.redact_url` after this)."""
    named = _named(asked_path)
    if named is not None and named[0] in url:
        url = url.replace(named[0], logged_id(named[0]))
    return _STORED_IN_URL.sub(
        lambda found: (
            found.group(0)
            if found.group(1).startswith("{response_id:")
            else f"{_STORED_PREFIX}{logged_id(found.group(1))}"
        ),
        url,
    )
