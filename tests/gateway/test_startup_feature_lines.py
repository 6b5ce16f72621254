"""``igw serve`` logs one start-up line per optional feature it switched on
(``igw.launch.optional_features``): ``--otel-endpoint URL`` said nothing about tracing until a span
was exported (before session s44)."""

from __future__ import annotations

from igw.gateway.debug_api import DecisionDebug
from igw.gateway.tracing_options import TracingOptions
from igw.launch import LaunchOptions, optional_features

TOKEN = "t0ken-" + "x" * 40


def test_no_optional_feature_no_line() -> None:
    assert optional_features(LaunchOptions(config_path="c.yaml"), env={}) == []


def test_tracing_line_names_the_endpoint_without_its_credentials_and_the_sampling() -> None:
    tracing = TracingOptions(
        endpoint="https://user:hunter2@collector:4318/v1/traces?api_key=s3cr3t",
        sample_ratio=0.25,
        export_timeout_s=3.0,
    )
    (line,) = optional_features(LaunchOptions(config_path="c.yaml", tracing=tracing), env={})
    assert line.startswith("tracing: OTLP/HTTP export to https://")
    assert "collector:4318/v1/traces" in line
    assert "hunter2" not in line
    assert "s3cr3t" not in line
    assert "user" not in line
    assert "sampling 0.25 of new traces and of callers' traces (their sampled flag not followed)" in line
    assert "export timeout 3s" in line
    trusted = TracingOptions(endpoint="http://collector:4318", sample_ratio=0.25, trust_parent_sampling=True)
    (line,) = optional_features(LaunchOptions(config_path="c.yaml", tracing=trusted), env={})
    assert "0.25 of new traces (a caller's sampled flag followed: --otel-trust-parent-sampling)" in line


def test_tracing_line_names_the_sdk_sampler_when_no_ratio_is_given() -> None:
    tracing = TracingOptions(endpoint="http://collector:4318/v1/traces")
    options = LaunchOptions(config_path="c.yaml", tracing=tracing)
    (line,) = optional_features(options, env={})
    assert "sampling every request" in line
    env = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"}
    (line,) = optional_features(options, env=env)
    assert "sampling OTEL_TRACES_SAMPLER=parentbased_traceidratio (0.1)" in line


def test_emf_and_decision_debug_lines_never_show_the_debug_token() -> None:
    options = LaunchOptions(
        config_path="c.yaml",
        emf_interval_s=5.0,
        emf_destination="tcp://127.0.0.1:25888",
        decision_debug=DecisionDebug(10, TOKEN),
        management_port=9090,
    )
    emf, debug = optional_features(options, env={})
    assert emf == "EMF metrics: every 5s to tcp://127.0.0.1:25888"
    assert debug.startswith("decision debug: the last 10 scheduling decisions at /debug/decisions")
    assert "on the management port" in debug
    assert TOKEN not in debug
