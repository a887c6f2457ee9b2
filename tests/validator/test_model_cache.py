"""The generic reader's shapes are built once per config, then read back (issue 43).

Before: every `estimate` of a model the hand-written parsers lack imported torch and
transformers and built the model on the meta device: ~4 s of CPU and ~370 MB each time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hwadvisor.models.workload import ModelSpec
from hwadvisor.validator import model_cache

REPO = Path(__file__).resolve().parents[2]
CONFIG = {"model_type": "olmo", "hidden_size": 256, "intermediate_size": 688,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
          "vocab_size": 1000, "max_position_embeddings": 512, "tie_word_embeddings": False}


def _spec(name: str) -> ModelSpec:
    return ModelSpec(name=name, model_type="olmo", hidden_size=256, num_layers=2, num_heads=4,
                     num_kv_heads=4, head_dim=64, intermediate_size=688, vocab_size=1000)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv(model_cache.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(model_cache, "_transformers_version", lambda: "5.24.0")
    model_cache._MEMORY.clear()
    calls: list[str] = []

    def reader(data, source):
        calls.append(source)
        return _spec(source)

    yield model_cache.cached(reader), calls, tmp_path
    model_cache._MEMORY.clear()


def test_a_config_is_built_once_and_read_back_in_a_new_process(counting) -> None:
    read, calls, folder = counting
    first = read(dict(CONFIG), "a/config.json")
    model_cache._MEMORY.clear()  # as a new process would start
    second = read(dict(CONFIG), "b/config.json")
    assert calls == ["a/config.json"]
    assert second.hidden_size == first.hidden_size
    assert second.name == "b/config.json" and second.source.startswith("b/config.json")
    assert len(list((folder / "generic").glob("*.json"))) == 1


def test_another_config_or_transformers_is_another_entry(counting, monkeypatch) -> None:
    read, calls, _folder = counting
    read(dict(CONFIG), "x")
    read({**CONFIG, "num_hidden_layers": 3}, "x")
    monkeypatch.setattr(model_cache, "_transformers_version", lambda: "5.25.0")
    read(dict(CONFIG), "x")
    assert len(calls) == 3


def test_a_corrupt_entry_is_rebuilt_not_trusted(counting) -> None:
    read, calls, folder = counting
    read(dict(CONFIG), "x")
    for path in (folder / "generic").glob("*.json"):
        path.write_text('{"name": "forged", "hidden_size": -1}')
    model_cache._MEMORY.clear()
    assert read(dict(CONFIG), "x").hidden_size == 256
    assert len(calls) == 2


def test_an_empty_cache_dir_keeps_nothing_on_disk(counting, monkeypatch, tmp_path) -> None:
    read, calls, folder = counting
    monkeypatch.setenv(model_cache.CACHE_ENV, "")
    read(dict(CONFIG), "x")
    assert not (folder / "generic").exists() and calls == ["x"]


@pytest.mark.slow
def test_a_second_estimate_imports_neither_torch_nor_transformers(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    code = ("import sys; from hwadvisor.__main__ import main; sys.argv = ['hwadvisor', "
            f"'estimate', '--model', {str(config)!r}, '--device', 'h100-sxm', '--json'];\n"
            "import atexit; atexit.register(lambda: print(sorted({m.split('.')[0] for m in "
            "sys.modules} & {'torch', 'transformers'}), file=sys.stderr))\nmain()")
    env = {**os.environ, model_cache.CACHE_ENV: str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=300, check=False) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr[-800:]
    assert "'torch'" in runs[0].stderr  # the first built the shapes
    assert runs[1].stderr.strip().endswith("[]"), runs[1].stderr[-400:]
    first, second = (json.loads(r.stdout) for r in runs)
    assert first["workload"]["model"] == second["workload"]["model"]
    assert first["estimate"] == second["estimate"]
