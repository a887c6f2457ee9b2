"""Weight formats reproduce the sizes of published files (perfmodel/formats.py)."""

from __future__ import annotations

import pytest

from hwadvisor.perfmodel.formats import FORMATS, weight_bytes
from hwadvisor.workload import load_spec
from hwadvisor.workload.params import breakdown

# (model, format, published file size in bytes, where)
PUBLISHED = [
    ("llama-3-8b", "q4_k_m", 4.92e9, "bartowski/Meta-Llama-3-8B-Instruct-GGUF"),
    ("llama-3-8b", "iq4_xs", 4.45e9, "bartowski/Meta-Llama-3-8B-Instruct-GGUF"),
    ("llama-2-7b", "q4_0", 3.83e9, "TheBloke/Llama-2-7B-GGUF"),
    ("llama-2-7b", "q6_k", 5.53e9, "TheBloke/Llama-2-7B-GGUF"),
    ("llama-2-7b", "q8_0", 7.16e9, "TheBloke/Llama-2-7B-GGUF"),
    ("llama-3-8b", "int4", 5.7e9, "AWQ 4-bit checkpoint, embeddings and lm_head in 16 bits"),
    ("llama-3-8b", "fp8", 9.1e9, "llm-compressor FP8 checkpoint"),
    ("llama-3-8b", "bf16", 16.06e9, "meta-llama/Meta-Llama-3-8B safetensors"),
]


@pytest.mark.parametrize("model, fmt, size, where", PUBLISHED)
def test_format_sizes_match_published_files(model, fmt, size, where):
    spec = load_spec(model)
    got = weight_bytes(breakdown(spec), spec, fmt)
    assert got == pytest.approx(size, rel=0.02), f"{model} {fmt}: {got / 1e9:.2f} GB ({where})"


def test_every_weights_dtype_has_a_format_and_4bit_is_smaller_than_8bit():
    from typing import get_args

    from hwadvisor.models.workload import Dtype

    assert set(get_args(Dtype)) <= set(FORMATS)
    spec = load_spec("llama-3-8b")
    parts = breakdown(spec)
    sizes = {f: weight_bytes(parts, spec, f) for f in FORMATS}
    assert sizes["q4_k_m"] < sizes["q5_k_m"] < sizes["q6_k"] < sizes["q8_0"] < sizes["bf16"]
    assert sizes["mlx-4bit"] < sizes["mlx-8bit"] < sizes["bf16"] < sizes["fp32"]
