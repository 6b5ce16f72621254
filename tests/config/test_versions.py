from __future__ import annotations

import dataclasses

import pytest
from packaging.version import Version

from igw.config.versions import (
    KnownVersion,
    UnknownVersion,
    Verdict,
    check_model_server,
    engine_version,
    load_requirements,
    parse_image_reference,
    parse_version_tag,
)
from igw.engines import ENGINES

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("tag", "version"),
    [
        ("v0.9.2", "0.9.2"),
        ("0.10.1.1", "0.10.1.1"),
        ("v0.4.6.post1-cu124", "0.4.6.post1"),
        ("0.9.2rc1", "0.9.2rc1"),
        ("v0.9.2-cu128-ubuntu22.04", "0.9.2"),
        ("0.3.5.post1", "0.3.5.post1"),
        ("v0.5.0rc0-cu126", "0.5.0rc0"),
    ],
)
def test_release_tags(tag: str, version: str) -> None:
    result = parse_version_tag(tag)
    assert isinstance(result, KnownVersion)
    assert result.version == Version(version)


@pytest.mark.parametrize(
    "tag", ["latest", "nightly-20260901", "nightly", "main", "cu124", "sha-abc123", "dev"]
)
def test_unparseable_tags_are_unknown(tag: str) -> None:
    result = parse_version_tag(tag)
    assert isinstance(result, UnknownVersion)
    assert result.reason


@pytest.mark.parametrize(
    ("image", "registry", "repository", "tag", "digest"),
    [
        ("my.reg:5000/vllm/vllm-openai:v0.9.2", "my.reg:5000", "vllm/vllm-openai", "v0.9.2", None),
        ("vllm/vllm-openai", None, "vllm/vllm-openai", None, None),
        (f"lmsysorg/sglang@{DIGEST}", None, "lmsysorg/sglang", None, DIGEST),
        (f"localhost:5000/sglang:v0.4.6@{DIGEST}", "localhost:5000", "sglang", "v0.4.6", DIGEST),
        (
            "123456789012.dkr.ecr.us-west-2.amazonaws.com/vllm:0.10.1.1",
            "123456789012.dkr.ecr.us-west-2.amazonaws.com",
            "vllm",
            "0.10.1.1",
            None,
        ),
    ],
)
def test_image_references(
    image: str, registry: str | None, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = parse_image_reference(image)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)


@pytest.mark.parametrize("image", ["", "a b:1", "repo@sha256:short", "repo:bad tag", "reg.io/:v1"])
def test_malformed_references(image: str) -> None:
    with pytest.raises(ValueError, match="invalid"):
        parse_image_reference(image)
    assert isinstance(engine_version(image), UnknownVersion)


def test_digest_only_and_untagged_images_are_unknown() -> None:
    assert "digest" in str(engine_version(f"vllm/vllm-openai@{DIGEST}"))
    assert "latest" in str(engine_version("vllm/vllm-openai"))
    assert engine_version(f"vllm/vllm-openai:v0.9.2@{DIGEST}") == KnownVersion(Version("0.9.2"), "v0.9.2")


def _vllm(image: str, args: list[str] | None = None) -> Verdict:
    return check_model_server(engine="vllm", image=image, args=args or [], env={}).verdict


def test_vllm_minimum_and_prereleases() -> None:
    assert _vllm("vllm/vllm-openai:v0.9.2") is Verdict.OK
    assert _vllm("vllm/vllm-openai:v0.10.1.1") is Verdict.OK
    assert _vllm("vllm/vllm-openai:v0.9.1") is Verdict.FAIL
    assert _vllm("vllm/vllm-openai:0.9.2rc1") is Verdict.FAIL  # a pre-release of the minimum
    assert _vllm("vllm/vllm-openai:0.9.3rc1") is Verdict.OK
    assert _vllm("vllm/vllm-openai:latest") is Verdict.UNKNOWN
    assert _vllm("vllm/vllm-openai:nightly-20260901") is Verdict.UNKNOWN


def test_vllm_failure_message_says_why() -> None:
    check = check_model_server(engine="vllm", image="vllm/vllm-openai:v0.8.5", args=[], env={})
    minimum = next(r for r in check.results if r.requirement == "minimum-version")
    assert minimum.verdict is Verdict.FAIL
    assert "0.9.2" in minimum.message
    assert "kv_cache_usage_perc" in minimum.message


def test_vllm_disable_log_stats_fails() -> None:
    assert _vllm("vllm/vllm-openai:v0.10.0", ["--model", "m", "--disable-log-stats"]) is Verdict.FAIL


@pytest.mark.parametrize(
    ("tag", "names"),
    [
        ("v0.9.1", ("vllm:gpu_cache_usage_perc",)),
        ("v0.9.2", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
        ("v0.10.2", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
        ("v0.11.0", ("vllm:kv_cache_usage_perc",)),
        ("v0.12.1", ("vllm:kv_cache_usage_perc",)),
    ],
)
def test_vllm_kv_metric_names_by_version(tag: str, names: tuple[str, ...]) -> None:
    check = check_model_server(engine="vllm", image=f"vllm/vllm-openai:{tag}", args=[], env={})
    assert check.kv_cache_metrics == names


def test_unknown_version_has_unknown_metrics() -> None:
    check = check_model_server(engine="vllm", image="vllm/vllm-openai:latest", args=[], env={})
    assert check.kv_cache_metrics == ()
    assert {r.requirement: r.verdict for r in check.results}["kv-metrics"] is Verdict.UNKNOWN


@pytest.mark.parametrize(
    ("image", "args", "env", "verdict"),
    [
        ("lmsysorg/sglang:v0.4.6.post1-cu124", ["--enable-metrics"], {}, Verdict.OK),
        ("lmsysorg/sglang:v0.4.6.post1-cu124", ["--model-path", "m"], {}, Verdict.FAIL),
        (
            "lmsysorg/sglang:v0.4.6.post1-cu124",
            ["python3 -m sglang.launch_server --enable-metrics"],
            {},
            Verdict.OK,
        ),
        (
            "lmsysorg/sglang:v0.4.6.post1-cu124",
            ["$(EXTRA)"],
            {"EXTRA": "--enable-metrics --port 30000"},
            Verdict.OK,
        ),
        ("lmsysorg/sglang:v0.3.5.post1", ["--enable-metrics"], {}, Verdict.OK),
        ("lmsysorg/sglang:v0.3.5", ["--enable-metrics"], {}, Verdict.FAIL),
        ("lmsysorg/sglang:latest", ["--enable-metrics"], {}, Verdict.UNKNOWN),
        ("lmsysorg/sglang:latest", [], {}, Verdict.FAIL),
    ],
)
def test_sglang_needs_version_and_enable_metrics(
    image: str, args: list[str], env: dict[str, str], verdict: Verdict
) -> None:
    assert check_model_server(engine="sglang", image=image, args=args, env=env).verdict is verdict


def test_unknown_engine_is_an_error() -> None:
    with pytest.raises(ValueError, match="known engines: sglang, tgi, vllm"):
        check_model_server(engine="nope", image="x:1", args=[], env={})


def test_requirements_come_from_the_engine_catalogue() -> None:
    table = load_requirements()
    assert table["vllm"].minimum_version == Version("0.9.2")
    assert table["sglang"].minimum_version == Version("0.3.5.post1")
    assert [f.flag for f in table["sglang"].required_flags] == ["--enable-metrics"]
    assert set(table) == set(ENGINES)


def test_a_changed_catalogue_entry_changes_the_verdict() -> None:
    stricter = dataclasses.replace(ENGINES["vllm"], minimum_version="0.12.0")
    table = load_requirements({"vllm": stricter})
    check = check_model_server(
        engine="vllm", image="vllm/vllm-openai:v0.11.0", args=[], env={}, requirements=table
    )
    assert check.verdict is Verdict.FAIL
    assert check_model_server(engine="vllm", image="vllm/vllm-openai:v0.11.0", args=[], env={}).verdict is (
        Verdict.OK
    )


def test_malformed_catalogue_entry_is_reported_naming_the_field() -> None:
    bad = dataclasses.replace(ENGINES["vllm"], minimum_version="not a version")
    with pytest.raises(ValueError, match=r"engine catalogue: vllm\.minimum_version: .*not a PEP 440 version"):
        load_requirements({"vllm": bad})
