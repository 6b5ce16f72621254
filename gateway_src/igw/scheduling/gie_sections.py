"""The parts of a GIE v1.3-v1.5 ``EndpointPickerConfig`` that are not scheduling plugins.

GIE's releases added top-level sections and plugin types around the scheduler: the data layer
(``data`` in v1.3-v1.4, ``dataLayer`` in v1.5, with ``metrics-data-source`` and the
``model-server-protocol-metrics`` / ``core-metrics-extractor`` plugins that GIE v1.5's Helm chart
writes into every default config), the request ``parser`` (v1.5), ``flowControl`` with its policy
plugins (v1.4+), and ``featureGates`` (v1.2+). A file written for GIE must load here, so each is
read and judged against what igw does:

* what igw does anyway is accepted without a word: a metrics data source at ``http`` ``/metrics``,
  an extractor whose metric specs are the ones igw reads for that engine, ``openai-parser``, the
  ``dataLayer`` / ``prepareDataPlugins`` / ``enableLegacyMetrics`` gates;
* what igw does not use but routing does not depend on is accepted with a warning naming its path
  (the extractor's ``engineLabelKey`` / ``defaultEngine``: igw reads a scheduler's pods as the
  engine its ``engineType`` names; mappings for engines igw has no entry for; flow-control policy
  plugins and a ``flowControl`` section that GIE itself ignores without the ``flowControl`` gate);
* what would route differently from GIE is refused, naming the path: a metrics page elsewhere
  than ``http`` ``/metrics``, an extractor reading other metric names than igw for the same engine,
  a parser other than OpenAI's, the ``flowControl`` gate (igw's queueing is configured in
  ``spec.extensions.flowControl`` of the InferenceGatewayConfig), an unknown gate (GIE refuses it).

:func:`check_sections` validates the sections' shape and references as GIE's strict loader does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from igw.engines import ENGINES, Engine, parse_metric_spec
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.framework import Plugin, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.registry import PluginFactory

METRICS_DATA_SOURCE: Final = "metrics-data-source"
EXTRACTOR_TYPES: Final = ("core-metrics-extractor", "model-server-protocol-metrics")
"""GIE v1.5's name and GIE v1.3-v1.4's name of the metrics extractor."""
OPENAI_PARSER: Final = "openai-parser"
REFUSED_PARSERS: Final[Mapping[str, str]] = {
    "vllmgrpc-parser": "igw speaks OpenAI-compatible HTTP to model servers, not vLLM's gRPC protocol",
    "passthrough-parser": "igw reads every request body as OpenAI JSON (model, prompt, LoRA) and answers "
    "400 to one that is not; it has no pass-through mode",
}
FLOW_POLICY_TYPES: Final = (
    "global-strict-fairness-policy",
    "round-robin-fairness-policy",
    "fcfs-ordering-policy",
    "edf-ordering-policy",
    "slo-deadline-ordering-policy",
    "static-usage-limit-policy",
)
FLOW_CONTROL_GATE: Final = "flowControl"
FEATURE_GATES: Final = frozenset(
    {"dataLayer", "prepareDataPlugins", "enableLegacyMetrics", FLOW_CONTROL_GATE}
)
"""Every gate GIE v1.2-v1.5 registers; GIE refuses any other name."""
DATA_SECTIONS: Final = ("data", "dataLayer")
"""GIE v1.3-v1.4 and GIE v1.5 spellings of the data-layer section."""
TOP_LEVEL: Final = frozenset({*DATA_SECTIONS, "parser", "flowControl", "featureGates"})
DEFAULT_ENGINE_LABEL: Final = "inference.networking.k8s.io/engine-type"
_HTTP_METRICS: Final = ("http", "/metrics")
_FLOW_CONTROL_HINT: Final = (
    "igw's flow control is configured in spec.extensions.flowControl of the InferenceGatewayConfig "
    "(docs/flow-control.md)"
)


class GieSectionPlugin(PluginHooks):
    """A plugin of a GIE data-layer, parser or flow-control type: takes no part in a pick.

    ``role`` is what the sections may reference it as (``source``, ``extractor``, ``parser``,
    ``flow-policy``); ``notes`` are the warnings its parameters gave (each naming its path)."""

    def __init__(self, *, name: str, type_name: str, role: str, notes: Sequence[str] = ()) -> None:
        self.name = name
        self.type_name = type_name
        self.role = role
        self.notes = tuple(notes)


def _same_spec(given: str, expected: str) -> bool:
    try:
        return parse_metric_spec(given) == parse_metric_spec(expected)
    except ValueError:
        return False


def _spec_fields(engine: Engine) -> dict[str, tuple[str, ...]]:
    """GIE extractor field -> the metric specs (or label names) igw reads for ``engine``; an empty
    tuple where igw reads none (GIE's empty string then agrees)."""
    f = engine.families
    gauges = f.cache_gauges or ("", "")
    return {
        "queuedRequestsSpec": (f.waiting,),
        "runningRequestsSpec": (f.running,),
        "kvUsageSpec": f.kv_usage,
        "loraSpec": (f.lora,) if f.lora else (),
        "cacheInfoSpec": (f.cache_config,) if f.cache_config else (),
        "cacheBlockSizeLabelName": (f.block_size_label,) if f.block_size_label else (),
        "cacheNumBlocksLabelName": (f.num_blocks_label,) if f.num_blocks_label else (),
        "cacheBlockSizeSpec": (gauges[0],) if gauges[0] else (),
        "cacheNumBlocksSpec": (gauges[1],) if gauges[1] else (),
    }


_LABEL_FIELDS: Final = frozenset({"cacheBlockSizeLabelName", "cacheNumBlocksLabelName"})


def _check_engine_specs(
    entry: Mapping[str, Any], engine: Engine, path: str, problems: list[str], notes: list[str]
) -> None:
    """Refuse a spec naming another metric than igw reads for ``engine`` (routing would differ)."""
    fields = _spec_fields(engine)
    for key in sorted(entry):
        if key == "name":
            continue
        value = entry[key]
        if key not in fields:
            notes.append(f"{path}.{key}: unknown field ignored")
            continue
        if not isinstance(value, str):
            problems.append(f"{path}.{key}: must be a string, got {value!r}")
            continue
        expected = fields[key]
        if not value:
            continue  # GIE: no such signal; igw reading one more is no change a user relies on
        matches = value in expected if key in _LABEL_FIELDS else any(_same_spec(value, e) for e in expected)
        if not matches:
            reads = " or ".join(repr(e) for e in expected) if expected else "nothing"
            problems.append(
                f"{path}.{key}: {value!r} is not what igw reads for {engine.name} ({reads}); to read other "
                "metric names, list the scheduler under spec.extensions.engines.generic"
            )


def _extractor(type_name: str) -> PluginFactory:
    def factory(name: str, params: Mapping[str, Any], path: str) -> Plugin:
        problems: list[str] = []
        notes: list[str] = []
        raw = params if isinstance(params, Mapping) else {}
        if not isinstance(params, Mapping):
            problems.append(f"{path}: must be a mapping")
        default_engine = raw.get("defaultEngine", "") or "vllm"
        if not isinstance(default_engine, str):
            problems.append(f"{path}.defaultEngine: must be a string, got {default_engine!r}")
            default_engine = "vllm"
        elif default_engine not in ENGINES:
            problems.append(
                f"{path}.defaultEngine: igw has no engine {default_engine!r} (it has "
                f"{', '.join(sorted(ENGINES))}); for another server list the scheduler under "
                "spec.extensions.engines.generic with its metric specs"
            )
        elif "defaultEngine" in raw:
            notes.append(
                f"{path}.defaultEngine: igw reads this scheduler's pods as the engine its "
                f"spec.schedulers[].engineType (or spec.extensions.engines) names; make sure that is "
                f"{default_engine!r}"
            )
        label_key = raw.get("engineLabelKey")
        if label_key is not None and label_key != DEFAULT_ENGINE_LABEL:
            notes.append(
                f"{path}.engineLabelKey: not used: igw does not choose the engine per pod by a label, "
                "every pod of a scheduler is read as the engine its engineType names"
            )
        # GIE v1.3's form: the specs at the top level, for the default engine
        top_level = {
            k: v for k, v in raw.items() if k not in {"defaultEngine", "engineLabelKey", "engineConfigs"}
        }
        if top_level and default_engine in ENGINES:
            _check_engine_specs(top_level, ENGINES[default_engine], path, problems, notes)
        configs = raw.get("engineConfigs", [])
        if not isinstance(configs, list):
            problems.append(f"{path}.engineConfigs: must be a list")
            configs = []
        for j, entry in enumerate(configs):
            where = f"{path}.engineConfigs[{j}]"
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
                problems.append(f"{where}.name: required (a non-empty engine name)")
                continue
            engine = ENGINES.get(entry["name"])
            if engine is not None:
                _check_engine_specs(entry, engine, where, problems, notes)
            elif entry["name"] == default_engine:
                continue  # already refused at defaultEngine
            else:
                notes.append(
                    f"{where}: not used: igw has no engine {entry['name']!r}; a scheduler whose pods run it "
                    "takes these metric specs under spec.extensions.engines.generic"
                )
        if problems:
            raise SchedulerConfigError(problems)
        return GieSectionPlugin(name=name, type_name=type_name, role="extractor", notes=notes)

    return factory


def _metrics_source(name: str, params: Mapping[str, Any], path: str) -> Plugin:
    reader = ParamReader(params, path=path)
    scheme = reader.string("scheme", _HTTP_METRICS[0])
    page = reader.string("path", _HTTP_METRICS[1])
    reader.boolean("insecureSkipVerify", True)  # only meaningful with https, which is refused
    refused: list[str] = []
    if scheme != _HTTP_METRICS[0]:
        refused.append(f"{path}.scheme: igw scrapes model servers' metrics over plain http, got {scheme!r}")
    if page != _HTTP_METRICS[1]:
        refused.append(f"{path}.path: igw scrapes every engine's metrics at /metrics, got {page!r}")
    if refused:
        raise SchedulerConfigError(refused)
    reader.finish()
    return GieSectionPlugin(name=name, type_name=METRICS_DATA_SOURCE, role="source")


def _openai_parser(name: str, params: Mapping[str, Any], path: str) -> Plugin:
    ParamReader(params, path=path).finish()
    return GieSectionPlugin(name=name, type_name=OPENAI_PARSER, role="parser")


def _refused_parser(type_name: str, why: str) -> PluginFactory:
    def factory(name: str, params: Mapping[str, Any], path: str) -> Plugin:
        type_path = path.removesuffix(".parameters")
        raise SchedulerConfigError([f"{type_path}.type: {type_name!r} is not supported: {why}"])

    return factory


def _flow_policy(type_name: str) -> PluginFactory:
    def factory(name: str, params: Mapping[str, Any], path: str) -> Plugin:
        note = f"{path.removesuffix('.parameters')}: {type_name!r} not used: {_FLOW_CONTROL_HINT}"
        return GieSectionPlugin(name=name, type_name=type_name, role="flow-policy", notes=(note,))

    return factory


def factories() -> dict[str, PluginFactory]:
    """Plugin type -> factory, for :func:`igw.scheduling.builtin.build_registry`."""
    table: dict[str, PluginFactory] = {METRICS_DATA_SOURCE: _metrics_source, OPENAI_PARSER: _openai_parser}
    for type_name in EXTRACTOR_TYPES:
        table[type_name] = _extractor(type_name)
    for type_name, why in REFUSED_PARSERS.items():
        table[type_name] = _refused_parser(type_name, why)
    for type_name in FLOW_POLICY_TYPES:
        table[type_name] = _flow_policy(type_name)
    return table


def _ref(
    value: Any, path: str, role: str, plugins: Mapping[str, Plugin], refused: set[str], problems: list[str]
) -> None:
    if not isinstance(value, str) or not value:
        problems.append(f"{path}: required (the name of a plugin in plugins)")
    elif value in refused:
        return  # its problem is reported where it is declared
    elif value not in plugins:
        problems.append(f"{path}: references undefined plugin {value!r}")
    else:
        plugin = plugins[value]
        if not (isinstance(plugin, GieSectionPlugin) and plugin.role == role):
            problems.append(f"{path}: plugin {value!r} is not a data-layer {role}")


def _fields(section: Any, path: str, allowed: set[str], problems: list[str]) -> Mapping[str, Any]:
    if not isinstance(section, Mapping):
        problems.append(f"{path}: must be a mapping")
        return {}
    for key in sorted(set(section) - allowed):
        problems.append(f"{path}.{key}: unknown field")
    return section


def _gates(doc: Mapping[str, Any], problems: list[str]) -> set[str]:
    raw = doc.get("featureGates")
    if raw is None:
        return set()
    if not isinstance(raw, list):
        problems.append("featureGates: must be a list of gate names")
        return set()
    gates: set[str] = set()
    for i, gate in enumerate(raw):
        if gate not in FEATURE_GATES:
            problems.append(
                f"featureGates[{i}]: unknown feature gate {gate!r} "
                f"(GIE knows {', '.join(sorted(FEATURE_GATES))})"
            )
        elif gate == FLOW_CONTROL_GATE:
            problems.append(
                f"featureGates[{i}]: {gate!r} is not supported in an EndpointPickerConfig: "
                f"{_FLOW_CONTROL_HINT}; "
                "move the priority bands there and remove this gate"
            )
            gates.add(gate)
        else:
            gates.add(gate)
    return gates


def check_sections(
    doc: Mapping[str, Any], plugins: Mapping[str, Plugin], refused: set[str], problems: list[str]
) -> list[str]:
    """Validate ``featureGates``, ``data`` / ``dataLayer``, ``parser`` and ``flowControl`` (shape and
    plugin references, as GIE's loader does) into ``problems``; return the warnings, each naming its
    path, the declared GIE plugins' own warnings included (the caller logs or refuses them)."""
    warnings: list[str] = []
    gates = _gates(doc, problems)
    present = [key for key in DATA_SECTIONS if key in doc]
    if len(present) > 1:
        problems.append("dataLayer: give either data (GIE v1.3-v1.4) or dataLayer (GIE v1.5), not both")
    for key in present:
        section = _fields(doc[key], key, {"sources"}, problems)
        sources = section.get("sources", [])
        if not isinstance(sources, list):
            problems.append(f"{key}.sources: must be a list")
            continue
        for i, source in enumerate(sources):
            where = f"{key}.sources[{i}]"
            entry = _fields(source, where, {"pluginRef", "extractors"}, problems)
            if not entry:
                continue
            _ref(entry.get("pluginRef"), f"{where}.pluginRef", "source", plugins, refused, problems)
            extractors = entry.get("extractors", [])
            if not isinstance(extractors, list):
                problems.append(f"{where}.extractors: must be a list")
                continue
            for j, extractor in enumerate(extractors):
                ref = _fields(extractor, f"{where}.extractors[{j}]", {"pluginRef"}, problems)
                if ref:
                    _ref(
                        ref.get("pluginRef"),
                        f"{where}.extractors[{j}].pluginRef",
                        "extractor",
                        plugins,
                        refused,
                        problems,
                    )
    if "parser" in doc:
        parser = _fields(doc["parser"], "parser", {"pluginRef"}, problems)
        if parser or isinstance(doc["parser"], Mapping):
            _ref(parser.get("pluginRef"), "parser.pluginRef", "parser", plugins, refused, problems)
    if "flowControl" in doc:
        if not isinstance(doc["flowControl"], Mapping):
            problems.append("flowControl: must be a mapping")
        elif FLOW_CONTROL_GATE not in gates:
            warnings.append(
                "flowControl: ignored, as GIE ignores it without featureGates: [flowControl]; "
                + _FLOW_CONTROL_HINT
            )
    for plugin in plugins.values():
        if isinstance(plugin, GieSectionPlugin):
            warnings.extend(plugin.notes)
    return warnings
