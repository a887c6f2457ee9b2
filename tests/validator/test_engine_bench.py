"""The engine's own benchmark in the loop (validator/engine_bench.py).

The llama.cpp parsers read outputs captured on an NVIDIA H200 (llama.cpp 0c1e57098, see
docs/benchmarks.md, "llama.cpp on the H200"); the subprocess path runs a fake engine binary (a
small Python script put on PATH) so the command, the run and the parse are exercised end to end.
"""

from __future__ import annotations

import json
import os
import stat
import statistics
import sys
from pathlib import Path

import pytest

from hwadvisor.models import EngineConfig, EngineFigures, EngineValidation, PlanValidation
from hwadvisor.validator import engine_bench as eb

FIXTURES = Path(__file__).parents[1] / "fixtures" / "engine_bench"
EMITTED = EngineConfig(
    engine="llamacpp",
    version="llama.cpp 0c1e57098",
    format="cli",
    text="llama-server -m MODEL \\\n  --parallel 1 \\\n  --ctx-size 131072 \\\n"
    "  --n-gpu-layers 999 \\\n  --spec-type ngram-mod \\\n  --spec-ngram-mod-n-max 3",
)


def fake_binary(folder: Path, name: str, stdout_file: Path, exit_code: int = 0) -> Path:
    """A Python script named `name` in folder that records its argv and prints a captured output."""
    path = folder / name
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(folder / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        f"sys.stdout.write(open({str(stdout_file)!r}).read())\n"
        f"sys.exit({exit_code})\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_llama_bench_json_from_the_h200_gives_prefill_and_decode() -> None:
    text = (FIXTURES / "llama_bench_1b_q4_k_m.json").read_text()
    run = eb.parse_llama_bench(text, eb.BenchWorkload("m.gguf", 1, 512, 128))
    rows = json.loads(text)
    pp = next(r for r in rows if r["n_gen"] == 0)
    tg = next(r for r in rows if r["n_prompt"] == 0)
    # the first of the five repetitions is cold (28,919 tokens/s, then ~42,400): left out
    pp_timed, tg_timed = pp["samples_ts"][1:], tg["samples_ts"][1:]
    assert run.figures.prefill_tokens_per_s == pytest.approx(statistics.mean(pp_timed))
    assert run.figures.prefill_tokens_per_s > pp["avg_ts"] * 1.05
    assert run.figures.decode_tokens_per_s == pytest.approx(statistics.mean(tg_timed))
    assert run.figures.ttft_s == pytest.approx(512 / statistics.mean(pp_timed))
    assert run.figures.tpot_s == pytest.approx(1 / statistics.mean(tg_timed))
    assert run.version is not None and "llama.cpp" in run.version
    # llama-bench's own stddev_ts is 15% of pp512's mean with the cold sample, under 1% without
    assert pp["stddev_ts"] / pp["avg_ts"] > 0.1
    assert run.spread == pytest.approx(max(
        statistics.stdev(x) / statistics.mean(x) for x in (pp_timed, tg_timed)))
    assert run.spread < 0.01


def test_llama_bench_without_samples_falls_back_to_its_mean_and_stddev() -> None:
    row = {"n_prompt": 512, "n_gen": 0, "avg_ts": 1000.0, "stddev_ts": 50.0}
    run = eb.parse_llama_bench(json.dumps([row]), eb.BenchWorkload("m.gguf", 1, 512, 128))
    assert run.figures.prefill_tokens_per_s == 1000.0 and run.spread == pytest.approx(0.05)
    assert run.figures.decode_tokens_per_s is None


def test_batched_bench_table_from_the_h200_picks_the_batch_row() -> None:
    text = (FIXTURES / "batched_bench_1b_q4_k_m_p512.txt").read_text()
    r8 = eb.parse_batched_bench(text, eb.BenchWorkload("m.gguf", 8, 512, 128)).figures
    r64 = eb.parse_batched_bench(text, eb.BenchWorkload("m.gguf", 64, 512, 128)).figures
    # more sequences: more tokens/s over the batch, a longer prefill of the whole batch
    assert r64.decode_tokens_per_s > r8.decode_tokens_per_s > 0
    assert r64.ttft_s > r8.ttft_s > 0
    assert r8.tpot_s == pytest.approx(8 / r8.decode_tokens_per_s, rel=0.01)
    with pytest.raises(ValueError, match="no row"):
        eb.parse_batched_bench(text, eb.BenchWorkload("m.gguf", 16, 512, 128))


def test_batched_bench_repeats_the_batch_and_times_the_runs_after_its_warm_up(
    tmp_path: Path,
) -> None:
    # llama-batched-bench warms up on 16 tokens: the first run of a batch shape is cold (the
    # batch-1 prefill row of the H200 capture is 3x slower than llama-bench's pp512 there).
    cmd, _ = eb.llamacpp_command(eb.BenchWorkload("m.gguf", 64, 512, 128), EMITTED, tmp_path)
    assert cmd[cmd.index("-npl") + 1] == ",".join(["64"] * eb.BATCHED_RUNS)
    head = (FIXTURES / "batched_bench_1b_q4_k_m_p512.txt").read_text().splitlines()[:5]
    rows = [
        "| 512 | 128 | 64 | 40960 | 2.000 | 16384.00 | 1.000 |  8192.00 | 3.0 | 1.0 |",
        "| 512 | 128 | 64 | 40960 | 0.700 | 46000.00 | 0.720 | 11000.00 | 1.4 | 1.0 |",
        "| 512 | 128 | 64 | 40960 | 0.720 | 48000.00 | 0.740 | 11600.00 | 1.5 | 1.0 |",
    ]
    run = eb.parse_batched_bench("\n".join(head + rows), eb.BenchWorkload("m", 64, 512, 128))
    f = run.figures
    assert f.prefill_tokens_per_s == pytest.approx(47000.0)  # the cold first row left out
    assert f.decode_tokens_per_s == pytest.approx(11300.0)
    assert f.ttft_s == pytest.approx(0.71) and f.tpot_s == pytest.approx(0.73 / 128)
    # the larger relative spread of the two speeds: decode's here
    assert run.spread == pytest.approx(statistics.stdev([11000.0, 11600.0]) / 11300.0)


def test_batched_bench_jsonl_lines_read_like_the_table() -> None:
    line = (
        '{"n_kv_max": 41216, "n_batch": 2048, "n_ubatch": 512, "flash_attn": -1, '
        '"is_pp_shared": 0, '
        '"n_gpu_layers": 99, "n_threads": 8, "n_threads_batch": 8, "pp": 512, "tg": 128, "pl": 8, '
        '"n_kv": 5120, "t_pp": 0.25, "speed_pp": 16384.0, "t_tg": 0.5, "speed_tg": 2048.0, '
        '"t": 0.75, "speed": 6826.6}'
    )
    f = eb.parse_batched_bench(line, eb.BenchWorkload("m.gguf", 8, 512, 128)).figures
    assert (f.ttft_s, f.prefill_tokens_per_s, f.decode_tokens_per_s) == (0.25, 16384.0, 2048.0)
    assert f.tpot_s == pytest.approx(0.5 / 128)


def test_llamacpp_command_takes_the_emitted_flags_it_can_and_says_which_it_cannot(
    tmp_path: Path,
) -> None:
    cmd, not_run = eb.llamacpp_command(eb.BenchWorkload("m.gguf", 1, 512, 128), EMITTED, tmp_path)
    assert (
        cmd[:2] == ["llama-bench", "-m"]
        and ["-ngl", "999"] == cmd[cmd.index("-ngl") : cmd.index("-ngl") + 2]
    )
    assert cmd[cmd.index("-p") + 1] == "512" and cmd[cmd.index("-n") + 1] == "128"
    assert {n.split(":")[0] for n in not_run} == {
        "--parallel",
        "--ctx-size",
        "--spec-type",
        "--spec-ngram-mod-n-max",
    }
    cmd8, _ = eb.llamacpp_command(eb.BenchWorkload("m.gguf", 8, 2048, 256), EMITTED, tmp_path)
    assert cmd8[0] == "llama-batched-bench" and cmd8[cmd8.index("-npl") + 1].split(",")[0] == "8"
    assert int(cmd8[cmd8.index("-c") + 1]) >= 8 * (
        2048 + 256
    )  # every sequence gets its whole context


def test_not_installed_is_unsupported_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    v = eb.validate_engine("llamacpp", eb.BenchWorkload(str(model), 1, 512, 128), EMITTED, None)
    assert v.status == "unsupported" and "llama-bench is not on PATH" in (v.reason or "")
    v = eb.validate_engine("trtllm", eb.BenchWorkload(str(model), 1, 512, 128), None, None)
    assert v.status == "unsupported" and "no benchmark" in (v.reason or "")


def test_a_preset_name_is_unsupported_the_benchmark_needs_the_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_binary(tmp_path, "llama-bench", FIXTURES / "llama_bench_1b_q4_k_m.json")
    monkeypatch.setenv("PATH", str(tmp_path))
    v = eb.validate_engine("llamacpp", eb.BenchWorkload("llama-3.2-1b", 1, 512, 128), EMITTED, None)
    assert v.status == "unsupported" and "not a local file" in (v.reason or "")
    assert not (tmp_path / "argv.json").exists()  # nothing ran


def test_fake_llama_bench_runs_end_to_end_and_is_judged_by_the_tolerance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture = FIXTURES / "llama_bench_1b_q4_k_m.json"
    fake_binary(tmp_path, "llama-bench", capture)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    work = eb.BenchWorkload(str(model), 1, 512, 128)
    measured = eb.parse_llama_bench(capture.read_text(), work).figures
    right = EngineFigures(ttft_s=measured.ttft_s * 1.05, tpot_s=measured.tpot_s * 0.95)
    v = eb.validate_engine("llamacpp", work, EMITTED, right, tolerance=0.2)
    assert eb.validate_engine("llamacpp", work, EMITTED, right).status == "confirmed"
    # a tolerance tighter than the timed repetitions' spread cannot judge
    assert eb.validate_engine("llamacpp", work, EMITTED, right, tolerance=0.001).status == (
        "inconclusive")
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:2] == ["-m", str(model)] and "-ngl" in argv and "json" in argv
    assert v.status == "confirmed", v.reason
    assert v.ratio["tpot_s"] == pytest.approx(1 / 0.95) and v.measured == measured
    wrong = EngineFigures(ttft_s=measured.ttft_s, tpot_s=measured.tpot_s * 2.0)
    v = eb.validate_engine("llamacpp", work, EMITTED, wrong, tolerance=0.2)
    assert v.status == "refuted" and "tpot_s" in (v.reason or "")
    assert eb.validate_engine("llamacpp", work, EMITTED, None).status == "inconclusive"


def test_a_failing_engine_is_an_error_with_its_last_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.txt"
    out.write_text("error: failed to load model\n")
    fake_binary(tmp_path, "llama-bench", out, exit_code=1)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    v = eb.validate_engine("llamacpp", eb.BenchWorkload(str(model), 1, 512, 128), EMITTED, None)
    assert (
        v.status == "error"
        and "exited 1" in (v.reason or "")
        and "failed to load" in (v.reason or "")
    )


def test_the_run_spread_beyond_the_tolerance_is_inconclusive() -> None:
    status, reason = eb.verdict({"tpot_s": 1.02}, spread=0.3, tolerance=0.15)
    assert status == "inconclusive" and "spread" in (reason or "")


def test_plan_validation_carries_the_engine_result() -> None:
    v = PlanValidation(
        status="inconclusive",
        engine=EngineValidation(engine="llamacpp", status="unsupported", reason="x"),
    )
    assert PlanValidation.model_validate_json(v.model_dump_json()).engine == v.engine


def test_a_recommend_report_without_a_model_file_is_unsupported() -> None:
    from typer.testing import CliRunner

    from hwadvisor.cli.app import app

    args = ("recommend --goal inference-latency --device h200-sxm --engine llamacpp "
            "--model llama-3.2-1b --weights-dtype q4_k_m --json")
    out = CliRunner().invoke(app, args.split())
    assert out.exit_code == 0, out.output
    from hwadvisor.models import Report

    report = Report.model_validate_json(out.stdout)
    v = eb.validate_plan_engine(report, None)
    assert v is not None and v.engine == "llamacpp" and v.status == "unsupported"
    # the benchmark runs no server slots: llama-server's per-slot host work is left out
    times = report.estimate.times
    assert times.server_host_s is not None and 0 < times.server_host_s < times.tpot_s
    assert v.predicted is not None and v.predicted.decode_tokens_per_s == pytest.approx(
        1 / (times.tpot_s - times.server_host_s)
    )


def test_recommend_validate_runs_the_engines_own_benchmark_on_the_model_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """recommend --validate --engine-model: the emitted config's engine benchmark, end to end."""
    pytest.importorskip("torch")  # --validate runs the trials too
    from typer.testing import CliRunner

    from hwadvisor.cli.app import app
    from hwadvisor.models import Report

    fake_binary(tmp_path, "llama-bench", FIXTURES / "llama_bench_1b_q4_k_m.json")
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    model = tmp_path / "llama-3.2-1b-q4_k_m.gguf"
    model.write_bytes(b"GGUF")
    out = CliRunner().invoke(app, [
        "recommend", "--goal", "inference-latency", "--device", "h200-sxm", "--engine",
        "llamacpp", "--model", "llama-3.2-1b", "--weights-dtype", "q4_k_m", "--prompt-len", "512",
        "--gen-len", "128", "--validate", "--engine-model", str(model), "--json"])
    assert out.exit_code in (0, 1), out.output
    report = Report.model_validate_json(out.stdout)
    engine = report.plan.validation.engine
    assert engine is not None and engine.engine == "llamacpp"
    assert engine.status in ("confirmed", "refuted", "inconclusive"), engine.reason
    assert engine.measured is not None and engine.predicted is not None
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:2] == ["-m", str(model)]  # the benchmark ran on the user's file


# ---------------------------------------------------------------------------------------------
# Real outputs of the other engines' benchmarks (tests/fixtures/engine_bench/SOURCES.json says
# where each was published and at which version).


def test_every_benchmark_fixture_names_its_source_and_version() -> None:
    sources = json.loads((FIXTURES / "SOURCES.json").read_text())
    files = sorted(p.name for p in FIXTURES.iterdir() if p.name != "SOURCES.json")
    assert sorted(sources) == files
    assert all(s.get("source") and s.get("version") for s in sources.values())


def test_mlx_benchmark_trials_and_averages_read_the_averages_line() -> None:
    text = (FIXTURES / "mlx_benchmark_b1_2048.txt").read_text()
    run = eb.parse_mlx(text, eb.BenchWorkload("m", 1, 2048, 128))
    assert run.figures.prefill_tokens_per_s == pytest.approx(2902.166)
    assert run.figures.decode_tokens_per_s == pytest.approx(205.099)
    assert run.figures.ttft_s == pytest.approx(2048 / 2902.166)
    assert run.figures.tpot_s == pytest.approx(1 / 205.099)


@pytest.mark.parametrize(("model", "batch"), [("qwen3_next", 16), ("granite", 32)])
def test_mlx_benchmark_rates_at_a_batch_are_the_whole_batchs(model: str, batch: int) -> None:
    # mlx_lm.benchmark -b B reports batch_generate's BatchStats: all sequences' tokens over the
    # shared time. Read as one sequence's rate, Qwen3-Next at -b 16 would decode each sequence
    # 4.6x faster than alone at -b 1, which a memory-bound decode cannot do.
    one = eb.parse_mlx((FIXTURES / f"mlx_benchmark_{model}_b1.txt").read_text(),
                       eb.BenchWorkload("m", 1, 128, 128))
    many = eb.parse_mlx((FIXTURES / f"mlx_benchmark_{model}_b{batch}.txt").read_text(),
                        eb.BenchWorkload("m", batch, 128, 128))
    assert many.figures.decode_tokens_per_s == pytest.approx(
        float((FIXTURES / f"mlx_benchmark_{model}_b{batch}.txt").read_text()
              .split("generation_tps=")[1].split(",")[0]))
    assert many.figures.tpot_s is not None and one.figures.tpot_s is not None
    assert many.figures.tpot_s > one.figures.tpot_s  # a step of B sequences is not faster
    assert many.figures.ttft_s is not None and one.figures.ttft_s is not None
    assert many.figures.ttft_s > one.figures.ttft_s


def test_vllm_latency_json_captured_on_an_mi300x_reads_the_mean_batch_latency() -> None:
    # vLLM's benchmark_latency.py --output-json, batch 8, 128 tokens in, 128 out, 10 iterations
    # (SOURCES.json). The mean, not the median (0.8987 s) nor the first iteration (1.115 s, which
    # the spread shows): the model predicts the mean.
    text = (FIXTURES / "vllm_latency_llama31_8b_bs8_in128_out128_mi300x.json").read_text()
    run = eb.parse_vllm_latency(text, eb.BenchWorkload("m", 8, 128, 128))
    assert run.figures.decode_tokens_per_s == pytest.approx(8 * 128 / 0.9204040324199013)
    latencies = json.loads(text)["latencies"]
    mean = sum(latencies) / len(latencies)
    assert run.spread == pytest.approx(statistics.stdev(latencies) / mean)
    assert run.figures.ttft_s is None and run.figures.tpot_s is None  # one batch's end to end


def test_sglang_one_batch_rows_read_prefill_and_the_median_decode_step() -> None:
    # Rows as sglang 0.5.23's one_batch.py writes them (generated from the writer, SOURCES.json):
    # batch 8 first, then a batch-1 row appended after it.
    text = (FIXTURES / "sglang_one_batch_generated.jsonl").read_text()
    run = eb.parse_sglang(text, eb.BenchWorkload("m", 8, 1024, 128))
    assert run.figures.ttft_s == 0.25  # prefill_latency, not total_latency (2.79)
    assert run.figures.tpot_s == 0.02  # median_decode_latency
    assert run.figures.prefill_tokens_per_s == 32768.0  # prefill_throughput (whole batch)
    assert run.figures.decode_tokens_per_s == 400.0  # median_decode_throughput, not overall
    one = eb.parse_sglang(text, eb.BenchWorkload("m", 1, 1024, 128))
    assert (one.figures.ttft_s, one.figures.tpot_s) == (0.05, 0.008)


def test_sglang_result_file_appended_to_reads_this_runs_row() -> None:
    # bench_one_batch opens --result-filename for appending (sglang/benchmark/one_batch.py)
    old = {"batch_size": 4, "prefill_latency": 9.0, "median_decode_latency": 0.9}
    new = {"batch_size": 4, "prefill_latency": 1.0, "median_decode_latency": 0.1}
    text = json.dumps(old) + "\n" + json.dumps(new) + "\n"
    run = eb.parse_sglang(text, eb.BenchWorkload("m", 4, 1024, 128))
    assert run.figures.ttft_s == 1.0 and run.figures.tpot_s == 0.1


# ---------------------------------------------------------------------------------------------
# The commands the validator runs, checked against the pinned engines' own argparse


def _command_text(engine: str, config: EngineConfig | None, tmp_path: Path) -> str:
    work = eb.BenchWorkload("/models/llama", 8, 1024, 128)
    cmd, _ = eb.BENCHES[engine].command(work, config, tmp_path)
    if cmd[0] == sys.executable:
        cmd = ["python", *cmd[1:]]
    return " ".join(cmd)


@pytest.mark.parametrize(("engine", "table_command"), [
    ("vllm", "vllm bench latency"),
    ("sglang", "python -m sglang.benchmark.one_batch"),
    ("mlx", "mlx_lm.benchmark"),
])
def test_the_benchmark_command_takes_only_flags_the_pinned_engine_has(
        engine: str, table_command: str, tmp_path: Path) -> None:
    from engine_flag_check import check_cli, table

    data = table(engine)
    assert data is not None
    config = EngineConfig(engine="vllm", version="0.33.0", format="cli",
                          text="vllm serve M \\\n  --max-model-len 8192 \\\n  --dtype half \\\n"
                               "  --kv-cache-dtype fp8 \\\n  --gpu-memory-utilization 0.9") \
        if engine == "vllm" else None
    text = _command_text(engine, config, tmp_path)
    assert text.startswith(table_command)
    assert check_cli(text, data["commands"][table_command], table_command) == []


def test_a_plan_that_moves_engine_benchmarks_the_baselines_engine_at_its_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp F16 at batch 64 on an H200: the plan moves to vLLM, llama.cpp is measured.

    The prediction compared is the baseline's (llama.cpp with its defaults), so the benchmark
    must be llama.cpp's, without the vLLM flags; it was vLLM's (not installed: unsupported).
    """
    from typer.testing import CliRunner

    from hwadvisor.cli.app import app
    from hwadvisor.models import Report

    args = ("recommend --goal inference-latency --device h200-sxm --engine llamacpp "
            "--model llama-3.2-1b --weights-dtype fp16 --batch 64 --prompt-len 512 "
            "--gen-len 128 --json")
    out = CliRunner().invoke(app, args.split())
    assert out.exit_code == 0, out.output
    report = Report.model_validate_json(out.stdout)
    assert report.plan is not None and report.plan.engine_config is not None
    assert report.plan.engine_config.engine == "vllm"  # the case this test is about
    for name in ("llama-bench", "llama-batched-bench"):
        fake_binary(tmp_path, name, FIXTURES / "batched_bench_1b_q4_k_m_p512.txt")
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    v = eb.validate_plan_engine(report, str(model))
    assert v is not None and v.engine == "llamacpp" and v.status in ("confirmed", "refuted")
    assert v.command[0] == "llama-batched-bench"
    assert not any(w.startswith("--") for w in v.command)  # no vLLM flag reached llama.cpp
    assert "moves to vllm" in v.not_run[0]
