"""The ``--otel-*`` options, defined once for the two commands that record a span per request.

``igw serve`` and ``igw global serve`` take the same three tracing flags, read by
:func:`igw.gateway.tracing_options.tracing_options` with the same defaults and variables; until this
module each command defined them itself, in copies that had to be kept in step by hand. Each command
still says in its own words what its spans send and which callers may be trusted.
"""

from __future__ import annotations

import argparse

from igw.cli.arg_types import FRACTION


def add_tracing_options(parser: argparse.ArgumentParser, *, sends: str, note: str = "", trusted: str) -> None:
    """Add the group of ``--otel-endpoint``, ``--otel-sample-ratio`` and
    ``--otel-trust-parent-sampling`` to ``parser``. ``sends``: what the receiver is sent ("request
    traces"); ``note``: appended to the endpoint's help (what the next hop gets); ``trusted``: the
    callers whose sampled flag may be followed, as the trust flag's help names them."""
    otel = parser.add_argument_group(
        "OpenTelemetry traces (off by default; the OTEL_EXPORTER_OTLP_* variables also switch them on)"
    )
    otel.add_argument(
        "--otel-endpoint",
        metavar="URL",
        help=f"send {sends} to this OTLP/HTTP receiver (http://collector:4318; the path "
        f"/v1/traces is added when the URL has none){note}",
    )
    otel.add_argument(
        "--otel-sample-ratio",
        type=FRACTION,
        metavar="R",
        help="record this fraction (0..1) of the requests; a caller's traceparent is continued but its "
        "sampled flag not followed (default: $IGW_OTEL_SAMPLE_RATIO, else OTEL_TRACES_SAMPLER's ratio, its "
        "parent-based samplers not following the flag either, else every request)",
    )
    otel.add_argument(
        "--otel-trust-parent-sampling",
        action="store_true",
        help="with --otel-sample-ratio: follow the sampled flag of the caller's traceparent (for "
        f"{trusted}; otherwise a client could force every request recorded; default: "
        "$IGW_OTEL_TRUST_PARENT_SAMPLING, true or false)",
    )
