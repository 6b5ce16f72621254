"""Timeouts and limits from ``spec.extensions.serverLimits``: defaults agree with the schema, the
config sets them, a command-line option overrides the field, and bad values are refused naming the
field or the option."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.cli.main import main
from igw.config.durations import parse_duration
from igw.config.errors import ConfigError
from igw.config.loader import load_gateway_config
from igw.config.paths import EXTENSION_SUFFIX, EXTENSIONS_SUBDIR, schemas_dir
from igw.config.restart_only import RESTART_ONLY
from igw.gateway.limits_config import EXTENSION_NAME, FIELDS, PATH, ServerLimitsError, server_limits
from igw.gateway.serving import ServerLimits
from igw.sim.live import run_fleet
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.reliability.harness import fleet_spec, gateway_doc, igw_serve, write_config
from tests.reliability.test_limits import SLOW_HEAD, closed_answer, open_stalled

NO_OPTIONS: dict[str, float | int | None] = {f.name: None for f in fields(ServerLimits)}


def limits_doc(**limits: Any) -> dict[str, Any]:
    doc = gateway_doc()
    doc["spec"]["extensions"][EXTENSION_NAME] = limits
    return doc


def test_schema_defaults_are_the_gateway_defaults() -> None:
    schema = json.loads(
        (schemas_dir() / EXTENSIONS_SUBDIR / f"{EXTENSION_NAME}{EXTENSION_SUFFIX}").read_text()
    )
    defaults = ServerLimits()
    assert {f.key for f in FIELDS} == set(schema["properties"])
    assert {f.attribute for f in FIELDS} == {f.name for f in fields(ServerLimits)}
    for f in FIELDS:
        stated = schema["properties"][f.key]["default"]
        value = parse_duration(stated) if f.duration else stated
        assert value == getattr(defaults, f.attribute), f.key


def test_config_sets_the_limits_and_an_option_overrides_a_field(tmp_path: Path) -> None:
    config_path, _ = write_config(
        tmp_path,
        limits_doc(headerTimeout="1500ms", keepAliveTimeout="1m", maxHeaders=50, streamGrace="40s"),
        ["127.0.0.1:9"],
    )
    extension = load_gateway_config(config_path).extensions[EXTENSION_NAME]
    from_config = server_limits(extension, NO_OPTIONS)
    assert from_config.header_timeout_s == 1.5
    assert from_config.keepalive_timeout_s == 60.0
    assert from_config.max_headers == 50
    assert from_config.stream_grace_s == 40.0
    assert from_config.body_timeout_s == ServerLimits().body_timeout_s  # the schema's default
    overridden = server_limits(extension, {**NO_OPTIONS, "header_timeout_s": 3.0, "stream_grace_s": 20.0})
    assert overridden.header_timeout_s == 3.0
    assert overridden.stream_grace_s == 20.0
    assert overridden.max_headers == 50  # fields without an option keep the config's value


def test_out_of_range_values_are_refused_naming_each_field() -> None:
    with pytest.raises(ServerLimitsError) as caught:
        server_limits(
            {"keepAliveTimeout": "5m", "headerTimeout": "0s", "bodyTimeout": "soon", "maxHeaderBytes": 8190},
            NO_OPTIONS,
        )
    problems = caught.value.problems
    assert len(problems) == 4
    assert any(p.startswith(f"{PATH}.maxHeaderBytes: must differ from 8190") for p in problems)
    assert any(p.startswith(f"{PATH}.keepAliveTimeout: at most 120s") for p in problems)
    assert any(p.startswith(f"{PATH}.headerTimeout: must be greater than 0s") for p in problems)
    assert any(p.startswith(f"{PATH}.bodyTimeout: invalid duration") for p in problems)


def test_a_bad_option_is_refused_naming_the_option() -> None:
    with pytest.raises(ServerLimitsError, match="--keepalive-timeout: at most 120"):
        server_limits({"keepAliveTimeout": "30s"}, {**NO_OPTIONS, "keepalive_timeout_s": 500.0})


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ({"maxHeaderBytes": 512}, "maxHeaderBytes"),
        ({"maxConnections": 0}, "maxConnections"),
        ({"headerTimeout": "10"}, "headerTimeout"),
        ({"readTimeout": "10s"}, "readTimeout"),
    ],
)
def test_schema_refuses_bad_fields_with_their_path(
    tmp_path: Path, limits: dict[str, Any], field: str
) -> None:
    config_path, _ = write_config(tmp_path, limits_doc(**limits), ["127.0.0.1:9"])
    with pytest.raises(ConfigError) as caught:
        load_gateway_config(config_path)
    assert any(field in str(p) and p.path.startswith(PATH) for p in caught.value.problems), caught.value


def test_igw_serve_refuses_an_out_of_range_field_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, eps = write_config(tmp_path, limits_doc(keepAliveTimeout="10m"), ["127.0.0.1:9"])
    code = main(["serve", "--config", str(config), "--endpoints", str(eps), "--port", "0"])
    assert code == 2
    assert f"{PATH}.keepAliveTimeout: must be greater than 0s and at most 120s" in capsys.readouterr().err


def _with_jwt(doc: dict[str, Any], **authorization: Any) -> dict[str, Any]:
    """``doc`` with ``spec.auth.jwt`` (an issuer nothing here serves: the start is refused before
    any fetch) and, when given, ``spec.extensions.authorization``."""
    doc["spec"]["auth"] = {
        "jwt": {
            "provider": {
                "name": "idp",
                "issuer": "https://idp.example.com",
                "remoteJWKS": {"uri": "https://idp.example.com/jwks"},
                "audiences": ["igw"],
            }
        }
    }
    if authorization:
        doc["spec"]["extensions"]["authorization"] = authorization
    return doc


@pytest.mark.parametrize(
    ("authorization", "option", "needed"),
    [({}, "4096", 8212), ({"maxTokenBytes": 2048}, "2000", 2068)],
)
def test_igw_serve_refuses_a_max_header_bytes_option_that_leaves_no_room_for_the_token_cap(
    tmp_path: Path, authorization: dict[str, int], option: str, needed: int
) -> None:
    """``--max-header-bytes`` below ``maxTokenBytes`` + 20 made the listener answer 431 to tokens
    the guard would take, unnoticed (the config's ``serverLimits.maxHeaderBytes`` is held to it by
    the rule ``token-fits-header-limit``; the option was not). A process of its own: accepted, the
    command serves until stopped, so the bound on its run fails the test instead of hanging it."""
    doc = _with_jwt(gateway_doc(), **authorization)
    config, eps = write_config(tmp_path, doc, ["127.0.0.1:9"])
    argv = ["serve", "--config", str(config), "--endpoints", str(eps), "--port", "0"]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "igw.cli.main", *argv, "--max-header-bytes", option],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"igw serve --max-header-bytes {option} started serving")
    assert done.returncode == 2, done.stderr
    assert "--max-header-bytes" in done.stderr
    assert "spec.extensions.authorization.maxTokenBytes" in done.stderr
    assert f"needs at least {needed}" in done.stderr
    assert f"got {option}" in done.stderr


def test_a_max_header_bytes_option_with_room_for_the_token_or_without_auth_is_taken() -> None:
    option = {**NO_OPTIONS, "max_header_field_bytes": 8212}
    assert server_limits(None, option, max_token_bytes=8192).max_header_field_bytes == 8212
    small = {**NO_OPTIONS, "max_header_field_bytes": 2048}
    assert server_limits(None, small, max_token_bytes=None).max_header_field_bytes == 2048
    with pytest.raises(ServerLimitsError, match="needs at least 8213"):
        server_limits(None, option, max_token_bytes=8193)


@pytest.mark.parametrize(
    ("limits", "field"),
    [
        ({"keepAliveTimeout": "121s"}, "keepAliveTimeout"),
        ({"keepAliveTimeout": "0s"}, "keepAliveTimeout"),
        ({"headerTimeout": "0ms"}, "headerTimeout"),
        ({"bodyTimeout": "0s"}, "bodyTimeout"),
        ({"sendTimeout": "0s"}, "sendTimeout"),
    ],
)
def test_igw_validate_refuses_out_of_range_timeouts_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], limits: dict[str, str], field: str
) -> None:
    config, _ = write_config(tmp_path, limits_doc(**limits), ["127.0.0.1:9"])
    assert main(["validate", str(config)]) == 1
    assert f"{PATH}.{field}: must be greater than 0s" in capsys.readouterr().out


@pytest.mark.parametrize(("options", "expected"), [((), "1s"), (("--header-timeout", "2"), "2s")])
async def test_igw_serve_applies_the_config_header_timeout_unless_the_option_is_given(
    tmp_path: Path, options: tuple[str, ...], expected: str
) -> None:
    async with run_fleet(fleet_spec("llama-3.1-8b/h100"), admin=False) as fleet:
        doc = limits_doc(headerTimeout="1s")
        async with igw_serve(tmp_path, doc, [fleet.pods[0].key], *options) as gw:
            ((reader, writer),) = await open_stalled(gw.url, SLOW_HEAD, 1)
            answer = await closed_answer(reader, within=60)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 408")
            for _ in range(100):  # the warning line may arrive just after the answer
                if "did not arrive within" in gw.output:
                    break
                await asyncio.sleep(0.05)
        assert f"did not arrive within {expected} " in gw.output


async def test_a_reload_that_adds_heartbeats_says_so_and_one_that_undoes_it_says_it_runs_as_started(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    doc = config_doc([scheduler("pool", "m")])
    async with running(FakeModelServer("a")) as (pod,), gateway(doc, {"pool": [pod.key]}, reload=True) as gw:
        changed = config_doc([scheduler("pool", "m")])
        changed["spec"]["extensions"]["globalHeartbeat"] = {"cluster": "east-a", "region": "east"}
        with caplog.at_level(logging.INFO, logger="igw.gateway.reload"):
            gw.config_path.write_text(yaml.safe_dump(changed))
            await wait_for(
                lambda: "globalHeartbeat" in gw.state.runtime.config.extensions, what="reload applied"
            )
            assert (
                "spec.extensions.globalHeartbeat changed: the heartbeat publisher keeps the settings it "
                "started with until igw serve restarts"
            ) in caplog.text
            gw.config_path.write_text(yaml.safe_dump(doc))
            await wait_for(
                lambda: "globalHeartbeat" not in gw.state.runtime.config.extensions, what="second reload"
            )
    assert "spec.extensions.globalHeartbeat is back to what this process runs with" in caplog.text


RESTART_ONLY_VALUES = {
    "serverLimits": {"headerTimeout": "3s"},
    "tlsTermination": {"certFile": "/etc/igw/tls/tls.crt", "keyFile": "/etc/igw/tls/tls.key"},
    "management": {"port": 9191},
    "globalHeartbeat": {"cluster": "east-a", "region": "east"},
}


def test_every_restart_only_extension_has_a_value_below() -> None:
    assert set(RESTART_ONLY_VALUES) == set(RESTART_ONLY)


@pytest.mark.parametrize("name", sorted(RESTART_ONLY_VALUES))
async def test_a_reload_names_each_extension_it_cannot_apply(
    gateway: Any, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    doc = config_doc([scheduler("pool", "m")])
    async with running(FakeModelServer("a")) as (pod,), gateway(doc, {"pool": [pod.key]}, reload=True) as gw:
        changed = config_doc([scheduler("pool", "m")])
        changed["spec"]["extensions"][name] = RESTART_ONLY_VALUES[name]
        with caplog.at_level(logging.WARNING, logger="igw.gateway.reload"):
            gw.config_path.write_text(yaml.safe_dump(changed))
            await wait_for(lambda: name in gw.state.runtime.config.extensions, what="reload applied")
    assert f"spec.extensions.{name} changed: {RESTART_ONLY[name]} until igw serve restarts" in caplog.text
