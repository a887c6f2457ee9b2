"""Write random-weight GGUF files of a Llama preset's shapes, for timing llama.cpp.

The shapes come from hwadvisor's presets (hwadvisor/workload/presets/*.json); the file is
written in F16 with llama.cpp's own gguf-py (carried with the llama.cpp source, put on
PYTHONPATH). Weights are random normal x 0.02, so activations stay far from fp16's range;
their values do not change the time a kernel takes. One random array per distinct shape is
reused by every layer: that keeps generation to seconds, and timing does not depend on the
values. The vocabulary is synthetic (SentencePiece-style: <unk>, <s>, </s>, 256 byte tokens,
then placeholder pieces) of the preset's size, enough for llama.cpp to load and serve token ids.

Usage: python make_gguf.py PRESET.json OUT.gguf
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

SCALE = 0.02  # std of the random weights


def vocab(n: int) -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece-shaped vocabulary of n tokens: specials, bytes, placeholder pieces."""
    import gguf

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    rest = n - len(tokens)
    tokens += [f"\u2581w{i}" for i in range(rest)]
    types += [gguf.TokenType.NORMAL] * rest
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(rest)]
    return tokens, scores, [int(t) for t in types]


def write(preset: dict, out: Path) -> None:
    """Write the F16 GGUF file of the preset's Llama shapes."""
    import gguf

    h = preset["hidden_size"]
    n_layer = preset["num_hidden_layers"]
    n_head = preset["num_attention_heads"]
    n_kv = preset["num_key_value_heads"]
    hd = preset.get("head_dim") or h // n_head
    ff = preset["intermediate_size"]
    n_vocab = preset["vocab_size"]
    rng = np.random.default_rng(0)
    cache: dict[tuple[int, int], np.ndarray] = {}

    def mat(rows: int, cols: int) -> np.ndarray:
        if (rows, cols) not in cache:
            cache[(rows, cols)] = (
                rng.standard_normal((rows, cols), dtype=np.float32) * SCALE
            ).astype(np.float16)
        return cache[(rows, cols)]

    ones = np.ones(h, dtype=np.float32)
    w = gguf.GGUFWriter(str(out), "llama")
    # llama.cpp reads the model's name for tokenizer fixes (a name with "phi-3" looks up
    # <|endoftext|>, which the synthetic vocabulary lacks): the source goes in the description.
    w.add_name("random weights")
    w.add_description(f"{preset.get('_source', 'a preset')}'s shapes, random weights")
    w.add_context_length(preset["max_position_embeddings"])
    w.add_embedding_length(h)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(hd)
    if hd != h // n_head:  # llama.cpp takes n_embd / n_head unless the file says otherwise
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_rope_freq_base(float(preset.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(preset.get("rms_norm_eps", 1e-5)))
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens, scores, types = vocab(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_tensor("token_embd.weight", mat(n_vocab, h))
    w.add_tensor("output_norm.weight", ones)
    if not preset.get("tie_word_embeddings", False):
        w.add_tensor("output.weight", mat(n_vocab, h))
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", mat(n_head * hd, h))
        w.add_tensor(p + "attn_k.weight", mat(n_kv * hd, h))
        w.add_tensor(p + "attn_v.weight", mat(n_kv * hd, h))
        w.add_tensor(p + "attn_output.weight", mat(h, n_head * hd))
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", mat(ff, h))
        w.add_tensor(p + "ffn_up.weight", mat(ff, h))
        w.add_tensor(p + "ffn_down.weight", mat(h, ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    """Read the preset, write the file."""
    preset = json.loads(Path(sys.argv[1]).read_text())
    write(preset, Path(sys.argv[2]))
    print(f"wrote {sys.argv[2]} ({Path(sys.argv[2]).stat().st_size / 1e9:.2f} GB)")


if __name__ == "__main__":
    main()
