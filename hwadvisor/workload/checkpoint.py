"""Model folders and the Hugging Face cache: config.json plus the safetensors headers.

A safetensors file starts with an 8-byte little-endian header length and a JSON header that
names every tensor's dtype, shape and byte range (huggingface/safetensors, docs "Format").
Reading only that header (a few KB, never the weights) gives the exact bytes the weights take
and the dtypes they are stored in, which tells a quantised checkpoint's format apart even
when its config.json is silent. A Hugging Face repo id resolves through the local cache
(HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub), never the network.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from hwadvisor.errors import UserError

# A header lists tensor names, dtypes, shapes and offsets: a few MB for the largest models.
MAX_HEADER_BYTES = 100 * 1024 * 1024
# safetensors dtype names -> bytes per element (safetensors' Dtype enum); sub-byte types are
# packed two to a byte by the writers that use them (F4 for NVFP4/MXFP4).
_ELEMENT_BYTES = {
    "F64": 8.0, "I64": 8.0, "U64": 8.0, "F32": 4.0, "I32": 4.0, "U32": 4.0, "F16": 2.0,
    "BF16": 2.0, "I16": 2.0, "U16": 2.0, "F8_E4M3": 1.0, "F8_E5M2": 1.0, "F8_E8M0": 1.0,
    "I8": 1.0, "U8": 1.0, "BOOL": 1.0, "F4": 0.5,
}


@dataclass
class Checkpoint:
    """What the safetensors headers of a model folder say about its weights."""

    files: int = 0
    file_bytes: int = 0
    tensor_bytes: int = 0
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)

    def share(self, *dtypes: str) -> float:
        """Return the share of the tensor bytes stored in any of these dtypes."""
        if not self.tensor_bytes:
            return 0.0
        return sum(self.bytes_by_dtype.get(d, 0) for d in dtypes) / self.tensor_bytes

    def has_suffix(self, *suffixes: str) -> bool:
        """Tell whether some tensor name ends with one of the suffixes."""
        return any(name.endswith(suffixes) for name in self.names)


def read_header(path: Path) -> dict[str, object]:
    """Read one safetensors file's JSON header (the weights are never read)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(8)
            if len(raw) != 8:
                raise _bad(path, "shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", raw)
            if length > MAX_HEADER_BYTES or length > path.stat().st_size - 8:
                raise _bad(path, f"header length {length} does not fit the file")
            text = handle.read(length)
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})",
                        hint="check the model folder and its permissions") from None
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, ValueError):
        raise _bad(path, "its header is not JSON") from None
    if not isinstance(header, dict):
        raise _bad(path, "its header is not a JSON object")
    return header


def _bad(path: Path, why: str) -> UserError:
    return UserError(f"{path}: not a safetensors file ({why})",
                     hint="a model folder holds config.json and *.safetensors weights; "
                     "re-download the damaged file")


def read_checkpoint(folder: Path) -> Checkpoint | None:
    """Sum the safetensors headers of a folder; None when it holds no safetensors file."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    out = Checkpoint()
    for path in files:
        header = read_header(path)
        out.files += 1
        out.file_bytes += path.stat().st_size
        for name, info in header.items():
            if name == "__metadata__" or not isinstance(info, dict):
                continue
            offsets = info.get("data_offsets")
            dtype = str(info.get("dtype", "?"))
            if not (isinstance(offsets, list) and len(offsets) == 2
                    and all(isinstance(x, int) for x in offsets)):
                raise _bad(path, f"tensor {name!r} has no data_offsets")
            size = offsets[1] - offsets[0]
            out.tensor_bytes += size
            out.bytes_by_dtype[dtype] = out.bytes_by_dtype.get(dtype, 0) + size
            out.names.append(name)
    return out


def format_from_tensors(ckpt: Checkpoint) -> tuple[str, str] | None:
    """(weights dtype, evidence) from tensor names and dtypes; None when plainly 16/32-bit.

    Each format's telltale tensors, as its writer saves them: GPTQ and AWQ pack int4 into
    int32 `qweight` with `scales`/`qzeros`; bitsandbytes 4-bit keeps `absmax` and a
    `quant_state`, 8-bit `SCB`; FP8 block checkpoints (DeepSeek-V3) `weight_scale_inv`;
    compressed-tensors `weight_packed` (4-bit) or F8 weights with `weight_scale`; NVFP4
    (ModelOpt) `weight_scale_2`; MXFP4 (gpt-oss) `_blocks` with `_scales`.
    """
    if ckpt.has_suffix("_blocks") and ckpt.has_suffix("_scales"):
        return "fp4", "MXFP4 tensors (*_blocks, *_scales) in the safetensors headers"
    if ckpt.has_suffix("weight_scale_2"):
        return "fp4", "NVFP4 tensors (weight_scale_2) in the safetensors headers"
    if ckpt.has_suffix("weight_packed"):
        return "int4", "compressed-tensors packed 4-bit weights in the safetensors headers"
    if ckpt.has_suffix(".qweight"):
        return "int4", "GPTQ/AWQ packed int4 tensors (qweight) in the safetensors headers"
    if ckpt.has_suffix("quant_state.bitsandbytes__nf4", "quant_state.bitsandbytes__fp4"):
        return "nf4", "bitsandbytes 4-bit tensors (quant_state) in the safetensors headers"
    if ckpt.has_suffix(".SCB"):
        return "int8", "bitsandbytes 8-bit tensors (SCB) in the safetensors headers"
    if ckpt.has_suffix("weight_scale_inv"):
        return "fp8", "FP8 block-scaled weights (weight_scale_inv) in the safetensors headers"
    if ckpt.share("F8_E4M3", "F8_E5M2") > 0.25:
        return "fp8", "FP8 (F8_E4M3) weights in the safetensors headers"
    if ckpt.share("I8") > 0.5:
        return "int8", "INT8 weights in the safetensors headers"
    return None


# --------------------------------------------------------------------------- the HF cache

def hub_cache_dir() -> Path:
    """Return the Hugging Face hub cache folder, found as huggingface_hub finds it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME")
    base = Path(home).expanduser() if home else Path.home() / ".cache" / "huggingface"
    return base / "hub"


def looks_like_repo_id(model: str) -> bool:
    """Tell whether `model` reads as a Hugging Face repo id (org/name)."""
    parts = model.split("/")
    return (len(parts) == 2 and all(parts) and not model.startswith((".", "~"))
            and not model.endswith(".json"))


def cached_snapshot(repo_id: str) -> Path:
    """Return the cached snapshot folder of a repo holding config.json, or refuse.

    The cache keeps models--<org>--<name>/refs/<revision> (a commit hash) and
    snapshots/<hash>/ with the downloaded files; main is preferred, then any snapshot.
    """
    repo = hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    candidates: list[Path] = []
    ref = repo / "refs" / "main"
    if ref.is_file():
        candidates.append(snapshots / ref.read_text(encoding="utf-8").strip())
    if snapshots.is_dir():
        candidates.extend(sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime,
                                 reverse=True))
    for snapshot in candidates:
        if (snapshot / "config.json").is_file():
            return snapshot
    raise UserError(
        f"--model {repo_id}: not in the local Hugging Face cache ({hub_cache_dir()}); "
        "hwadvisor does not use the network",
        hint=f"download its config alone: hf download {repo_id} config.json "
        "(add '--include \"*.safetensors\"' for exact weight sizes), then run again")
