"""Whether and where the gateway sends OpenTelemetry traces: ``igw serve --otel-endpoint`` and
``--otel-sample-ratio``, or the standard ``OTEL_*`` variables (and ``IGW_OTEL_SAMPLE_RATIO`` /
``IGW_OTEL_TRUST_PARENT_SAMPLING`` for the sampling flags, where no flag can be given).

Kept apart from :mod:`igw.gateway.tracing` so that deciding "tracing is off" (the default) never
loads the OpenTelemetry SDK.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from igw.errors import IgwGatewayError
from igw.redaction import redact

SERVICE_NAME: Final = "igw-gateway"
"""``service.name`` unless ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``) says otherwise."""
TRACES_PATH: Final = "/v1/traces"
"""The OTLP/HTTP traces path, appended to an endpoint given without a path."""
ENDPOINT_ENV: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""The standard variables that switch tracing on when no ``--otel-endpoint`` is given."""
TIMEOUT_ENV: Final = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
"""The exporter's timeout variables, in the SDK's order (seconds)."""
DEFAULT_EXPORT_TIMEOUT_S: Final = 10.0
"""The SDK's timeout without them (or with a value that is not a number, as the SDK does)."""
HEADERS_ENV: Final = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
"""The exporter's header variables, in the SDK's order: the first one set (not empty) is read."""
_HEADER_ENTRY: Final = re.compile(
    r"[ \t]*[\x21\x23-\x27\x2a\x2b\x2d\x2e\x30-\x39\x41-\x5a\x5e-\x7a\x7c\x7e]+[ \t]*="
    r"[ \t]*[\x20\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*[ \t]*"
)
"""One ``name=value`` entry as the OTLP/HTTP exporter accepts it (``opentelemetry.util.re``'s
liberal form: a token name, ``=``, a value of printable ASCII and spaces without ``"``, ``,``, ``;``
or ``\\``)."""
_HEADER_DELIMITER: Final = re.compile(r"[ \t]*,[ \t]*")
SAMPLE_RATIO_ENV: Final = "IGW_OTEL_SAMPLE_RATIO"
"""``--otel-sample-ratio`` when the flag is absent: the operator's gateway pods get no ``igw serve``
flags of an operator's choosing, only variables (``operator.gatewayEnv``). Without it their only
ratio was an SDK sampler the caller steers (``parentbased_*`` follows its sampled flag,
``traceidratio`` judges the trace id it chose)."""
TRUST_PARENT_ENV: Final = "IGW_OTEL_TRUST_PARENT_SAMPLING"
"""``--otel-trust-parent-sampling`` when the flag is absent: ``true`` or ``false``."""
SAMPLER_ENV: Final = "OTEL_TRACES_SAMPLER"
SAMPLER_ARG_ENV: Final = "OTEL_TRACES_SAMPLER_ARG"
_FIXED_SAMPLERS: Final = {
    "always_on": 1.0,
    "parentbased_always_on": 1.0,
    "always_off": 0.0,
    "parentbased_always_off": 0.0,
}
_RATIO_SAMPLERS: Final = frozenset({"traceidratio", "parentbased_traceidratio"})


class TracingConfigError(IgwGatewayError):
    """The tracing options are unusable (the message names the option)."""


@dataclass(frozen=True, slots=True)
class TracingOptions:
    """Where spans go and which fraction of new traces is kept."""

    endpoint: str
    """OTLP/HTTP traces URL (``http://collector:4318/v1/traces``)."""
    sample_ratio: float | None = None
    """Fraction of requests that are recorded, a caller's ``traceparent`` continued but its sampled
    flag not followed unless :attr:`trust_parent_sampling`; ``None``: the SDK's
    ``OTEL_TRACES_SAMPLER``/``_ARG`` variables decide (their parent-based samplers follow it)."""
    trust_parent_sampling: bool = False
    """Follow the sampled flag of the caller's ``traceparent`` (``--otel-trust-parent-sampling``):
    for a tier whose callers are trusted (tier 1 behind the global router), so that the traces the
    tier above records are recorded whole. Off: a client cannot force recording (cost) nor hide
    its requests from it (:func:`igw.gateway.tracing.edge_sampler`)."""
    export_timeout_s: float = 10.0
    """The exporter's timeout for one batch (``OTEL_EXPORTER_OTLP_TRACES_TIMEOUT``, else
    ``OTEL_EXPORTER_OTLP_TIMEOUT``, seconds; the SDK's default 10 s): also how long the final flush
    at shutdown may take (:meth:`igw.gateway.tracing.Tracing.shutdown`)."""


def ratio_words(options: TracingOptions) -> str:
    """How the start-up line describes an explicit ``sample_ratio`` (and whose flag is followed)."""
    ratio = f"{options.sample_ratio:g}"
    if options.trust_parent_sampling:
        return f"{ratio} of new traces (a caller's sampled flag followed: --otel-trust-parent-sampling)"
    return f"{ratio} of new traces and of callers' traces (their sampled flag not followed)"


def tracing_options(
    endpoint: str | None,
    sample_ratio: float | None,
    env: Mapping[str, str] = os.environ,
    *,
    trust_parent_sampling: bool = False,
) -> TracingOptions | None:
    """The options from ``igw serve --otel-endpoint/--otel-sample-ratio`` or, without the flag, the
    standard ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` variables; ``None`` when tracing stays off
    (no endpoint, or ``OTEL_SDK_DISABLED=true``). Without ``--otel-sample-ratio`` /
    ``--otel-trust-parent-sampling``, :data:`SAMPLE_RATIO_ENV` / :data:`TRUST_PARENT_ENV` stand in
    for them (a flag given wins)."""
    ratio_source = "--otel-sample-ratio"
    if sample_ratio is not None and not 0.0 <= sample_ratio <= 1.0:
        raise TracingConfigError(f"--otel-sample-ratio must be between 0 and 1, got {sample_ratio:g}")
    if sample_ratio is None:
        sample_ratio = _env_ratio(env)
        ratio_source = SAMPLE_RATIO_ENV
    if not trust_parent_sampling:
        trust_parent_sampling = _env_trust_parent(env)
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    source = "--otel-endpoint"
    if not endpoint:
        traces, generic = (env.get(name, "").strip() for name in ENDPOINT_ENV)
        if traces:
            endpoint, source = traces, ENDPOINT_ENV[0]
        elif generic:
            # The generic variable names the collector's base URL; the signal path is appended.
            endpoint, source = _with_traces_path(generic), ENDPOINT_ENV[1]
        elif sample_ratio is not None:
            # tracing stays off: the ratio was dropped and the gateway started as if it sampled
            raise TracingConfigError(
                f"{ratio_source} needs --otel-endpoint or {' / '.join(ENDPOINT_ENV)}: "
                "without a receiver no trace is recorded"
            )
        else:
            return None
    parts = urlsplit(endpoint)
    try:
        parts.port  # noqa: B018 - read for its check: a port past 65535 or not a number raises
    except ValueError:
        valid_port = False
    else:
        valid_port = True
    if parts.scheme not in ("http", "https") or not parts.hostname or not valid_port:
        # Quoted without user-info. The port is checked here: ``http://collector:99999`` started,
        # and every export of spans then failed ("Port out of range"), logged once per batch.
        raise TracingConfigError(
            f"{source} must be an http(s) URL of an OTLP/HTTP receiver with a valid port, got "
            f"{redact(endpoint)!r}"
        )
    if parts.path in ("", "/"):
        endpoint = _with_traces_path(endpoint)
    _check_headers(env)
    if sample_ratio is None and not trust_parent_sampling:
        env_sampler_ratio(env)  # refused here, at start-up, as the flags are
    return TracingOptions(
        endpoint=endpoint,
        sample_ratio=sample_ratio,
        export_timeout_s=_export_timeout_s(env),
        trust_parent_sampling=trust_parent_sampling,
    )


def _env_ratio(env: Mapping[str, str]) -> float | None:
    """:data:`SAMPLE_RATIO_ENV` as a fraction (``None``: unset or empty), refused like the flag."""
    raw = env.get(SAMPLE_RATIO_ENV, "").strip()
    if not raw:
        return None
    return _ratio(raw, f"{SAMPLE_RATIO_ENV} must be a number between 0 and 1")


def _ratio(raw: str, refusal: str) -> float:
    """``raw`` as a fraction from 0 to 1, or :class:`TracingConfigError` saying ``refusal`` and
    what was given (cut and redacted: a variable may hold anything)."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # also NaN, inf and words
        raise TracingConfigError(f"{refusal}, got {redact(raw[:40])!r}")
    return value


def env_sampler_ratio(env: Mapping[str, str]) -> float | None:
    """The fraction of requests :data:`SAMPLER_ENV` (with :data:`SAMPLER_ARG_ENV`) asks to record,
    for a tier that does not follow its callers' sampled flag (``None``: the variable is unset).

    Why: the SDK's samplers of that variable leave the decision to the caller: a ``parentbased_*``
    one follows the ``traceparent``'s flag (a client's ``-00`` kept its request out of every trace,
    its ``-01`` had it recorded at a ratio of 0) and ``traceidratio`` judges the trace id the caller
    chose. Read as a ratio, the tier draws it itself (:func:`igw.gateway.tracing.edge_sampler`), as
    for ``--otel-sample-ratio``; until session s50 the SDK's sampler was used as named. A name the
    SDK does not know (it put ``parentbased_always_on`` in its place) or an argument that is not a
    ratio is refused, named: the SDK had logged a warning and used 1.0."""
    name = env.get(SAMPLER_ENV, "").strip().lower()
    if not name:
        return None
    if name in _FIXED_SAMPLERS:
        return _FIXED_SAMPLERS[name]
    if name not in _RATIO_SAMPLERS:
        known = ", ".join([*_FIXED_SAMPLERS, *sorted(_RATIO_SAMPLERS)])
        raise TracingConfigError(
            f"{SAMPLER_ENV} must be one of {known} (or set --otel-trust-parent-sampling / "
            f"{TRUST_PARENT_ENV}=true to use the SDK's own), got {redact(name[:40])!r}"
        )
    raw = env.get(SAMPLER_ARG_ENV, "").strip()
    if not raw:
        return 1.0  # the SDK's default rate
    return _ratio(
        raw, f"{SAMPLER_ARG_ENV} must be a number between 0 and 1 (the ratio of {SAMPLER_ENV}={name})"
    )


def _env_trust_parent(env: Mapping[str, str]) -> bool:
    """:data:`TRUST_PARENT_ENV`: ``true`` or ``false`` (any case; unset or empty: false). Anything
    else is refused: a ``1`` or ``yes`` read as false would silently keep a tier's traces apart."""
    raw = env.get(TRUST_PARENT_ENV, "").strip()
    if raw.lower() in ("", "false"):
        return False
    if raw.lower() == "true":
        return True
    raise TracingConfigError(f"{TRUST_PARENT_ENV} must be true or false, got {redact(raw[:40])!r}")


def _with_traces_path(base: str) -> str:
    """``base`` with ``/v1/traces`` appended to its path, its query kept after it (appending to the
    string put the path after a query: ``http://c:4318?api_key=x/v1/traces``)."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + TRACES_PATH))


def _export_timeout_s(env: Mapping[str, str]) -> float:
    """The OTLP exporter's timeout as the SDK resolves it (first variable set, a bad value: default)."""
    raw = next((env[name] for name in TIMEOUT_ENV if env.get(name)), None)
    try:
        value = float(raw) if raw is not None else DEFAULT_EXPORT_TIMEOUT_S
    except ValueError:
        return DEFAULT_EXPORT_TIMEOUT_S
    return value if value > 0 and math.isfinite(value) else DEFAULT_EXPORT_TIMEOUT_S


def _check_headers(env: Mapping[str, str]) -> None:
    """Refuse an exporter header variable with an entry the exporter cannot read, naming the
    variable and the entry's position, never its text.

    Why: the exporter drops such an entry and logs it whole (``Header format invalid! ...:
    x-honeycomb-team: <the key>``), so a collector credential written ``name: value`` instead of
    ``name=value`` went to the gateway's log (header names other than ``Authorization`` and the
    API-key ones are not redacted), and every export was then refused for want of it."""
    for name in HEADERS_ENV:
        raw = env.get(name)
        if raw:
            break
    else:
        return
    entries = _HEADER_DELIMITER.split(raw)
    for position, entry in enumerate(entries, start=1):
        if entry and not _HEADER_ENTRY.fullmatch(entry.strip()):
            raise TracingConfigError(
                f"{name}: entry {position} of {len(entries)} is not name=value (a header name, '=', "
                "then a value of printable ASCII without '\"', ',', ';' or '\\'; URL-encode others); "
                "not shown, as it may hold a credential"
            )
