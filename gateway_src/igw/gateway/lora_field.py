"""The LoRA adapter a request is served by is the one it was authorized for: SGLang's ``lora_path``.

Why: the gateway routes, authorizes (``authorization.modelAccess``) and rate-limits a request by
the model its ``model`` field names, an adapter by its own name. SGLang's OpenAI-compatible
request models (completions, chat completions, embeddings, ...) take a second way to name one, the
extension field ``lora_path`` (read in its source, ``serving_base._resolve_lora_path``: an adapter
in ``model`` as ``base:adapter``, else ``lora_path``), and ignore a ``model`` without a colon. Before
session s39 the gateway forwarded the client's field as it was, so, measured through the gateway
in front of an SGLang pool:

- a tenant allowed only the base model ``m`` sent ``{"model": "m", "lora_path": "secret-adapter"}``
  and the pod was asked for the adapter it was refused by name (403 for ``"model":
  "secret-adapter"``, 200 this way);
- a tenant allowed only the adapter ``m-adapter`` sent ``{"model": "m-adapter"}``, as the gateway
  documents, and the pod got no ``lora_path``: SGLang answered with the base model, which the
  tenant may not use (the engine-side twin of session s34's header-named model on vLLM).

So a client's ``lora_path`` must name the adapter its ``model`` was authorized as (or be ``null``):
anything else is refused, 400 ``invalid_request`` naming the field (:func:`lora_path_refusal`).
And a request routed to an adapter of an SGLang pool gets ``lora_path`` written by the gateway
(:data:`LORA_PATH_ENGINES`), so the engine serves the adapter the gateway authorized. vLLM names an
adapter by ``model`` only (it ignores the field), so its pools get the body as before.
"""

from __future__ import annotations

from typing import Final

FIELD: Final = "lora_path"

LORA_PATH_ENGINES: Final = frozenset({"sglang"})
"""Engines that pick a request's LoRA adapter by the body's ``lora_path`` rather than its ``model``."""


def lora_path_refusal(given: str | None, *, adapter: str | None, model: str | None) -> str | None:
    """Why a body's ``lora_path`` ``given`` (``None``: absent or ``null``) is refused for a request
    authorized as ``model``, which is adapter ``adapter`` (``None``: a base model, or a model only
    the default backend knows); else ``None``."""
    if given is None or given == adapter:
        return None
    return (
        f"'lora_path' names adapter {given!r}, but the request is for model {model!r}: an adapter "
        "is routed, authorized and rate-limited by its own name in 'model', so name it there"
    )
