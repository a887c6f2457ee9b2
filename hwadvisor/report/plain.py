"""Plain words for people new to the field: the sentence to act on, next step, glossary.

Every text view (and the HTML report) opens with `bottom_line(report)` and ends with
`next_step(report)`; `glossary_lines(text)` defines, one line each, the terms found in the text
that was printed. The definitions are data (glossary.toml), not code.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from functools import cache
from importlib import resources

from hwadvisor import units
from hwadvisor.models import Report, TrialResult

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

# What limits the speed, in words a newcomer reads without a glossary.
BOTTLENECK_WORDS = {
    "compute": "the GPU's arithmetic (compute-bound)",
    "memory-bandwidth": "how fast weights and KV cache are read from memory (memory-bound)",
    "memory-capacity": "memory size: the workload does not fit",
    "launch-overhead": "the CPU time to start each kernel (launch overhead)",
    "communication": "data exchanged between GPUs (communication)",
}
GPU_CLASSES = ("datacenter-gpu", "consumer-gpu")


@dataclass(frozen=True)
class Term:
    """One glossary entry: the term as shown, the spellings that mark it used, its meaning."""

    term: str
    pattern: re.Pattern[str]
    means: str


@cache
def glossary() -> tuple[Term, ...]:
    """Load glossary.toml (shipped with the package) into Terms, in file order."""
    text = resources.files("hwadvisor.report").joinpath("glossary.toml").read_text("utf-8")
    terms = []
    for entry in tomllib.loads(text)["term"]:
        flags = re.IGNORECASE if entry.get("ignore_case") else 0
        alternatives = "|".join(f"(?:{m})" for m in entry["match"])
        pattern = re.compile(rf"(?<![\w-])(?:{alternatives})", flags)
        terms.append(Term(entry["term"], pattern, entry["means"]))
    return tuple(terms)


def terms_used(text: str) -> list[Term]:
    """Return the glossary's terms that occur in text, in glossary order."""
    return [term for term in glossary() if term.pattern.search(text)]


def glossary_lines(text: str) -> list[str]:
    """Return 'terms used' and one 'TERM: meaning' line per term found in text; [] if none."""
    found = terms_used(text)
    if not found:
        return []
    return ["terms used:", *(f"  {t.term}: {t.means}" for t in found)]


def wrap(line: str, width: int) -> list[str]:
    """Wrap one line at word boundaries to width, continuing under its own indent (+3)."""
    if len(line) <= width:
        return [line]
    indent = len(line) - len(line.lstrip(" "))
    hang = " " * min(indent + 3, max(width // 3, 0))
    return textwrap.wrap(line, width=width, subsequent_indent=hang, break_long_words=False,
                         break_on_hyphens=False) or [line]


def on_gpu(report: Report) -> bool:
    """Tell whether the advice is for a GPU (memory per GPU) rather than one shared pool."""
    return str(report.device_class) in GPU_CLASSES


def engine_name(engine_id: str, short: bool = False) -> str:
    """Return the engine's name as people know it ('vLLM'), or the id when it is unknown.

    short: without the trailing parenthesis ('llama.cpp', not 'llama.cpp (llama-server)').
    """
    from hwadvisor.engines import get_engine

    try:
        name = get_engine(engine_id).name
    except Exception:  # an engine this version does not ship (an older report): its id
        return engine_id
    return name.split(" (", 1)[0] if short else name


def machine(report: Report) -> str:
    """Return '8 x H100 SXM' / 'this CPU (AMD EPYC)' for the report's planned hardware."""
    gpus = report.workload.gpus if report.workload is not None else len(report.devices) or 1
    if report.devices:
        return f"{gpus} x {report.devices[0].name}"
    cpu = report.host.cpu_model or "this machine's CPU"
    return f"the CPU ({cpu})"


def per_user_speed(report: Report) -> float | None:
    """Tokens/s one user sees while the reply streams: 1 / time per output token."""
    plan, est = report.plan, report.estimate
    tpot = plan.tpot_s if plan is not None else None
    if tpot is None and est is not None:
        tpot = est.times.decode_step_s
    return 1.0 / tpot if tpot else None


def bottom_line(report: Report) -> str:
    """Return the one sentence a newcomer can act on, for any kind of report."""
    kind = report.kind
    if kind == "recommend" and report.plan is not None:
        return _recommend_line(report)
    if kind == "estimate" and report.estimate is not None:
        return _estimate_line(report)
    if kind == "validate" and report.load_test is not None and not report.trials:
        from hwadvisor.report.loadtext import load_test_line

        return load_test_line(report.load_test)
    if kind == "validate" or report.trials:
        return _validate_line(report)
    return _probe_line(report)


def _serving_line(report: Report) -> str | None:
    """Under a load: the model, the engine, the GPUs, the targets met or missed."""
    from hwadvisor.models.serving import FIGURE_WORDS

    serving, wl = report.serving, report.workload
    if serving is None or wl is None:
        return None
    engine = engine_name(wl.engine)
    device = report.devices[0].name if report.devices else "this machine"
    load = serving.load.words()
    checks = ", ".join(f"{FIGURE_WORDS[c.figure]} p{c.percentile} {units.ms(c.value_s)}"
                       for c in serving.checks)
    if report.kind == "estimate":
        cfg = serving.config
        gpus = cfg.gpus if cfg is not None else wl.gpus
        met = all(c.met for c in serving.checks)
        verdict = ("meets " if met else "misses ") + serving.targets.words() \
            if serving.checks else "no latency target set"
        return (f"{wl.model} with {engine} on {gpus} x {device} under {load}: "
                f"{checks or 'see the figures'}; {verdict}.")
    best = serving.best
    if best is None:
        fewest = (f"the fewest GPUs that would: {serving.fewest_gpus}"
                  if serving.fewest_gpus is not None else "no count of these GPUs does")
        where = f"{serving.gpus} x {device}" if serving.gpus else device
        return (f"No config of {wl.model} with {engine} meets {serving.targets.words()} "
                f"at {load} on {where}; {fewest}.")
    fewest = " (the fewest)" if serving.gpus is None else ""
    return (f"Serve {wl.model} with {engine} on {best.config.gpus} x {device}{fewest} using the "
            f"command below for {load}; expect {checks}"
            + (f" against {serving.targets.words()}." if serving.checks else "."))


def _recommend_line(report: Report) -> str:
    plan, wl = report.plan, report.workload
    assert plan is not None and wl is not None
    serving = _serving_line(report)
    if serving is not None:
        return serving
    engine = engine_name(plan.engine)
    moved = plan.engine_config is not None and plan.engine_config.engine != plan.engine
    if moved and plan.engine_config is not None:  # the plan moves to another engine
        engine = f"{engine_name(plan.engine_config.engine)} instead of {engine}"
    where = machine(report)
    if not plan.fits:
        # the plan as it is on more GPUs first: the direct answer to "it does not fit here"
        # (the alternatives' own order is by throughput, which may lead with a larger change)
        fitting = sorted((a for a in plan.alternatives if a.fits),
                         key=lambda a: a.id != "more-gpus")
        what = f" What would work: {fitting[0].title}." if fitting else (
            f" It would fit on {plan.min_gpus} of these GPUs." if plan.min_gpus else "")
        return (f"{wl.model} does not fit on {where}: it needs "
                f"{units.gb(plan.memory_per_gpu_bytes)}{' per GPU' if on_gpu(report) else ''} "
                f"of {units.gb(plan.device_memory_bytes)}, even with the changes below.{what}")
    config = "the command below" if plan.engine_config and plan.engine_config.format == "cli" \
        else "the config below"
    changes = len(plan.steps)
    counted = f"{changes} change{'s' if changes != 1 else ''}"
    using = (f"using {config} ({counted}{'' if moved else ' from its defaults'})"
             if changes else "with its default settings")
    if wl.phase == "training":
        speed = units.rate(plan.tokens_per_s)
        return (f"Train {wl.model} with {engine} on {where} {using}; expect about {speed} "
                "for the whole job.")
    expect = _serving_expectation(report)
    return f"Serve {wl.model} with {engine} on {where} {using}; expect {expect}."


def _serving_expectation(report: Report) -> str:
    """'about 24 tokens/s per user, the first token after 1.2 s' (and users at once, if many)."""
    plan, wl = report.plan, report.workload
    assert plan is not None and wl is not None
    parts = []
    speed = per_user_speed(report)
    if speed is not None:
        users = f" with {wl.batch} users at once" if wl.batch > 1 else ""
        parts.append(f"about {units.rate(speed)} per user{users}")
    if plan.ttft_s is not None:
        parts.append(f"the first token after {units.seconds(plan.ttft_s)}")
    if plan.metric.unit == "bytes":  # the goal's metric is the memory in use
        parts.append(f"{units.gb(plan.memory_per_gpu_bytes)} of memory"
                     f"{' per GPU' if on_gpu(report) else ''} in use")
    return ", ".join(parts) or "it to fit"


def _estimate_line(report: Report) -> str:
    est, wl = report.estimate, report.workload
    assert est is not None and wl is not None
    serving = _serving_line(report)
    if serving is not None:
        return serving
    mem = est.memory
    per = " per GPU" if on_gpu(report) else ""
    fit = "fits" if est.fits else "does not fit"
    line = (f"{wl.model} {fit} on {machine(report)} ({units.gb(mem.total_bytes)}{per} of "
            f"{units.gb(mem.device_memory_bytes)}); its speed is limited by "
            f"{BOTTLENECK_WORDS.get(est.bottleneck, est.bottleneck)}")
    speed = per_user_speed(report) if wl.phase == "inference" else est.tokens_per_s
    if speed is not None:
        who = " per user" if wl.phase == "inference" else " for the whole job"
        line += f"; expect about {units.rate(speed)}{who}"
    return line + "."


def _trials_ran_on(report: Report, ran: list[TrialResult]) -> str:
    """Where the trials ran: the CPU when torch ran them there (a CPU-only torch), else the GPU."""
    if ran and all(t.environment.device == "cpu" for t in ran) and report.devices:
        return (f"this machine's CPU ({report.host.cpu_model or 'unknown'}), not "
                f"{report.devices[0].name}: torch sees no GPU here")
    return machine(report)


def _validate_line(report: Report) -> str:
    ran = [t for t in report.trials if t.status == "ok"]
    line = f"{len(ran)} of {len(report.trials)} trials ran on {_trials_ran_on(report, ran)}"
    skipped = len(report.trials) - len(ran)
    if skipped:
        line += f" ({skipped} could not run here: see the reasons below)"
    verdicts = [r.validation.status for r in report.recommendations
                if r.validation.status != "pending"]
    if verdicts:
        counts = {s: verdicts.count(s) for s in ("confirmed", "refuted", "inconclusive")}
        said = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        line += f"; of the recommendations: {said or 'none decided'}"
    return line + "."


def _probe_line(report: Report) -> str:
    if not report.devices:
        ram = units.gb(report.host.memory_total_bytes)
        return (f"No GPU or other accelerator found: hwadvisor plans for the CPU "
                f"({report.host.cpu_model or 'unknown'}, {ram} RAM).")
    first = report.devices[0]
    count = len(report.devices)
    return (f"Found {count} x {first.name} with {units.gb(first.memory_total_bytes)} of memory"
            f"{' each' if count > 1 else ''}.")


def next_step(report: Report) -> str:
    """Return the 'next:' line: what to run after reading this view."""
    kind = report.kind
    if kind == "recommend" and report.plan is not None:
        if report.plan.validation is None and not any(
                r.validation.status != "pending" for r in report.recommendations):
            return ("next: add --validate to measure the plan here (short trials; pip install "
                    "'hwadvisor[validate]'), and --emit FILE to save the config; "
                    "--html FILE writes this report as a page to share.")
        return ("next: --emit FILE saves the config to run; --output FILE keeps this report as a "
                "baseline for 'hwadvisor compare' in CI.")
    if kind == "estimate":
        return "next: 'hwadvisor recommend' with the same options gives the plan that fits best."
    if kind == "validate":
        return ("next: keep this run with --output FILE and compare later runs against it: "
                "'hwadvisor compare baseline.json current.json'.")
    measured = any(t.status == "ok" for t in report.trials)
    return ("next: 'hwadvisor recommend --model MODEL' plans for this machine"
            + ("" if measured else "; 'probe --measure' measures its bandwidth and matmul speed")
            + ".")
