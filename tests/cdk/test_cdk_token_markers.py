"""A deployment config value that looks like a CDK token is refused with its path (session s41).

CDK searches every string, key and number reaching a construct for its token encodings. Before the fix
``modelName: team-${Token[AWS.AccountId.7]}`` synthesized with exit 0 and the applied
InferenceGatewayConfig and the alarms named ``team-<account id>`` (``{"Ref": "AWS::AccountId"}``), and an
unknown key (``${Token[TOKEN.99999]}``) ended ``app.py`` in a jsii ``UnrecognizedTokenKey`` traceback.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdk import cdk_tokens, config
from tests.cdk.support import EXAMPLES
from tests.cdk.test_app_entry import run_app

NUMBER_TOKEN = struct.unpack("<d", struct.pack("<Q", (cdk_tokens.NUMBER_MARKER_BITS << 48) | 5))[0]
"""What aws-cdk-lib encodes its fifth number token as (``createTokenDouble(5)``, about ``-1.9e289``)."""


def _existing() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(
        (EXAMPLES / "existing-cluster.yaml").read_text(encoding="utf-8")
    )
    return document


def _scheduler(document: dict[str, Any]) -> dict[str, Any]:
    scheduler: dict[str, Any] = document["inference"]["gatewayConfig"]["spec"]["schedulers"][0]
    return scheduler


def _audiences(document: dict[str, Any]) -> list[Any]:
    audiences: list[Any] = document["inference"]["gatewayConfig"]["spec"]["auth"]["jwt"]["provider"][
        "audiences"
    ]
    return audiences


SCHEDULER = "inference.gatewayConfig.spec.schedulers[0]"
AUDIENCE = "inference.gatewayConfig.spec.auth.jwt.provider.audiences[0]"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda d: _scheduler(d).update(modelName="${Token[TOKEN.99999]}"),
            f"{SCHEDULER}.modelName: '${{Token[TOKEN.99999]}}' is a CDK token marker: ",
        ),
        (
            lambda d: _scheduler(d).update(modelName="team-${Token[AWS.AccountId.7]}"),
            f"{SCHEDULER}.modelName: '${{Token[AWS.AccountId.7]}}' is a CDK token marker: ",
        ),
        (
            lambda d: _audiences(d).__setitem__(0, "#{Token[TOKEN.5]}"),
            f"{AUDIENCE}: '#{{Token[TOKEN.5]}}' is a CDK token marker: ",
        ),
        (
            lambda d: _audiences(d).__setitem__(0, "aud-1.8881545897087626e+289"),
            f"{AUDIENCE}: '-1.8881545897087626e+289' is a CDK token marker: ",
        ),
        (
            lambda d: _scheduler(d)["modelSelector"]["matchLabels"].update({"${Token[TOKEN.5]}": "a"}),
            f"{SCHEDULER}.modelSelector.matchLabels: the key '${{Token[TOKEN.5]}}' is a CDK token marker: ",
        ),
        (
            lambda d: _scheduler(d).update(replicas=NUMBER_TOKEN),
            f"{SCHEDULER}.replicas: {NUMBER_TOKEN!r} is the encoding of a CDK number token: ",
        ),
    ],
    ids=["string-token", "known-key", "list-token", "stringified-number", "mapping-key", "number-token"],
)
def test_a_cdk_token_marker_is_refused_naming_its_field(
    edit: Callable[[dict[str, Any]], None], expected: str
) -> None:
    document = _existing()
    edit(document)
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document)
    found = [p for p in caught.value.problems if p.startswith(expected)]
    assert found, caught.value.problems
    assert found[0].endswith(
        "CDK would resolve it at synthesis instead of taking it literally (a known key becomes another "
        "value, an unknown one fails synthesis); write the literal value"
    )


def test_text_that_only_resembles_a_token_is_taken_literally() -> None:
    document = _existing()
    _scheduler(document)["modelName"] = "org/Token[x]-${Token}-#{Token[]}-1.5e+289"
    _audiences(document)[0] = "-1.888e+289"
    _scheduler(document)["replicas"] = 3
    parsed = config.parse(document)
    assert (
        parsed.gateway_config.spec["schedulers"][0]["modelName"]
        == "org/Token[x]-${Token}-#{Token[]}-1.5e+289"
    )
    assert not cdk_tokens.problems({"n": -1.0e289, "big": -(10**400), "flag": True, "nan": float("nan")})


def test_the_app_refuses_a_token_in_the_config_without_a_traceback(tmp_path: Path) -> None:
    document = _existing()
    _scheduler(document)["modelName"] = "team-${Token[AWS.AccountId.7]}"
    source = tmp_path / "token.yaml"
    source.write_text(yaml.safe_dump(document), encoding="utf-8")

    done = run_app(tmp_path / "out", context=None, IGW_DEPLOYMENT_CONFIG=str(source))

    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"{SCHEDULER}.modelName: '${{Token[AWS.AccountId.7]}}' is a CDK token marker" in done.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_token_in_the_global_router_files_is_refused_naming_its_field(tmp_path: Path) -> None:
    """The global router's stack embeds its deployment file's values and the router configuration in
    its template: the same markers were resolved there."""
    from cdk.global_router_config import EXAMPLE_FILE, GlobalRouterDeploymentError, parse

    raw = yaml.safe_load(EXAMPLE_FILE.read_text(encoding="utf-8"))
    router = yaml.safe_load((EXAMPLE_FILE.parent / raw["routerConfig"]).read_text(encoding="utf-8"))
    router["spec"]["clusters"][0]["models"] = ["team-${Token[AWS.AccountId.7]}"]
    (tmp_path / "router.yaml").write_text(yaml.safe_dump(router), encoding="utf-8")
    raw["routerConfig"] = "router.yaml"

    with pytest.raises(GlobalRouterDeploymentError) as caught:
        parse(raw, base=tmp_path, source="global.yaml")
    assert (
        f"{tmp_path / 'router.yaml'}: spec.clusters[0].models[0]: '${{Token[AWS.AccountId.7]}}' is a CDK "
        "token marker: " in str(caught.value)
    )

    raw["image"] = "111111111111.dkr.ecr.us-east-1.amazonaws.com/igw:${Token[TOKEN.5]}"
    with pytest.raises(GlobalRouterDeploymentError) as caught:
        parse(raw, base=tmp_path, source="global.yaml")
    assert "global.yaml: image: '${Token[TOKEN.5]}' is a CDK token marker: " in str(caught.value)
