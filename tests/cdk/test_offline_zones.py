"""A deployment config that names its zones synthesizes offline for any account, as the example says.

``ec2.Vpc`` checks its zones against the stack's, and the stack's zones are a context lookup that only
``cdk.context.json`` answers, for the examples' account alone. Before session s40 any other account's
config left the lookup ``missing`` in the cloud assembly, and ``cdk synth`` without credentials ended
in "Need to perform AWS calls for account 222222222222, but no credentials have been configured".
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.cdk.support import EXAMPLES


def test_configured_zones_answer_the_zone_lookup_for_any_account(tmp_path: Path) -> None:
    from cdk import config
    from cdk.app_builder import build_app

    text = (EXAMPLES / "deployment.yaml").read_text(encoding="utf-8").replace("111111111111", "222222222222")
    document = yaml.safe_load(text)
    document["availabilityZones"] = ["us-west-2a", "us-west-2b", "us-west-2d"]
    built = build_app(config.parse(document), outdir=tmp_path)
    assembly = built.app.synth()

    manifest = json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    assert manifest.get("missing", []) == []
    assert built.network is not None
    template = assembly.get_stack_artifact(built.network.artifact_id).template
    zones = {
        r["Properties"]["AvailabilityZone"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EC2::Subnet"
    }
    assert zones == {"us-west-2a", "us-west-2b", "us-west-2d"}
