"""The model's prediction for the validator trials' own shapes, next to what the trials measured.

Each trial builds something small at Llama-3-8B widths (hwadvisor/trials/*.py): a stack of a few
decoder blocks (trials/kit/blocks.py: RMSNorm in fp32, q/k/v/o, SDPA over GQA heads expanded by
copies, SiLU-gated MLP, no rotary, no embedding or lm_head), or single GEMMs at the model's
linear shapes. This script builds the same work out of the performance model's op groups
(perfmodel/compute.py, with the rates of perfmodel/efficiency.py and the kernel floors and host
costs of perfmodel/overhead.py) and predicts the effect each trial reports:

- cuda-graphs: eager and replayed decode step of 4 layers at batch 1, context 2304;
- torch-compile: one block's forward at 1 x 2048, eager against fused elementwise kernels;
- activation-checkpointing: forward + backward of 4 blocks at 1 x 2048, time with / without
  (memory with / without from perfmodel/memory.py, at the trial's 4 layers);
- int4-weight-only: bf16 / int4 GEMM time at batch 1, 4, 16, 64 (geometric mean over shapes);
- fp8-gemm: bf16 / fp8 GEMM time at prefill M = 2048 and decode M = 16.

The attention-backends, memory-bandwidth and matmul-peak trials are sources of constants
(constants.py cites them), so they are listed, not checked. Target: every checked figure
within +-25% of the model's prediction.

Run: python benchmarks/trials_vs_model.py              (the committed H200 run)
     python benchmarks/trials_vs_model.py --report R.json   (another saved validate report)
     python benchmarks/trials_vs_model.py --run        (run the trials on this CUDA GPU first)
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from hwadvisor import profiles
from hwadvisor.engines import get_engine
from hwadvisor.models import Device, ModelOptions, Report, Workload
from hwadvisor.perfmodel import constants as C
from hwadvisor.perfmodel.compute import (
    Op,
    Phase,
    _gemm,
    attention_op,
    decode_attention_op,
    layer_gemms,
    rates,
)
from hwadvisor.perfmodel.context import Setup
from hwadvisor.perfmodel.layout import resolve_layout
from hwadvisor.perfmodel.memory import checkpoint_working_bytes, training_activation_bytes
from hwadvisor.perfmodel.resources import resolve
from hwadvisor.workload import WorkloadRequest, build_workload
from hwadvisor.workload.params import workload_breakdown

HERE = Path(__file__).resolve().parent
# The validate suite on an H200 with the GEMM trials timed as CUDA graphs (2026-12-01 23:30 UTC).
VALIDATE = HERE / "data" / "h200_validate_2026-12-01_graphs.json"
# Figures set by how fast this host's CPU launches eager kernels, listed but not checked: the
# 4-layer eager decode step measured 2.37 and 1.95 ms on two H200 hosts and 4.31-4.61 ms on a
# third the same day (docs/benchmarks.md), while the graphed step stayed at 0.93-1.01 ms. The
# model charges one per-kernel host cost; --calibration with a measured launch latency sets
# this host's.
HOST_DEPENDENT = {("cuda-graphs", "speedup"), ("cuda-graphs", "eager_step_ms")}
TARGET = 0.25

# The trial blocks' elementwise traffic per token per layer (trials/kit/blocks.py), bytes, as
# (coefficient of h, of I): two fp32 RMSNorms 36h each, the attention output's
# transpose-reshape copy 4h, two residual adds 6h each, SiLU and the product 10 I; the GQA
# expansion copies (read the KV heads, write them x group) go with attention below.
TRIAL_ELEMENTWISE = {"eager": (88.0, 10.0), "fused": (16.0, 6.0)}
# Kernels of one trial block: forward 35 (calibration.TRIAL_DECODE_KERNELS_PER_LAYER), and under
# torch.compile the 7 matmuls, SDPA and ~6 fused Triton kernels = 14.
TRIAL_KERNELS = {"eager": 35.0, "fused": 14.0}


@dataclass
class Row:
    """One compared figure."""

    trial: str
    figure: str
    measured: float
    predicted: float
    checked: bool = True

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return self.predicted / self.measured - 1.0


def _setup(device: Device, layers: int, *, weights: str = "bf16", batch: int = 1,
           prompt: int = 2048, gen: int = 1, training: bool = False,
           options: ModelOptions | None = None, checkpointing: bool = False) -> Setup:
    """Build a Setup for a Llama-3-8B-wide stack of `layers` blocks (the trials' shapes)."""
    base = build_workload(WorkloadRequest(model="llama-3-8b",
                                          phase="training" if training else "inference",
                                          batch=batch, prompt_len=prompt,
                                          gen_len=0 if training else gen, weights_dtype=weights,
                                          engine="hf", activation_checkpointing=checkpointing))
    assert base.spec is not None
    # the trial stack has no embedding and no lm_head: a token vocabulary of 8 stands for none
    spec = base.spec.model_copy(update={"num_layers": layers, "vocab_size": 8})
    workload: Workload = base.model_copy(update={"spec": spec, "params_total": None,
                                                 "params_active": None})
    opts = options or ModelOptions()
    return Setup(workload=workload, spec=spec, options=opts, device=device,
                 parts=workload_breakdown(workload, spec), layout=resolve_layout(workload, opts),
                 res=resolve(workload, device, opts))


def _elementwise(setup: Setup, tokens: float, mode: str, factor: float = 1.0) -> Op:
    a, c = TRIAL_ELEMENTWISE[mode]
    spec = setup.spec
    nbytes = (a * spec.hidden_size + c * spec.intermediate_size) * tokens * spec.num_layers
    return Op("elementwise", 0.0, nbytes * factor, 1.0, setup.res.stream_gbps * C.GB)


def _expand_kv(setup: Setup, tokens: float) -> Op:
    """expand_kv's copies: read the KV heads of `tokens` tokens, write them x group."""
    spec = setup.spec
    group = spec.num_heads / spec.num_kv_heads
    kv = 2.0 * spec.num_kv_heads * spec.head_dim * 2.0  # K and V, bf16
    return Op("expand_kv", 0.0, tokens * kv * (1.0 + group) * spec.num_layers, 1.0,
              setup.res.stream_gbps * C.GB)


def _time(setup: Setup, phase: Phase, eager: bool) -> float:
    """GPU time (ops + floors) against eager host launches, as overhead.step_time does."""
    gpu = phase.busy_s + phase.kernels * setup.res.kernel_floor_s
    if not eager:
        return gpu
    host = phase.kernels * C.EAGER_OP_S * get_engine("hf").costs.host_op_factor
    return max(gpu, host)


def _stack_decode(device: Device, layers: int, context: int, eager: bool) -> float:
    setup = _setup(device, layers, prompt=context)
    r = rates(setup)
    phase = Phase("decode")
    for op, n in layer_gemms(setup, r, 1.0, float(layers)):
        phase.add(op, n)
    # SDPA over the expanded heads (no mask) reads them once; the expansion is _expand_kv
    attend = decode_attention_op(setup, r, 1.0, float(context), 1.0)
    spec = setup.spec
    group = spec.num_heads / spec.num_kv_heads
    cache = 2.0 * spec.num_kv_heads * spec.head_dim * 2.0 * context * layers
    phase.add(Op("attention", attend.flops, cache * group, attend.compute_rate,
                 attend.memory_rate))
    phase.add(_expand_kv(setup, float(context)))
    phase.add(_elementwise(setup, 1.0, "eager"))
    phase.kernels = layers * TRIAL_KERNELS["eager"]
    return _time(setup, phase, eager)


def _block_forward(setup: Setup, tokens: float, mode: str) -> Phase:
    r = rates(setup)
    layers = float(setup.spec.num_layers)
    phase = Phase("forward")
    for op, n in layer_gemms(setup, r, tokens, layers):
        phase.add(op, n)
    phase.add(attention_op(setup, r, 1.0, 0.0, tokens, 1.0))
    phase.add(_expand_kv(setup, tokens))
    phase.add(_elementwise(setup, tokens, mode))
    phase.kernels = layers * TRIAL_KERNELS[mode]
    return phase


def _block_train(device: Device, layers: int, tokens: int, checkpointing: bool) -> float:
    setup = _setup(device, layers, prompt=tokens, training=True)
    fwd = _block_forward(setup, float(tokens), "eager")
    step = Phase("train")
    step.extend(fwd)
    for op, n in fwd.ops:
        if op.name == "attention":
            step.add(Op("attention backward", op.flops * C.ATTENTION_BACKWARD_FLOP_FACTOR,
                        op.device_bytes * 2.0, op.compute_rate * C.ATTENTION_BACKWARD_EFFICIENCY,
                        op.memory_rate), n)
        elif op.name in ("elementwise", "expand_kv"):
            step.add(Op(op.name + " backward", 0.0,
                        op.device_bytes * C.ELEMENTWISE_BACKWARD_FACTOR, 1.0, op.memory_rate), n)
        else:
            step.add(Op(op.name + " backward", op.flops * 2.0, op.device_bytes * 2.0,
                        op.compute_rate, op.memory_rate, op.p), n)
    kernels = fwd.kernels * (1.0 + C.BACKWARD_KERNEL_FACTOR)
    if checkpointing:
        step.extend(fwd)
        kernels += fwd.kernels
    step.kernels = kernels
    return _time(setup, step, eager=True)


def _gemm_time(device: Device, weights: str, m: int, n: int, k: int) -> float:
    setup = _setup(device, 1, weights=weights)
    op = _gemm(setup, rates(setup), "gemm", float(m), float(n * k), float(n), float(k),
               16.0 if weights == "bf16" else _bits(weights))
    return op.time_s + setup.res.kernel_floor_s


def _bits(weights: str) -> float:
    # the trial's packing: int4 with a bf16 scale and zero per group of 128; fp8 e4m3
    return {"int4": 4.0 + 32.0 / 128.0, "fp8": 8.0}[weights]


SHAPES = [("qkv", 6144, 4096), ("gate_up", 14336, 4096), ("down", 4096, 14336)]


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _activation_peak(setup: Setup) -> float:
    """Activations at the backward's peak: held ones plus a checkpointed layer's recomputation."""
    return training_activation_bytes(setup) + checkpoint_working_bytes(setup)


def predictions(device: Device) -> dict[tuple[str, str], float]:
    """The model's figure for each trial effect on this device."""
    out: dict[tuple[str, str], float] = {}
    eager = _stack_decode(device, 4, 2304, eager=True)
    graph = _stack_decode(device, 4, 2304, eager=False)
    out[("cuda-graphs", "speedup")] = eager / graph
    out[("cuda-graphs", "eager_step_ms")] = eager * 1e3
    out[("cuda-graphs", "graph_step_ms")] = graph * 1e3
    one = _setup(device, 1, prompt=2048)
    compiled = _setup(device, 1, prompt=2048, options=ModelOptions(compiled=True))
    t_eager = _time(one, _block_forward(one, 2048.0, "eager"), eager=True)
    t_compiled = _time(compiled, _block_forward(compiled, 2048.0, "fused"), eager=True)
    out[("torch-compile", "speedup")] = t_eager / t_compiled
    out[("torch-compile", "eager_ms")] = t_eager * 1e3
    plain = _block_train(device, 4, 2048, checkpointing=False)
    ckpt = _block_train(device, 4, 2048, checkpointing=True)
    out[("activation-checkpointing", "time_factor")] = ckpt / plain
    # the trial's peak under checkpointing: the layers' inputs plus one layer's recomputation
    mem = [_activation_peak(_setup(device, 4, prompt=2048, training=True, checkpointing=c))
           for c in (False, True)]
    out[("activation-checkpointing", "memory_factor")] = mem[1] / mem[0]
    for batch in (1, 4, 16, 64):
        ratios = [_gemm_time(device, "bf16", batch, n, k) / _gemm_time(device, "int4", batch, n, k)
                  for _, n, k in SHAPES]
        out[("int4-weight-only", f"speedup_b{batch}")] = _geomean(ratios)
    for phase, m in (("prefill", 2048), ("decode", 16)):
        ratios = [_gemm_time(device, "bf16", m, n, k) / _gemm_time(device, "fp8", m, n, k)
                  for _, n, k in SHAPES]
        out[("fp8-gemm", f"{phase}_speedup")] = _geomean(ratios)
    return out


SOURCES = {"attention-backends": "attention efficiencies (constants.ATTENTION_PEAK_FRACTION)",
           "memory-bandwidth": "stream share on Hopper (STREAM_BANDWIDTH_FRACTION)",
           "matmul-peak": "GEMM peak share on Hopper (GEMM_PEAK_FRACTION)"}


def compare(report: Report | None = None) -> list[Row]:
    """Measured trial effects of a validate report next to the model's predictions."""
    if report is None:
        from hwadvisor.report.io import load_report

        report = load_report(VALIDATE)
    device = _device_of(report)
    predicted = predictions(device)
    rows = []
    for trial in report.trials:
        if trial.status != "ok":
            continue
        for (tid, name), value in predicted.items():
            if tid == trial.id and name in trial.effect:
                rows.append(Row(tid, name, float(trial.effect[name]), value,
                                checked=(tid, name) not in HOST_DEPENDENT))
    return rows


def _device_of(report: Report) -> Device:
    """The report's device as the model sees it: its profile's datasheet figures."""
    device = report.devices[0] if report.devices else None
    if device is not None and device.profile_id:
        return profiles.device_from_profile(device.profile_id)
    if device is not None:
        return device
    return profiles.device_from_profile("h200-sxm")


def render(rows: list[Row], markdown: bool = False) -> tuple[str, bool]:
    """The comparison table; True when every checked figure is within the target."""
    lines = []
    if markdown:
        lines += ["| trial | figure | measured | predicted | error |", "|---|---|---|---|---|"]
    ok = True
    for r in rows:
        hit = abs(r.error) <= TARGET
        ok &= hit or not r.checked
        if markdown:
            lines.append(f"| {r.trial} | {r.figure} | {r.measured:.3g} | {r.predicted:.3g} | "
                         f"{r.error:+.0%} |")
        else:
            mark = "" if hit else ("  (host-dependent, not checked)" if not r.checked
                                   else "  MISSED")
            lines.append(f"{r.trial:26s} {r.figure:16s} measured {r.measured:8.3g}  predicted "
                         f"{r.predicted:8.3g}  {r.error:+6.1%}{mark}")
    lines.append("sources of constants, not checks: " + "; ".join(
        f"{k} -> {v}" for k, v in SOURCES.items()))
    if not rows:
        ok = False
        lines.append("no trial results to compare (did the trials run? they need a CUDA GPU)")
    checked = [r for r in rows if r.checked]
    lines.append(f"trials: {sum(abs(r.error) <= TARGET for r in checked)}/{len(checked)} checked "
                 f"figures within +-{TARGET:.0%} {'ok' if ok else 'MISSED'}")
    return "\n".join(lines), ok


def run_trials() -> Report:
    """Run the checked trials on this machine's CUDA GPU (Llama-3-8B shapes)."""
    from hwadvisor.pipeline import validate_trials_report
    from hwadvisor.workload import WorkloadRequest

    ids = ["cuda-graphs", "torch-compile", "activation-checkpointing", "int4-weight-only",
           "fp8-gemm"]
    return validate_trials_report(ids, quick=False, request=WorkloadRequest(model="llama-3-8b"))


def main(argv: list[str] | None = None) -> int:
    """Print measured against predicted; exit 1 when a checked figure misses the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="run the trials here first (CUDA)")
    parser.add_argument("--report", type=Path, help="a saved validate report to compare")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    report = None
    if args.run:
        report = run_trials()
    elif args.report:
        from hwadvisor.report.io import load_report

        report = load_report(args.report)
    text, ok = render(compare(report), args.markdown)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
