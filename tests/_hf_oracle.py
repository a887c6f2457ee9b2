"""Test helper: count parameters the way transformers instantiates a config (meta device)."""

from __future__ import annotations

import copy
import warnings


def shrink(cfg: dict, layers: int = 4) -> dict:
    """A copy of cfg with fewer decoder layers (and first_k_dense_replace kept below that)."""
    out = copy.deepcopy(cfg)
    out["num_hidden_layers"] = min(layers, cfg["num_hidden_layers"])
    if "first_k_dense_replace" in out and out["first_k_dense_replace"] is not None:
        out["first_k_dense_replace"] = min(
            out["first_k_dense_replace"], out["num_hidden_layers"] - 1
        )
    if "max_window_layers" in out:
        out["max_window_layers"] = min(out["max_window_layers"], out["num_hidden_layers"])
    if isinstance(out.get("mlp_only_layers"), list):
        out["mlp_only_layers"] = [i for i in out["mlp_only_layers"] if i < out["num_hidden_layers"]]
    return out


def hf_counts(cfg: dict) -> tuple[int, int]:
    """(total, active) of the model transformers builds from cfg, on the meta device.

    total = parameters + DeepSeek-V3's e_score_correction_bias buffer (it is in the checkpoint);
    active = total minus the routed experts a token does not use, measured from the expert
    modules themselves.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = {k: v for k, v in cfg.items() if not k.startswith("_")}
    model_type = kwargs.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.for_model(model_type, **kwargs)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    total += sum(
        b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")
    )
    idle = 0
    top_k = config.num_experts_per_tok if hasattr(config, "num_experts_per_tok") else 0
    for module in model.modules():
        if type(module).__name__.endswith("Experts"):
            experts = module.num_experts
            per_expert = sum(p.numel() for p in module.parameters(recurse=False)) // experts
            idle += (experts - top_k) * per_expert
    return total, total - idle
