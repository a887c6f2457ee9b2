"""Write tests/fixtures/hf_causal_lm_counts.json: the parameter count of every causal-LM type.

For each model type in the installed transformers' MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, the
default configuration (AutoConfig.for_model(type)) is built with AutoModelForCausalLM on the
meta device (no weights, no network, trust_remote_code off) and its parameters counted. The
fixture keeps the config (as config.json would hold it), the total, the active count (routed
experts a token does not visit left out) and, where transformers cannot build the model, why.
tests/workload/test_hf_coverage.py compares hwadvisor's counts with it; run again after a
transformers upgrade:  python scripts/hf_oracle_counts.py
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "hf_causal_lm_counts.json"


def _count(model_type: str) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model(model_type)
        entry: dict = {"config": json.loads(config.to_json_string(use_diff=False))}
        try:
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config)
        except Exception as exc:  # noqa: BLE001 - the reason is the record
            entry["build_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            return entry
    total = sum(p.numel() for p in model.parameters())
    # DeepSeek-V3's router bias is a buffer that the checkpoint stores: count it as weights.
    total += sum(b.numel() for n, b in model.named_buffers()
                 if n.endswith("e_score_correction_bias"))
    text = config.get_text_config()
    top_k = next((v for k in ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k")
                  if isinstance(v := getattr(text, k, None), int)), 0)
    idle = 0
    for module in model.modules():
        if type(module).__name__.endswith("Experts") and hasattr(module, "num_experts"):
            experts = module.num_experts
            own = sum(p.numel() for p in module.parameters(recurse=False))
            idle += (experts - min(top_k, experts)) * (own // experts)
    entry.update(architecture=type(model).__name__, total=total, active=total - idle)
    return entry


def main() -> int:
    """Count every causal-LM type and write the fixture."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    only = set(sys.argv[1:])
    types = sorted(t for t in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if not only or t in only)
    out: dict = {"transformers": transformers.__version__, "models": {}}
    for model_type in types:
        try:
            out["models"][model_type] = _count(model_type)
        except Exception as exc:  # noqa: BLE001
            out["models"][model_type] = {"config_error": f"{type(exc).__name__}: {exc}"[:200]}
        print(model_type, out["models"][model_type].get("total"), file=sys.stderr)
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    if only:
        print(text)
    else:
        OUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
