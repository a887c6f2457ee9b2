"""The engines' serving benchmarks ([bench_serve]) for a load, held to the tools' own flags.

Each rendered command is checked against the flag table of the tool it runs, read from the
tool's own code at the pinned version (tests/fixtures/engine_flags/, scripts/engine_flags.py):
`vllm bench serve` (vLLM 0.33.0), `python -m sglang.benchmark.serving` (SGLang 0.5.23),
TensorRT-LLM's benchmark_serving (1.3.0rc3).
"""

from __future__ import annotations

import math
import shlex
from typing import Any

import pytest
from engine_flag_check import check_cli, load_engines, table

from hwadvisor.engines.bench import range_ratio, render_bench, root_url
from hwadvisor.models.serving import Lengths, Load

BENCHED = sorted(e.id for e in load_engines().values() if e.bench_serve is not None)
LOADS = [
    Load(rate_rps=2.5, prompt=Lengths(mean=1024, spread=0.5), output=Lengths(mean=256),
         requests=200, source="test"),
    Load(concurrency=16, prompt=Lengths(mean=128), output=Lengths(mean=64, spread=1.0),
         requests=50, source="test"),
]


def _table_command(name: str) -> dict[str, Any]:
    """Return the table of a tool's command, whichever engine's table holds it."""
    for engine_id in load_engines():
        data = table(engine_id)
        if data is not None and name in data["commands"]:
            return data["commands"][name]
    raise AssertionError(f"no flag table has the command {name!r}")


def test_the_serving_engines_have_a_bench_command() -> None:
    assert {"vllm", "sglang", "trtllm", "llamacpp"} <= set(BENCHED)


@pytest.mark.parametrize("engine_id", BENCHED)
@pytest.mark.parametrize("load", LOADS, ids=["rate", "concurrency"])
@pytest.mark.parametrize("model", [None, "meta-llama/Llama-3.1-8B"])
def test_bench_commands_use_flags_the_tool_takes(engine_id: str, load: Load,
                                                 model: str | None) -> None:
    bench = load_engines()[engine_id].bench_serve
    assert bench is not None and bench.table is not None
    text = render_bench(engine_id, load, "http://127.0.0.1:8080/v1", model)
    assert text is not None
    assert check_cli(text, _table_command(bench.table), bench.table) == []
    words = shlex.split(text)
    assert words[words.index("--num-prompts") + 1] == str(load.requests)
    if load.rate_rps is not None:
        assert words[words.index("--request-rate") + 1] == "2.5"
        assert "--max-concurrency" not in words
    else:
        assert words[words.index("--max-concurrency") + 1] == "16"
        assert "--request-rate" not in words  # inf by default: a closed loop of 16
    assert ("--model" in words) == (model is not None)


def test_an_engine_without_a_bench_has_none() -> None:
    assert render_bench("hf", LOADS[0]) is None


@pytest.mark.parametrize("spread", [0.0, 0.2, 0.5])
def test_symmetric_ranges_keep_the_mean_and_the_spread(spread: float) -> None:
    length, ratio = range_ratio("symmetric", 1000, spread)
    assert length == 1000
    # uniform in [len(1 - r), len(1 + r)]: its coefficient of variation is r / sqrt(3)
    assert ratio / math.sqrt(3) == pytest.approx(spread, abs=0.001)


def test_fraction_of_max_ranges_keep_the_mean() -> None:
    length, ratio = range_ratio("fraction-of-max", 1000, 0.2)
    assert (length * ratio + length) / 2 == pytest.approx(1000, rel=0.01)
    assert range_ratio("fraction-of-max", 1000, 0.0) == (1000, 1.0)  # SGLang's 0 means [1, len]


def test_sglang_output_length_keeps_the_mean_under_the_prompts_ratio() -> None:
    load = Load(rate_rps=1, prompt=Lengths(mean=1000, spread=0.3), output=Lengths(mean=200),
                requests=10, source="test")
    words = shlex.split(render_bench("sglang", load) or "")
    ratio = float(words[words.index("--random-range-ratio") + 1])
    out = int(words[words.index("--random-output-len") + 1])
    assert out * (1 + ratio) / 2 == pytest.approx(200, rel=0.01)


@pytest.mark.parametrize(("url", "root"), [
    ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"),
    ("http://h:1/v1/completions", "http://h:1"), ("https://h/api/v1/", "https://h/api")])
def test_the_base_url_is_the_servers_root(url: str, root: str) -> None:
    bench = load_engines()["vllm"].bench_serve
    assert bench is not None
    assert root_url(url, bench) == root
    assert root_url(None, bench) == "http://127.0.0.1:8000"
