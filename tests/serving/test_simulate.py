"""The scheduler simulation against cases whose answer is known by hand (a step of fixed time)."""

from __future__ import annotations

import pytest

from hwadvisor.serving.load import Requests
from hwadvisor.serving.simulate import Scheduler, simulate

STEP = 0.01  # seconds a step takes, whatever it holds


class Fixed:
    """A step model whose every step takes STEP seconds."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def step_s(self, decode_rows: int, decode_context: float, prefill_tokens: int = 0,
               prefill_seqs: int = 0, prefill_start: float = 0.0) -> float:
        self.calls.append((decode_rows, prefill_tokens))
        return STEP


def _sched(**kw: object) -> Scheduler:
    base = dict(policy="mixed", max_seqs=64, step_tokens=512, kv_pool_tokens=1 << 20)
    base.update(kw)
    return Scheduler(**base)  # type: ignore[arg-type]


def test_one_request_alone_gets_its_first_token_after_one_step_and_then_one_a_step() -> None:
    out = simulate(Requests((100,), (10,), (0.0,)), _sched(), Fixed())
    assert out.first_token[0] == pytest.approx(STEP)
    assert out.finish[0] == pytest.approx(10 * STEP)


def test_a_long_prompt_is_prefilled_in_chunks_of_the_step_budget() -> None:
    out = simulate(Requests((1500,), (2,), (0.0,)), _sched(step_tokens=512), Fixed())
    assert out.first_token[0] == pytest.approx(3 * STEP)  # 512 + 512 + 476


def test_decode_rows_take_their_share_of_the_step_budget_first() -> None:
    steps = Fixed()
    # the first request decodes while the second's 600-token prompt arrives
    simulate(Requests((10, 600), (50, 2), (0.0, 0.05)), _sched(step_tokens=512), steps)
    mixed = [c for c in steps.calls if c[0] and c[1]]
    assert mixed and all(rows + tokens <= 512 for rows, tokens in mixed)
    assert mixed[0] == (1, 511)


def test_a_full_server_makes_the_next_request_wait_for_a_slot() -> None:
    out = simulate(Requests((10, 10), (5, 5), (0.0, 0.0)), _sched(max_seqs=1), Fixed())
    assert out.finish[0] == pytest.approx(5 * STEP)
    assert out.first_token[1] == pytest.approx(6 * STEP)


def test_a_closed_loop_user_sends_again_when_the_answer_ends() -> None:
    out = simulate(Requests((10,) * 4, (5,) * 4, None), _sched(), Fixed(), concurrency=1)
    assert out.arrival == pytest.approx([0, 5 * STEP, 10 * STEP, 15 * STEP])
    assert out.end_s == pytest.approx(20 * STEP)


def test_prefill_first_stops_decode_while_a_prompt_is_prefilled() -> None:
    steps = Fixed()
    simulate(Requests((10, 1024), (50, 2), (0.0, 0.05)),
             _sched(policy="prefill-first", step_tokens=512), steps)
    assert not [c for c in steps.calls if c[0] and c[1]]  # never both in one step
    assert steps.calls.count((0, 512)) == 2


def test_a_static_batch_runs_to_its_longest_answer_before_the_next_starts() -> None:
    out = simulate(Requests((10, 10, 10), (2, 8, 3), (0.0, 0.0, 0.0)),
                   _sched(policy="static", max_seqs=2), Fixed())
    assert out.finish[0] == pytest.approx(2 * STEP)  # its own tokens end early
    assert out.first_token[2] == pytest.approx(9 * STEP)  # after the first batch's 8 tokens


def test_arrivals_faster_than_the_server_are_called_saturated() -> None:
    arrivals = tuple(i * 0.001 for i in range(200))  # 1000 requests/s, each needs 20 steps
    out = simulate(Requests((10,) * 200, (20,) * 200, arrivals), _sched(max_seqs=4), Fixed())
    assert out.saturated


def test_a_light_load_is_not_saturated() -> None:
    arrivals = tuple(i * 1.0 for i in range(50))
    out = simulate(Requests((10,) * 50, (20,) * 50, arrivals), _sched(), Fixed())
    assert not out.saturated
    assert max(f - a for f, a in zip(out.first_token, out.arrival, strict=True)) == \
        pytest.approx(STEP)


def test_out_of_kv_cache_the_newest_sequence_is_preempted_and_recomputed() -> None:
    out = simulate(Requests((100, 100), (100, 100), (0.0, 0.0)),
                   _sched(kv_pool_tokens=320), Fixed())
    assert out.preemptions >= 1
    assert all(f > 0 for f in out.finish)


def test_speculation_verifies_every_drafted_token_and_pays_for_the_draft() -> None:
    # 2 accepted of 3 drafted: each decode step verifies 4 rows a sequence and the drafter
    # costs half a step; the first token comes from the prefill step, which drafts nothing.
    steps = Fixed()
    out = simulate(Requests((100,), (10,), (0.0,)),
                   _sched(tokens_per_step=2.0, verify_tokens=4.0, draft_cost=0.5), steps)
    assert {rows for rows, _ in steps.calls[1:]} == {4}
    assert out.finish[0] == pytest.approx(STEP + 5 * 1.5 * STEP)


def test_a_block_of_speculative_steps_runs_as_the_steps_one_by_one_would() -> None:
    # Alone in the server, a drafting sequence's decode steps are taken as one block
    # (_fast_forward): the same finish and ITL as its 20 steps of 2 tokens one by one, each
    # paying the drafter's 0.3 of a step, at a step time that grows with the context.
    class Growing(Fixed):
        def step_s(self, decode_rows: int, decode_context: float, prefill_tokens: int = 0,
                   prefill_seqs: int = 0, prefill_start: float = 0.0) -> float:
            super().step_s(decode_rows, decode_context, prefill_tokens)
            return STEP + 1e-5 * decode_context

    steps = Growing()
    out = simulate(Requests((300,), (41,), (0.0,)),
                   _sched(tokens_per_step=2.0, verify_tokens=3.0, draft_cost=0.3), steps)
    each = [1.3 * (STEP + 1e-5 * (300 + 1 + 2 * k)) for k in range(20)]
    assert out.finish[0] == pytest.approx(STEP + sum(each), rel=1e-9)
    assert len(steps.calls) < 10  # taken as a block, not 21 steps
    weight = sum(w for _, w in out.itl)
    assert weight == pytest.approx(40.0)
    assert sum(v * w for v, w in out.itl) / weight == pytest.approx(sum(each) / 40.0, rel=1e-9)


class Contexts(Fixed):
    """Fixed step times that also record each decode pass's rows and context."""

    def __init__(self) -> None:
        super().__init__()
        self.contexts: list[tuple[int, float]] = []

    def step_s(self, decode_rows: int, decode_context: float, prefill_tokens: int = 0,
               prefill_seqs: int = 0, prefill_start: float = 0.0) -> float:
        if decode_rows:
            self.contexts.append((decode_rows, decode_context))
        return super().step_s(decode_rows, decode_context, prefill_tokens, prefill_seqs,
                              prefill_start)


def test_llama_server_gives_each_request_the_least_recently_used_slot() -> None:
    # one request at a time: each takes the slot released longest ago, so eight requests on
    # four slots go round them twice in the same order
    n = 8
    requests = Requests((10,) * n, (3,) * n, tuple(0.1 * i for i in range(n)))
    out = simulate(requests, _sched(max_seqs=4, stream_per_slot=True), Fixed())
    assert sorted(out.slots[:4]) == [0, 1, 2, 3]
    assert out.slots[4:] == out.slots[:4]


def test_busy_slots_apart_decode_as_a_forward_pass_each() -> None:
    # pairs of overlapping requests on a server of 16 slots that has served before: its
    # least-recently-used order is a shuffle, so most pairs sit apart and decode as two passes
    # of one row, where one pass of two rows would do (and does with a unified cache)
    pairs = 16
    arrivals = tuple(t for i in range(pairs) for t in (1.0 * i, 1.0 * i + 0.001))
    requests = Requests((10,) * 2 * pairs, (20,) * 2 * pairs, arrivals)
    out = simulate(requests, _sched(max_seqs=16, stream_per_slot=True), Contexts())
    one = simulate(requests, _sched(max_seqs=16, unified_pool=True), Contexts())
    apart = [abs(a - b) != 1 for a, b in zip(out.slots[::2], out.slots[1::2], strict=True)]
    assert sum(apart) >= pairs // 2
    # a pass takes STEP whatever it holds: a pair apart takes two a step, side by side one
    for i, is_apart in enumerate(apart):
        took = out.finish[2 * i + 1] - out.arrival[2 * i + 1]
        alone = one.finish[2 * i + 1] - one.arrival[2 * i + 1]
        assert took == pytest.approx(2 * alone if is_apart else alone, rel=0.1)


def test_a_unified_pool_makes_each_decode_row_read_the_whole_used_cache() -> None:
    requests = Requests((100, 300), (5, 5), (0.0, 0.0))
    own, pool = Contexts(), Contexts()
    simulate(requests, _sched(max_seqs=4), own)
    simulate(requests, _sched(max_seqs=4, unified_pool=True), pool)
    first_own, first_pool = own.contexts[0], pool.contexts[0]
    assert first_own == (2, pytest.approx((101 + 301) / 2))
    assert first_pool == (2, pytest.approx(101 + 301))


def test_a_multi_step_decode_run_holds_a_new_prompt_until_it_ends() -> None:
    # vLLM V0 with --num-scheduler-steps 10: the first request decodes in runs of 10 steps; the
    # second arrives during the first run's second step and is prefilled only after the run
    # (one prefill step, then decode runs) - with 1 it is prefilled at the next step
    reqs = Requests((10, 10), (40, 2), (0.0, 0.015))
    single = simulate(reqs, _sched(policy="prefill-first"), Fixed())
    multi = simulate(reqs, _sched(policy="prefill-first", decode_run=10), Fixed())
    assert single.first_token[1] == pytest.approx(3 * STEP)  # prefill, decode, its prefill
    assert multi.first_token[1] == pytest.approx(12 * STEP)  # prefill, 10 decode, its prefill


def test_a_source_s_multi_step_flag_is_read_as_the_engine_option() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from serving_published import stated_options

    cmd = "vllm.entrypoints.openai.api_server --num-scheduler-steps 10 --max_model_len 4096"
    assert stated_options(cmd) == ("scheduler_steps=10",)
    assert stated_options("vllm serve x --num-scheduler-steps=8") == ("scheduler_steps=8",)
    assert stated_options("sglang.launch_server --model-path x") == ()
