"""kopf's record of the configuration it last handled, kept as a digest instead of a copy.

Why: kopf tells an update from a no-op by comparing an object with the "essence" (spec, labels,
annotations) it last handled, which it keeps in an annotation on the object. The API server limits
an object's annotations to 256 KiB together, and ``kubectl apply`` keeps a copy of the whole object
there as well (``last-applied-configuration``). So an InferenceGatewayConfig whose spec was larger
than about 128 KiB, which the CRD allows (16 schedulers with 50 LoRA adapters each come to 160 KiB),
was applied by ``kubectl``, and then kopf's write of its own copy was refused with 422 after every
pass, logged as an error each time, and the object was never recorded as handled (found by probing,
session s38).

The handlers here re-read the object and never use kopf's ``old``, ``new`` or ``diff``; they need
from kopf only whether the essence changed. A SHA-256 of the essence tells that, in 80 bytes
whatever the spec's size. An object handled before this change holds the full essence: it differs
from any digest, so its first event after an upgrade runs one more (idempotent) pass and stores the
digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, cast

import kopf


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """:class:`kopf.AnnotationsDiffBaseStorage` whose stored and compared essence is a digest."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        essence = super().build(body=body, extra_fields=extra_fields)
        canonical = json.dumps(essence, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return cast(kopf.BodyEssence, {"sha256": hashlib.sha256(canonical.encode()).hexdigest()})
