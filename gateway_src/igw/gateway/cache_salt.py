"""Each tenant's prompts in a prefix cache of their own: the ``cache_salt`` the gateway writes.

Why: a model server's prefix cache is shared by everyone its pod serves. A prompt whose leading
blocks another caller sent moments ago is prefilled faster and, with vLLM's
``--enable-prompt-tokens-details``, reports them as ``cached_tokens``: a caller can test whether
anyone sent a given prefix (another tenant's system prompt, a document, a question), one guess per
request. vLLM and SGLang take a ``cache_salt`` in the body of a completion, chat completion or
Responses API request and keep blocks of different salts apart (vLLM mixes it into the first block's
hash; SGLang keys its radix tree by it).

With ``spec.extensions.authorization.prefixCacheIsolation: tenant`` the guard gives each caller a
salt of its scope (:func:`scope_salt` of :func:`igw.gateway.guards.caller_scope`: the tenant, else
the token's subject), and the gateway writes it into every such request to a vLLM or SGLang pool
(:func:`request_salt`). A client's own ``cache_salt`` (vLLM's way to keep one user's prompts from
another's) is mixed into the tenant's, never replacing it: it can divide a tenant's cache further,
not reach another's. The salts are 32 hex digits each, so SGLang's concatenation with a client's
``extra_key`` cannot reach another tenant's key either.

The price: tenants no longer share cached prefixes (a system prompt they all send is prefilled
once per tenant per pod). The default, ``shared``, writes nothing. The prefix-cache scorer hashes a
salted request's blocks under its salt (``RoutingRequest.cache_salt``), so it no longer predicts
hits across salts that the engine will not give.

Not salted: the Anthropic Messages API (vLLM's request model of it has no ``cache_salt``: read in
its source) and engines other than vLLM and SGLang.
"""

from __future__ import annotations

import hashlib
from typing import Final

from igw.gateway.inference_apis import InferenceApi

SALTING_ENGINES: Final = frozenset({"vllm", "sglang"})
"""Engines that read ``cache_salt`` (their completion, chat and Responses request models)."""

SALTED_APIS: Final = frozenset({InferenceApi.COMPLETIONS, InferenceApi.CHAT, InferenceApi.RESPONSES})
"""The APIs whose requests carry it."""

SALT_HEX: Final = 32
"""Hex digits of a salt: 128 bits."""

_PERSON: Final = b"igw-cache-salt"


def _digest(data: str) -> str:
    return hashlib.blake2b(data.encode(), digest_size=SALT_HEX // 2, person=_PERSON).hexdigest()


def scope_salt(scope: str) -> str:
    """The salt of a caller scope's prompts (computed once per verified token, by the guard)."""
    return _digest("scope\x00" + scope)


def request_salt(scope: str | None, client: str | None) -> str | None:
    """The salt a request's prefix is cached under, 32 hex digits: ``scope`` (the caller's
    :func:`scope_salt`; ``None``: isolation off) mixed with the client's own ``client`` when it gave
    one - the value the gateway writes; with isolation off, a digest of the client's own (the
    engine reads the client's value, the gateway only tells salts apart: a digest, so that a
    client's megabyte of salt is not what the prefix index keeps), else ``None``."""
    if scope is None:
        return _digest("client\x00" + client) if client else None
    if not client:
        return scope
    return _digest(scope + "\x00" + client)
