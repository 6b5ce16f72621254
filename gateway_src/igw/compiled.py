"""The hot path compiled with mypyc: which modules, and whether the running tree's compiled ones are
the current sources.

An opt-in build (``IGW_MYPYC=1 pip install .``, or ``pip wheel``; ``setup.py`` at the repository root)
compiles :data:`COMPILED_MODULES` into C extension modules that sit next to their ``.py`` files; the
import system loads an extension module before a source file of the same name, so once built a
compiled module shadows its source. A default install and ``make test`` stay pure Python.

The shadowing is the hazard: after an edit, a stale ``.so`` would keep running the old code with
nothing to say so. The build therefore records the SHA-256 of every source it compiled in
:data:`MANIFEST_NAME` next to the package, and :func:`inspect_tree` compares every extension module
found under the package with that record: ``igw serve`` refuses to start on a mismatch
(:mod:`igw.launch`), ``igw perf gateway`` and ``igw perf decide`` print which code they measured.

Stdlib only: ``setup.py`` imports this module before any dependency is installed.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

PACKAGE_ROOT: Final = Path(__file__).resolve().parent
MYPYC_LIBRARY_SUFFIX: Final = "__mypyc"
"""mypyc puts the compiled code of a build in one shared library, ``<group>__mypyc``; the module files
are shims that load it. Not a module with a source of its own."""
MANIFEST_NAME: Final = "compiled_build.json"
"""Written by the compiled build next to the package's ``__init__.py``: ``{"modules": {name: sha256}}``."""

_SCHEDULING: Final = (
    "",
    ".builtin",
    ".columns",
    ".cycle",
    ".dispatch_ledger",
    ".engine_priority",
    ".errors",
    ".ewma",
    ".factory",
    ".flow_control",
    ".outliers",
    ".params",
    ".pick_notes",
    ".picker_config",
    ".plugins",
    ".plugins.backlog_ttft_scorer",
    ".plugins.context_length_filter",
    ".plugins.decode_balance_scorer",
    ".plugins.endpoint_speed_scorer",
    ".plugins.inflight_scorer",
    ".plugins.kv_cache_scorer",
    ".plugins.label_selector_filter",
    ".plugins.lora_affinity_scorer",
    ".plugins.lora_slot_filter",
    ".plugins.max_score_picker",
    ".plugins.no_hit_lru_scorer",
    ".plugins.output_affinity_scorer",
    ".plugins.picker_base",
    ".plugins.predicted_ttft_scorer",
    ".plugins.prefill_admission_scorer",
    ".plugins.prefill_collision_scorer",
    ".plugins.prefix_cache_scorer",
    ".plugins.prefix_index",
    ".plugins.queue_scorer",
    ".plugins.random_picker",
    ".plugins.running_requests_scorer",
    ".plugins.speed_pools",
    ".plugins.token_load_scorer",
    ".plugins.ttft_pool",
    ".plugins.utilization_detector",
    ".plugins.weighted_random_picker",
    ".recent_count",
    ".registry",
    ".request_faults",
    ".response_affinity",
    ".retry_policy",
    ".retry_spread",
    ".saturation",
    ".scheduler",
    ".settings",
    ".slot_init",
    ".upstream_plugins",
    ".values",
)
"""Every module of ``igw.scheduling`` but four, which stay interpreted:

- ``types`` and ``framework``: their ``@runtime_checkable`` protocols fail to import when compiled
  (mypyc/mypyc#909), and ``framework.UnitScores`` subclasses ``list``, which mypyc cannot compile.
  What every pick makes and reads moved out of them into compiled modules (2026-12-03, session
  s13), re-exported where they were: the records of ``types`` (``EndpointView``, ``RoutingRequest``,
  ``RoutingDecision``, ...) into ``values``, ``framework``'s ``CycleContext`` into ``cycle``;
- ``data_flow``: configuration time only, and its generic frozen dataclass ``Placed`` fails to
  import when compiled ("attribute '__dict__' of 'type' objects is not writable");
- ``gie_sections``: configuration time only (GIE's data-layer, parser, flow-control and feature-gate
  sections, judged once per picker-config load); nothing a pick runs."""

SCHEDULING_INTERPRETED: Final = ("types", "framework", "data_flow", "gie_sections")
"""The modules of ``igw.scheduling`` that :data:`_SCHEDULING` leaves out, for the reasons it gives:
every other module of the package is compiled (a test holds the two lists to the package's files, so
a new plugin is compiled or named here)."""

_REQUEST_PATH: Final = (
    "lean_server",
    "inference",
    "upstream",
    "upstream_client",
    "forwarded_answer",
    "observer",
    "request_body",
    "inference_apis",
    "access_log",
    "guards",
    "log_buffer",
    "metric_batch",
    "model_router",
    "shutdown",
    "telemetry",
    "endpoints",
    "slots",
    "retries",
)
"""The request path of ``igw.gateway``: the handler's modules, and (since 2026-12-03, session s13)
what they call per request - the guard port's ``Principal``, the access log's queue, the batched
metric updates and their series, the model look-up, the in-flight registry, the pool's views -
which were interpreted functions called from compiled code; and (session s14) the upstream pool's
connection slots, which replaced its ``asyncio.Semaphore`` (five interpreted calls per request).
In ``endpoints`` the class ``EndpointState`` was a Python class until session s26 (its own
``__setattr__`` wrote through ``object.__setattr__``, which a native class refuses); the fields a view
carries are properties now, and it is native. ``retries`` (session s30): the refusal test every
request's bookkeeping reads (``refused_status``) and the retry decision; ``inference_apis`` (session
s31): the API a request's body is parsed for, compared per request."""

_SECURITY: Final = ("guard", "authorization", "ratelimit.limiter", "verifier", "token_cache")
"""What ``igw.security`` runs per request (``authenticate``, ``authorize``, ``admit``, ``account``:
five coroutines and a dozen calls when no limit applies) and, with ``spec.auth`` set (the
benchmark's default since session s14), the JWT verifier's cache hit: ``TokenVerifier.verify`` and
``VerifiedTokenCache.get`` (session s15; until then interpreted calls from the compiled guard). Not
what a miss runs (strict parsing, claims, key look-up, signature, the principal: once per token and
``maxAge``) nor the JWKS cache (fetches, readiness: no per-request call left on a hit)."""

_SCRAPE_PATH: Final = (
    "scraper",
    "scrape_client",
    "metrics_parser",
    "page_template",
    "page_filter",
    "page_encoding",
    "scrape_share",
    "scrape_pacing",
)
"""What worker 0 runs per scrape (the scraper, its HTTP client, the page's filter, encoding check,
parser and template, the idle pacing) and what every other worker of a group runs per relayed snapshot
(``scrape_share``). Compiling them needs no ``@runtime_checkable`` protocol in them and the HTTP
client's exception class kept a Python class (``OSError`` among its bases); its connection is an
asyncio protocol by its methods, so it compiles to a native class (as the upstream client's)."""

COMPILED_MODULES: Final[tuple[str, ...]] = tuple(
    [f"igw.scheduling{name}" for name in _SCHEDULING]
    + [f"igw.gateway.{name}" for name in _REQUEST_PATH]
    + [f"igw.gateway.{name}" for name in _SCRAPE_PATH]
    + [f"igw.security.{name}" for name in _SECURITY]
)
"""What ``IGW_MYPYC=1`` compiles: the one list (``setup.py``, the compiled-build tests and
``tests/architecture/test_compiled_modules.py`` read it). The source changes compiling needs are
kept in these modules' sources (``@mypyc_attr(native_class=False)`` where a class subclasses aiohttp
or asyncio, distinct ``except ... as`` names); docs/gateway.md lists each with its symptom."""


def source_path(module: str, root: Path = PACKAGE_ROOT) -> Path:
    """The ``.py`` file of ``module`` (``igw.x.y``) under the ``igw`` package directory ``root``."""
    parts = module.split(".")[1:]
    path = root.joinpath(*parts)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def digest(path: Path) -> str:
    """SHA-256 of a source file, as the manifest records it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(modules: tuple[str, ...], root: Path = PACKAGE_ROOT) -> dict[str, dict[str, str]]:
    """The record a build writes for the sources of ``modules`` under ``root`` as they are now."""
    return {"modules": {name: digest(source_path(name, root)) for name in modules}}


def write_manifest(modules: tuple[str, ...], *, sources: Path, into: Path) -> Path:
    """Write :func:`manifest` of ``modules`` (read from ``sources``) as ``into``/:data:`MANIFEST_NAME`."""
    into.mkdir(parents=True, exist_ok=True)
    path = into / MANIFEST_NAME
    path.write_text(json.dumps(manifest(modules, sources), indent=1, sort_keys=True) + "\n")
    return path


@dataclass(frozen=True, slots=True)
class CompiledTree:
    """What :func:`inspect_tree` found: the compiled modules, and one line per one that is not the
    current source's build (empty when every compiled module matches its source)."""

    compiled: tuple[str, ...]
    stale: tuple[str, ...]

    @property
    def mode(self) -> str:
        """``"mypyc"`` when any module is compiled, else ``"python"``."""
        return "mypyc" if self.compiled else "python"

    def describe(self) -> str:
        """One line for logs and benchmark output."""
        if not self.compiled:
            return "pure Python (no mypyc-compiled module)"
        of = f"{len(self.compiled)} of {len(COMPILED_MODULES)}"
        text = f"mypyc-compiled: {of} hot-path modules"
        return text + (f"; STALE: {len(self.stale)}" if self.stale else "")


def _extension_modules(root: Path) -> dict[str, Path]:
    """Every extension module file under the package directory ``root``, by module name."""
    suffixes = sorted(importlib.machinery.EXTENSION_SUFFIXES, key=len, reverse=True)
    found: dict[str, Path] = {}
    for path in root.rglob("*"):
        suffix = next((s for s in suffixes if path.name.endswith(s)), None)
        if suffix is None:
            continue
        parts = path.relative_to(root).parts
        leaf = path.name.removesuffix(suffix)
        if leaf.endswith(MYPYC_LIBRARY_SUFFIX):
            continue  # the group's shared library, beside its modules when it holds only one
        name = ".".join(("igw", *parts[:-1], *(() if leaf == "__init__" else (leaf,))))
        found[name] = path
    return found


def inspect_tree(root: Path = PACKAGE_ROOT) -> CompiledTree:
    """The compiled modules under the ``igw`` package directory ``root`` and whether each was built
    from the ``.py`` beside it (the digest recorded at build time against the file's now)."""
    extensions = _extension_modules(root)
    manifest_path = root / MANIFEST_NAME
    recorded: dict[str, str] = {}
    if manifest_path.is_file():
        recorded = json.loads(manifest_path.read_text()).get("modules", {})
    stale: list[str] = []
    for name, extension in sorted(extensions.items()):
        source = source_path(name, root)
        if name not in recorded:
            stale.append(
                f"{extension} is not in {manifest_path} (not built by igw's compiled build): "
                "delete it or rebuild with IGW_MYPYC=1"
            )
        elif source.is_file() and digest(source) != recorded[name]:
            stale.append(
                f"{source} changed after {name} was compiled ({extension} runs the old code): "
                "rebuild with IGW_MYPYC=1 or delete the compiled module"
            )
    return CompiledTree(compiled=tuple(sorted(extensions)), stale=tuple(stale))
