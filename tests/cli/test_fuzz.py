"""Fuzzing, in process: mutated report files and mutated argument lists through every command.

- mutated report files (hypothesis: values replaced by hostile ones, keys dropped or
  added, versions, deep nesting, truncation, garbage bytes) through the report reader,
  `compare` (both sides), `validate --report` and `plot` (matplotlib Agg);
- mutated argument lists through every command (probe, estimate, recommend,
  validate, compare, plot, schema, profiles): valid, boundary and hostile option values,
  unknown options, repeats, markup and control characters, odd paths.

Every run must end with a documented exit code (0, 1, 2, 3, 4; 70, 130, 141 and 143 never
happen here) and never print a traceback; an exit 2 says `error:` in one line.

Each leg draws 1,500 cases by default, so README's test command stays within minutes on
2 cores (~15 s a leg); HWADVISOR_FUZZ_EXAMPLES sets the cases of each leg, and a scheduled job
runs 10,000 (~100 s a leg). Cost: the CLI is one prebuilt click command called with captured streams
(no subprocess); each hypothesis example feeds BATCH cases, the one hypothesis drew and
BATCH - 1 more from a random.Random it seeded (hypothesis's engine costs ~1-2 ms an example);
trials are an instant stand-in (validate's CLI, runner and report paths run, torch does not),
except one run in 500 of a real CPU-quick trial (kv-cache-quantization). plot: a file the
reader refuses goes through the plot command (which stops at the same reader); a readable one
through the roofline data plot draws (its skip rules included), and the command draws a real
PNG (Agg) for the first PLOT_RENDERS distinct shapes (which figures, each one's decade): one
PNG takes ~0.3 s.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import math
import os
import random
import shutil
import stat
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import report_factory as factory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwadvisor.errors import UserError
from hwadvisor.models import Effect, Measurement, TrialResult
from hwadvisor.report.io import load_report, report_json, write_report

DEFAULT_EXAMPLES = 1500  # a scheduled job sets HWADVISOR_FUZZ_EXAMPLES=10000
EXAMPLES = int(os.environ.get("HWADVISOR_FUZZ_EXAMPLES", str(DEFAULT_EXAMPLES)))
BATCH = 4
PLOT_RENDERS = 8
ALLOWED_CODES = {0, 1, 2, 3, 4}
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "reports"
SETTINGS = settings(max_examples=-(-EXAMPLES // BATCH), deadline=None, database=None,
                    derandomize=True, suppress_health_check=list(HealthCheck))


class Cli:
    """The hwadvisor CLI as one prebuilt click command, run with captured streams."""

    def __init__(self) -> None:
        import typer

        from hwadvisor.cli.app import build_app

        self.command = typer.main.get_command(build_app())

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        """Run argv; return (exit code, stdout, stderr)."""
        out, err = io.StringIO(), io.StringIO()
        code: Any = 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                self.command.main(list(argv), prog_name="hwadvisor")
            except SystemExit as exc:
                code = exc.code
        return (code if isinstance(code, int) else 1), out.getvalue(), err.getvalue()


def check(argv: list[str], code: int, out: str, err: str) -> None:
    """The contract of every run: a documented code, no traceback, one-line errors."""
    assert code in ALLOWED_CODES, (argv, code, err[-2000:])
    assert "Traceback" not in out + err, (argv, err[-3000:])
    assert "internal error" not in err, (argv, err[-2000:])
    if code == 2:
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, (argv, err[-2000:])


class QuickTrial:
    """An instant stand-in for a trial: validate's whole path runs, torch does not."""

    title = "stand-in"
    needs = "nothing"

    def __init__(self, trial_id: str) -> None:
        self.id = trial_id

    def unsupported_reason(self, ctx: object) -> str | None:
        return "stand-in: unsupported here" if self.id.startswith(("fp8", "col")) else None

    def run(self, ctx: object) -> TrialResult:
        return TrialResult(
            id=self.id, status="ok",
            measurements=[Measurement(label="copy", samples=[1e-3, 1.1e-3, 1.2e-3],
                                      value=40.0, value_unit="GB/s")],
            effects=[Effect.named("copy_gbps", 40.0), Effect.named("speedup", 1.2)])


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    """The prebuilt CLI, fast trials, a fake 2-GPU NVML, base reports and a scratch folder."""
    from nvml_fakes import h200x2_fake

    from hwadvisor.probe import nvml as nvml_mod
    from hwadvisor.probe.nvml import Nvml
    from hwadvisor.validator import runner as validator_runner

    patch = pytest.MonkeyPatch()
    patch.setattr(validator_runner, "get_trial", QuickTrial)
    patch.setenv("COLUMNS", "120")
    patch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    patch.delenv("HWADVISOR_DEBUG", raising=False)
    nvml_mod.set_nvml(Nvml(backend=h200x2_fake()))
    root = _scratch(tmp_path_factory)
    patch.chdir(root)  # plot without -o writes ./roofline.png
    bases = _bases(root)
    cli = Cli()
    for argv in (["compare", str(bases["probe"]), str(bases["validate"])], ["validate", "--quick"],
                 ["recommend"], ["estimate"], ["probe"]):
        cli.run(argv)  # warm up: every command's modules imported once
    # Everything loaded so far (torch, matplotlib, hypothesis: ~10^6 objects) is left out of
    # the collector's full passes, which would otherwise rescan it thousands of times.
    gc.freeze()
    yield {"cli": cli, "root": root, "bases": bases}
    gc.unfreeze()
    nvml_mod.set_nvml(None)
    patch.undo()
    shutil.rmtree(root, ignore_errors=True)


def _scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch folder in memory (/dev/shm) when there is one: ~20,000 files are written and
    fsync'ed (atomic writes), which on a disk costs more than the runs themselves."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="hwadvisor-fuzz-", dir=shm))
    return Path(tempfile.mkdtemp(prefix="hwadvisor-fuzz-", dir=tmp_path_factory.getbasetemp()))


def _bases(root: Path) -> dict[str, Path]:
    """Valid reports to mutate and to compare against: crafted, committed, and real ones."""
    reports = {
        "validate": factory.validate_report(),
        "validate-measured": factory.validate_report(device_measured=True),
        "probe": factory.probe_report(measured_bw_gbps=4100.0,
                                      measured_tflops={"bf16": 700.0}),
    }
    paths = {}
    for name, report in reports.items():
        paths[name] = root / f"base-{name}.json"
        write_report(paths[name], report)
    for name in ("h200-validate.json", "h200-probe-measured.json",
                 "schema-1.99-newer-minor.json"):
        paths[name] = FIXTURES / name
    return paths


# --------------------------------------------------------------------------- report fuzz

SPECIAL_STRINGS = ["[/]", "[wip]", "[bold]x", "\x1b[2J\x07", "1.\u00b2", "2.0", "1.99", "1.0",
                   "1.2", "", "\u0663", "a\nb", "\u221e", "NaN", "-", "0x10", "\x00", "\\",
                   "datacenter-gpu", "ok", "error", "confirmed", "GB/s", "TFLOP/s", "s"]
SPECIAL_NUMBERS = [0, -1, 1, 2**63, -(2**63), 10**19, 10**40, 1e308, -1e308, 5e-324, -0.0,
                   1e-300, 1e300, 1e9, 1e-6, 4800.0, 0.5]
HOSTILE = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(SPECIAL_NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(SPECIAL_STRINGS),
    st.lists(st.integers(min_value=-5, max_value=5), max_size=3),
    st.dictionaries(st.sampled_from(["a", "name", "value", "unit"]),
                    st.integers(min_value=-5, max_value=5), max_size=2),
)
OPS = st.one_of(
    st.tuples(st.just("number"), st.integers(0, 10**6), st.sampled_from(SPECIAL_NUMBERS)),
    st.tuples(st.just("number"), st.integers(0, 10**6), st.floats(allow_nan=True,
                                                                 allow_infinity=True)),
    st.tuples(st.just("set"), st.integers(0, 10**6), HOSTILE),
    st.tuples(st.just("set"), st.integers(0, 10**6), st.sampled_from(SPECIAL_NUMBERS)),
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(st.just("add"), st.integers(0, 10**6), st.sampled_from(["x", "typo_field",
                                                                      "median", "effect"]),
              HOSTILE),
    st.tuples(st.just("version"), st.sampled_from(SPECIAL_STRINGS + ["1.1", "1.0", "0.9"])),
    st.tuples(st.just("nest"), st.integers(0, 10**6), st.sampled_from([2, 50, 900, 3000])),
    st.tuples(st.just("truncate"), st.floats(0.0, 1.0)),
    st.tuples(st.just("garbage"), st.floats(0.0, 1.0), st.sampled_from(
        ["\x00", "\xff", "}", "{", "NaN", "Infinity", "1e999", "9" * 5000, '"', ",", "\ud800"])),
)


POOL: list[Any] = [*SPECIAL_NUMBERS, *SPECIAL_STRINGS, None, True, False, [], {}, [1, 2],
                   {"a": 1}, math.nan, math.inf, -math.inf, 2**70, -(2**70), "x" * 10_000]


def _random_value(rng: random.Random) -> Any:
    """A hostile value from a seeded Random: pooled, or a number of any magnitude or sign."""
    kind = rng.randrange(6)
    if kind == 0:
        return rng.choice([-1, 1]) * 10 ** rng.uniform(-320, 308)
    if kind == 1:
        return rng.randrange(-(2**66), 2**66)
    if kind == 2:
        letters = "ab[]/\\\n\x1b\x00 9\u00b2\u0663"
        return "".join(rng.choice(letters) for _ in range(rng.randrange(8)))
    return rng.choice(POOL)


def random_ops(rng: random.Random) -> list[tuple[Any, ...]]:
    """One to three mutations, as OPS draws them, from a seeded Random."""
    ops: list[tuple[Any, ...]] = []
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(12)
        where = rng.randrange(10**6)
        if kind < 5:
            ops.append(("number", where, _random_value(rng) if kind == 0 else
                        rng.choice(SPECIAL_NUMBERS) * rng.choice([1, 1, 10, 0.1, 1e-9, 1e9])))
        elif kind < 7:
            ops.append(("set", where, _random_value(rng)))
        elif kind == 7:
            ops.append(("delete", where))
        elif kind == 8:
            ops.append(("add", where, rng.choice(["x", "typo_field", "median"]),
                        _random_value(rng)))
        elif kind == 9:
            ops.append(("version", rng.choice(SPECIAL_STRINGS + ["1.1", "1.0", "1.2"])))
        elif kind == 10:
            ops.append(("nest", where, rng.choice([2, 50, 900, 3000])))
        else:
            ops.append(rng.choice([("truncate", rng.random()),
                                   ("garbage", rng.random(), rng.choice(["\x00", "}", "NaN",
                                                                         "9" * 5000, '"']))]))
    return ops


def _slots(data: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key) in a JSON tree, in a fixed order."""
    if isinstance(data, dict):
        for key in data:
            out.append((data, key))
            _slots(data[key], out)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            out.append((data, i))
            _slots(item, out)
    return out


NEST_MARK = "__hwadvisor_fuzz_nest__"


def mutate(text: str, ops: list[tuple[Any, ...]]) -> bytes:
    """Apply the ops to a report's JSON; return the bytes of the file to feed."""
    data = json.loads(text)
    nests: list[int] = []
    textual: list[tuple[Any, ...]] = []
    for op in ops:
        slots = _slots(data, [])
        if op[0] in ("truncate", "garbage"):
            textual.append(op)
            continue
        if op[0] == "version" and isinstance(data, dict):
            data["schema_version"] = op[1]
            continue
        if not slots:
            continue
        container, key = slots[op[1] % len(slots)] if len(op) > 1 else slots[0]
        if op[0] == "number":  # a number slot gets another number: files often stay valid
            numbers = [(c, k) for c, k in slots if isinstance(c[k], (int, float))
                       and not isinstance(c[k], bool)]
            if numbers:
                container, key = numbers[op[1] % len(numbers)]
                container[key] = op[2]
        elif op[0] == "set":
            container[key] = op[2]
        elif op[0] == "delete":
            del container[key]
        elif op[0] == "add" and isinstance(container[key], dict):
            container[key][op[2]] = op[3]
        elif op[0] == "nest":
            container[key] = NEST_MARK
            nests.append(op[2])
    encoded = json.dumps(data, allow_nan=True)
    for depth in nests:
        encoded = encoded.replace(f'"{NEST_MARK}"', "[" * depth + "1" + "]" * depth, 1)
    for op in textual:
        at = int(op[1] * len(encoded))
        encoded = encoded[:at] if op[0] == "truncate" else encoded[:at] + op[2] + encoded[at:]
    return encoded.encode("utf-8", errors="surrogatepass")


def _plot_shape(data: Any) -> tuple[Any, ...]:
    """Which figures a roofline has and each one's decade: plots of one shape draw alike."""
    def decade(value: float | None) -> int | None:
        return None if value is None else math.floor(math.log10(value))

    return (decade(data.datasheet_bandwidth_gbps), decade(data.measured_bandwidth_gbps),
            tuple(sorted((k, decade(v)) for k, v in data.datasheet_tflops.items())),
            tuple(sorted((k, decade(v)) for k, v in data.measured_tflops.items())),
            tuple((decade(p.intensity), decade(p.tflops)) for p in data.phases + data.trials))


def test_mutated_reports(env: dict[str, Any]) -> None:
    pytest.importorskip("matplotlib")
    from hwadvisor.report.plot import roofline_data

    cli, root, bases = env["cli"], env["root"], env["bases"]
    names = sorted(bases)
    texts = {name: bases[name].read_text() for name in names}
    case = root / "case.json"
    png = root / "roofline.png"
    counts: Counter[str] = Counter()
    shapes: set[tuple[Any, ...]] = set()

    def feed(base: str, ops: list[tuple[Any, ...]], human: int) -> None:
        case.write_bytes(mutate(texts[base], ops))
        counts["files"] += 1
        try:  # the reader: a Report, or a UserError of exit 2 in one line
            report = load_report(case)
        except UserError as exc:
            assert exc.code == 2 and "\n" not in exc.message and exc.hint
            report = None
        counts["read" if report is not None else "refused"] += 1
        # The valid side: the small probe report half the time (it reads fastest).
        other = str(bases["probe"] if human % 4 < 2 else bases[names[human % len(names)]])
        as_json = [] if human == 0 else ["--json"]  # the tables one time in ten
        argv = (["compare", other, str(case), *as_json] if human % 2 else
                ["compare", str(case), other, *as_json])
        check(argv, *cli.run(argv))
        counts["compare"] += 1
        if human == 1 and counts["files"] % 10 == 0:  # one file in a hundred
            argv = ["validate", "--report", str(case), "--json"]
            check(argv, *cli.run(argv))
            counts["validate --report"] += 1
        if report is None:  # plot stops at the reader, as a user's run would
            argv = ["plot", str(case), "-o", str(png)]
            check(argv, *cli.run(argv))
            counts["plot"] += 1
            return
        try:
            data = roofline_data(report)
        except UserError:
            counts["plot data refused"] += 1
            return
        counts["plot data"] += 1
        shape = _plot_shape(data)
        if shape not in shapes and len(shapes) < PLOT_RENDERS:
            shapes.add(shape)
            argv = ["plot", str(case), "-o", str(png)]
            code, out, err = cli.run(argv)
            check(argv, code, out, err)
            assert code == 0 and png.read_bytes()[:4] == b"\x89PNG", err
            counts["plot rendered"] += 1

    @SETTINGS
    @given(base=st.sampled_from(names), ops=st.lists(OPS, min_size=1, max_size=3),
           seed=st.integers(0, 2**32))
    def one(base: str, ops: list[tuple[Any, ...]], seed: int) -> None:
        rng = random.Random(seed)  # also for the run's shape: hypothesis favours 0 and 1
        feed(base, ops, rng.randrange(10))
        for _ in range(BATCH - 1):
            feed(rng.choice(names), random_ops(rng), rng.randrange(10))

    one()
    print(f"\nreport fuzz: {dict(counts)}")
    assert counts["files"] >= EXAMPLES
    assert counts["read"] > EXAMPLES // 10 and counts["refused"] > EXAMPLES // 10


# --------------------------------------------------------------------------- argument fuzz

PRESETS = ["llama-3.2-1b", "llama-3-8b", "mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b"]
VALUES = st.one_of(
    st.sampled_from(["0", "1", "-1", "2", "8", "64", "65", "1024", "2048", "65536", "70000",
                     "1048576", "2000000", "1e308", "-1e308", "inf", "-inf", "nan", "0.5",
                     "1.5", "0.1", "1e-300", "", " ", "[/]", "[wip]", "\x1b[2J", "\u0663",
                     "1.\u00b2", "0,1", "1,0", "0,,1", "99", "a", "--", "-h", "true"]),
    st.integers(min_value=-(2**40), max_value=2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=8),
)
WORKLOAD_OPTIONS = {
    "--model": st.one_of(st.sampled_from(PRESETS + ["", "nope", "meta-llama/Llama-3-8B",
                                                    "/nonexistent/config.json", "[/]"]),
                         VALUES),
    "--phase": st.sampled_from(["inference", "training", "Training", "", "pretraining"]),
    "--batch": VALUES, "--prompt-len": VALUES, "--gen-len": VALUES,
    "--weights-dtype": st.sampled_from(["bf16", "fp8", "int4", "fp16", "fp32", "fp7", ""]),
    "--kv-dtype": st.sampled_from(["bf16", "fp8", "nf4", "x"]),
    "--activation-dtype": st.sampled_from(["bf16", "fp32", "half", "y"]),
    "--optimizer": st.sampled_from(["adamw", "sgd", "adamw-8bit", "lion"]),
    "--grad-accum": VALUES, "--gpus": VALUES, "--nodes": VALUES, "--gpus-per-node": VALUES,
    "--inter-node-gbps": VALUES,
    "--activation-checkpointing": None, "--no-activation-checkpointing": None,
}
MODEL_OPTIONS = {
    "--sharding": st.sampled_from(["none", "ddp", "fsdp", "tp", "zero3", ""]),
    "--attention-kernel": st.sampled_from(["math", "flash", "xformers"]),
    "--offload-fraction": VALUES, "--prefix-cache-hit": VALUES, "--speculative-tokens": VALUES,
    "--cuda-graphs": None, "--compiled": None, "--fused-optimizer": None,
    "--comm-overlap": None, "--fp32-training": None,
}
OUTPUT_OPTIONS = {"--json": None, "-o": "FILE", "--output": "FILE", "--markdown": "FILE",
                  "--markdown-overwrite": None}
GATES = {"--fail-on": st.sampled_from(["refuted", "error", "unsupported", "bogus"]),
         "--min-bandwidth-fraction": VALUES}
DEVICE = {"--device": st.sampled_from(["h200-sxm", "h100-sxm", "rtx-4090", "m3-max", "nope",
                                       "", "[/]"])}
GPU = {"-i": VALUES, "--gpu": st.sampled_from(["0", "1", "0,1", "5", "x", ""])}
COMMANDS: dict[str, dict[str, Any]] = {
    "estimate": {**WORKLOAD_OPTIONS, **MODEL_OPTIONS, **DEVICE, "--json": None, "-o": "FILE"},
    "recommend": {**WORKLOAD_OPTIONS, **DEVICE, **OUTPUT_OPTIONS, **GATES,
                  "--goal": st.sampled_from(["training-throughput", "inference-latency",
                                             "memory-footprint", "a", "b", "c", "speed"]),
                  "--validate": None},
    "validate": {**WORKLOAD_OPTIONS, **OUTPUT_OPTIONS, **GATES, **GPU,
                 "--trial": st.sampled_from(["memory-bandwidth", "kv-cache-quantization",
                                             "matmul-peak", "fp8-gemm", "nope"]),
                 "--quick": None, "--require-gpu": None, "--list": None, "--nvls": None,
                 "--allow-unsupported": None, "--report": "REPORT"},
    "probe": {**OUTPUT_OPTIONS, **GPU, "--measure": None},
    "compare": {"ARG": "REPORT", "--max-regression": VALUES, **OUTPUT_OPTIONS},
    "plot": {"ARG": "REPORT", "-o": "IMAGE", "--device-index": VALUES, "--device": VALUES},
    "schema": {},
    "profiles list": {"--class": st.sampled_from(["datacenter-gpu", "cpu", "gpu", ""]),
                      "--json": None},
    "profiles show": {"ARG": st.sampled_from(["h200-sxm", "rtx-4090", "nope", "", "[/]"]),
                      "--json": None},
}
NOISE = st.sampled_from(["--bogus", "-x", "--", "extra", "--help", "-h", "--json=1", "-oo",
                         "--version"])


@st.composite
def argument_lists(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A command and its arguments: options with values of every kind, plus some noise."""
    name = draw(st.sampled_from(sorted(COMMANDS)))
    options = COMMANDS[name]
    argv = name.split()
    keys = sorted(options)
    for key in draw(st.lists(st.sampled_from(keys), max_size=6)) if keys else []:
        value = options[key]
        if key != "ARG":
            argv.append(key)
        if value is None:
            continue
        if isinstance(value, str):
            argv.append(f"@{value}")  # a file slot, filled in by the test
        else:
            argv.append(draw(value))
    if draw(st.integers(0, 9)) == 0:
        argv.insert(draw(st.integers(1, len(argv))), draw(NOISE))
    if name in ("compare", "plot") and draw(st.booleans()):
        argv[len(name.split()):len(name.split())] = ["@REPORT", "@REPORT"][
            : 2 if name == "compare" else 1]
    return name, argv


RANDOM_VALUES = ["0", "1", "-1", "8", "65", "2048", "70000", "2000000", "1e308", "nan", "inf",
                 "0.5", "1e-300", "", "[/]", "[wip]", "\x1b[2J", "\u0663", "0,1", "x", "--"]


def _choices(value: Any) -> list[str]:
    """The values a sampled_from strategy holds, else the generic pool (plain lists for Random)."""
    elements = getattr(value, "elements", None)
    if elements is not None:
        return [str(e) for e in elements]
    return RANDOM_VALUES + PRESETS


def random_argv(rng: random.Random) -> tuple[str, list[str]]:
    """A command and its arguments as argument_lists draws them, from a seeded Random."""
    name = rng.choice(sorted(COMMANDS))
    options = COMMANDS[name]
    argv = name.split()
    keys = sorted(options)
    for key in (rng.choices(keys, k=rng.randrange(7)) if keys else []):
        value = options[key]
        if key != "ARG":
            argv.append(key)
        if value is None:
            continue
        argv.append(f"@{value}" if isinstance(value, str) else
                    rng.choice(_choices(value) + [str(rng.uniform(-1e6, 1e6)),
                                                  str(rng.randrange(-(2**40), 2**40))]))
    if rng.randrange(10) == 0:
        argv.insert(rng.randrange(1, len(argv) + 1), rng.choice(
            ["--bogus", "-x", "--", "extra", "--help", "-h", "--json=1", "--version"]))
    if name in ("compare", "plot") and rng.random() < 0.5:
        slots = ["@REPORT", "@REPORT"] if name == "compare" else ["@REPORT"]
        argv[len(name.split()):len(name.split())] = slots
    return name, argv


def _file_slot(kind: str, root: Path, bases: dict[str, Path], pick: int) -> str:
    """A path for a FILE/REPORT/IMAGE slot: good, missing, a folder, odd names, a device."""
    choices = {
        "FILE": [root / "out.json", root / "out.md", root, root / "no" / "x.json",
                 root / "devnull", root / "[/] out.json", root / "link.json"],
        "IMAGE": [root / "r.png", root / "r.svg", root / "r.xyz", root, root / "devnull",
                  root / "no" / "r.png"],
        "REPORT": [*bases.values(), root / "missing.json", root, root / "bad.json",
                   root / "devnull"],
    }[kind]
    return str(choices[pick % len(choices)])


ARG_PLOT_RENDERS = 5


@contextlib.contextmanager
def _few_plot_renders(counts: Counter[str]):
    """Let plot draw real PNGs ARG_PLOT_RENDERS times, then stop short of matplotlib.

    The stand-in does what plot_roofline does but draw: the roofline data (its refusals),
    the output checks, the image format check, and a write through report/io.py.
    """
    from hwadvisor.report import plot as plot_mod
    from hwadvisor.report.io import check_target, write_bytes

    real = plot_mod.plot_roofline
    supported = _SupportedFormats()

    def plot_roofline(report: Any, path: Any, device_index: Any = None) -> Any:
        if counts["plot rendered"] < ARG_PLOT_RENDERS:
            counts["plot rendered"] += 1
            return real(report, path, device_index)
        data = plot_mod.roofline_data(report, device_index)
        check_target(path)
        plot_mod._check_format(supported, Path(path))
        write_bytes(path, b"\x89PNG\r\n\x1a\n (stand-in)")
        return data

    plot_mod.plot_roofline = plot_roofline
    try:
        yield
    finally:
        plot_mod.plot_roofline = real


class _SupportedFormats:
    """A figure's canvas as _check_format asks it: the image formats matplotlib writes."""

    def __init__(self) -> None:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure

        self.canvas = Figure().canvas


def test_mutated_argument_lists(env: dict[str, Any]) -> None:
    pytest.importorskip("matplotlib")
    cli, root, bases = env["cli"], env["root"], env["bases"]
    (root / "bad.json").write_text('{"schema_version": "1.\u00b2"}')
    for link, target in (("link.json", "target.json"), ("devnull", os.devnull)):
        if not (root / link).is_symlink():  # a link, never /dev/null itself: see test_output_files
            (root / link).symlink_to(target)
    counts: Counter[str] = Counter()

    def feed(name: str, argv: list[str], pick: int, real_trial: bool) -> None:
        argv = [_file_slot(a[1:], root, bases, pick + i) if a.startswith("@") and a[1:] in
                ("FILE", "IMAGE", "REPORT") else a for i, a in enumerate(argv)]
        if name == "validate" and real_trial:  # now and then, a real CPU-quick trial
            argv = [*argv, "--trial", "kv-cache-quantization", "--quick"]
            with _real_trials():
                code, out, err = cli.run(argv)
            counts["real trial runs"] += 1
        else:
            code, out, err = cli.run(argv)
        check(argv, code, out, err)
        counts[name] += 1
        counts[f"exit {code}"] += 1

    @SETTINGS
    @given(case=argument_lists(), pick=st.integers(0, 50), real_trial=st.integers(0, 499),
           seed=st.integers(0, 2**32))
    def one(case: tuple[str, list[str]], pick: int, real_trial: int, seed: int) -> None:
        rng = random.Random(seed)
        feed(*case, pick, rng.randrange(500) == 0)
        for _ in range(BATCH - 1):
            feed(*random_argv(rng), rng.randrange(50), False)
        assert stat.S_ISCHR(os.stat(os.devnull).st_mode)  # never replaced

    with _few_plot_renders(counts):
        one()
    print(f"\nargument fuzz: {dict(counts)}")
    assert sum(counts[name] for name in COMMANDS) >= EXAMPLES
    assert all(counts[name] > 0 for name in COMMANDS)


@contextlib.contextmanager
def _real_trials():
    from hwadvisor.trials.registry import get_trial
    from hwadvisor.validator import runner as validator_runner

    stand_in = validator_runner.get_trial
    validator_runner.get_trial = get_trial
    try:
        yield
    finally:
        validator_runner.get_trial = stand_in


def test_mutate_makes_what_it_says() -> None:
    text = report_json(factory.probe_report())
    assert json.loads(mutate(text, [("version", "1.\u00b2")]))["schema_version"] == "1.\u00b2"
    nested = mutate(text, [("nest", 3, 3000)]).decode()
    assert "[" * 3000 in nested
    assert len(mutate(text, [("truncate", 0.5)])) < len(text)
