"""Trial `plan-step`: the plan's stacked step on a few real layers against the baseline's.

The validator hands over the baseline's knobs and the plan's (ctx.plan_spec, the
PlanTrialSpec of models/plan.py): both sides are built from the same random weights on the
workload's block widths (a few layers, full widths on a GPU, tiny on a CPU) and run the same
step, each with its own knobs stacked:

- inference, one decode step against a static KV cache of the workload's context (capped):
  `weights` bf16 | int4 (torch's int4 weight-only kernel, group 128) | fp8 (row-wise scaled
  `torch._scaled_mm`, activations quantised per row each call); `kv` bf16 | fp8 (per-tensor
  scale, dequantised before SDPA: torch has no attention kernel reading FP8 K/V);
  `attention` flash (SDPA's own choice) | math (SDPBackend.MATH); `cuda_graphs` (the step
  captured once and replayed);
- training, forward + backward + AdamW step on `batch` x seq_len tokens: `checkpointing`
  none | full | selective (attention recomputed); `fused_optimizer` (AdamW fused=True, else
  foreach); `lora_rank` (frozen base, rank-r adapters on every linear, only they stepped);
  `batch` (when the plan changes it, both sides keep the ratio, timed per token).

A knob this device cannot run (FP8 without FP8 tensor cores, CUDA graphs off CUDA, 4-bit
formats torch has no kernel for) is set alike on both sides and named with its reason in the
plan measurement's params ("dropped.<knob>"); when nothing is left to differ the trial is
unsupported.

Correctness first: each inference side's step (its kernels, graph replay) must match the same
side computed eagerly with plain bf16 matmuls on its dequantised weights (FP8 activations
round too, so that side gets a looser bound); each training side's loss and gradients must be
finite and the plan's forward must match the baseline's (LoRA adapters start at zero). Then the
two sides run interleaved (timing.interleaved) until the ratio's 95% interval is within +-5%
or the budget is spent. On a CUDA device each side's peak memory (persistent tensors plus the
step's transient peak, from the caching allocator) is measured too.

Effect keys:
- speedup: baseline time per token / plan time per token, with its interval
- baseline_step_ms, plan_step_ms: the medians
- memory_factor (CUDA): plan peak bytes / baseline peak bytes; baseline_bytes, plan_bytes
- plan_output_rel_error (inference): the plan's output against the baseline's (what the
  quantisation changes; information, not a pass/fail bound)

torch is imported only inside functions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from hwadvisor.models import Measurement, TrialResult
from hwadvisor.models.stats import LogEstimate
from hwadvisor.trials.base import (
    TrialContext,
    cuda_available,
    has_fp8,
    torch_device,
)
from hwadvisor.trials.kit import common

TRIAL_ID = "plan-step"
LAYERS = 4
LAYERS_QUICK = 2
MAX_CONTEXT = 4096
MAX_DECODE_BATCH = 64
MAX_TRAIN_TOKENS = 16384  # per step on a GPU: a few-second trial at 8B widths
MAX_SEQ = 4096
QUICK_CONTEXT = 128
QUICK_SEQ = 64
QUICK_TOKENS = 256
FP8_MAX = 448.0  # largest finite float8_e4m3fn value (OCP FP8 spec)
INT4_MULTIPLE = 128  # torch's int4 kernel: K a multiple of the group (128) and of 16 x 8 tiles
WEIGHT_SEED, CACHE_SEED, INPUT_SEED = 71, 72, 73
LORA_ALPHA_OVER_RANK = 2.0  # the usual alpha = 2r (PEFT examples); it only scales the adapter
LR = 1e-6  # tiny, so hundreds of timed steps keep the weights near where they started

# Bounds on the relative error of a side against its own eager, dequantised reference: bf16
# over a few layers (timing.py's method: bf16 lands 1e-3..1e-2 per op); FP8 activations add
# ~3% per matmul (3 mantissa bits), so that side is only checked for being sane.
TOLERANCE = 5e-2
TOLERANCE_FP8 = 0.2

DEFAULT_KNOBS: dict[str, Any] = {
    "cuda_graphs": False, "weights": "bf16", "kv": "bf16", "attention": "flash",
    "checkpointing": "none", "fused_optimizer": False, "lora_rank": 0, "batch": 1,
}
INFERENCE_KNOBS = ("cuda_graphs", "weights", "kv", "attention")
TRAINING_KNOBS = ("checkpointing", "fused_optimizer", "lora_rank", "batch", "attention")


class PlanStepTrial(common.GuardedTrial):
    """The plan's stacked decode or train step against the baseline's, on a few layers."""

    id = TRIAL_ID
    title = "The plan as a whole: its stacked step against the baseline's"
    needs = "torch; a plan (recommend --validate); CUDA for CUDA graphs and FP8"

    def also_needs(self, ctx: TrialContext) -> str | None:
        """Need the plan's knobs."""
        if not isinstance(ctx.plan_spec, dict):
            return "no plan to measure: run it through recommend --validate"
        return None

    def body(self, ctx: TrialContext, started: float) -> TrialResult:
        """Build both sides, check them, time them; see the module docstring."""
        return _run(ctx, started)


# ---------------------------------------------------------------------------------------
# knobs


def knobs_of(side: dict[str, Any] | None) -> dict[str, Any]:
    """Every knob of one side, defaults filled in."""
    return {**DEFAULT_KNOBS, **(side or {})}


def _why_not(knob: str, value: Any, device: str, phase: str) -> str | None:
    """Why this device (or this trial) cannot run knob=value; None when it can."""
    on_cuda = device.startswith("cuda")
    if knob == "cuda_graphs" and value and not on_cuda:
        return "CUDA graphs need a CUDA GPU"
    if knob == "weights" and value == "fp8" and not has_fp8(device):
        return "FP8 weights need FP8 tensor cores (NVIDIA cc >= 8.9, AMD MI300+)"
    if knob == "weights" and value == "int4" and device.startswith("mps"):
        return "torch has no int4 weight-only kernel on MPS"
    if knob == "weights" and value not in ("bf16", "int4", "fp8"):
        return f"torch has no kernel for {value} weights (the engine's own kernel runs them)"
    if knob == "weights" and value != "bf16" and phase == "training":
        return "quantised base weights in training (QLoRA) need bitsandbytes' NF4 kernels"
    if knob == "kv" and value == "fp8" and not hasattr(_torch(), "float8_e4m3fn"):
        return "this torch has no float8_e4m3fn"
    if knob == "kv" and value not in ("bf16", "fp8"):
        return f"a {value} KV cache is not one torch can hold"
    return None


def _torch() -> Any:
    import torch

    return torch


def runnable(baseline: dict[str, Any], plan: dict[str, Any], device: str,
             phase: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """(baseline, plan, dropped): knobs this device cannot run set to the default on both sides.

    dropped maps each knob left out to its reason.
    """
    base, new = dict(baseline), dict(plan)
    dropped: dict[str, str] = {}
    for knob in DEFAULT_KNOBS:
        for side in (base, new):
            reason = _why_not(knob, side[knob], device, phase)
            if reason is not None:
                dropped.setdefault(knob, f"{knob}={side[knob]}: {reason}")
                side[knob] = DEFAULT_KNOBS[knob] if knob != "batch" else side[knob]
    relevant = INFERENCE_KNOBS if phase == "inference" else TRAINING_KNOBS
    for knob in DEFAULT_KNOBS:
        if knob not in relevant:
            base[knob] = new[knob] = DEFAULT_KNOBS[knob] if knob != "batch" else base[knob]
    return base, new, dropped


def differing(base: dict[str, Any], plan: dict[str, Any], phase: str) -> list[str]:
    """Return the knobs the two sides set differently (what the trial measures)."""
    relevant = INFERENCE_KNOBS if phase == "inference" else TRAINING_KNOBS
    return [k for k in relevant if base[k] != plan[k]]


# ---------------------------------------------------------------------------------------
# quantised and adapted linears


def _quant_linear_class() -> Any:
    import torch
    import torch.nn.functional as F
    from torch import nn

    from hwadvisor.trials.kit import fp8_ops, int4_ops

    class QuantLinear(nn.Module):
        """A bias-free linear whose weight is int4 (torch kernel) or FP8 (row-wise scales).

        `reference` set: plain F.linear on the dequantised weight (kept only until the check
        has run; drop_reference frees it so memory and timing see the quantised bytes).
        """

        def __init__(self, linear: Any, kind: str, device: str) -> None:
            super().__init__()
            w = linear.weight.detach()
            self.kind, self.device, self.out_features = kind, device, w.shape[0]
            self.reference = False
            if kind == "int4":
                q, scales, zeros = int4_ops.quantize_int4(w)
                self.packed = int4_ops.pack_weight(q, device)
                self.sz = int4_ops.scales_and_zeros(scales, zeros)
                self.ref_w: Any = int4_ops.dequantize_int4(q, scales, zeros).to(w.dtype)
            else:
                self.fp8 = fp8_ops.fp8_dtype(device)
                self.wq, self.ws = fp8_ops.quantize_fp8(w, rowwise=True, dtype=self.fp8)
                self.ref_w = fp8_ops.dequantized(self.wq, self.ws).to(w.dtype)

        def drop_reference(self) -> None:
            self.ref_w = None

        def forward(self, x: Any) -> Any:
            lead, k = x.shape[:-1], x.shape[-1]
            x2 = x.reshape(-1, k)
            if self.reference:
                out = F.linear(x2, self.ref_w)
            elif self.kind == "int4":
                out = int4_ops.int4_mm(x2, self.packed, self.sz, self.device)
            else:
                rows = x2.shape[0]
                padded = F.pad(x2, (0, 0, 0, (-rows) % 16))  # _scaled_mm wants M % 16 == 0
                xq, xs = fp8_ops.quantize_fp8(padded, rowwise=True, dtype=self.fp8)
                out = fp8_ops.scaled_mm(xq, self.wq, xs, self.ws, rowwise=True)[:rows]
            return out.reshape(*lead, self.out_features).to(x.dtype)

    class LoraLinear(nn.Module):
        """A frozen linear plus a rank-r adapter: base(x) + scale * (x A^T) B^T, B zero at start."""

        def __init__(self, linear: Any, rank: int) -> None:
            super().__init__()
            self.base = linear
            self.base.weight.requires_grad_(False)
            n, k = linear.weight.shape
            dev, dt = linear.weight.device, linear.weight.dtype
            self.a = nn.Parameter(torch.randn(rank, k, device=dev, dtype=dt) / k**0.5)
            self.b = nn.Parameter(torch.zeros(n, rank, device=dev, dtype=dt))
            self.scale = LORA_ALPHA_OVER_RANK

        def forward(self, x: Any) -> Any:
            return self.base(x) + F.linear(F.linear(x, self.a), self.b) * self.scale

    return QuantLinear, LoraLinear


def _swap_linears(module: Any, make: Callable[[Any], Any]) -> None:
    """Replace every nn.Linear below module by make(linear), in place."""
    from torch import nn

    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            setattr(module, name, make(child))
        else:
            _swap_linears(child, make)


def _quant_modules(module: Any) -> list[Any]:
    return [m for m in module.modules() if hasattr(m, "drop_reference")]


def _attention_context(kind: str) -> Any:
    """SDPA restricted to the math backend for math attention; SDPA's own choice for flash."""
    import contextlib

    if kind != "math":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


# ---------------------------------------------------------------------------------------
# shapes


def _shape(ctx: TrialContext, device: str, phase: str, batch: int,
           seq_len: int, int4: bool) -> common.BlockShape:
    """Return the workload's block: full widths and a few layers on a GPU, tiny on a CPU."""
    small = ctx.quick or not device.startswith("cuda")
    if small:
        shape = common.scaled_shape(ctx.workload, max_heads=4, layers=LAYERS_QUICK, batch=batch,
                                    seq_len=seq_len, quick_head_dim=32)
    else:
        shape = common.scaled_shape(ctx.workload, max_heads=64, layers=LAYERS, batch=batch,
                                    seq_len=seq_len)
    if int4:
        # The int4 kernel takes K in whole groups: round the MLP width up to one.
        inter = -(-shape.intermediate_size // INT4_MULTIPLE) * INT4_MULTIPLE
        shape = dataclasses.replace(shape, intermediate_size=inter)
    return shape


def _decode_sizes(ctx: TrialContext, request: dict[str, Any], device: str) -> tuple[int, int]:
    """(batch, context) of the decode step: the workload's, capped."""
    if ctx.quick or not device.startswith("cuda"):
        return max(1, min(int(request.get("batch", 1)), 4)), QUICK_CONTEXT
    batch = max(1, min(int(request.get("batch", 1)), MAX_DECODE_BATCH))
    return batch, max(16, min(int(request.get("context_len", 2048)), MAX_CONTEXT))


def train_sizes(ctx: TrialContext, request: dict[str, Any], base: dict[str, Any],
                plan: dict[str, Any], device: str) -> tuple[int, int, int]:
    """(baseline batch, plan batch, seq_len) of the train step, scaled to the trial's tokens.

    Both batches shrink by the same factor so their ratio (what a batch change does per
    token) is kept as far as whole sequences allow.
    """
    small = ctx.quick or not device.startswith("cuda")
    seq = QUICK_SEQ if small else max(16, min(int(request.get("seq_len", 2048)), MAX_SEQ))
    budget = (QUICK_TOKENS if small else MAX_TRAIN_TOKENS) // seq
    b0, b1 = max(1, int(base["batch"])), max(1, int(plan["batch"]))
    scale = min(1.0, budget / max(b0, b1))
    return max(1, round(b0 * scale)), max(1, round(b1 * scale)), seq


# ---------------------------------------------------------------------------------------
# inference sides


class _DecodeSide:
    """One side of the decode comparison: its stack, caches and the step it times."""

    def __init__(self, knobs: dict[str, Any], shape: common.BlockShape, context: int,
                 device: str, dtype: Any) -> None:
        import torch

        from hwadvisor.trials.kit import blocks

        self.knobs, self.device = knobs, device
        self.stack = blocks.build_stack(shape, device, dtype, seed=WEIGHT_SEED).eval()
        if knobs["weights"] != "bf16":
            quant, _lora = _quant_linear_class()
            _swap_linears(self.stack, lambda lin: quant(lin, knobs["weights"], device))
        where = "cpu" if device.startswith("mps") else device
        gen = torch.Generator(device=where).manual_seed(CACHE_SEED)
        size = (shape.batch, shape.num_kv_heads, context, shape.head_dim)
        self.kv_scale: float | None = None
        self.ks: list[Any] = []
        self.vs: list[Any] = []
        for _ in range(shape.layers):
            k = torch.randn(size, generator=gen, device=where).to(device, dtype)
            v = torch.randn(size, generator=gen, device=where).to(device, dtype)
            if knobs["kv"] == "fp8":
                # One scale for every cache (vLLM's default FP8 KV: per-tensor scales); the
                # random caches share one distribution.
                # The first cache's range sets the one scale; the other layers' caches are
                # clamped into e4m3's range (an out-of-range value would turn into NaN).
                self.kv_scale = self.kv_scale or float(k.abs().amax()) / FP8_MAX
                k = (k.float() / self.kv_scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
                v = (v.float() / self.kv_scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            self.ks.append(k)
            self.vs.append(v)
        xgen = torch.Generator(device="cpu").manual_seed(INPUT_SEED)
        self.x = torch.randn(shape.batch, 1, shape.hidden_size, generator=xgen).to(device, dtype)
        self.pos = torch.tensor([context - 1], device=device, dtype=torch.long)
        self.graph: Any = None
        self.out: Any = None

    def eager(self) -> Any:
        """One decode step, eagerly."""
        import torch

        with torch.no_grad(), _attention_context(self.knobs["attention"]):
            return self.stack.decode(self.x, self.ks, self.vs, self.pos, self.kv_scale)

    def reference(self) -> Any:
        """Run the same step with plain bf16 matmuls on the dequantised weights, eagerly."""
        mods = _quant_modules(self.stack)
        for m in mods:
            m.reference = True
        try:
            return self.eager().clone()
        finally:
            for m in mods:
                m.reference = False

    def prepare(self) -> None:
        """Drop the reference weights; capture the step in a CUDA graph when the knob says so."""
        for m in _quant_modules(self.stack):
            m.drop_reference()
        if not self.knobs["cuda_graphs"]:
            return
        import torch

        with torch.cuda.device(torch.device(self.device)):
            side = torch.cuda.Stream(device=self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(3):  # warm up off the capture (torch.cuda.graphs docs)
                    self.eager()
            torch.cuda.current_stream(self.device).wait_stream(side)
            torch.cuda.synchronize(self.device)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = self.eager()
            torch.cuda.synchronize(self.device)

    def step(self, _i: int = 0) -> Any:
        """Run the timed step: a graph replay, or the eager step."""
        if self.graph is not None:
            self.graph.replay()
            return self.out
        return self.eager()

    def output(self) -> Any:
        """Return the timed step's output (poisoned first, so an unwritten element shows)."""
        from hwadvisor.trials.kit.timing import poison, sync

        if self.out is not None:
            poison(self.out)
        out = self.step().clone()
        sync(self.device)
        return out


def _allocated(device: str) -> int:
    """Bytes the caching allocator holds for tensors now (0 off CUDA)."""
    if not device.startswith("cuda"):
        return 0
    import torch

    return int(torch.cuda.memory_allocated(torch.device(device)))


def _step_peak(device: str, step: Callable[[], Any]) -> int:
    """Transient bytes one step allocates above what was there before it (0 off CUDA)."""
    if not device.startswith("cuda"):
        step()
        return 0
    import torch

    dev = torch.device(device)
    torch.cuda.synchronize(dev)
    before = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    step()
    torch.cuda.synchronize(dev)
    return int(torch.cuda.max_memory_allocated(dev) - before)


# ---------------------------------------------------------------------------------------
# training sides


class _TrainSide:
    """One side of the train-step comparison: its stack, optimizer and input."""

    def __init__(self, knobs: dict[str, Any], shape: common.BlockShape, device: str,
                 dtype: Any) -> None:
        import torch

        from hwadvisor.trials.kit import blocks

        self.knobs, self.device, self.tokens = knobs, device, shape.batch * shape.seq_len
        before = _allocated(device)
        self.stack = blocks.build_stack(shape, device, dtype, seed=WEIGHT_SEED)
        rank = int(knobs["lora_rank"])
        if rank > 0:
            for p in self.stack.parameters():
                p.requires_grad_(False)  # the base is frozen; norms too, as PEFT does
            _quant, lora = _quant_linear_class()
            gen_state = torch.random.get_rng_state()
            torch.manual_seed(WEIGHT_SEED + 1)
            _swap_linears(self.stack, lambda lin: lora(lin, rank))
            torch.random.set_rng_state(gen_state)
        self.stack.checkpointing = knobs["checkpointing"] != "none"
        self.stack.selective = knobs["checkpointing"] == "selective"
        self.params = [p for p in self.stack.parameters() if p.requires_grad]
        fused = bool(knobs["fused_optimizer"])
        self.opt = torch.optim.AdamW(self.params, lr=LR, weight_decay=0.1, fused=fused or None,
                                     foreach=None if fused else True)
        self.x = blocks.random_hidden(shape, device, dtype, seed=INPUT_SEED)
        self.loss: Any = None
        self.weights_bytes = _allocated(device) - before

    def forward(self, x: Any | None = None) -> Any:
        """Run the stack's forward (no grad) on x or the side's own input."""
        import torch

        with torch.no_grad(), _attention_context(self.knobs["attention"]):
            return self.stack(self.x if x is None else x)

    def step(self, _i: int = 0) -> None:
        """One training step: forward, backward, AdamW."""
        self.opt.zero_grad(set_to_none=True)
        with _attention_context(self.knobs["attention"]):
            out = self.stack(self.x)
        self.loss = out.float().pow(2).mean()
        self.loss.backward()
        self.opt.step()

    def finite(self) -> bool:
        """Tell whether the last step's loss and every gradient are finite."""
        import torch

        grads = [p.grad for p in self.params if p.grad is not None]
        return bool(torch.isfinite(self.loss).item()) and bool(grads) and all(
            bool(torch.isfinite(g).all()) for g in grads)


# ---------------------------------------------------------------------------------------
# the run


def _kernels(knobs: dict[str, Any], device: str) -> list[str]:
    """Name the kernels the plan side ran (what was measured, not what the advice assumes)."""
    from hwadvisor.trials.int4 import kernel_name

    out = []
    if knobs["weights"] == "int4":
        out.append(f"int4 weights: {kernel_name(device)} (not Marlin)")
    if knobs["weights"] == "fp8":
        out.append("FP8 weights: torch._scaled_mm, row-wise scales, activations quantised "
                   "per call")
    if knobs["kv"] == "fp8":
        out.append("FP8 KV cache: dequantised to bf16 before SDPA each step (no fused FP8 "
                   "attention kernel in torch)")
    return out


def _params(prefix: str, knobs: dict[str, Any]) -> dict[str, float | int | str]:
    """Knobs as Measurement params (booleans as 0/1)."""
    return {f"{prefix}.{k}": int(v) if isinstance(v, bool) else
            (v if isinstance(v, (int, float, str)) else str(v)) for k, v in knobs.items()}


def _unsupported_nothing(dropped: dict[str, str]) -> TrialResult:
    why = "; ".join(dropped.values()) or "the plan sets no knob a stacked step can measure"
    return common.unsupported(TRIAL_ID, f"nothing of the plan to measure here: {why}")


def _run(ctx: TrialContext, started: float) -> TrialResult:
    request = dict(ctx.plan_spec or {})
    phase = str(request.get("phase", "inference"))
    device = torch_device(ctx)
    base, plan, dropped = runnable(knobs_of(request.get("baseline")),
                                   knobs_of(request.get("plan")), device, phase)
    if not differing(base, plan, phase):
        return _unsupported_nothing(dropped)
    if phase == "training":
        return _run_training(ctx, started, request, base, plan, dropped, device)
    return _run_inference(ctx, started, request, base, plan, dropped, device)


def _dtype(device: str) -> tuple[str, Any]:
    """bf16 everywhere torch's int4 kernel runs (CPU too); fp16 on MPS."""
    import torch

    return ("fp16", torch.float16) if device.startswith("mps") else ("bf16", torch.bfloat16)


def _run_inference(ctx: TrialContext, started: float, request: dict[str, Any],
                   base: dict[str, Any], plan: dict[str, Any], dropped: dict[str, str],
                   device: str) -> TrialResult:
    from hwadvisor.trials.kit.timing import Variant, interleaved, rel_error

    dtype_name, dtype = _dtype(device)
    batch, context = _decode_sizes(ctx, request, device)
    int4 = "int4" in (base["weights"], plan["weights"])
    shape = _shape(ctx, device, "inference", batch, context, int4)
    if int4 and shape.hidden_size % INT4_MULTIPLE:
        dropped["weights"] = (f"weights=int4: hidden size {shape.hidden_size} is not a "
                              f"multiple of the int4 kernel's {INT4_MULTIPLE}")
        base["weights"] = "bf16" if base["weights"] == "int4" else base["weights"]
        plan["weights"] = "bf16" if plan["weights"] == "int4" else plan["weights"]
        if not differing(base, plan, "inference"):
            return _unsupported_nothing(dropped)
    sides: dict[str, _DecodeSide] = {}
    errors: dict[str, float] = {}
    resident: dict[str, int] = {}
    for name, knobs in (("baseline", base), ("plan", plan)):
        before = _allocated(device)
        side = sides[name] = _DecodeSide(knobs, shape, context, device, dtype)
        ref = side.reference()
        side.prepare()  # frees the reference weights, captures the graph
        errors[name] = rel_error(side.output(), ref)
        del ref
        resident[name] = _allocated(device) - before
    plan_vs_base = rel_error(sides["plan"].output(), sides["baseline"].output())
    bounds = {n: TOLERANCE_FP8 if s.knobs["weights"] == "fp8" else TOLERANCE
              for n, s in sides.items()}
    bad = [f"{n} step differs from its eager reference: {errors[n]:.2e} > {bounds[n]:.0e}"
           for n in sides if not errors[n] <= bounds[n]]
    peaks = {n: resident[n] + _step_peak(device, s.step) for n, s in sides.items()}
    params = {**shape.params(), "dtype": dtype_name, "context_len": context,
              "phase": "inference"}
    timed = interleaved(
        Variant("baseline decode step", sides["baseline"].step, _params("knob", base)),
        Variant("plan decode step", sides["plan"].step,
                {**_params("knob", plan),
                 **{f"dropped.{k}": v for k, v in dropped.items()}}),
        device=device, budget_s=max(1.0, ctx.budget_s), params=params)
    ratio = timed.ratio("plan decode step")
    timed.baseline.error = errors["baseline"]
    timed.variants["plan decode step"].error = errors["plan"]
    return _result(ctx, started, device, shape, "decode step", timed.measurements, ratio,
                   peaks, bad, max(errors.values()), plan, base,
                   {"plan_output_rel_error": plan_vs_base}, tokens=(1.0, 1.0))


def _run_training(ctx: TrialContext, started: float, request: dict[str, Any],
                  base: dict[str, Any], plan: dict[str, Any], dropped: dict[str, str],
                  device: str) -> TrialResult:
    from hwadvisor.trials.kit.timing import Variant, interleaved, rel_error

    dtype_name, dtype = _dtype(device)
    b0, b1, seq = train_sizes(ctx, request, base, plan, device)
    shapes = {"baseline": _shape(ctx, device, "training", b0, seq, False),
              "plan": _shape(ctx, device, "training", b1, seq, False)}
    sides = {"baseline": _TrainSide(base, shapes["baseline"], device, dtype),
             "plan": _TrainSide(plan, shapes["plan"], device, dtype)}
    # The same weights and (leading) input: the forwards must agree before any step.
    both = min(b0, b1)
    x = sides["baseline"].x[:both]
    agree = rel_error(sides["plan"].forward(x), sides["baseline"].forward(x))
    bad = [] if agree <= TOLERANCE else [
        f"the plan's forward differs from the baseline's: {agree:.2e} > {TOLERANCE:.0e}"]
    peaks: dict[str, int] = {}
    for name, side in sides.items():
        # Each side's own bytes: its weights and input, the gradients and optimizer states its
        # first step leaves behind, and the transient peak of a step on top.
        before = _allocated(device)
        side.step()
        states = _allocated(device) - before
        peaks[name] = side.weights_bytes + states + _step_peak(device, side.step)
        if not side.finite():
            bad.append(f"{name} step gave a non-finite loss or gradient")
    params = {**shapes["plan"].params(), "dtype": dtype_name, "phase": "training",
              "baseline_batch": b0, "plan_batch": b1}
    timed = interleaved(
        Variant("baseline train step", sides["baseline"].step, _params("knob", base)),
        Variant("plan train step", sides["plan"].step,
                {**_params("knob", plan),
                 **{f"dropped.{k}": v for k, v in dropped.items()}}),
        device=device, budget_s=max(1.5, ctx.budget_s), warmup=2, params=params)
    ratio = timed.ratio("plan train step")
    tokens = (float(sides["baseline"].tokens), float(sides["plan"].tokens))
    return _result(ctx, started, device, shapes["plan"], "train step", timed.measurements,
                   ratio, peaks, bad, agree, plan, base, {}, tokens=tokens)


def _result(ctx: TrialContext, started: float, device: str, shape: common.BlockShape,
            what: str, measurements: list[Measurement], ratio: LogEstimate | None,
            peaks: dict[str, int], bad: list[str], err: float, plan: dict[str, Any],
            base: dict[str, Any], extra: dict[str, float],
            tokens: tuple[float, float]) -> TrialResult:
    import math

    base_m, plan_m = measurements
    effect: dict[str, float] = dict(extra)
    intervals: dict[str, tuple[tuple[float, float] | None, int]] = {}
    if ratio is not None and base_m.median and plan_m.median:
        # Per token: the plan's step may carry a different batch.
        per_token = dataclasses.replace(ratio, mean=ratio.mean + math.log(tokens[1] / tokens[0]))
        effect.update(speedup=per_token.value, baseline_step_ms=base_m.median * 1e3,
                      plan_step_ms=plan_m.median * 1e3)
        intervals["speedup"] = (per_token.ci, per_token.n)
    if peaks.get("baseline", 0) > 0 and peaks.get("plan", 0) > 0:
        factor = peaks["plan"] / peaks["baseline"]
        effect.update(memory_factor=factor, baseline_bytes=float(peaks["baseline"]),
                      plan_bytes=float(peaks["plan"]))
        intervals["memory_factor"] = ((factor, factor), 1)  # allocator bytes: exact
    changed = ", ".join(f"{k} {base[k]}->{plan[k]}" for k in DEFAULT_KNOBS if base[k] != plan[k])
    summary = (f"{what}, {shape.layers} layers ({shape.source}, hidden {shape.hidden_size}, "
               f"batch {shape.batch} x {shape.seq_len}) on {device}: {changed}; "
               f"baseline {effect.get('baseline_step_ms', math.nan):.3f} ms, plan "
               f"{effect.get('plan_step_ms', math.nan):.3f} ms, x"
               f"{effect.get('speedup', math.nan):.2f} per token")
    if "memory_factor" in effect:
        summary += f", memory x{effect['memory_factor']:.2f}"
    ok = not bad and "speedup" in effect
    return common.finished(
        TRIAL_ID, device, started, ok=ok,
        reason="; ".join(bad) if bad else (None if ok else "no timing came back"),
        measurements=measurements, effect=effect, intervals=intervals, summary=summary,
        max_error=err if math.isfinite(err) else None,
        kernel="; ".join(_kernels(plan, device)) or None,
    )


def cuda_ready() -> bool:
    """Tell whether this trial can use CUDA here (for the tests' markers)."""
    return cuda_available()
