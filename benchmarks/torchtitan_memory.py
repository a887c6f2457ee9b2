"""One rank's GPU memory in torchtitan's published Llama 3.1 runs, measured with torchtitan's own
code.

What it measures
    torch.cuda.max_memory_allocated and max_memory_reserved (GiB) per training step of ONE rank of
    torchtitan's published H100 runs (benchmarks/llama3_h100_202412_torchtitan.md, torchtitan
    9dec370,
    rows in benchmarks/published_figures.toml): Llama 3.1 8B on FSDP 8 (control), 70B on FSDP 32 x
    TP 8
    (256 GPUs, local batch 16 x 8192, full activation checkpointing; published 71.9 GiB) and 405B on
    FSDP 8 x TP 8 x PP 8 with Interleaved 1F1B (512 GPUs, local batch 32; published 72.7 GiB, the
    maximum over all GPUs, so PP ranks 0 and 7 are both measured). Plus a breakdown: memory after
    the
    sharded model is materialized, after the first optimizer step (AdamW states exist from then on),
    and the peak of the forward pass (non-PP cases). torchtitan's own log line prints
    DeviceMemoryMonitor's max_reserved_gib, the allocator's reserved_bytes.all.peak since the last
    log
    step: the steady-state step here is the comparable figure.

How
    torchtitan 0.2.2 (the version pinned in scripts/engine_flags.py) as torchtitan's train.py builds
    a run: the Llama 3 model is built on the meta device in fp32 (training.dtype default), passed to
    torchtitan's parallelize_llama (TP + loss parallel, activation checkpointing, FSDP2 with bf16
    params / fp32 reduce) or pipeline_llm (PP), materialized with to_empty(device) + init_weights,
    and
    trained with torchtitan's cross-entropy loss, its loss-parallel train context, its grad-norm
    clipping and its optimizer container (AdamW, fused). Token ids are random. torch.distributed
    runs
    with the "fake" backend: this process is one global rank of a world of the published size, every
    DeviceMesh has the published shape, and every collective returns at once without moving data.

Why that is faithful for memory
    FSDP2 shards each parameter, gradient and optimizer state by the real mesh size, allocates its
    all-gather and reduce-scatter buffers at their real sizes, and frees them on its real schedule;
    TP/SP modules hold their real local shards and gather/scatter into real-size outputs; the loss
    under loss parallel sees the vocabulary-sharded logits; the PP schedule keeps its real number of
    microbatches in flight. The caching allocator sees the same sequence of tensor sizes as the real
    rank, so allocated bytes match and reserved bytes match up to timing (below).

Where it is not
    - NCCL's own buffers and communicator memory (outside the caching allocator, but inside what
      nvidia-smi shows; torchtitan's figure is the allocator's reserved peak, so it does not include
      them either) are absent.
    - Async TP is off: it needs symmetric memory and a real NCCL group. The published 70B 71.9 GiB
      row
      is plain TP; the 405B row used async TP, whose symmetric-memory workspace is not counted here.
    - Collectives complete instantly, so the overlap of communication with compute differs: FSDP's
      prefetched all-gather of the next layer is allocated at the same program point, but buffers
      held until a real collective finishes (record_stream / event waits) are freed earlier, which
      can lower reserved (fragmentation) slightly.
    - Float8 (published for 70B and 405B) needs torchao; --float8 switches it on. Float8 training
      keeps fp32 master weights and bf16 compute copies as in bf16; it changes the bytes of the
      saved activations of linears and, with FSDP float8 all-gather, the all-gather buffers. Under
      the fake backend the amax all-reduce returns local values, which does not change sizes.
    - torch.compile (published for 70B and 405B) is off unless --compile: Inductor changes which
      intermediates a block keeps (usually fewer); compile under the fake backend is not verified.
    - torchtitan 0.2.2 differs from 9dec370 (Dec 2024): the PP microbatch is set by microbatch size
      (4 here, so 8 microbatches as 9dec370's default of microbatches = PP degree gave), stages per
      rank come from layers per stage (8 here: 16 stages, 2 per rank, as 9dec370's looped default).

Running
    Each case runs in a child process (fresh CUDA context, so one case's out-of-memory cannot spoil
    the next); the parent writes all results to --out after each case (atomic replace). The script
    installs nothing: torchtitan and its import-time dependencies must be on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import types
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

GIB = 1024**3

# Published rows: benchmarks/published_figures.toml (ids below); source
# pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md at 820504e.
PUBLISHED_NOTE = (
    "published runs: torch 1963fc8, torchao eab345c, torchtitan 9dec370; H100 96 GB HBM2e; "
    "memory is torchtitan's max_reserved_gib read at iteration 90"
)


@dataclass(frozen=True)
class Case:
    """One rank of one published run, in torchtitan 0.2.2 config terms."""

    name: str
    flavor: str  # key of torchtitan.models.llama3.llama3_args
    dp_shard: int
    tp: int = 1
    pp: int = 1
    local_batch: int = 2
    seq_len: int = 8192
    ac_mode: str = "selective"  # torchtitan activation_checkpoint.mode
    ac_option: str = "op"  # selective_ac_option ("op" = per-op SAC, the llama3 configs' choice)
    pp_schedule: str = "1F1B"
    pp_microbatch_size: int = 1
    pp_layers_per_stage: int | None = None
    ranks: tuple[int, ...] = (0,)  # global ranks to measure, one child process each
    float8: bool = False
    compile: bool = False
    steps: int = 3
    published_id: str = ""
    published_gib: float | None = None
    published_setup: str = ""
    n_layers: int | None = None  # override, only for the tiny local test
    dim: int | None = None
    n_heads: int | None = None
    vocab_size: int | None = None

    @property
    def world(self) -> int:
        """World size of the published run."""
        return self.dp_shard * self.tp * self.pp


CASES: dict[str, Case] = {
    "8b": Case(
        name="8b",
        flavor="8B",
        dp_shard=8,
        local_batch=2,
        ac_mode="selective",
        ac_option="op",
        published_id="torchtitan-h100-llama3.1-8b-fsdp8-bf16",
        published_gib=82.4,
        published_setup="FSDP 8, eager, bf16, local batch 2 x 8192, selective (per-op) AC",
    ),
    "70b": Case(
        name="70b",
        flavor="70B",
        dp_shard=32,
        tp=8,
        local_batch=16,
        ac_mode="full",
        published_id="torchtitan-h100-llama3.1-70b-fsdp32-tp8-fp8",
        published_gib=71.9,
        published_setup=(
            "FSDP 32 x TP 8, torch.compile + Float8 (plain TP; async TP row: 67.6 GiB), "
            "local batch 16 x 8192, full AC"
        ),
    ),
    "405b": Case(
        name="405b",
        flavor="405B",
        dp_shard=8,
        tp=8,
        pp=8,
        local_batch=32,
        ac_mode="full",
        pp_schedule="Interleaved1F1B",
        pp_microbatch_size=4,
        pp_layers_per_stage=8,
        # PP rank 0 (global rank 0) keeps the most microbatches in flight; PP rank 7 (global rank
        # 7 * 64 = 448 on mesh pp x dp x tp = 8 x 8 x 8) holds the output layer and the loss.
        ranks=(0, 448),
        steps=2,
        published_id="torchtitan-h100-llama3.1-405b-fsdp8-tp8-pp8-fp8",
        published_gib=72.7,
        published_setup=(
            "FSDP 8 x TP 8 x PP 8, Interleaved 1F1B, torch.compile + Float8 + async TP, "
            "local batch 32 x 8192, full AC; memory = max over all GPUs"
        ),
    ),
}

# Small shapes for checking the script on a CPU (no published figure).
TEST_CASES: dict[str, Case] = {
    "tiny-fsdp": Case(
        name="tiny-fsdp",
        flavor="debugmodel",
        dp_shard=8,
        local_batch=2,
        seq_len=64,
        ac_mode="selective",
        steps=2,
        n_layers=2,
    ),
    "tiny-tp": Case(
        name="tiny-tp",
        flavor="debugmodel",
        dp_shard=4,
        tp=2,
        local_batch=2,
        seq_len=64,
        ac_mode="full",
        steps=2,
        n_layers=2,
    ),
    "tiny-pp": Case(
        name="tiny-pp",
        flavor="debugmodel",
        dp_shard=2,
        tp=2,
        pp=2,
        local_batch=4,
        seq_len=64,
        ac_mode="full",
        pp_schedule="Interleaved1F1B",
        pp_microbatch_size=1,
        pp_layers_per_stage=2,
        ranks=(0, 4),
        steps=2,
        n_layers=6,
    ),
}


def gib(n_bytes: float) -> float:
    """Bytes to GiB, rounded for the report."""
    return round(n_bytes / GIB, 3)


# ----------------------------------------------------------------------------------------------
# child: one rank of one case
# ----------------------------------------------------------------------------------------------


# Data-side libraries torchtitan's llama3 package imports at load (its tokenizer, dataloader and
# dataset builders) but that building, parallelizing and training the model never calls.
DATA_SIDE_MODULES = (
    "tokenizers",
    "torchdata",
    "torchdata.stateful_dataloader",
    "datasets",
    "datasets.distributed",
)


def placeholder_module(name: str) -> types.ModuleType:
    """A module whose every attribute is an empty class (`class X(Placeholder)` still imports)."""
    import importlib.machinery

    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    mod.__path__ = []  # type: ignore[attr-defined]  # a package, so submodules can be registered

    def attribute(attr: str) -> type:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return type(attr, (), {"__module__": name})

    mod.__getattr__ = attribute  # type: ignore[method-assign]  # PEP 562 module __getattr__
    return mod


def stub_unused_imports() -> list[str]:
    """Let torchtitan import where its data-side libraries or triton are not installed.

    Returns the names replaced. torchtitan/__init__ imports the float8 converter, which imports the
    MoE package, whose kernels module imports triton at load (Llama 3 never calls those kernels;
    any CUDA build of torch ships triton, so on a GPU host nothing is replaced there). The llama3
    package imports its tokenizer/dataloader/dataset builders, whose libraries are replaced by
    placeholders only where they are missing.
    """
    import importlib.util

    missing = {
        n.split(".")[0]
        for n in DATA_SIDE_MODULES
        if importlib.util.find_spec(n.split(".")[0]) is None
    }
    replaced = [n for n in DATA_SIDE_MODULES if n.split(".")[0] in missing]
    if importlib.util.find_spec("tensorboard") is None:
        # torch.utils.tensorboard imports tensorboard and checks its version at load
        replaced.append("torch.utils.tensorboard")
    for name in replaced:
        sys.modules[name] = placeholder_module(name)
    if importlib.util.find_spec("triton") is None:
        stub = types.ModuleType("torchtitan.models.moe.kernels")

        def generate_permute_indices(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("MoE triton kernels are unavailable on this host")

        stub.generate_permute_indices = generate_permute_indices  # type: ignore[attr-defined]
        sys.modules["torchtitan.models.moe.kernels"] = stub
        replaced.append("torchtitan.models.moe.kernels")
    return replaced


class Memory:
    """Reads the allocator on CUDA; on CPU every figure is 0 (the run only checks the code path)."""

    def __init__(self, device: Any) -> None:
        """Remember whether the device has an allocator to read."""
        import torch

        self.torch = torch
        self.cuda = device.type == "cuda"

    def reset_peak(self) -> None:
        """Start a new peak window (as torchtitan's DeviceMemoryMonitor.reset_peak_stats)."""
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def now(self) -> dict[str, float]:
        """Allocated and reserved now, and their peaks since the last reset, in GiB."""
        if not self.cuda:
            return {
                "allocated_gib": 0.0,
                "reserved_gib": 0.0,
                "max_allocated_gib": 0.0,
                "max_reserved_gib": 0.0,
            }
        c = self.torch.cuda
        return {
            "allocated_gib": gib(c.memory_allocated()),
            "reserved_gib": gib(c.memory_reserved()),
            "max_allocated_gib": gib(c.max_memory_allocated()),
            "max_reserved_gib": gib(c.max_memory_reserved()),
        }


def point_torchtitan_at_cpu() -> None:
    """For the CPU check only: torchtitan picks "cuda" at import when no accelerator is found."""
    import torch

    for name, mod in list(sys.modules.items()):
        if name.startswith("torchtitan") and getattr(mod, "device_type", None) == "cuda":
            mod.device_type = "cpu"  # type: ignore[attr-defined]
            if hasattr(mod, "device_module"):
                mod.device_module = torch.cpu  # type: ignore[attr-defined]


def build_job_config(case: Case) -> Any:
    """torchtitan JobConfig for the case; everything not set here is torchtitan 0.2.2's default."""
    from torchtitan.config import JobConfig

    jc = JobConfig()
    jc.model.name = "llama3"
    jc.model.flavor = case.flavor
    jc.training.local_batch_size = case.local_batch
    jc.training.seq_len = case.seq_len
    jc.training.steps = case.steps
    jc.training.dataset = "none"
    jc.parallelism.data_parallel_shard_degree = case.dp_shard
    jc.parallelism.tensor_parallel_degree = case.tp
    jc.parallelism.pipeline_parallel_degree = case.pp
    jc.parallelism.pipeline_parallel_schedule = case.pp_schedule
    jc.parallelism.pipeline_parallel_microbatch_size = case.pp_microbatch_size
    jc.parallelism.pipeline_parallel_layers_per_stage = case.pp_layers_per_stage
    jc.parallelism.enable_async_tensor_parallel = False  # needs symmetric memory + real NCCL
    jc.activation_checkpoint.mode = case.ac_mode
    jc.activation_checkpoint.selective_ac_option = case.ac_option
    jc.compile.enable = case.compile
    jc.job.dump_folder = tempfile.mkdtemp(prefix="tt_memory_")
    jc.metrics.enable_tensorboard = False
    if case.float8:
        # The published configs (llama3_70b/405b.toml at 9dec370): tensorwise float8 linears with
        # FSDP float8 all-gather and precomputed dynamic scales.
        jc.model.converters = ["quantize.linear.float8"]
        jc.quantize.linear.float8.enable_fsdp_float8_all_gather = True
        jc.quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp = True
        jc.quantize.linear.float8.filter_fqns = ["output"]
    return jc


def model_args_for(case: Case, jc: Any) -> Any:
    """torchtitan's llama3_args entry for the flavor, with the tiny test's overrides."""
    from torchtitan.models.llama3 import llama3_args

    args = replace(llama3_args[case.flavor])
    for name in ("n_layers", "dim", "n_heads", "vocab_size"):
        value = getattr(case, name)
        if value is not None:
            setattr(args, name, value)
    args.update_from_config(jc)
    return args


def patch_pp_static_shapes(case: Case, args: Any, device: Any) -> None:
    """Give torchtitan's PipelineStages their input/output shapes up front.

    Without them a stage learns its input shape at the first step by receiving a pickled object
    from the previous rank; under the fake backend nothing arrives. The shapes are the ones the
    real stages exchange: a stage's input is the previous stage's hidden states, (microbatch,
    seq / TP, dim) in bf16 (sequence parallel; FSDP computes in bf16); stage 0 takes token ids.
    """
    import torch
    import torchtitan.distributed.pipeline_parallel as ttpp

    original = ttpp.PipelineStage
    mb, seq = case.pp_microbatch_size, case.seq_len
    hidden = (mb, seq // case.tp, args.dim)

    def stage_with_shapes(model: Any, stage_idx: int, num_stages: int, dev: Any, **kw: Any) -> Any:
        with torch.device("meta"):
            if stage_idx == 0:
                inputs = torch.zeros((mb, seq), dtype=torch.int64)
            else:
                inputs = torch.zeros(hidden, dtype=torch.bfloat16)
            # the last stage's output is the logits, never sent, but torch checks it against
            # the shape it infers on meta from plain-tensor inputs (seq / TP): state it, the
            # global (microbatch, seq, vocab) of the loss-parallel DTensor, in bf16
            if stage_idx == num_stages - 1:
                outputs = torch.zeros((mb, seq, args.vocab_size), dtype=torch.bfloat16)
            else:
                outputs = torch.zeros(hidden, dtype=torch.bfloat16)
        return original(
            model, stage_idx, num_stages, dev, input_args=inputs, output_args=outputs, **kw
        )

    ttpp.PipelineStage = stage_with_shapes  # type: ignore[assignment]
    del device


def run_rank(case: Case, rank: int, device_name: str) -> dict[str, Any]:  # noqa: C901, PLR0915
    """Build, parallelize and train one rank of the case; return its memory figures."""
    stubbed = stub_unused_imports()
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    device = torch.device(device_name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)  # set_device needs an index
    if device.type == "cuda":
        torch.cuda.set_device(device)
    mem = Memory(device)
    t0 = time.perf_counter()
    dist.init_process_group("fake", rank=rank, world_size=case.world, store=FakeStore())

    from torchtitan.components.loss import build_cross_entropy_loss
    from torchtitan.components.optimizer import build_optimizers
    from torchtitan.config import TORCH_DTYPE_MAP
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.models.llama3 import Transformer, parallelize_llama
    from torchtitan.protocols.model_converter import build_model_converters
    from torchtitan.tools import utils as tt_utils

    if device.type == "cpu":
        point_torchtitan_at_cpu()
    jc = build_job_config(case)
    pd = ParallelDims(
        dp_shard=case.dp_shard,
        dp_replicate=1,
        cp=1,
        tp=case.tp,
        pp=case.pp,
        ep=1,
        etp=1,
        world_size=case.world,
    )
    pd.build_mesh()
    args = model_args_for(case, jc)
    with torch.device("meta"), tt_utils.set_default_dtype(TORCH_DTYPE_MAP[jc.training.dtype]):
        model = Transformer(args)
    n_params = sum(p.numel() for p in model.parameters())
    converters = build_model_converters(jc, pd)
    converters.convert(model)
    loss_fn = build_cross_entropy_loss(jc)

    pp_schedule = None
    has_first = has_last = True
    if pd.pp_enabled:
        from torchtitan.distributed.pipeline_parallel import pipeline_llm

        patch_pp_static_shapes(case, args, device)
        pp_schedule, parts, has_first, has_last = pipeline_llm(
            model, pd, jc, device, args, parallelize_llama, loss_fn
        )
        del model
    else:
        parts = [parallelize_llama(model, pd, jc)]
    for m in parts:
        m.to_empty(device=device)
        with torch.no_grad():
            m.init_weights(buffer_device=None)
        m.train()
    after_init = mem.now()
    local_params = sum(
        p.to_local().numel() if hasattr(p, "to_local") else p.numel()
        for m in parts
        for p in m.parameters()
    )
    print(
        f"  [{case.name} rank {rank}] model on {device} after {time.perf_counter() - t0:.0f}s: "
        f"{local_params:,} of {n_params:,} params here, {after_init}",
        flush=True,
    )

    optimizers = build_optimizers(parts, jc.optimizer, pd)
    optimizers.register_step_post_hook(lambda *a, **k: converters.post_optimizer_hook(parts))
    loss_parallel = pd.tp_enabled and not jc.parallelism.disable_loss_parallel
    train_context = dist_utils.get_train_context(loss_parallel)
    amp = dist_utils.maybe_enable_amp(pd, jc.training.mixed_precision_param, device.type)
    dp_degree = case.dp_shard
    global_valid_tokens = torch.tensor(
        float(case.local_batch * case.seq_len * dp_degree), device=device
    )

    steps: list[dict[str, Any]] = []
    after_optimizer: dict[str, float] = {}
    for step in range(1, case.steps + 1):
        ts = time.perf_counter()
        mem.reset_peak()
        optimizers.zero_grad()
        g = torch.Generator().manual_seed(step)
        tokens = torch.randint(0, args.vocab_size, (case.local_batch, case.seq_len), generator=g)
        labels = torch.randint(0, args.vocab_size, (case.local_batch, case.seq_len), generator=g)
        tokens, labels = tokens.to(device), labels.to(device)
        fwd_peak: dict[str, float] = {}
        if pp_schedule is not None:
            with train_context():
                losses: list[Any] | None = [] if has_last else None
                target = labels if has_last else None
                if has_first:
                    pp_schedule.step(tokens, target=target, losses=losses, return_outputs=False)
                else:
                    pp_schedule.step(target=target, losses=losses, return_outputs=False)
        else:
            with train_context(), amp:
                pred = parts[0](tokens)
                loss = loss_fn(pred, labels) / global_valid_tokens
                fwd_peak = mem.now()
                del pred  # as torchtitan's train.py: free the logits before backward
                loss.backward()
        dist_utils.clip_grad_norm_(
            [p for m in parts for p in m.parameters()],
            jc.training.max_norm,
            foreach=True,
            pp_mesh=pd.get_optional_mesh("pp"),
            ep_enabled=pd.ep_enabled,
        )
        optimizers.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        row = {"step": step, "seconds": round(time.perf_counter() - ts, 2), **mem.now()}
        if fwd_peak:
            row["forward_max_allocated_gib"] = fwd_peak["max_allocated_gib"]
            row["after_forward_allocated_gib"] = fwd_peak["allocated_gib"]
        if step == 1:
            after_optimizer = {
                "allocated_gib": row["allocated_gib"],
                "reserved_gib": row["reserved_gib"],
            }
        steps.append(row)
        print(f"  [{case.name} rank {rank}] step {step}: {row}", flush=True)

    last = steps[-1]
    return {
        "rank": rank,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "total_params": n_params,
        "local_params": local_params,
        "after_model_init": after_init,
        "after_first_optimizer_step": after_optimizer,
        "steps": steps,
        "steady_max_allocated_gib": last["max_allocated_gib"],
        "steady_max_reserved_gib": last["max_reserved_gib"],
        "seconds_total": round(time.perf_counter() - t0, 1),
        "import_placeholders": stubbed,
    }


def child_main(ns: argparse.Namespace) -> int:
    """Run one rank of one case and write its result (or its failure) to ns.result."""
    case = Case(**json.loads(ns.case_json))
    case = replace(case, ranks=tuple(case.ranks))
    try:
        result = {"status": "ok", **run_rank(case, ns.rank, ns.device)}
    except Exception as exc:  # noqa: BLE001 - a case's failure is a result, not a crash
        import torch

        oom = isinstance(exc, torch.OutOfMemoryError)
        if oom and torch.cuda.is_available():
            # A real out-of-memory fills the device; a single absurd request (a size read from a
            # buffer the fake backend never filled) does not, and is an error of the method.
            total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
            oom = torch.cuda.max_memory_reserved() > 0.8 * total
        result = {
            "status": "out_of_memory" if oom else "error",
            "rank": ns.rank,
            "error": f"{type(exc).__name__}: {str(exc)[:2000]}",
            "traceback": traceback.format_exc()[-4000:],
        }
        if oom and torch.cuda.is_available():
            result["max_allocated_gib"] = gib(torch.cuda.max_memory_allocated())
            result["max_reserved_gib"] = gib(torch.cuda.max_memory_reserved())
        print(
            f"  [{case.name} rank {ns.rank}] {result['status']}: {result['error'][:500]}",
            flush=True,
        )
    write_json_atomic(Path(ns.result), result)
    with contextlib.suppress(Exception):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------------------------------------
# parent: cases, child processes, the JSON report
# ----------------------------------------------------------------------------------------------


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temporary file beside path, then rename it over path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


@dataclass
class Plan:
    """The cases to run and how."""

    cases: list[Case] = field(default_factory=list)
    device: str = "cuda"
    alloc_conf: str = ""
    timeout_s: int = 300


def run_case_rank(case: Case, rank: int, plan: Plan) -> dict[str, Any]:
    """Run one rank of a case in a child process and read back its result."""
    with tempfile.TemporaryDirectory() as td:
        result_path = Path(td) / "result.json"
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            "--case-json",
            json.dumps(asdict(case)),
            "--rank",
            str(rank),
            "--device",
            plan.device,
            "--result",
            str(result_path),
        ]
        env = dict(os.environ)
        if plan.alloc_conf:
            env["PYTORCH_ALLOC_CONF"] = plan.alloc_conf
            env["PYTORCH_CUDA_ALLOC_CONF"] = plan.alloc_conf
        try:
            proc = subprocess.run(cmd, env=env, timeout=plan.timeout_s, check=False)  # noqa: S603
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "rank": rank, "timeout_s": plan.timeout_s}
        if not result_path.exists():
            return {"status": "crashed", "rank": rank, "returncode": proc.returncode}
        return json.loads(result_path.read_text())


def summarize(case: Case, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """A case's record: config, per-rank results, the max over ranks (as the published figure)."""
    ok = [r for r in ranks if r.get("status") == "ok"]
    rec: dict[str, Any] = {"case": asdict(case), "world_size": case.world, "ranks": ranks}
    if ok:
        rec["max_over_ranks_reserved_gib"] = max(r["steady_max_reserved_gib"] for r in ok)
        rec["max_over_ranks_allocated_gib"] = max(r["steady_max_allocated_gib"] for r in ok)
    return rec


def parse(argv: list[str]) -> argparse.Namespace:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--case",
        default="all",
        help=f"comma-separated of {', '.join(CASES)}, 'all', or test cases {', '.join(TEST_CASES)}",
    )
    p.add_argument("--out", help="JSON report path (written atomically after each case)")
    p.add_argument(
        "--device", default="cuda", help="cuda (measure) or cpu (check the code path only)"
    )
    p.add_argument(
        "--steps", type=int, default=0, help="training steps per case (0 = the case's default)"
    )
    p.add_argument(
        "--float8", action="store_true", help="float8 linears (torchao), as the 70B/405B runs"
    )
    p.add_argument(
        "--compile", action="store_true", help="torch.compile per block, as the 70B/405B runs"
    )
    p.add_argument(
        "--alloc-conf",
        default="expandable_segments:True",
        help=(
            "PYTORCH_ALLOC_CONF for the runs (torchtitan's run_train.sh sets "
            "expandable_segments:True); '' = the default allocator"
        ),
    )
    p.add_argument(
        "--also-default-alloc",
        action="store_true",
        help="run every case a second time with the default allocator (no expandable segments)",
    )
    p.add_argument(
        "--timeout", type=int, default=240, help="seconds per rank before it counts as timed out"
    )
    p.add_argument(
        "--budget",
        type=int,
        default=330,
        help="seconds for the whole run: a rank gets what is left; none starts with < 30 s left",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--case-json", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def select_cases(ns: argparse.Namespace) -> list[Case]:
    """The cases the command line names, with its overrides applied."""
    names = (
        list(CASES) if ns.case == "all" else [n.strip() for n in ns.case.split(",") if n.strip()]
    )
    known = {**CASES, **TEST_CASES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(
            f"unknown case(s) {unknown}; hint: choose from {', '.join(known)} or 'all'"
        )
    cases = []
    for n in names:
        c = known[n]
        c = replace(c, float8=ns.float8 or c.float8, compile=ns.compile or c.compile)
        if ns.steps:
            c = replace(c, steps=ns.steps)
        cases.append(c)
    return cases


def main(argv: list[str] | None = None) -> int:
    """Run each case's ranks in child processes and write the report."""
    ns = parse(sys.argv[1:] if argv is None else argv)
    if ns.child:
        return child_main(ns)
    allocs = [ns.alloc_conf] + ([""] if ns.also_default_alloc and ns.alloc_conf else [])
    report: dict[str, Any] = {
        "what": "one rank's GPU memory in torchtitan's published Llama 3.1 runs, "
        "torchtitan 0.2.2 under the fake process group",
        "note": PUBLISHED_NOTE,
        "float8": ns.float8,
        "compile": ns.compile,
        "async_tp": False,
        "results": [],
    }
    t0 = time.perf_counter()
    for alloc in allocs:
        plan = Plan(
            cases=select_cases(ns), device=ns.device, alloc_conf=alloc, timeout_s=ns.timeout
        )
        for case in plan.cases:
            print(
                f"== {case.name} (world {case.world}, ranks {list(case.ranks)}, alloc '{alloc}') "
                f"at {time.perf_counter() - t0:.0f}s",
                flush=True,
            )
            ranks = []
            for r in case.ranks:
                left = ns.budget - (time.perf_counter() - t0)
                if left < 30:
                    ranks.append(
                        {"status": "skipped", "rank": r, "why": f"run budget of {ns.budget}s spent"}
                    )
                    continue
                ranks.append(
                    run_case_rank(case, r, replace(plan, timeout_s=int(min(plan.timeout_s, left))))
                )
            rec = {"alloc_conf": alloc, **summarize(case, ranks)}
            report["results"].append(rec)
            print(
                f"== {case.name}: max reserved {rec.get('max_over_ranks_reserved_gib')} GiB, "
                f"max allocated {rec.get('max_over_ranks_allocated_gib')} GiB "
                f"(published {case.published_gib}); statuses {[r.get('status') for r in ranks]}",
                flush=True,
            )
            report["seconds_total"] = round(time.perf_counter() - t0, 1)
            if ns.out:
                write_json_atomic(Path(ns.out), report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
