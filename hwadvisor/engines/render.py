"""Rendering a plan in the engine's own words: a command line, TOML, JSON or Python.

`render_config(engine, steps, values, device_class, forms, phase)` turns the plan's step ids
(and the layout keys its values use) into the text a user pastes, each line traced to the step
that asked for it. What the values mean (the context per llama-server slot, vLLM's
--max-model-len) is settled by whoever fills the `PlanValues` (values.py; the advice fills them
in rules/engine_config.py); this module only says them in the engine's syntax.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from hwadvisor.engines.schema import (
    _DOTTED,
    LAYOUT_KEYS,
    STEP_FORMS,
    STEP_IDS,
    Engine,
    EngineConfig,
    Format,
    LaunchKind,
    NodeLaunch,
    _Strict,
    fill,
    parse_value,
    placeholders,
    tomllib,  # the one Python 3.10 shim
)
from hwadvisor.engines.values import PlanValues
from hwadvisor.errors import UserError

_DEGREE_KEYS: frozenset[str] = frozenset({"tp", "pp", "dp", "ep"})


class RenderedLine(_Strict):
    """One flag or setting of the rendered config, and the plan step that asked for it."""

    setting: str
    step: str


class NotExpressed(_Strict):
    """A plan step the rendered config does not carry, and why."""

    step: str
    reason: str


class RenderedConfig(_Strict):
    """A plan rendered for one engine: the text to paste, and where each line came from."""

    engine: str
    format: Format
    text: str
    lines: list[RenderedLine]
    tool: str = Field("", description="The engine's other tool this says the plan for "
                      "(other_configs: genie, coremltools); empty for the engine's own config")
    not_expressed: list[NotExpressed] = Field(default_factory=list)
    defaulted: list[str] = Field(default_factory=list, description="Steps it does already")
    notes: list[str] = Field(default_factory=list, description="What the steps need besides")
    launch: str = Field("", description="How a config file starts on several nodes (the "
                        "launcher's command on each); a command line says it in its text")
    files: dict[str, str] = Field(default_factory=dict, description="Files the config names "
                                  "(config.files), by name: their text, to write beside it")


def _wanted_keys(steps: list[str], values: Mapping[str, object]) -> list[str]:
    """Return the keys to emit, in order: base, the layout keys in use, the plan's steps."""
    keys = ["base"]
    for key in LAYOUT_KEYS[1:]:
        if key in steps or _layout_in_use(key, values):
            keys.append(key)
    keys.extend(s for s in steps if s not in LAYOUT_KEYS)
    return list(dict.fromkeys(keys))


def _layout_in_use(key: str, values: Mapping[str, object]) -> bool:
    """Tell whether a layout key is in use: its degree is above one, or its value given."""
    value = values.get(key)
    if key in _DEGREE_KEYS:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 1
    return value is not None


def _check_steps(steps: list[str]) -> None:
    """Refuse step ids that are neither plan steps nor layout keys, with close matches."""
    known = STEP_IDS + LAYOUT_KEYS
    for step in steps:
        if step not in known:
            close = difflib.get_close_matches(step, known, n=3)
            hint = f"did you mean {', '.join(close)}?" if close else None
            raise UserError(f"unknown plan step {step!r}", hint=hint)


def _skip_reason(engine: Engine, config: EngineConfig, step: str,
                 device_class: str | None, form: str | None = None) -> str | None:
    """Return why a step is not rendered, or None when the engine's config maps it (or its form)."""
    if engine.cannot(step, device_class):
        note = engine.reasons.get(step) or config.not_expressed.get(step, "")
        where = f" on {device_class}" if step not in engine.unsupported else ""
        return f"{engine.name} cannot do this{where}" + (f": {note}" if note else "")
    if step in config.not_expressed:
        return config.not_expressed[step]
    if step not in config.steps and step not in LAYOUT_KEYS and \
            f"{step}-{form}" not in config.steps:
        return f"no {engine.name} setting maps to this step"
    return None


def render_config(
    engine: Engine,
    steps: list[str],
    plan_values: PlanValues,
    device_class: str | None = None,
    forms: Mapping[str, str] | None = None,
    phase: str = "inference",
    tool: str = "",
    launch: LaunchKind | None = None,
) -> RenderedConfig:
    """Render plan steps as the engine's own config: a command line, TOML, JSON or Python.

    `base` is always emitted; the layout keys (tp, pp, dp, ep, max_batch, context, gpu_layers)
    when named in `steps`, or when the plan's values use them (a degree above one, a value
    given). Steps the engine does by default go to `defaulted`; steps it cannot express go to
    `not_expressed` with the reason. `plan_values` fills the {placeholders}; one not given is a
    UserError naming it. `forms` asks for a step's model-dependent form (STEP_FORMS), e.g.
    {"speculative-decoding": "mtp"}; an engine without that form says the plain one, with a note.
    `phase` picks the config: an engine may train with another tool than it serves with, and
    serve another way on a device class (its class_configs: MLC LLM's phone apps);
    `tool` one of the engine's other_configs (Genie's JSON, a coremltools conversion).
    `launch` says how the plan spans nodes when it spans several (values.nodes > 1): the
    engine's [config.launch] of that kind gives each node's command (render_launch).
    """
    _check_steps(steps)
    config = _config_of(engine, phase, tool, device_class)
    values = _given(config, plan_values)
    traced: list[RenderedLine] = []
    skipped: list[NotExpressed] = []
    defaulted: list[str] = []
    notes: list[str] = list(engine.variant_notes)
    sources: list[str] = []
    for key in _wanted_keys(steps, values):
        if engine.does_by_default(key, device_class) and \
                not _other_level(engine, key, (forms or {}).get(key)):
            defaulted.append(key)
            continue
        reason = _skip_reason(engine, config, key, device_class, (forms or {}).get(key))
        if reason is not None:
            skipped.append(NotExpressed(step=key, reason=reason))
            continue
        source = _form_key(engine, config, key, (forms or {}).get(key), notes)
        sources.append(source)
        traced.extend(_render_step(config, key, values, source))
        if source in config.step_notes:
            notes.append(f"{key}: {_fill_or_raise(config.step_notes[source], values, key)}")
    traced = _dedupe(traced)
    if config.format != "cli":
        traced = _last_setting_wins(traced, notes)
    text = _TEXT[config.format](config, traced, values)
    started = ""
    nodes = _count(values, "nodes")
    how = _launch_of(config, launch) if launch is not None and nodes > 1 else None
    if launch is not None and how is None and nodes > 1:
        notes.append(f"multi-node: {engine.name}'s config here says no multi-node launch; "
                     "it runs on one node as written")
    if how is not None:
        blocks, head_flags = render_launch(config, how, traced, values)
        said = _fill_or_raise(how.note, values, "multi-node")
        notes.append(f"multi-node: {said}")
        # the commands say it too: they are what is pasted, or written by --emit
        blocks = f"# {said}\n\n{blocks}"
        if config.format == "cli":
            text = blocks
            traced = [*traced, *(RenderedLine(setting=f, step="multi-node") for f in head_flags)]
        else:
            started = blocks
    return RenderedConfig(engine=engine.id, format=config.format, text=text, lines=traced,
                          not_expressed=skipped, defaulted=defaulted, notes=notes, tool=tool,
                          launch=started, files=_files(config, sources, values))


def _files(config: EngineConfig, sources: list[str],
           values: Mapping[str, object]) -> dict[str, str]:
    """Return the text of each file the rendered steps put settings in.

    A name ending in .json is written as JSON, any other as YAML (by PyYAML).
    """
    out: dict[str, str] = {}
    for name, by_step in config.files.items():
        merged: dict[str, Any] = {}
        for source in sources:
            if source in by_step:
                _merge(merged, _filled(by_step[source], values, source))
        if not merged:
            continue
        if name.endswith(".json"):
            out[name] = json.dumps(merged, indent=4) + "\n"
            continue
        import yaml  # only a plan that names such a file needs it

        out[name] = yaml.safe_dump(merged, sort_keys=False, default_flow_style=False)
    return out


def _filled(value: Any, values: Mapping[str, object], step: str) -> Any:
    """Fill the placeholders of a file's settings; a lone {name} keeps the value's type."""
    if isinstance(value, dict):
        return {k: _filled(v, values, step) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, values, step) for v in value]
    if isinstance(value, str):
        names = placeholders(value)
        if len(names) == 1 and value == "{" + next(iter(names)) + "}":
            name = next(iter(names))
            if name not in values:
                raise UserError(f"plan step {step!r} needs a value for {{{name}}}")
            return values[name]
        return _fill_or_raise(value, values, step)
    return value


def _merge(into: dict[str, Any], more: Mapping[str, Any]) -> None:
    """Merge nested settings; a later step's scalar wins (as a later flag would).

    Lists of mappings of one length merge entry by entry: a step adds its keys to the entry
    another step made (the context's overrides to mlc-package-config.json's one model).
    """
    for key, value in more.items():
        earlier = into.get(key)
        if isinstance(value, dict) and isinstance(earlier, dict):
            _merge(earlier, value)
        elif isinstance(value, list) and isinstance(earlier, list) and _mappings(value) \
                and _mappings(earlier) and len(value) == len(earlier):
            for entry, added in zip(earlier, value, strict=True):
                _merge(entry, added)
        else:
            into[key] = value


def _mappings(value: Any) -> bool:
    """Whether a value is a non-empty list of mappings."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _count(values: Mapping[str, object], key: str) -> int:
    """Return a count among the plan values (1 when not given)."""
    value = values.get(key)
    return value if isinstance(value, int) and value >= 1 else 1


def _launch_of(config: EngineConfig, kind: LaunchKind) -> NodeLaunch | None:
    """Return the config's launch for this kind of layout (a kind not listed takes group's)."""
    return config.launch.get(kind) or (config.launch.get("group") if kind != "replicas"
                                       else None)


# Nodes written out one by one; above this the head, node 1 and a line for the rest.
_NODES_SPELLED = 4


def render_launch(config: EngineConfig, how: NodeLaunch, traced: list[RenderedLine],
                  values: Mapping[str, object]) -> tuple[str, list[str]]:
    """Return the commands to run on the nodes, one block each, and node 0's launch flags.

    A block starts with a comment line saying where it runs. `runs = "each"` writes one
    command per node of an instance (node_rank and dp_start_rank filled per node; a worker
    takes `worker`'s flags), "same" one command for every node, "head" one for node 0.
    """
    group = _count(values, "group_nodes" if values.get("group_nodes") else "nodes")
    groups = max(1, _count(values, "nodes") // group)
    flags = [line.setting for line in traced] if config.format == "cli" else []
    blocks: list[str] = []
    ranks = list(range(group)) if how.runs == "each" else [0]
    if how.runs == "each" and group > _NODES_SPELLED:
        ranks = [0, 1]
    head_flags: list[str] = []
    for rank in ranks:
        local = _count(values, "dp_local")
        per_node = {**values, "node_rank": rank, "dp_start_rank": rank * local}
        extra = [*how.every, *(how.head if rank == 0 else how.worker)]
        filled = [_fill_or_raise(f, per_node, "multi-node", "cli") for f in extra]
        if rank == 0:
            head_flags = filled
        command = _fill_or_raise(how.command or config.command or "", per_node, "multi-node",
                                 "cli")
        merged = _merge_flags([*flags, *filled], config.merge_flags)
        blocks.append("\n".join([_where(how, rank, group, groups),
                                  " \\\n  ".join([command, *merged])]))
    if how.runs == "each" and group > _NODES_SPELLED:
        blocks.append(f"# nodes 2 to {group - 1}: as node 1, with its own index for node_rank"
                      " (and the start rank that follows)")
    return "\n\n".join(blocks), head_flags


def render_pd(config: EngineConfig, flags: list[str], values: Mapping[str, object],
              prefill: int, decode: int, gpus_each: int) -> str:
    """Return a P/D group's commands on one node: each instance on its GPUs, then the router.

    `flags` are one instance's own settings (its layout, formats and knobs); the prefill
    instances take GPUs from 0, the decode instances the ones after, each its own port.
    """
    how = config.pd
    assert how is not None, "render_pd needs the config's [config.pd]"
    blocks: list[str] = []
    ports: dict[str, list[int]] = {"prefill": [], "decode": []}
    router_parts: dict[str, list[str]] = {"prefill": [], "decode": []}
    roles = [("prefill", i, prefill) for i in range(prefill)] + \
        [("decode", i, decode) for i in range(decode)]
    for n, (role, i, count) in enumerate(roles):
        port = how.first_port + (0 if role == "prefill" else 100) + i
        first = n * gpus_each
        ids = ",".join(str(g) for g in range(first, first + gpus_each))
        each = {**values, "port": port, "gpu_ids": ids, "first_gpu": first,
                "side_port": 5600 + n, "bootstrap_port": 8998 + i,
                "router_port": how.router_port}
        env = [_fill_or_raise(e, each, "pd-disaggregation", "cli") for e in how.env]
        own = how.prefill if role == "prefill" else how.decode
        extra = [_fill_or_raise(f, each, "pd-disaggregation", "cli") for f in [*how.every, *own]]
        command = _fill_or_raise(config.command or "", each, "pd-disaggregation", "cli")
        merged = _merge_flags([*flags, *extra], config.merge_flags)
        gpus = f"GPU{'s' if gpus_each > 1 else ''} {ids}"
        blocks.append("\n".join([f"# {role} instance {i + 1} of {count}: {gpus}, port {port}",
                                  " \\\n  ".join([" ".join([*env, command]), *merged])]))
        ports[role].append(port)
        template = how.router_prefill if role == "prefill" else how.router_decode
        if template:
            router_parts[role].append(_fill_or_raise(template, each, "pd-disaggregation"))
    lists = {"router_port": how.router_port,
             "prefill_each": " ".join(router_parts["prefill"]),
             "decode_each": " ".join(router_parts["decode"]),
             "prefill_hosts": " ".join(["localhost"] * prefill),
             "decode_hosts": " ".join(["localhost"] * decode),
             "prefill_ports": " ".join(map(str, ports["prefill"])),
             "decode_ports": " ".join(map(str, ports["decode"]))}
    router = _fill_or_raise(how.router, {**values, **lists}, "pd-disaggregation")
    blocks.append(f"# the router in front: send requests to port {how.router_port}\n{router}")
    return "\n\n".join(blocks)


def _where(how: NodeLaunch, rank: int, group: int, groups: int) -> str:
    """Return the comment line that says on which node(s) a command runs."""
    if how.runs == "same":
        return f"# on each of the {group * groups} nodes, the same command"
    repeat = f"; the same on each of the {groups} groups of {group} nodes, each with its head" \
        if groups > 1 else ""
    if how.runs == "head":
        return f"# on node 0 of {group}: the launcher starts the ranks on every node{repeat}"
    role = " (the head)" if rank == 0 else ""
    return f"# node {rank} of {group}{role}{repeat}"


def step_note(engine: Engine, step: str, plan_values: PlanValues,
              phase: str = "inference", device_class: str | None = None) -> str | None:
    """Return the engine config's note for a step (what it needs besides), filled; None: none.

    For a step another one implies: a serving engine the plan moves to runs the user's GGUF
    quant as its own 4-bit checkpoint, whose note (serve an AWQ or GPTQ copy) the config says.
    """
    config = _config_of(engine, phase, "", device_class)
    note = config.step_notes.get(step)
    if note is None:
        return None
    return f"{step}: {_fill_or_raise(note, _given(config, plan_values), step)}"


def _config_of(engine: Engine, phase: str, tool: str,
               device_class: str | None = None) -> EngineConfig:
    """Return the config asked for: the phase's own (on this device class), or another tool's."""
    if not tool:
        return engine.config_for(phase, device_class)
    if tool not in engine.other_configs:
        raise UserError(f"{engine.name} has no {tool!r} config",
                        hint=f"its other configs: {', '.join(engine.other_configs) or 'none'}")
    return engine.other_configs[tool]


def _given(config: EngineConfig, plan_values: PlanValues) -> dict[str, object]:
    """Return the plan values given, {compute_units} said in this config's words.

    The plan names the unit it models (cpu, gpu, npu: the engine's default or the user's
    --engine-option compute_unit, so the emitted config runs where the prediction assumed);
    each config names it its own way (Core ML's cpu_and_gpu, coremltools' CPU_AND_GPU).
    """
    values = plan_values.given()
    unit = values.get("compute_units")
    if isinstance(unit, str) and unit in config.unit_words:
        values["compute_units"] = config.unit_words[unit]
    name = values.get("model_name")
    for key, by_name in config.by_model.items():
        word = by_name.get(str(name), by_name.get("*")) if isinstance(name, str) else None
        if word is not None:
            values[key] = word
    vendor = plan_values.vendor
    for key, words in config.words.items():
        value = values.get(key)
        if value is None:
            continue
        word = words.get(f"{value}@{vendor}", words.get(str(value)))
        if word is not None:
            values[key] = word
    return values


def _other_level(engine: Engine, step: str, form: str | None) -> bool:
    """Whether the plan asks for another checkpointing level than the engine's default."""
    return step == "activation-checkpointing" and form is not None and \
        form != engine.defaults.checkpointing


def _form_key(engine: Engine, config: EngineConfig, step: str, form: str | None,
              notes: list[str]) -> str:
    """Return the config key that says this step: its asked-for form where the engine has it."""
    if form is None:
        return step
    key = f"{step}-{form}"
    if STEP_FORMS.get(key) != (step, form):
        raise UserError(f"step {step!r} has no form {form!r}",
                        hint=f"forms: {', '.join(sorted(STEP_FORMS))}")
    if key in config.steps:
        return key
    if key == "activation-checkpointing-full":
        return step  # the plain step recomputes whole layers in every engine that has it
    notes.append(f"{step}: {engine.name} has no {form} form of this step in its config; "
                 "the general one is shown")
    return step


def _render_step(config: EngineConfig, step: str, values: Mapping[str, object],
                 source: str | None = None) -> list[RenderedLine]:
    """Return the filled settings of one step (read from source, a form of it), traced to it."""
    return [RenderedLine(setting=_fill_or_raise(s, values, step, config.format), step=step)
            for s in config.steps.get(source or step, [])]


def _fill_or_raise(template: str, values: Mapping[str, object], step: str,
                   fmt: Format = "python") -> str:
    """Fill a template, turning a missing plan value into a UserError that names it."""
    missing = sorted(placeholders(template) - set(values))
    if missing:
        raise UserError(f"step {step!r} needs plan values {missing}",
                        hint=f"pass them in values: {template!r}")
    return fill(template, values, fmt)


def _dedupe(lines: list[RenderedLine]) -> list[RenderedLine]:
    """Drop repeated settings (the first step that asked keeps the trace)."""
    seen: set[str] = set()
    kept: list[RenderedLine] = []
    for line in lines:
        if line.setting not in seen:
            seen.add(line.setting)
            kept.append(line)
    return kept


def _setting_key(setting: str) -> str:
    """Return the key a toml/json/python setting assigns (the text before its '=')."""
    return setting.partition("=")[0].strip()


def _last_setting_wins(lines: list[RenderedLine], notes: list[str]) -> list[RenderedLine]:
    """Keep one setting per key: a later step's value replaces an earlier one, with a note."""
    last: dict[str, RenderedLine] = {}
    for line in lines:
        key = _setting_key(line.setting)
        earlier = last.get(key)
        if earlier is not None:
            notes.append(f"{line.step}: {line.setting!r} replaces {earlier.setting!r} "
                         f"(from {earlier.step})")
        last[key] = line
    kept = set(map(id, last.values()))
    return [line for line in lines if id(line) in kept]


def _cli_text(config: EngineConfig, lines: list[RenderedLine],
              values: Mapping[str, object]) -> str:
    """Return a full command line: the base command, then one flag per continued line."""
    command = _fill_or_raise(config.command or "", values, "base", "cli")
    flags = _merge_flags([line.setting for line in lines], config.merge_flags)
    before = [_fill_or_raise(c, values, "base", "cli") for c in config.before]
    after = [_fill_or_raise(c, values, "base", "cli") for c in config.after]
    return "\n\n".join([*before, " \\\n  ".join([command, *flags]), *after])


def _merge_flags(flags: list[str], merge: Mapping[str, str]) -> list[str]:
    """Join the values of flags that take one combined value (MLC's --overrides a=1;b=2)."""
    merged: dict[str, list[str]] = {}
    out: list[str] = []
    for flag in flags:
        name, _, value = flag.partition(" ")
        if name in merge and value:
            if name not in merged:
                merged[name] = []
                out.append(name)
            merged[name].extend(shlex.split(value))
        else:
            out.append(flag)
    return [f"{f} {shlex.quote(merge[f].join(merged[f]))}" if f in merged else f for f in out]


def _nested(fmt: Format, lines: list[RenderedLine]) -> dict[str, Any]:
    """Build a nested mapping from 'dotted.key = value' settings; a later step wins a key."""
    root: dict[str, Any] = {}
    for line in lines:
        match = _DOTTED.match(line.setting)
        if match is None:  # pragma: no cover - refused at load time
            raise ValueError(f"not a dotted setting: {line.setting!r}")
        *parents, leaf = match.group(1).split(".")
        node = root
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = parse_value(fmt, match.group(2))
    return root


def _json_text(config: EngineConfig, lines: list[RenderedLine],
               values: Mapping[str, object]) -> str:
    """Return a pretty JSON object built from the dotted keys (DeepSpeed's config)."""
    return json.dumps(_nested("json", lines), indent=2) + "\n"


def _toml_text(config: EngineConfig, lines: list[RenderedLine],
               values: Mapping[str, object]) -> str:
    """Return a TOML fragment with one [section] per dotted prefix, in first-seen order."""
    sections: dict[str, list[str]] = {"": []}  # top-level keys must precede every [section]
    for line in lines:
        match = _DOTTED.match(line.setting)
        if match is None:  # pragma: no cover - refused at load time
            raise ValueError(f"not a dotted setting: {line.setting!r}")
        section, _, key = match.group(1).rpartition(".")
        sections.setdefault(section, []).append(f"{key} = {match.group(2).strip()}")
    parts = []
    for section, entries in sections.items():
        if entries:
            header = [f"[{section}]"] if section else []
            parts.append("\n".join(header + entries))
    text = "\n\n".join(parts) + "\n"
    tomllib.loads(text)  # what we print must parse; a failure here is a bug in the data
    return text


def _python_text(config: EngineConfig, lines: list[RenderedLine],
                 values: Mapping[str, object]) -> str:
    """Return 'name=value' lines, under a comment naming where they go."""
    header = [f"# {_fill_or_raise(config.command, values, 'base')}"] \
        if config.command else []
    return "\n".join(header + [line.setting for line in lines]) + "\n"


_TEXT = {"cli": _cli_text, "toml": _toml_text, "json": _json_text, "python": _python_text}
