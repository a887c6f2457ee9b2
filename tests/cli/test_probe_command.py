"""`hwadvisor probe`: JSON contract, --output, usage errors, and the no-GPU / fake-H200 paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from nvml_fakes import h200_fake, no_module_loader
from typer.testing import CliRunner

from hwadvisor.cli.app import app
from hwadvisor.probe import nvml as nvml_mod
from hwadvisor.probe.nvml import Nvml

REPO = Path(__file__).resolve().parents[2]
HOST_KEYS = {"cpu_model", "cpu_cores", "memory_total_bytes", "memory_available_bytes", "os"}
DEVICE_KEYS = {"index", "vendor", "device_class", "name", "memory_total_bytes",
               "memory_bandwidth_gbps", "compute_capability", "formats", "source"}


def _runner() -> CliRunner:
    # Older click mixes stderr into output unless told not to; newer click keeps both apart.
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def invoke(args: list[str]):
    return _runner().invoke(app, args)


def stdout_of(result) -> str:
    return result.stdout


def stderr_of(result) -> str:
    try:
        return result.stderr
    except ValueError:  # stderr mixed into output
        return result.output


def parse_json(result) -> dict:
    text = stdout_of(result)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(text[text.index("{"):])


@pytest.fixture
def no_gpu():
    nvml_mod.set_nvml(Nvml(loader=no_module_loader))
    yield
    nvml_mod.set_nvml(None)


@pytest.fixture
def fake_h200():
    nvml_mod.set_nvml(Nvml(backend=h200_fake()))
    yield
    nvml_mod.set_nvml(None)


def test_probe_json_public_keys(no_gpu):
    result = invoke(["probe", "--json"])
    assert result.exit_code == 0, result.output
    report = parse_json(result)
    assert {"schema_version", "tool_version", "generated_at", "host", "devices"} <= set(report)
    assert report["kind"] == "probe"
    assert HOST_KEYS <= set(report["host"])
    assert isinstance(report["host"]["memory_total_bytes"], int)
    assert report["host"]["memory_total_bytes"] > 0


def test_probe_without_gpu(no_gpu):
    result = invoke(["probe", "--json"])
    assert result.exit_code == 0
    report = parse_json(result)
    assert [d for d in report["devices"] if d["vendor"] == "nvidia"] == []
    assert any("no NVIDIA GPU" in n for n in report["notes"])
    assert "no NVIDIA GPU" in stderr_of(result)


def test_probe_with_fake_h200(fake_h200):
    result = invoke(["probe", "--json"])
    assert result.exit_code == 0, result.output
    report = parse_json(result)
    assert report["device_class"] == "datacenter-gpu"
    (device,) = report["devices"]
    assert DEVICE_KEYS <= set(device)
    assert device["vendor"] == "nvidia" and device["source"] == "probe"
    assert device["name"] == "NVIDIA H200"
    assert device["compute_capability"] == "9.0"
    assert device["memory_total_bytes"] == 150754820096
    assert abs(device["memory_bandwidth_gbps"] - 4814) <= 1
    assert device["nvidia"]["driver_version"] == "580.159.04"


def test_probe_table_output_with_fake_h200(fake_h200):
    result = invoke(["probe"])
    assert result.exit_code == 0, result.output
    assert "NVIDIA H200" in stdout_of(result)


def test_probe_output_file(fake_h200, tmp_path):
    target = tmp_path / "probe.json"
    result = invoke(["probe", "--json", "--output", str(target)])
    assert result.exit_code == 0, result.output
    written = json.loads(target.read_text())
    printed = parse_json(result)
    written.pop("generated_at")
    printed.pop("generated_at")
    # Host readings like free memory move between two reads; the probe ran once, so equal.
    assert written == printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.json"]  # no temp files left


def test_probe_output_into_missing_folder(no_gpu, tmp_path):
    target = tmp_path / "missing" / "probe.json"
    result = invoke(["probe", "--output", str(target)])
    assert result.exit_code == 2
    assert not target.exists()
    assert "hint:" in stderr_of(result)
    assert "Traceback" not in result.output


def test_unknown_option(no_gpu):
    result = invoke(["probe", "--no-such-option"])
    assert result.exit_code == 2
    text = result.output + (stderr_of(result) or "")
    assert "hint:" in text
    assert "Traceback" not in text


def test_probe_path_imports_no_torch():
    code = ("import sys, hwadvisor.cli.app, hwadvisor.probe; hwadvisor.probe.collect(); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_probe_json_imports_only_what_it_needs():
    """`probe --json` (the start-up target) loads no torch, no rich and no other command."""
    code = (
        "import runpy, sys\n"
        "sys.argv = ['hwadvisor', 'probe', '--json']\n"
        "try:\n"
        "    runpy.run_module('hwadvisor', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('torch', 'rich', 'matplotlib')\n"
        "          or m in ('hwadvisor.cli.commands.recommend', 'hwadvisor.perfmodel',\n"
        "                   'hwadvisor.workload', 'hwadvisor.rules')]\n"
        "print(sorted(loaded), file=sys.stderr)\n"
        "sys.exit(1 if loaded else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
