"""Model folders (config.json + safetensors headers) and the Hugging Face cache, offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hwadvisor.errors import ExitCode, UserError
from hwadvisor.perfmodel.formats import weight_bytes
from hwadvisor.workload import WorkloadRequest, build_workload, load_spec
from hwadvisor.workload.checkpoint import read_checkpoint, read_header
from hwadvisor.workload.params import breakdown

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

H, LAYERS, INTER, VOCAB = 512, 2, 1024, 4096
CONFIG = {"model_type": "llama", "hidden_size": H, "intermediate_size": INTER,
          "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": LAYERS,
          "vocab_size": VOCAB, "torch_dtype": "bfloat16"}
LINEARS = {"self_attn.q_proj": (H, H), "self_attn.k_proj": (H, H), "self_attn.v_proj": (H, H),
           "self_attn.o_proj": (H, H), "mlp.gate_proj": (INTER, H), "mlp.up_proj": (INTER, H),
           "mlp.down_proj": (H, INTER)}


def _linear(kind: str, name: str, out: int, inp: int) -> dict:
    """The tensors one Linear takes in each format, as its writer names them (shapes only)."""
    t = torch.empty
    if kind == "bf16":
        return {f"{name}.weight": t(out, inp, dtype=torch.bfloat16)}
    if kind in ("gptq", "awq"):  # int4 packed 8 per int32, group 128, fp16 scales
        groups = inp // 128
        return {f"{name}.qweight": t(inp // 8, out, dtype=torch.int32),
                f"{name}.qzeros": t(groups, out // 8, dtype=torch.int32),
                f"{name}.scales": t(groups, out, dtype=torch.float16)}
    if kind == "bnb4":  # uint8 packed two per byte, absmax per 64
        return {f"{name}.weight": t(out * inp // 2, 1, dtype=torch.uint8),
                f"{name}.weight.absmax": t(out * inp // 64, dtype=torch.float32),
                f"{name}.weight.quant_map": t(16, dtype=torch.float32),
                f"{name}.weight.quant_state.bitsandbytes__nf4": t(64, dtype=torch.uint8)}
    if kind == "compressed":  # llm-compressor W4A16: int32 packed, group 128 scales
        return {f"{name}.weight_packed": t(out, inp // 8, dtype=torch.int32),
                f"{name}.weight_scale": t(out, inp // 128, dtype=torch.bfloat16),
                f"{name}.weight_shape": t(2, dtype=torch.int64)}
    if kind == "fp8block":  # DeepSeek-V3: e4m3 weights, fp32 scale per 128x128 block
        return {f"{name}.weight": t(out, inp, dtype=torch.float8_e4m3fn),
                f"{name}.weight_scale_inv": t(out // 128, inp // 128, dtype=torch.float32)}
    if kind == "nvfp4":  # ModelOpt: e2m1 packed in uint8, e4m3 scale per 16, global scales
        return {f"{name}.weight": t(out, inp // 2, dtype=torch.uint8),
                f"{name}.weight_scale": t(out, inp // 16, dtype=torch.float8_e4m3fn),
                f"{name}.weight_scale_2": t(1, dtype=torch.float32),
                f"{name}.input_scale": t(1, dtype=torch.float32)}
    if kind == "mxfp4":  # gpt-oss: 32-value blocks of e2m1 (16 bytes) and an e8m0 scale
        return {f"{name}_blocks": t(out, inp // 32, 16, dtype=torch.uint8),
                f"{name}_scales": t(out, inp // 32, dtype=torch.uint8)}
    raise AssertionError(kind)


QUANT_CONFIGS = {
    "bf16": None,
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128},
    "bnb4": {"quant_method": "bitsandbytes", "load_in_4bit": True},
    "compressed": {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int"}}}},
    "fp8block": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    "nvfp4": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
    "mxfp4": {"quant_method": "mxfp4"},
}
EXPECTED = {"bf16": "bf16", "gptq": "int4", "awq": "int4", "bnb4": "nf4", "compressed": "int4",
            "fp8block": "fp8", "nvfp4": "fp4", "mxfp4": "fp4"}


def _folder(root: Path, kind: str, with_quant_config: bool = True) -> Path:
    folder = root / f"tiny-{kind}"
    folder.mkdir()
    config = dict(CONFIG)
    if QUANT_CONFIGS[kind] and with_quant_config:
        config["quantization_config"] = QUANT_CONFIGS[kind]
    (folder / "config.json").write_text(json.dumps(config))
    tensors = {"model.embed_tokens.weight": torch.empty(VOCAB, H, dtype=torch.bfloat16),
               "lm_head.weight": torch.empty(VOCAB, H, dtype=torch.bfloat16),
               "model.norm.weight": torch.empty(H, dtype=torch.bfloat16)}
    for i in range(LAYERS):
        for name, (out, inp) in LINEARS.items():
            tensors.update(_linear(kind, f"model.layers.{i}.{name}", out, inp))
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"model.layers.{i}.{norm}.weight"] = torch.empty(H, dtype=torch.bfloat16)
    # Two shards, as large checkpoints come.
    names = sorted(tensors)
    half = len(names) // 2
    for index, part in enumerate((names[:half], names[half:])):
        safetensors_torch.save_file({n: tensors[n] for n in part},
                                    str(folder / f"model-0000{index + 1}-of-00002.safetensors"))
    return folder


@pytest.mark.parametrize("kind", sorted(QUANT_CONFIGS))
def test_folder_weight_bytes_match_the_files(tmp_path: Path, kind: str) -> None:
    folder = _folder(tmp_path, kind)
    spec = load_spec(str(folder))
    assert spec.native_weights_dtype == EXPECTED[kind]
    files = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    planned = weight_bytes(breakdown(spec), spec, spec.native_weights_dtype)
    assert planned == pytest.approx(files, rel=1e-3)
    # The plan runs in the checkpoint's own format.
    workload = build_workload(WorkloadRequest(model=str(folder)))
    assert workload.weights_dtype == EXPECTED[kind]
    assert workload.params_total == breakdown(spec).total


@pytest.mark.parametrize("kind", ["gptq", "bnb4", "compressed", "fp8block", "nvfp4", "mxfp4"])
def test_headers_tell_the_format_when_the_config_is_silent(tmp_path: Path, kind: str) -> None:
    folder = _folder(tmp_path, kind, with_quant_config=False)
    spec = load_spec(str(folder))
    assert spec.native_weights_dtype == EXPECTED[kind]
    assert "safetensors headers" in (spec.native_dtype_source or "")


def test_only_the_header_is_read(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "bf16")
    ckpt = read_checkpoint(folder)
    assert ckpt is not None and ckpt.files == 2
    assert ckpt.bytes_by_dtype == {"BF16": ckpt.tensor_bytes}
    path = next(folder.glob("*.safetensors"))
    with path.open("r+b") as handle:  # corrupt the weights, not the header: still readable
        handle.seek(-16, 2)
        handle.write(b"\xff" * 16)
    assert read_header(path)


def test_damaged_safetensors_is_a_clean_error(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "model.safetensors").write_bytes(b"\x00\x00\x00\x00\x00\x00\x10\x00{}")
    with pytest.raises(UserError) as info:
        load_spec(str(folder))
    assert info.value.code == ExitCode.USAGE and "safetensors" in info.value.message


def _cache(root: Path, repo: str, folder: Path) -> None:
    """Lay out a hub cache entry as huggingface_hub does (refs/main -> snapshots/<hash>)."""
    entry = root / ("models--" + repo.replace("/", "--"))
    snapshot = entry / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("a" * 40)
    for file in folder.iterdir():
        (snapshot / file.name).symlink_to(file)


def test_cached_hub_id_resolves_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder(tmp_path, "fp8block")
    _cache(tmp_path / "hub", "acme/tiny-fp8", folder)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    spec = load_spec("acme/tiny-fp8")
    assert spec.name == "acme/tiny-fp8" and spec.native_weights_dtype == "fp8"
    assert spec.checkpoint_bytes
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # HF_HOME/hub
    assert load_spec("acme/tiny-fp8").native_weights_dtype == "fp8"


def test_uncached_hub_id_names_the_download(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(UserError) as info:
        load_spec("acme/not-here")
    assert info.value.code == ExitCode.USAGE
    assert "hf download acme/not-here config.json" in (info.value.hint or "")
