"""Public face of engine-version handling: image tags → versions, and the model-server check.

``parse_version_tag``/``engine_version`` live in :mod:`igw.config.image_refs`; the requirements
(kept as data in the engine catalogue, :mod:`igw.engines`) are evaluated by
:mod:`igw.config.model_servers`. Import from here.
"""

from __future__ import annotations

from igw.config.image_refs import (
    EngineVersion,
    ImageReference,
    KnownVersion,
    UnknownVersion,
    engine_version,
    parse_image_reference,
    parse_version_tag,
)
from igw.config.model_servers import (
    EngineRequirements,
    ModelServerCheck,
    RequirementResult,
    Verdict,
    check_model_server,
    load_requirements,
)

__all__ = [
    "EngineRequirements",
    "EngineVersion",
    "ImageReference",
    "KnownVersion",
    "ModelServerCheck",
    "RequirementResult",
    "UnknownVersion",
    "Verdict",
    "check_model_server",
    "engine_version",
    "load_requirements",
    "parse_image_reference",
    "parse_version_tag",
]
