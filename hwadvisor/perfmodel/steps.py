"""One serving step as an engine's scheduler builds it: decode rows and prefill chunks together.

A serving engine with continuous batching runs steps that mix the decode tokens of the running
sequences with chunks of newly arrived prompts (vLLM's and TensorRT-LLM's schedulers,
llama-server's batch of n_batch tokens). `StepModel.step_s` times one such step from the same
ops the estimate is made of (compute.py): the GEMMs of all the step's rows at once, the decode
rows' KV reads at their contexts, the prefill chunks' attention, the head, the kernel floors,
the launches, the engine's host work and the exposed tensor-parallel collectives.

The GEMM part depends only on the step's rows, so it is computed once per row count and kept;
the attention parts are computed per step (a few arithmetic operations).
"""

from __future__ import annotations

import dataclasses

from hwadvisor.models import Device, ModelOptions, Workload
from hwadvisor.perfmodel import efficiency as E
from hwadvisor.perfmodel.calibration import Calibration
from hwadvisor.perfmodel.comm import communication
from hwadvisor.perfmodel.compute import (
    Phase,
    _head_ops,
    attention_op,
    decode_attention_op,
    elementwise_op,
    kernels_per_forward,
    layer_gemms,
    rates,
)
from hwadvisor.perfmodel.context import Setup
from hwadvisor.perfmodel.core import _setup
from hwadvisor.perfmodel.overhead import graph_batch_limit, graphs_on, step_time

_EXACT_ROWS = 64  # row counts up to here are timed exactly (the kernels' tile steps lie here)
_ROW_STEP = 16  # above, the dense part is interpolated between multiples of this


class StepModel:
    """Times of serving steps for one workload (model, formats, layout, engine) on one device."""

    def __init__(self, workload: Workload, device: Device, options: ModelOptions | None = None,
                 calibration: Calibration | None = None) -> None:
        """Resolve the setup once; each step's rows get their own (cached) GEMM time."""
        options = options or ModelOptions()
        # A workload of one token in and out: the attention of each step is added per step.
        self._workload = workload.model_copy(update={"batch": 1, "prompt_len": 1, "gen_len": 1})
        self._device, self._options, self._calibration = device, options, calibration
        self.setup = _setup(self._workload, device, options, calibration)
        self._rates = rates(self.setup)
        self._slot_s = E.server_slot_s(workload, self.setup.spec.vocab_size)
        self._graph_limit = graph_batch_limit(self.setup)
        self._graphs = graphs_on(self.setup)
        engine = E.engine_time(workload, self.setup.res.family)
        self._kv_pad = float(engine.kv_pad or 0)
        self._ubatch = _physical_batch(workload)
        self._dense_cache: dict[tuple[int, bool], float] = {}
        self._dp = self.setup.layout.dp

    @property
    def replicas(self) -> int:
        """Model instances (data-parallel replicas) the workload's GPUs hold."""
        return self._dp

    def _setup_for(self, rows: int) -> Setup:
        # Only the workload's batch differs from the one-row set-up: the spec, parameter
        # breakdown, layout and device resources do not depend on it (checked by
        # tests/perfmodel/test_steps.py against a whole new set-up), so they are kept.
        return dataclasses.replace(
            self.setup, workload=self._workload.model_copy(update={"batch": rows}))

    def _dense_s(self, rows: int, graphed: bool) -> float:
        """Return a step of `rows` tokens without its attention.

        GEMMs, elementwise, head, floors, launches, host work and exposed collectives.
        """
        key = (rows, graphed)
        cached = self._dense_cache.get(key)
        if cached is not None:
            return cached
        setup = self._setup_for(rows) if rows > 1 else self.setup
        r = self._rates
        layers = float(setup.spec.num_layers)
        phase = Phase("serving step")
        for op, n in layer_gemms(setup, r, float(rows), layers):
            phase.add(op, n)
        phase.add(elementwise_op(setup, r, float(rows), layers))
        for op, n in _head_ops(setup, r, float(rows), float(rows), False):
            phase.add(op, n)
        phase.kernels = kernels_per_forward(setup, float(rows))
        phase.host_kernels = phase.kernels
        timing = step_time(setup, phase, graphed=graphed)
        exposed = 0.0
        if setup.layout.gpus > 1:
            comm = communication(setup, {"prefill": timing.gpu_s, "decode": timing.gpu_s}, None)
            exposed = comm.decode.exposed_s
        value = timing.step_s + exposed
        self._dense_cache[key] = value
        return value

    def _pieces_s(self, rows: int, graphed: bool, near: bool = False) -> float:
        """Return the dense part of a step that the engine runs as physical batches of ubatch.

        near: each physical batch above _EXACT_ROWS rows is interpolated (_near_s).
        """
        one = self._near_s if near else self._dense_s
        if not self._ubatch or rows <= self._ubatch:
            return one(rows, graphed)
        whole, rest = divmod(rows, self._ubatch)
        total = whole * self._dense_s(self._ubatch, graphed)
        return total + (one(rest, graphed) if rest else 0.0)

    def _near_s(self, rows: int, graphed: bool) -> float:
        """Return _dense_s, interpolated between row counts _ROW_STEP apart above _EXACT_ROWS.

        A simulation's steps carry nearly every row count (decode rows plus a prompt's last
        chunk), and each new count costs a whole set-up. Above 64 rows the dense part is within
        0.4% of the line between its neighbours 16 rows apart (tests/perfmodel/test_steps.py:
        dense, tensor-parallel, MoE and llama.cpp cases, 64-4,096 rows), so the line is taken
        there; below, the kernels' tile and kernel-choice steps are kept exactly.
        """
        rest = rows % _ROW_STEP
        if rows <= _EXACT_ROWS or not rest:
            return self._dense_s(rows, graphed)
        low = rows - rest
        a, b = self._dense_s(low, graphed), self._dense_s(low + _ROW_STEP, graphed)
        return a + (b - a) * rest / _ROW_STEP

    def dense_s(self, rows: int, prefill: bool = False) -> float:
        """Return a step of `rows` tokens without its attention, graphed as step_s graphs it.

        The part of a step that depends on its rows alone (the analytic screen of
        serving/screen.py tabulates it once per row count).
        """
        graphed = (self._graphs and not prefill
                   and (self._graph_limit is None or rows <= self._graph_limit))
        return self._pieces_s(rows, graphed) if rows > 0 else 0.0

    def step_s(self, decode_rows: int, decode_context: float, prefill_tokens: int = 0,
               prefill_seqs: int = 0, prefill_start: float = 0.0) -> float:
        """Return the seconds of one step.

        `decode_rows` sequences decode one token each at a mean context of `decode_context`, and
        `prefill_tokens` prompt tokens of `prefill_seqs` sequences are prefilled from position
        `prefill_start` on (their mean).
        """
        rows = decode_rows + prefill_tokens
        if rows <= 0:
            return 0.0
        graphed = (self._graphs and prefill_tokens == 0
                   and (self._graph_limit is None or rows <= self._graph_limit))
        total = self._pieces_s(rows, graphed, near=True)
        r, setup = self._rates, self.setup
        if decode_rows:
            context = decode_context
            if self._kv_pad:  # llama.cpp pads the KV it reads to a multiple (kv_pad)
                context = -(-max(context, 1.0) // self._kv_pad) * self._kv_pad
            total += decode_attention_op(setup, r, float(decode_rows), context, 1.0).time_s
            total += decode_rows * self._slot_s
        if prefill_tokens and prefill_seqs:
            each = prefill_tokens / prefill_seqs
            total += attention_op(setup, r, float(prefill_seqs), prefill_start,
                                  prefill_start + each, 1.0).time_s
        return total



def _physical_batch(workload: Workload) -> int | None:
    """Return the rows one forward takes when a step is larger (llama.cpp's n_ubatch), or None.

    An engine whose step budget (step_tokens, llama-server's n_batch of 2048) is larger than its
    prefill chunk (n_ubatch, 512) runs a step as several forwards of the chunk.
    """
    from hwadvisor.engines import engine_for

    defaults = engine_for(workload).defaults
    chunk = defaults.prefill_chunk_tokens
    if defaults.step_tokens and chunk and chunk < defaults.step_tokens:
        return chunk
    return None
