"""The simulator's tokenisation and prefix-block hashing (one scheme for the DES and the live servers).

Real engines hash token ids. The simulator has no tokenizer, so it uses a fixed, documented stand-in:
one token is :data:`CHARS_PER_TOKEN` characters of prompt text, and a KV block of ``block_size`` tokens
covers ``block_size * CHARS_PER_TOKEN`` characters. Block hashes are chained (each block's hash folds in
its parent's), exactly like vLLM's automatic prefix caching, so two prompts share cached blocks iff
they share a character prefix of whole blocks. Because the live server and the DES call the same
functions on the same prompt text, a workload produces identical cache behaviour in both.
"""

from __future__ import annotations

import math
import random
from typing import Final

import xxhash

CHARS_PER_TOKEN: Final = 4
"""Characters of prompt text per simulated token (the usual English-text rule of thumb)."""

_ROOT_SEED = 0x1657_A11C_E5ED


def count_tokens(text: str) -> int:
    """Token count of ``text`` under the simulator's scheme (at least 1 for a non-empty prompt)."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN)) if text else 0


VOCAB_SIZE: Final = 128_256
"""Token ids are drawn from a Llama-3-sized vocabulary (only their equality matters to routers)."""


def token_ids(text: str) -> list[int]:
    """Stand-in token ids for ``text``: one id per :data:`CHARS_PER_TOKEN` characters.

    Served by the vLLM-flavoured ``/tokenize`` and ``/v1/completions/render`` endpoints so that routers
    which match prefixes on token ids (vllm-router's ``cache_aware``) see the same prefix structure the
    engine's block cache sees: equal text chunks give equal ids, so a shared character prefix is a
    shared token-id prefix.
    """
    digest = xxhash.xxh32_intdigest
    return [
        digest(text[i : i + CHARS_PER_TOKEN].encode(), seed=_ROOT_SEED & 0xFFFF_FFFF) % VOCAB_SIZE
        for i in range(0, len(text), CHARS_PER_TOKEN)
    ]


_ID_DIGITS: Final = "0123456789abcdefghijklmnopqrstuvwxyz"


def token_ids_text(ids: list[int]) -> str:
    """Prompt text standing for a token-id prompt: each id spelled as :data:`CHARS_PER_TOKEN` base-36
    digits (36**4 > :data:`VOCAB_SIZE`), so the prompt counts ``len(ids)`` tokens and two id prompts
    share cached blocks iff they share an id prefix of whole blocks. (The ids the simulator hands out
    for a text are hashes, so this text is not the one ``/tokenize`` was given.)"""
    digits = _ID_DIGITS
    out = []
    for i in ids:
        chunk = ""
        for _ in range(CHARS_PER_TOKEN):
            i, d = divmod(i, 36)
            chunk = digits[d] + chunk
        out.append(chunk)
    return "".join(out)


def block_hashes(text: str, *, block_size: int, salt: str = "") -> tuple[int, ...]:
    """Chained 64-bit hashes of every *full* block of ``text``.

    ``salt`` plays the role of vLLM's extra keys (the LoRA adapter): the same text under a different
    adapter must not hit the base model's cache.
    """
    chunk = block_size * CHARS_PER_TOKEN
    full = len(text) // chunk
    parent = xxhash.xxh64_intdigest(salt.encode(), seed=_ROOT_SEED) if salt else _ROOT_SEED
    out: list[int] = []
    digest = xxhash.xxh64_intdigest
    for i in range(full):
        parent = digest(text[i * chunk : (i + 1) * chunk].encode(), seed=parent)
        out.append(parent)
    return tuple(out)


OUTPUT_TOKENS: Final = (" the", " and", " of ", " to ", " in ", " is ", " it ", " for", " on ", " as ")
"""The vocabulary of generated text: every token is exactly :data:`CHARS_PER_TOKEN` characters."""


def output_token_text(index: int) -> str:
    """Text of the ``index``-th (0-based) generated token; identical in the DES and on the live servers."""
    return OUTPUT_TOKENS[index % len(OUTPUT_TOKENS)]


def generated_text(tokens: int) -> str:
    """The full text a simulated engine generates for ``tokens`` output tokens.

    Deterministic, so a follow-up turn that sends prompt + answer + new question hits the KV blocks the
    first turn cached for its answer (vLLM caches generated-token blocks too).
    """
    cycle = "".join(OUTPUT_TOKENS)
    full, rest = divmod(tokens, len(OUTPUT_TOKENS))
    return cycle * full + cycle[: rest * CHARS_PER_TOKEN]


def request_block_hashes(
    prompt_text: str, *, output_tokens: int, block_size: int, salt: str = ""
) -> tuple[int, ...]:
    """Hashes of every full block of the prompt followed by the text the engine will generate."""
    return block_hashes(prompt_text + generated_text(output_tokens), block_size=block_size, salt=salt)


def synthetic_text(*, tokens: int, rng: random.Random) -> str:
    """Filler text of exactly ``tokens`` tokens drawn from ``rng`` (hex digits: unique, cheap, exact)."""
    need = tokens * CHARS_PER_TOKEN
    return rng.randbytes((need + 1) // 2).hex()[:need]
