"""README's test command (scripts/test) on a machine that has never seen the project.

pip resolves scripts/torch-cpu.txt, the file scripts/test installs torch from, against two local
stand-ins: "PyPI", which holds torch 2.13.0 as PyPI does (its Linux wheel requires the nvidia-*
CUDA packages), and "PyTorch's CPU index", which holds 2.13.0+cpu. No configuration, cache or
environment of this machine takes part (PIP_CONFIG_FILE=/dev/null, --isolated, --no-cache-dir),
as on a fresh machine. A requirement pip could meet from PyPI alone pulls the CUDA build.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SCRIPT = REPO / "scripts" / "test"
REQUIREMENTS = REPO / "scripts" / "torch-cpu.txt"


def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    """Write a minimal wheel (metadata only: a dry run reads nothing else)."""
    stem = f"{name.replace('-', '_')}-{version}"  # a wheel's file name escapes "-" in names
    dist = f"{stem}.dist-info"
    metadata = "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                          *(f"Requires-Dist: {r}" for r in requires)]) + "\n"
    wheel = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{dist}/METADATA", metadata)
        zf.writestr(f"{dist}/WHEEL", wheel)
        zf.writestr(f"{dist}/RECORD", "")


def _index(root: Path, wheels: dict[str, list[tuple[str, list[str]]]]) -> str:
    """Build a PEP 503 simple index under root; return its file:// URL."""
    for name, versions in wheels.items():
        folder = root / name
        folder.mkdir(parents=True)
        for version, requires in versions:
            _wheel(folder, name, version, requires)
        links = "".join(f'<a href="{p.name}">{p.name}</a>\n' for p in sorted(folder.glob("*.whl")))
        (folder / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return root.as_uri()


def _resolve(tmp_path: Path, requirements: str) -> dict[str, str]:
    """Dry-run pip on the requirements against the two stand-in indexes; {name: version}."""
    pypi = _index(tmp_path / "pypi", {
        "torch": [("2.13.0", ["nvidia-cublas-cu12==12.9.1.4"])],
        "nvidia-cublas-cu12": [("12.9.1.4", [])],
    })
    cpu = _index(tmp_path / "cpu", {"torch": [("2.13.0+cpu", [])]})
    req = tmp_path / "req.txt"
    req.write_text(requirements.replace(CPU_INDEX, cpu))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--dry-run",
         "--ignore-installed", "--quiet", "--index-url", pypi, "-r", str(req),
         "--report", str(report)],
        env=env, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0 and "no such option: --report" in done.stderr:
        pytest.skip("this pip has no --report (pip >= 22.2 does)")
    assert done.returncode == 0, done.stderr
    installed = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in installed}


def test_torch_requirement_resolves_to_the_cpu_build_and_no_cuda_package(tmp_path: Path) -> None:
    if sys.platform == "darwin":
        pytest.skip("macOS resolves plain torch, which has no CUDA build there")
    resolved = _resolve(tmp_path, REQUIREMENTS.read_text())
    assert resolved["torch"] == "2.13.0+cpu"
    assert not [name for name in resolved if name.startswith("nvidia")], resolved


def test_the_stand_in_pypi_pulls_cuda_for_a_plain_pin(tmp_path: Path) -> None:
    """The check above can fail: a plain pin (README's old command) resolves to CUDA here."""
    resolved = _resolve(tmp_path, "torch==2.13.0\n")
    assert "nvidia-cublas-cu12" in resolved


def test_scripts_test_installs_torch_from_the_requirements_file_first() -> None:
    text = SCRIPT.read_text()
    torch_line = text.index("-r scripts/torch-cpu.txt")
    extras_line = text.index('-e ".[test,validate,plot]"')
    assert torch_line < extras_line  # the extras' torch>=2.4 is then met by the CPU build
    # retries bounded: an unreachable index costs seconds, not pip's 5 retries a package
    assert re.search(r"--retries [01] .*-r scripts/torch-cpu.txt", text)
    assert f"--extra-index-url {CPU_INDEX}" in REQUIREMENTS.read_text()
    assert "--index-url" not in REQUIREMENTS.read_text().replace("--extra-index-url", "")


def test_readme_says_what_the_test_command_installs() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("bash scripts/test"):]
    section = section[:section.index("## ")]
    for words in ("torch==2.13.0+cpu", CPU_INDEX, "`test`", "`validate`", "`plot`",
                  "Chromium", "root", "HWADVISOR_NO_BROWSER", "HWADVISOR_FUZZ_EXAMPLES"):
        assert words in section, words


def test_the_fuzz_tests_are_bounded_by_default() -> None:
    """10,000 cases a leg took minutes on 2 cores: the default is bounded, the job asks more."""
    env = {k: v for k, v in os.environ.items() if k != "HWADVISOR_FUZZ_EXAMPLES"}
    code = ("import sys; sys.path[:0] = ['tests', 'tests/cli']; import test_fuzz, "
            "test_fuzz_gates; print(test_fuzz.EXAMPLES, test_fuzz_gates.EXAMPLES)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    fuzz, gates = (int(x) for x in done.stdout.split())
    assert fuzz <= 2000 and gates <= 50
    env["HWADVISOR_FUZZ_EXAMPLES"] = "10000"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.split() == ["10000", "200"]
