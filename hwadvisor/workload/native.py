"""The checkpoint's own weights format, read from its config.json.

A checkpoint published quantised says so in `quantization_config` (transformers'
quantizer configs, utils/quantization_config.py); otherwise `torch_dtype` (or `dtype` in
transformers 5) names the stored precision. Serving engines load float32 checkpoints in
16 bits by default (vLLM `--dtype auto`, transformers `torch_dtype="auto"` downcasts nothing,
but nobody serves an 8B model in fp32), so fp32 is planned as bf16 with a note.
"""

from __future__ import annotations

from typing import Any

_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16"}


def _compressed_tensors(config: dict[str, Any]) -> tuple[str, str] | None:
    """llm-compressor's format: the weights' num_bits and type in its config groups."""
    groups = config.get("config_groups")
    if not isinstance(groups, dict):
        return None
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            continue
        bits, kind = weights.get("num_bits"), weights.get("type")
        if bits == 8 and kind == "float":
            return "fp8", "compressed-tensors FP8 weights"
        if bits == 8 and kind == "int":
            return "int8", "compressed-tensors INT8 weights"
        if bits == 4 and kind == "float":
            return "fp4", "compressed-tensors FP4 (NVFP4) weights"
        if bits == 4 and kind == "int":
            return "int4", "compressed-tensors 4-bit integer weights"
    return None


def _from_quantization(config: dict[str, Any]) -> tuple[str, str] | None:
    """(dtype, how) from a quantization_config; None when it names nothing we model."""
    method = str(config.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8"):
        block = config.get("weight_block_size")
        detail = f", blocks {block[0]}x{block[1]}" if isinstance(block, list) and len(block) == 2 \
            else ""
        return "fp8", f"quantization_config {method}{detail}"
    if method in ("gptq", "awq", "marlin", "gptq_marlin", "awq_marlin", "hqq", "exl2"):
        bits = config.get("bits", config.get("w_bit", 4))
        if bits == 8:
            return "int8", f"quantization_config {method} 8-bit"
        if bits == 4:
            return "int4", f"quantization_config {method} 4-bit"
        return None
    if method == "bitsandbytes":
        if config.get("load_in_4bit") or config.get("_load_in_4bit"):
            return "nf4", "quantization_config bitsandbytes 4-bit"
        if config.get("load_in_8bit") or config.get("_load_in_8bit"):
            return "int8", "quantization_config bitsandbytes 8-bit"
        return None
    if method == "mxfp4":
        return "fp4", "quantization_config mxfp4"
    if method == "modelopt":
        algo = str(config.get("quant_algo", "")).upper()
        if "FP8" in algo:
            return "fp8", f"quantization_config modelopt {algo}"
        if "FP4" in algo:
            return "fp4", f"quantization_config modelopt {algo}"
        return None
    if method == "compressed-tensors":
        return _compressed_tensors(config)
    return None


def native_weights_dtype(data: dict[str, Any]) -> tuple[str | None, str | None]:
    """(weights dtype, where it was read) from a config.json's fields; (None, None) if silent."""
    quant = data.get("quantization_config")
    if isinstance(quant, dict):
        found = _from_quantization(quant)
        if found is not None:
            return found[0], f"the checkpoint's {found[1]}"
        method = quant.get("quant_method", "unknown")
        note = f"quantization_config {method} is not a format hwadvisor models"
    else:
        note = None
    stored = data.get("torch_dtype", data.get("dtype"))
    dtype = _TORCH_DTYPES.get(str(stored).lower()) if isinstance(stored, str) else None
    if dtype is None:
        return None, note
    if dtype == "fp32":
        return "bf16", ("the checkpoint is stored in float32; engines serve it in 16 bits, "
                        "planned as bf16")
    where = f"the checkpoint's torch_dtype {stored}"
    return dtype, where if note is None else f"{where} ({note})"
