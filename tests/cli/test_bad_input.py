"""Every command fed bad input: exit 2 (or the documented code), a hint, never a traceback.

Also the output contract: no --output file is left behind when a run fails, stdout of each
--json command is JSON alone (notes go to stderr), and the planning commands never import
torch or matplotlib.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hwadvisor.cli.app import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "tests" / "fixtures" / "reports" / "h200-validate.json"
PROBE_REPORT = REPO / "tests" / "fixtures" / "reports" / "h200-probe-measured.json"
TRUNCATED = REPO / "tests" / "fixtures" / "reports" / "truncated.json"
DEV = ("--device", "h200-sxm")


def assert_clean_error(result, code: int = 2) -> None:
    """Exit `code`, a message and a hint line, and no traceback (neither printed nor raised)."""
    out = result.output
    assert result.exit_code == code, out
    assert "Traceback" not in out, out
    assert "hint:" in out, out
    assert "error:" in out or "Usage" in out or "usage" in out, out
    # An unexpected exception is reported by CliRunner as result.exception (not SystemExit).
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception)


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Malformed inputs: bad JSON, a folder without config.json, a non-report, binary bytes."""
    root = tmp_path_factory.mktemp("bad")
    files = {
        "bad_json": root / "config.json",
        "empty_dir": root / "empty",
        "non_report": root / "non-report.json",
        "json_list": root / "list.json",
        "binary": root / "binary.json",
        "empty_file": root / "empty.json",
        "dir_named_json": root / "folder.json",
    }
    files["bad_json"].write_text('{"model_type": "llama", "hidden_size": ')
    files["empty_dir"].mkdir()
    files["non_report"].write_text('{"hello": "world"}')
    files["json_list"].write_text("[1, 2, 3]")
    files["binary"].write_bytes(b"\xff\xfe\x00\x81garbage")
    files["empty_file"].write_text("")
    files["dir_named_json"].mkdir()
    files["root"] = root
    return files


# --------------------------------------------------------------------------- argument errors

# (id, argv): each must exit 2 with a hint. Files are filled in by the `bad_files` fixture.
USAGE_CASES: list[tuple[str, list[str]]] = [
    ("root-unknown-option", ["--bogus"]),
    ("unknown-command", ["nosuchcommand"]),
    ("command-typo", ["recomend"]),
    ("probe-unknown-option", ["probe", "--bogus"]),
    ("probe-extra-argument", ["probe", "extra"]),
    ("estimate-unknown-option", ["estimate", *DEV, "--bogus"]),
    ("estimate-bad-phase", ["estimate", *DEV, "--phase", "pretraining"]),
    ("estimate-empty-phase", ["estimate", *DEV, "--phase", ""]),
    ("estimate-bad-weights-dtype", ["estimate", *DEV, "--weights-dtype", "fp7"]),
    ("estimate-bad-kv-dtype", ["estimate", *DEV, "--kv-dtype", "int3"]),
    ("estimate-bad-activation-dtype", ["estimate", *DEV, "--activation-dtype", "x"]),
    ("estimate-bad-optimizer", ["estimate", *DEV, "--optimizer", "sgdx"]),
    ("estimate-bad-sharding", ["estimate", *DEV, "--sharding", "zero9"]),
    ("estimate-bad-attention", ["estimate", *DEV, "--attention-kernel", "magic"]),
    ("estimate-batch-negative", ["estimate", *DEV, "--batch", "-1"]),
    ("estimate-batch-zero", ["estimate", *DEV, "--batch", "0"]),
    ("estimate-batch-text", ["estimate", *DEV, "--batch", "abc"]),
    ("estimate-batch-float", ["estimate", *DEV, "--batch", "1.5"]),
    ("estimate-batch-huge", ["estimate", *DEV, "--batch", str(10**30)]),
    ("estimate-prompt-len-huge", ["estimate", *DEV, "--prompt-len", str(10**12)]),
    ("estimate-prompt-len-zero", ["estimate", *DEV, "--prompt-len", "0"]),
    ("estimate-gen-len-negative", ["estimate", *DEV, "--gen-len", "-5"]),
    ("estimate-gpus-zero", ["estimate", *DEV, "--gpus", "0"]),
    ("estimate-gpus-huge", ["estimate", *DEV, "--gpus", str(10**9)]),
    ("estimate-grad-accum-negative", ["estimate", *DEV, "--grad-accum", "-3"]),
    ("estimate-nodes-zero", ["estimate", *DEV, "--nodes", "0"]),
    ("estimate-gpus-per-node-zero", ["estimate", *DEV, "--gpus-per-node", "0"]),
    ("estimate-layout-mismatch",
     ["estimate", *DEV, "--nodes", "3", "--gpus-per-node", "5", "--gpus", "7"]),
    ("estimate-inter-node-negative", ["estimate", *DEV, "--inter-node-gbps", "-1"]),
    ("estimate-inter-node-nan", ["estimate", *DEV, "--inter-node-gbps", "nan"]),
    ("estimate-inter-node-inf", ["estimate", *DEV, "--inter-node-gbps", "inf"]),
    ("estimate-offload-above-one", ["estimate", *DEV, "--offload-fraction", "2"]),
    ("estimate-offload-nan", ["estimate", *DEV, "--offload-fraction", "nan"]),
    ("estimate-prefix-hit-negative", ["estimate", *DEV, "--prefix-cache-hit", "-0.1"]),
    ("estimate-speculative-below-one", ["estimate", *DEV, "--speculative-tokens", "0.5"]),
    ("estimate-speculative-inf", ["estimate", *DEV, "--speculative-tokens", "inf"]),
    ("estimate-speculative-nan", ["estimate", *DEV, "--speculative-tokens", "nan"]),
    ("estimate-model-missing-value", ["estimate", *DEV, "--model"]),
    ("estimate-model-nonexistent", ["estimate", *DEV, "--model", "/nonexistent/config.json"]),
    ("estimate-model-unknown-preset", ["estimate", *DEV, "--model", "llama-9-999b"]),
    ("estimate-model-hf-repo-id", ["estimate", *DEV, "--model", "meta-llama/Llama-3-8B"]),
    ("estimate-model-empty", ["estimate", *DEV, "--model", ""]),
    ("estimate-model-nul-byte", ["estimate", *DEV, "--model", "a\x00b"]),
    ("estimate-model-a-report", ["estimate", *DEV, "--model", str(REPORT)]),
    ("estimate-unknown-device", ["estimate", "--device", "h900-sxm"]),
    ("estimate-empty-device", ["estimate", "--device", ""]),
    ("recommend-unknown-option", ["recommend", *DEV, "--bogus"]),
    ("recommend-bad-goal", ["recommend", *DEV, "--goal", "speed"]),
    ("recommend-empty-goal", ["recommend", *DEV, "--goal", ""]),
    ("recommend-goal-missing-value", ["recommend", "-g"]),
    ("recommend-bad-phase", ["recommend", *DEV, "--phase", "serving"]),
    ("recommend-bad-dtype", ["recommend", *DEV, "--weights-dtype", "fp3"]),
    ("recommend-bad-optimizer", ["recommend", *DEV, "--optimizer", "lion2"]),
    ("recommend-batch-negative", ["recommend", *DEV, "--batch", "-1"]),
    ("recommend-batch-zero", ["recommend", *DEV, "--batch", "0"]),
    ("recommend-batch-text", ["recommend", *DEV, "--batch", "abc"]),
    ("recommend-prompt-len-huge", ["recommend", *DEV, "--prompt-len", str(10**12)]),
    ("recommend-gpus-zero", ["recommend", *DEV, "--gpus", "0"]),
    ("recommend-grad-accum-negative", ["recommend", *DEV, "--grad-accum", "-3"]),
    ("recommend-unknown-device", ["recommend", "--device", "gpu-9000"]),
    ("recommend-min-bw-above-one", ["recommend", *DEV, "--min-bandwidth-fraction", "2"]),
    ("recommend-min-bw-text", ["recommend", *DEV, "--min-bandwidth-fraction", "most"]),
    ("recommend-bad-fail-on", ["recommend", *DEV, "--fail-on", "bogus"]),
    ("recommend-model-nonexistent", ["recommend", *DEV, "--model", "/nonexistent"]),
    ("validate-unknown-option", ["validate", "--bogus"]),
    ("validate-unknown-trial", ["validate", "--trial", "nosuch-trial"]),
    ("validate-empty-trial", ["validate", "--trial", ""]),
    ("validate-one-bad-trial", ["validate", "--trial", "memory-bandwidth", "--trial", "nope"]),
    ("validate-batch-negative", ["validate", "--batch", "-1"]),
    ("validate-bad-phase", ["validate", "--phase", "x"]),
    ("validate-min-bw-above-one", ["validate", "--min-bandwidth-fraction", "2"]),
    ("validate-bad-fail-on", ["validate", "--fail-on", "bogus"]),
    ("validate-report-nonexistent", ["validate", "--report", "/nonexistent.json"]),
    ("validate-report-truncated", ["validate", "--report", str(TRUNCATED)]),
    ("schema-unknown-option", ["schema", "--bogus"]),
    ("schema-extra-argument", ["schema", "extra"]),
    ("compare-no-arguments", ["compare"]),
    ("compare-one-argument", ["compare", str(REPORT)]),
    ("compare-unknown-option", ["compare", str(REPORT), str(REPORT), "--bogus"]),
    ("compare-nonexistent", ["compare", "/nonexistent-a.json", "/nonexistent-b.json"]),
    ("compare-truncated", ["compare", str(REPORT), str(TRUNCATED)]),
    ("compare-max-regression-negative",
     ["compare", str(REPORT), str(REPORT), "--max-regression", "-5"]),
    ("compare-max-regression-text",
     ["compare", str(REPORT), str(REPORT), "--max-regression", "abc"]),
    ("compare-max-regression-nan",
     ["compare", str(REPORT), str(REPORT), "--max-regression", "nan"]),
    ("compare-max-regression-inf",
     ["compare", str(REPORT), str(REPORT), "--max-regression", "inf"]),
    ("plot-no-argument", ["plot"]),
    ("plot-nonexistent", ["plot", "/nonexistent.json"]),
    ("plot-truncated", ["plot", str(TRUNCATED)]),
    ("plot-device-out-of-range", ["plot", str(REPORT), "--device", "99"]),
    ("plot-device-negative", ["plot", str(REPORT), "--device", "-1"]),
    ("plot-device-text", ["plot", str(REPORT), "--device", "abc"]),
    ("profiles-unknown-subcommand", ["profiles", "bogus"]),
    ("profiles-list-bad-class", ["profiles", "list", "--class", "quantum"]),
    ("profiles-list-empty-class", ["profiles", "list", "--class", ""]),
    ("profiles-list-unknown-option", ["profiles", "list", "--bogus"]),
    ("profiles-show-missing-id", ["profiles", "show"]),
    ("profiles-show-unknown-id", ["profiles", "show", "h900-sxm"]),
    ("profiles-show-json-unknown-id", ["profiles", "show", "--json", "nope"]),
    ("profiles-show-extra-argument", ["profiles", "show", "h200-sxm", "extra"]),
]


@pytest.mark.parametrize("argv", [c[1] for c in USAGE_CASES], ids=[c[0] for c in USAGE_CASES])
def test_bad_arguments_exit_2_with_hint(argv: list[str]) -> None:
    """Unknown options, missing arguments, bad choices and numbers out of range."""
    assert_clean_error(runner.invoke(app, argv))


# Malformed files, by the key of `bad_files`, per command that reads one.
FILE_CASES: list[tuple[str, str]] = [
    (cmd, key)
    for cmd in ("estimate-model", "compare", "plot", "validate-report")
    for key in ("bad_json", "empty_dir", "non_report", "json_list", "binary", "empty_file",
                "dir_named_json")
]


def _file_argv(cmd: str, path: Path) -> list[str]:
    if cmd == "estimate-model":
        return ["estimate", *DEV, "--model", str(path)]
    if cmd == "compare":
        return ["compare", str(REPORT), str(path)]
    if cmd == "plot":
        return ["plot", str(path), "-o", str(path.parent / "never.png")]
    return ["validate", "--report", str(path)]


@pytest.mark.parametrize(("cmd", "key"), FILE_CASES, ids=[f"{c}-{k}" for c, k in FILE_CASES])
def test_malformed_files_exit_2_with_hint(cmd: str, key: str, bad_files: dict[str, Path]) -> None:
    """A config.json with bad JSON, a folder without config.json, non-reports, binary bytes."""
    assert_clean_error(runner.invoke(app, _file_argv(cmd, bad_files[key])))
    assert not (bad_files["root"] / "never.png").exists()


@pytest.mark.parametrize("cmd", ["estimate-model", "compare", "plot", "validate-report"])
def test_unreadable_file_exit_2_with_hint(cmd: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A file the user may not read: CI runs as root, where chmod 0 still reads, so the
    permission error is raised for that one path by every way the commands open files."""
    import builtins
    import io

    path = tmp_path / "config.json"
    path.write_text(REPORT.read_text())
    denied = str(path.resolve())

    def guard(target: object) -> None:
        if str(Path(str(target)).resolve()) == denied:
            raise PermissionError(13, "Permission denied", str(target))

    real_open, real_io_open = builtins.open, io.open
    real_read_text, real_read_bytes = Path.read_text, Path.read_bytes

    def fake_open(file: object, *args: object, **kwargs: object) -> object:
        if isinstance(file, (str, os.PathLike)):
            guard(file)
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    def fake_read_text(self: Path, *args: object, **kwargs: object) -> str:
        guard(self)
        return real_read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    def fake_read_bytes(self: Path) -> bytes:
        guard(self)
        return real_read_bytes(self)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)
    monkeypatch.setattr(Path, "read_text", fake_read_text)
    monkeypatch.setattr(Path, "read_bytes", fake_read_bytes)
    try:
        result = runner.invoke(app, _file_argv(cmd, path))
    finally:
        monkeypatch.setattr(builtins, "open", real_open)
        monkeypatch.setattr(io, "open", real_io_open)
    assert_clean_error(result)


# --------------------------------------------------------------------------- no file left behind

# Commands that write --output (or -o), a bad input that fails after the options parsed, and
# the name of the output file.
OUTPUT_CASES: list[tuple[str, list[str], str]] = [
    ("estimate-bad-batch", ["estimate", *DEV, "--batch", "-1"], "out.json"),
    ("estimate-bad-device", ["estimate", "--device", "nope"], "out.json"),
    ("estimate-bad-model", ["estimate", *DEV, "--model", "/nonexistent"], "out.json"),
    ("estimate-speculative-inf", ["estimate", *DEV, "--speculative-tokens", "inf"], "out.json"),
    ("recommend-bad-goal", ["recommend", *DEV, "--goal", "speed"], "out.json"),
    ("recommend-bad-prompt-len", ["recommend", *DEV, "--prompt-len", str(10**12)], "out.json"),
    ("recommend-bad-device", ["recommend", "--device", "nope"], "out.json"),
    ("validate-bad-trial", ["validate", "--trial", "nosuch"], "out.json"),
    ("validate-bad-report", ["validate", "--report", str(TRUNCATED)], "out.json"),
    ("plot-bad-device", ["plot", str(REPORT), "--device", "7"], "out.png"),
    ("plot-bad-format", ["plot", str(REPORT)], "out.bogusext"),
    ("plot-not-a-report", ["plot", str(TRUNCATED)], "out.png"),
]


@pytest.mark.parametrize(("argv", "name"), [(c[1], c[2]) for c in OUTPUT_CASES],
                         ids=[c[0] for c in OUTPUT_CASES])
def test_failed_run_leaves_no_output_file(argv: list[str], name: str, tmp_path: Path) -> None:
    """A run that fails writes neither the report nor a temp file next to it."""
    if name.endswith((".png", ".bogusext")):
        pytest.importorskip("matplotlib")
    out = tmp_path / name
    flags = ["-o", str(out)] if argv[0] == "plot" else ["--output", str(out)]
    if argv[0] in ("recommend", "validate"):
        flags += ["--markdown", str(tmp_path / "summary.md")]
    assert_clean_error(runner.invoke(app, [*argv, *flags]))
    assert list(tmp_path.iterdir()) == []


OUTPUT_PLACES = ["missing-folder", "a-folder", "a-folder-named-json"]


def _output_target(place: str, tmp_path: Path) -> Path:
    if place == "missing-folder":
        return tmp_path / "no" / "such" / "out.json"
    folder = tmp_path / ("folder.json" if place == "a-folder-named-json" else "folder")
    folder.mkdir()
    return folder


@pytest.mark.parametrize("place", OUTPUT_PLACES)
@pytest.mark.parametrize("command", [
    ["probe"],
    ["estimate", *DEV],
    ["recommend", *DEV],
    ["plot", str(REPORT)],
], ids=["probe", "estimate", "recommend", "plot"])
def test_output_into_a_missing_folder_or_a_folder(
    command: list[str], place: str, tmp_path: Path
) -> None:
    """--output into a folder that does not exist, or onto a folder: exit 2, nothing written."""
    target = _output_target(place, tmp_path)
    before = sorted(tmp_path.rglob("*"))
    flag = "-o" if command[0] == "plot" else "--output"
    assert_clean_error(runner.invoke(app, [*command, flag, str(target)]))
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("command", [["probe"], ["recommend", *DEV],
                                     ["compare", str(REPORT), str(REPORT)]],
                         ids=["probe", "recommend", "compare"])
def test_markdown_into_a_missing_folder(command: list[str], tmp_path: Path) -> None:
    """--markdown into a folder that does not exist: exit 2 and a hint."""
    target = tmp_path / "missing" / "summary.md"
    assert_clean_error(runner.invoke(app, [*command, "--markdown", str(target)]))
    assert not target.parent.exists()


def test_bad_output_leaves_no_markdown_behind(tmp_path: Path) -> None:
    """--markdown fine but --output into a missing folder: exit 2 and neither file written."""
    result = runner.invoke(app, ["recommend", *DEV, "--markdown", str(tmp_path / "summary.md"),
                                 "--output", str(tmp_path / "missing" / "out.json")])
    assert_clean_error(result)
    assert list(tmp_path.iterdir()) == []


def test_plot_unknown_image_format_is_a_usage_error(tmp_path: Path) -> None:
    """-o with a suffix matplotlib cannot write: exit 2 naming the formats, no file."""
    pytest.importorskip("matplotlib")
    result = runner.invoke(app, ["plot", str(REPORT), "-o", str(tmp_path / "roofline.bogus")])
    assert_clean_error(result)
    assert "png" in result.output
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- property test

_INT_TEXT = st.integers(min_value=-(10**15), max_value=10**15).map(str)
_VALUE = st.one_of(
    _INT_TEXT,
    st.text(max_size=12),
    st.sampled_from(["0", "-1", "1", "nan", "inf", "-inf", "1e9", "0.5", "", " ", "--json",
                     "bf16", "fp8", "int4", "adamw", "training", "inference", "llama-3-8b",
                     "mixtral-8x7b", "."]),
)
_WORKLOAD_OPTIONS = [
    "--model", "--phase", "--batch", "--prompt-len", "--gen-len", "--weights-dtype",
    "--kv-dtype", "--activation-dtype", "--optimizer", "--grad-accum", "--gpus", "--nodes",
    "--gpus-per-node", "--inter-node-gbps", "--offload-fraction", "--speculative-tokens",
    "--sharding",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_WORKLOAD_OPTIONS), _VALUE, max_size=5))
def test_estimate_workload_options_never_crash(options: dict[str, str]) -> None:
    """Any mix of workload values: exit 0 or 2, and never a traceback."""
    argv = ["estimate", *DEV, "--json"]
    for name, value in options.items():
        argv += [name, value]
    with tempfile.TemporaryDirectory() as empty:  # a random --model must not find repo files
        cwd = os.getcwd()
        os.chdir(empty)
        try:
            result = runner.invoke(app, argv)
        finally:
            os.chdir(cwd)
    assert result.exit_code in (0, 2), (argv, result.output)
    assert "Traceback" not in result.output, (argv, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        argv, repr(result.exception))
    if result.exit_code == 2:
        assert "hint:" in result.output, (argv, result.output)
    else:
        json.loads(result.stdout)


# --------------------------------------------------------------------------- stdout and imports

# Runs hwadvisor's CLI in this interpreter, then reports on stderr which heavy modules it loaded
# (from an exit handler: the CLI ends the process itself once it is done, after the handlers).
_WRAPPER = """
import atexit, runpy, sys
sys.argv = ["hwadvisor", *sys.argv[1:]]

def report():
    heavy = sorted(m for m in ("torch", "matplotlib") if m in sys.modules)
    sys.stderr.write("\\nHEAVY-MODULES=" + ",".join(heavy) + "\\n")

atexit.register(report)
runpy.run_module("hwadvisor", run_name="__main__")
"""

JSON_COMMANDS: list[tuple[str, list[str], bool]] = [
    # (id, argv, notes expected on stderr)
    ("probe", ["probe", "--json"], False),
    ("recommend-here", ["recommend", "--json"], True),
    ("recommend-profile", ["recommend", *DEV, "--json"], True),
    ("recommend-training", ["recommend", *DEV, "--goal", "a", "--gpus", "8", "--json"], True),
    ("estimate-here", ["estimate", "--json"], False),
    ("estimate-profile", ["estimate", *DEV, "--model", "llama-3-70b", "--json"], True),
    ("profiles-list", ["profiles", "list", "--json"], False),
    ("profiles-list-class", ["profiles", "list", "--class", "datacenter-gpu", "--json"], False),
    ("profiles-show", ["profiles", "show", "h200-sxm", "--json"], False),
    ("compare", ["compare", str(REPORT), str(PROBE_REPORT), "--json", "--allow-missing"], False),
    ("schema", ["schema"], False),
]
NO_HEAVY_IMPORTS = {"recommend-here", "recommend-profile", "recommend-training", "estimate-here",
                    "estimate-profile", "profiles-list", "profiles-show", "probe"}


def _run_wrapped(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100", "PYTHONPATH": str(REPO)}
    env.pop("HWADVISOR_DEBUG", None)
    return subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True, text=True,
                          timeout=120, check=False, cwd=REPO, env=env)


@pytest.mark.parametrize(("argv", "notes"), [(c[1], c[2]) for c in JSON_COMMANDS],
                         ids=[c[0] for c in JSON_COMMANDS])
def test_json_stdout_is_json_alone_and_no_heavy_imports(
    argv: list[str], notes: bool, request: pytest.FixtureRequest
) -> None:
    """stdout parses as JSON even when notes are printed (they go to stderr); the planning
    commands import neither torch nor matplotlib."""
    done = _run_wrapped(argv)
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)  # the whole of stdout, nothing else
    stderr, _, heavy = done.stderr.rpartition("HEAVY-MODULES=")
    assert "Traceback" not in stderr
    if notes:
        assert stderr.strip(), "expected notes on stderr"
    case_id = request.node.callspec.id
    if case_id in NO_HEAVY_IMPORTS:
        assert heavy.strip() == "", f"{argv} imported {heavy.strip()}"


def test_json_error_keeps_stdout_empty() -> None:
    """Under --json a usage error prints nothing on stdout: the message and hint go to stderr."""
    done = _run_wrapped(["estimate", *DEV, "--batch", "-1", "--json"])
    assert done.returncode == 2
    assert done.stdout == ""
    assert "hint:" in done.stderr and "Traceback" not in done.stderr


def test_validate_json_stdout_is_json_alone() -> None:
    """validate --json: the report alone on stdout, its notes on stderr."""
    pytest.importorskip("torch")
    result = runner.invoke(app, ["validate", "--trial", "memory-bandwidth", "--quick", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [t["id"] for t in data["trials"]] == ["memory-bandwidth"]


def test_atomic_write_turns_os_errors_into_user_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing rename (disk full, say) is a UserError with a hint, and no temp file stays."""
    from hwadvisor.errors import UserError
    from hwadvisor.report import io as reportio

    def full_disk(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reportio.os, "replace", full_disk)
    with pytest.raises(UserError) as caught:
        reportio.write_text_atomic(tmp_path / "report.json", "{}")
    assert "No space left" in caught.value.message and caught.value.hint
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UserError, match="is a folder"):
        reportio.write_text_atomic(tmp_path, "{}")
