"""``igw validate`` and ``igw generate`` through the real CLI entry point."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from igw.cli.main import main
from igw.config.crd import CRD_PATH
from igw.config.generated_files import GENERATED_FILES

from .cases import base_document
from .support import EXAMPLES


def _three_errors(tmp_path: Path) -> Path:
    doc = base_document()
    doc["spec"]["foo"] = 1
    doc["spec"]["schedulers"][1]["targetPort"] = 0
    doc["spec"]["schedulers"][1]["modelName"] = doc["spec"]["schedulers"][0]["modelName"]
    path = tmp_path / "three.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_examples_are_valid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", *map(str, EXAMPLES)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "0 problem(s)" in err
    # configmap-ref.yaml's ConfigMap holds the EndpointPickerConfig its configMapRef names: checked too
    assert "1 EndpointPickerConfig document(s)" in err
    assert "skipped document 2 (kind ConfigMap)" not in err


def test_aws_fields_igw_does_not_use_are_named_in_notes_and_the_exit_code_stays_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file written for AWS's gateway with ``logLevel: 4``, ``bbr.replicas: 3`` ... validated with
    no word that igw does nothing with them; each is now a note naming its path and line."""
    doc = base_document()
    doc["spec"]["bbr"]["replicas"] = 3
    doc["spec"]["observability"] = {"metrics": {"enabled": False}}
    first = doc["spec"]["schedulers"][0]
    first.update({"appProtocol": "kubernetes.io/h2c", "logLevel": 4, "env": [{"name": "A", "value": "b"}]})
    doc["spec"]["schedulers"][1]["envFrom"] = [{"configMapRef": {"name": "cm"}}]
    path = tmp_path / "aws.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    text = path.read_text().splitlines()
    noted = {}
    for line in err.splitlines():
        if "[accepted-unused]" in line:
            _, line_number, rest = line.split(":", 2)
            field_path = rest.removeprefix(" note: ").split(": ")[0]
            noted[field_path] = int(line_number)
    assert set(noted) == {
        "spec.bbr.replicas",
        "spec.observability.metrics.enabled",
        "spec.schedulers[0].appProtocol",
        "spec.schedulers[0].logLevel",
        "spec.schedulers[0].env",
        "spec.schedulers[1].envFrom",
    }
    for field_path, number in noted.items():  # each note points at its field (a list: its first item)
        key = field_path.rsplit(".", 1)[-1]
        assert key in text[number - 1] or f"{key}:" in text[number - 2], field_path
    assert "has no effect in igw" in err
    assert "1 InferenceGatewayConfig document(s) checked, 0 problem(s)" in err
    assert main(["validate", "--output", "json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == []  # notes are not problems


def test_three_errors_are_all_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _three_errors(tmp_path)
    assert main(["validate", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert any('spec.foo: unknown field "spec.foo"' in line for line in lines)
    assert any("spec.schedulers[1].targetPort: must be >= 1" in line for line in lines)
    assert any(
        "spec.schedulers[1].modelName: duplicates spec.schedulers[0].modelName" in line for line in lines
    )
    text = path.read_text().splitlines()
    for line in lines:  # each line points at the line of the offending field
        file_line = int(line.split(":")[1])
        field = line.split(": ")[1].rsplit(".", 1)[-1].split("[")[0]
        assert field in text[file_line - 1], line


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _three_errors(tmp_path)
    assert main(["validate", "--output", "json", str(path)]) == 1
    findings = json.loads(capsys.readouterr().out)
    assert {f["path"] for f in findings} == {
        "spec.foo",
        "spec.schedulers[1].targetPort",
        "spec.schedulers[1].modelName",
    }
    assert all({"file", "document", "line", "path", "message", "rule"} <= set(f) for f in findings)


def test_multi_document_file_reports_per_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = base_document()
    bad["spec"]["bbr"]["enabled"] = "maybe"
    path = tmp_path / "multi.yaml"
    path.write_text(yaml.safe_dump_all([base_document(), {"kind": "Service"}, bad]))
    assert main(["validate", "--output", "json", str(path)]) == 1
    findings = json.loads(capsys.readouterr().out)
    assert {f["document"] for f in findings} == {3}


def test_unreadable_and_syntax_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: InferenceGatewayConfig\nspec:\n  - a\n  b: c\n")
    assert main(["validate", str(broken), str(tmp_path / "missing.yaml"), str(EXAMPLES[0])]) == 2
    out = capsys.readouterr().out
    assert "broken.yaml: line 4" in out
    assert "cannot read file" in out


def test_a_file_without_gateway_configs_is_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["validate", str(path)]) == 0
    assert "no InferenceGatewayConfig document" in capsys.readouterr().err


def test_reads_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(base_document())))
    assert main(["validate", "-"]) == 0


def test_usage_error_exits_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["validate"])
    assert info.value.code == 2


def test_generate_check_names_a_stale_file(
    tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for top in {Path(rel).parts[0] for rel, _ in GENERATED_FILES} | {"schemas"}:
        if top != "gateway_src":
            shutil.copytree(repo_root / top, tmp_path / top)
    bundled = "gateway_src/igw/config/bundled"
    shutil.copytree(repo_root / bundled, tmp_path / bundled)
    assert main(["generate", "--root", str(tmp_path)]) == 0
    assert main(["generate", "--check", "--root", str(tmp_path)]) == 0
    crd = tmp_path / CRD_PATH
    crd.write_text(crd.read_text() + "# hand edit\n")
    (tmp_path / bundled / "admission-rules.yaml").unlink()
    capsys.readouterr()
    assert main(["generate", "--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"stale: {CRD_PATH}" in out
    assert f"missing: {bundled}/admission-rules.yaml" in out
    assert main(["generate", "--root", str(tmp_path)]) == 0
    assert main(["generate", "--check", "--root", str(tmp_path)]) == 0


def test_json_files_get_field_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = base_document()
    doc["spec"]["schedulers"][1]["targetPort"] = 0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc, indent=2))
    assert main(["validate", str(path)]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    number = int(line.split(":")[1])
    assert '"targetPort": 0' in path.read_text().splitlines()[number - 1]


def test_real_process_exit_codes_and_streams(tmp_path: Path) -> None:
    """The command as a user runs it: a separate process, stdout for problems, stderr for notes."""
    path = _three_errors(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "igw.cli.main", "validate", str(path), str(EXAMPLES[0])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert len(done.stdout.splitlines()) == 3
    counted = "2 InferenceGatewayConfig document(s) and 1 EndpointPickerConfig document(s) checked"
    assert f"{counted}, 3 problem(s)" in done.stderr


def test_broken_contract_exits_2(tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schemas = tmp_path / "schemas"
    shutil.copytree(repo_root / "schemas", schemas)
    (schemas / "extensions" / "open.schema.json").write_text('{"type": "object"}')
    monkeypatch.setenv("IGW_SCHEMAS_DIR", str(schemas))
    assert main(["validate", str(EXAMPLES[0])]) == 2


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://:SuperSecretToken123@redis.example:6379/0", "http://[REDACTED]@redis.example:6379/0"),
        ("https://admin:pa55w0rd@redis.example/0", "https://[REDACTED]@redis.example/0"),
        ("tcp://tokenOnly987654321@10.0.0.1:6379", "tcp://[REDACTED]@10.0.0.1:6379"),
    ],
)
def test_a_refused_url_is_quoted_without_its_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, shown: str
) -> None:
    """Problem messages reach CI logs, the operator's conditions and Events and the preflight / audit
    reports; a Redis URL with a password and a wrong scheme was quoted there whole."""
    doc = base_document()
    doc["spec"]["extensions"] = {"rateLimits": {"backend": "redis", "redis": {"url": url}}}
    path = tmp_path / "redis.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["validate", "--output", "json", str(path)]) == 1
    out, _ = capsys.readouterr()
    secret = url.split("://", 1)[1].split("@", 1)[0]
    assert secret not in out
    messages = [problem["message"] for problem in json.loads(out)]
    assert any(shown in message for message in messages), messages


_REFERENCE_PICKER = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - type: prefix-cache-scorer
    parameters: {blockSize: 0, blocksize: 64}
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
      - pluginRef: prefix-cache-scorer
        weight: 3
"""


def test_a_reference_picker_config_with_bad_parameters_warns_and_strict_plugins_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GIE EndpointPickerConfig loads as the gateway loads it: an invalid parameter falls back with a
    warning naming its path and line; --strict-plugins makes it a problem (exit 1)."""
    path = tmp_path / "plugins.yaml"
    path.write_text(_REFERENCE_PICKER)
    assert main(["validate", str(path)]) == 0
    captured = capsys.readouterr()
    assert f"{path}:6: warning: plugins[1].parameters.blockSize: must be >= 1, got 0" in captured.err
    assert "unknown field 'blocksize'" in captured.err
    assert "1 EndpointPickerConfig document(s) checked, 0 problem(s)" in captured.err
    assert "0 InferenceGatewayConfig" not in captured.err  # a file of other kinds counts only those
    assert main(["validate", "--strict-plugins", str(path)]) == 1
    out = capsys.readouterr().out
    expected = f"{path}:6: plugins[1].parameters.blockSize: must be >= 1, got 0 [endpoint-picker-parameter]"
    assert expected in out
    assert "blocksize" in out


def test_a_picker_config_with_an_unknown_plugin_type_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plugins.yaml"
    path.write_text(_REFERENCE_PICKER.replace("type: queue-scorer", "type: nope-scorer"))
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:4: plugins[0].type: unknown plugin type 'nope-scorer'" in out
    assert "[endpoint-picker-config]" in out


def test_a_misspelled_plugin_type_names_the_closest_known_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``type: queue-scorrer`` listed 36 known types and left the user to spot the one they meant;
    the message now names it first (as a misspelled kind does)."""
    path = tmp_path / "plugins.yaml"
    path.write_text(_REFERENCE_PICKER.replace("type: queue-scorer", "type: queue-scorrer"))
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert (
        f"{path}:4: plugins[0].type: unknown plugin type 'queue-scorrer' "
        "(did you mean 'queue-scorer'?); known: " in out
    )
    assert "kv-cache-utilization-scorer" in out  # the full list still follows


def _config_map(picker: str, *, key: str = "default-plugins.yaml") -> str:
    """A ConfigMap manifest holding ``picker`` under ``key`` as a literal block, as
    ``crds/examples/configmap-ref.yaml`` does (its ``data`` key on line 5)."""
    body = "".join(f"    {line}\n" for line in picker.splitlines())
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: plugins}}\ndata:\n  {key}: |\n{body}"


def test_a_configmap_holding_a_picker_config_has_its_plugins_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's plugins file is "the ConfigMap in crds/examples/configmap-ref.yaml", the form
    ``kubectl apply`` takes beside the InferenceGatewayConfig; ``igw validate`` skipped every ConfigMap,
    so ``type: queue-scorrer`` in one exited 0 and the gateway refused it later. Its
    EndpointPickerConfig is checked as a plugins file is, each problem at its line in the file."""
    path = tmp_path / "cm.yaml"
    path.write_text(_config_map(_REFERENCE_PICKER.replace("type: queue-scorer", "type: queue-scorrer")))
    assert main(["validate", str(path)]) == 1
    out, err = capsys.readouterr()
    lines = path.read_text().splitlines()
    assert "type: queue-scorrer" in lines[8]  # line 9 of the file
    assert (
        f"{path}:9: data[default-plugins.yaml].plugins[0].type: unknown plugin type 'queue-scorrer' "
        "(did you mean 'queue-scorer'?)" in out
    )
    assert "[endpoint-picker-config]" in out
    assert "skipped document" not in err
    assert "1 EndpointPickerConfig document(s) checked" in err
    # a parameter the gateway replaces by its default: a warning at its line, a problem with --strict-plugins
    assert "blockSize: 0" in lines[10]
    path.write_text(_config_map(_REFERENCE_PICKER))
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    warned = "warning: data[default-plugins.yaml].plugins[1].parameters.blockSize: must be >= 1"
    assert f"{path}:11: {warned}" in err
    assert main(["validate", "--strict-plugins", str(path)]) == 1
    assert "[endpoint-picker-parameter]" in capsys.readouterr().out


def test_a_configmap_entry_naming_the_picker_kind_that_is_not_yaml_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plugins entry with a YAML error is reported, not skipped; other ConfigMaps stay skipped."""
    path = tmp_path / "cm.yaml"
    path.write_text(
        _config_map("kind: EndpointPickerConfig\nplugins: [\n")
        + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\ndata: {a: b}\n"
    )
    assert main(["validate", str(path)]) == 1
    out, err = capsys.readouterr()
    assert f"{path}:5: data[default-plugins.yaml]: line 3, column 1: " in out
    assert "skipped document 2 (kind ConfigMap)" in err


def test_stdin_that_is_not_utf8_is_an_unreadable_file_not_a_traceback() -> None:
    """Under the C/POSIX locale Python reads standard input with surrogateescape: ``printf '\\xff' |
    igw validate -`` ended in a UnicodeEncodeError traceback from the YAML parser."""
    done = subprocess.run(
        [sys.executable, "-m", "igw.cli.main", "validate", "-"],
        input=b"\xff\xfe kind: x\n",
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ, "LC_ALL": "C", "PYTHONIOENCODING": "", "PYTHONUTF8": ""},
    )
    output = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 2, output
    assert "Traceback" not in output
    assert "-: cannot read file: 'utf-8' codec can't decode byte 0xff" in output
