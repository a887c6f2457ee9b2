"""Check a rendered engine config against the flags the engine itself accepts.

The tables in tests/fixtures/engine_flags/ are read from each engine's own code at its pinned
version (scripts/engine_flags.py). check_config() parses a rendered config of any format (a
command line, TOML, JSON, Python keyword lines) and returns readable problems: a flag or key
the command does not take, a value that does not parse to the declared type, a value outside
the choices or the range, a switch given a value or a flag missing one.
"""

from __future__ import annotations

import ast
import io
import json
import re
import shlex
import sys
import tokenize
from functools import cache
from pathlib import Path
from typing import Any

import yaml

# The one place the renderer is imported.
from hwadvisor.engines import Engine, RenderedConfig, load_engines, render_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["Engine", "RenderedConfig", "check_config", "check_launch", "check_notes",
           "check_rendered", "command_blocks", "load_engines", "render_config", "table"]

TABLES = Path(__file__).parent / "fixtures" / "engine_flags"
# The command a cli config runs -> the table command that describes it.
CLI_COMMANDS = {
    "vllm": "vllm serve", "sglang": "python -m sglang.launch_server",
    "llamacpp": "llama-server", "mlx": "mlx_lm.server", "mlc-llm": "mlc_llm serve",
    "litert": "litert-lm run", "megatron": "pretrain_gpt.py", "trtllm": "trtllm-serve",
}
TABLE_COMMANDS = {"torchtitan": "job_config.toml", "deepspeed": "ds_config.json",
                  "executorch": "export_llm", "qnn": "export_llm", "coreml": "export_llm"}
# Settings an engine reads from a file its command line names, written in the config's notes as
# "<file>: <YAML>" (trtllm-serve --config extra_llm_api_options.yaml): the table command of the
# file's keys. The YAML runs to the first " (", ";" or the end of the note.
NOTE_FILES = {"trtllm": "extra_llm_api_options.yaml"}


@cache
def table(engine: str, version: str | None = None) -> dict[str, Any] | None:
    """Return an engine's flag table, or None when none was extracted.

    version: a config said in an older release's flags (`--engine vllm==0.6.0`) is checked
    against that release's table (<engine>@<version>.json), the pinned one otherwise.
    """
    path = TABLES / f"{engine}.json"
    if version is not None and (TABLES / f"{engine}@{version}.json").exists():
        path = TABLES / f"{engine}@{version}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _lookup(flags: dict[str, Any], name: str) -> dict[str, Any] | None:
    """Return a flag's record by its name or one of its aliases."""
    if name in flags:
        return flags[name]
    for rec in flags.values():
        if name in rec.get("aliases", []):
            return rec
    return None


def check_value(rec: dict[str, Any], value: Any, where: str) -> list[str]:
    """Check one value against a record's type, choices and range."""
    problems: list[str] = []
    type_ = rec.get("type")
    parsed: Any = value
    if isinstance(value, str):
        try:
            if type_ == "int":
                parsed = int(value)
            elif type_ == "float":
                parsed = float(value)
            elif type_ == "json":
                parsed = json.loads(value)
        except ValueError:
            return [f"{where}: {value!r} is not a valid {type_}"]
    elif type_ == "int" and (isinstance(parsed, bool) or not isinstance(parsed, int)):
        problems.append(f"{where}: {value!r} is not an int")
    elif type_ == "float" and not isinstance(parsed, (int, float)):
        problems.append(f"{where}: {value!r} is not a number")
    elif type_ == "bool" and not isinstance(parsed, bool):
        problems.append(f"{where}: {value!r} is not a bool")
    elif type_ == "str" and not isinstance(parsed, (str, bool)):
        # bool passes: transformers keeps `str | None` fields with const=True so that True
        # turns them on (TrainingArguments.fsdp, training_args.py: "fsdp=True")
        problems.append(f"{where}: {value!r} is not a string")
    choices = rec.get("choices")
    if choices:
        items = parsed.split(rec["list_separator"]) if rec.get("list_separator") \
            and isinstance(parsed, str) else [parsed]
        for item in items:
            if item not in choices:
                problems.append(f"{where}: {item!r} is not one of {choices}")
    if isinstance(parsed, (int, float)) and not isinstance(parsed, bool):
        if rec.get("min") is not None and parsed < rec["min"]:
            problems.append(f"{where}: {parsed} is below the minimum {rec['min']}")
        if rec.get("max") is not None and parsed > rec["max"]:
            problems.append(f"{where}: {parsed} is above the maximum {rec['max']}")
        if parsed in rec.get("not", []):
            problems.append(f"{where}: {parsed} is refused")
    return problems


# ---------------------------------------------------------------------------------------------
# cli


def cli_tokens(text: str) -> list[str]:
    """Split a command line (with backslash-continued lines) as a shell would."""
    return shlex.split(text.replace("\\\n", " "))


def check_cli(text: str, command: dict[str, Any], command_name: str) -> list[str]:
    """Check every flag of a command line and its value."""
    flags = command["flags"]
    words = command_name.split()
    tokens = cli_tokens(text)
    if tokens[:len(words)] != words:
        return [f"the config runs {' '.join(tokens[:len(words)])!r}, not {command_name!r}"]
    problems: list[str] = []
    i = len(words)
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-"):
            continue  # a positional (the model) or a value already consumed
        name, eq, inline = token.partition("=")
        rec = _lookup(flags, name)
        if rec is None:
            problems.append(f"{command_name}: unknown flag {name}")
            continue
        if not rec.get("takes_value", True):
            if eq:
                problems.append(f"{command_name} {name}: a switch given a value {inline!r}")
            elif i < len(tokens) and not tokens[i].startswith("-") and rec.get("type") == "bool":
                problems.append(f"{command_name} {name}: a switch followed by {tokens[i]!r}")
            continue
        values: list[str] = []
        if eq:
            values = [inline]
        elif rec.get("nargs") in ("+", "*"):
            while i < len(tokens) and not tokens[i].startswith("--"):
                values.append(tokens[i])
                i += 1
        else:
            count = rec.get("values", 1) if isinstance(rec.get("values", 1), int) else 1
            values = tokens[i:i + count]
            i += count
        if not values and rec.get("nargs") not in ("?", "*"):
            problems.append(f"{command_name} {name}: needs a value")
        for value in values:
            problems.extend(_check_cli_value(rec, value, f"{command_name} {name}"))
    return problems


def _check_cli_value(rec: dict[str, Any], value: str, where: str) -> list[str]:
    """Check a flag's value, and the keys of a key=value;... value (MLC's --overrides)."""
    subkeys = rec.get("subkeys")
    if not subkeys:
        return check_value(rec, value, where)
    problems: list[str] = []
    for part in filter(None, value.split(rec.get("subkey_separator", ";"))):
        key, _, sub = part.partition("=")
        if key not in subkeys:
            problems.append(f"{where}: unknown key {key!r}")
        else:
            problems.extend(check_value(subkeys[key], sub, f"{where} {key}"))
    return problems


# ---------------------------------------------------------------------------------------------
# toml / json


def _leaves(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Return (dotted key, value) of every leaf of a nested mapping (an empty one is a leaf)."""
    if isinstance(data, dict) and (data or not prefix):
        out = []
        for key, value in data.items():
            out.extend(_leaves(value, f"{prefix}{key}."))
        return out
    return [(prefix[:-1], data)]


def check_keys(data: dict[str, Any], command: dict[str, Any], what: str) -> list[str]:
    """Check every dotted leaf key of a parsed TOML / JSON config."""
    keys = command["flags"]
    problems: list[str] = []
    for key, value in _leaves(data):
        rec = _lookup(keys, key)
        if rec is None:
            parent = key.rsplit(".", 1)[0]
            if "." in key and keys.get(parent, {}).get("type") == "json":
                continue  # a free-form mapping (DeepSpeed's optimizer.params)
            problems.append(f"{what}: unknown key {key}")
            continue
        if rec.get("type") in {"object", "section"}:
            continue
        if rec.get("type") == "list" and not isinstance(value, list):
            problems.append(f"{what} {key}: {value!r} is not a list")
        elif rec.get("type") == "list" and rec.get("items"):
            # a list of mappings whose keys the table states (mlc-package-config.json's
            # model_list entries)
            for item in value:
                problems.extend(check_keys(item, {"flags": rec["items"]}, f"{what} {key}[]")
                                if isinstance(item, dict) else
                                [f"{what} {key}: {item!r} is not a mapping"])
        elif rec.get("type") != "list":
            problems.extend(check_value(rec, value, f"{what} {key}"))
    return problems


# ---------------------------------------------------------------------------------------------
# python keyword lines


def _strip_comment(line: str) -> tuple[str, str]:
    """Return (code, comment) of one line of Python."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, IndentationError):
        return line, ""
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            return line[:tok.start[1]].rstrip(), tok.string
    return line.rstrip(), ""


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ast.unparse(node)


def check_python(text: str, commands: dict[str, Any]) -> list[str]:
    """Check `name=value` lines: each name a keyword/key of the command its comment names."""
    problems: list[str] = []
    for line in text.splitlines():
        code, comment = _strip_comment(line)
        if not code:
            continue
        try:
            stmt = ast.parse(code).body[0]
        except SyntaxError as exc:
            problems.append(f"not a Python statement: {code!r} ({exc.msg})")
            continue
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            problems.append(f"not a name=value line: {code!r}")
            continue
        problems.extend(_check_assignment(stmt, comment, commands))
    return problems


def _named(comment: str, commands: dict[str, Any]) -> list[str]:
    """Return the table commands a line's comment names (generate(), TrainingArguments ...)."""
    return [name for name in commands if name in comment]


# Keywords of libraries the engine entry does not pin (no table to check them against).
UNPINNED = {"peft_config": "trl's SFTTrainer / peft's LoraConfig (not pinned by the hf entry)"}


def _check_assignment(stmt: ast.Assign, comment: str, commands: dict[str, Any]) -> list[str]:
    key = _dotted(stmt.targets[0])
    if key in UNPINNED:
        return []
    named = _named(comment, commands)
    where = named or list(commands)
    problems: list[str] = []
    calls = [c for c in ast.walk(stmt.value) if isinstance(c, ast.Call)]
    callee = calls[0] and _callee(calls[0]) if calls else ""
    found = [name for name in where if _lookup(commands[name]["flags"], key) is not None]
    statement = isinstance(stmt.value, ast.Call) and callee in commands and not found
    if not found and not statement:
        said = f" ({', '.join(named)})" if named else ""
        problems.append(f"unknown keyword {key}{said}")
    for name in found[:1]:
        rec = _lookup(commands[name]["flags"], key)
        value = _python_literal(stmt.value)
        if rec is not None and value is not _NOT_LITERAL:
            problems.extend(check_value(rec, value, f"{name} {key}"))
    for call in calls:
        target = _callee(call)
        if target not in commands:
            continue
        for kw in call.keywords:
            if kw.arg is None:
                continue
            rec = _lookup(commands[target]["flags"], kw.arg)
            if rec is None:
                problems.append(f"{target}: unknown keyword {kw.arg}")
                continue
            value = _python_literal(kw.value)
            if value is not _NOT_LITERAL:
                problems.extend(check_value(rec, value, f"{target} {kw.arg}"))
    return problems


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id \
        if isinstance(func, ast.Name) else ""


_NOT_LITERAL = object()


def _python_literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return _NOT_LITERAL


# ---------------------------------------------------------------------------------------------


def command_blocks(text: str) -> list[str]:
    """Return the commands of a config text: one per block, comment lines dropped.

    A plan over several nodes writes one command per node, each block under a comment line
    saying where it runs, blocks apart by a blank line.
    """
    blocks = []
    for block in text.split("\n\n"):
        kept = "\n".join(line for line in block.splitlines() if not line.startswith("#"))
        if kept.strip():
            blocks.append(kept)
    return blocks


# Launchers a command may run under, before the engine's own command (srun's flags are not
# the engine's to check; trtllm-llmapi-launch passes the rest through).
LAUNCHERS = ("srun", "mpirun", "trtllm-llmapi-launch")


# Launchers with a table of their own (table file, command): torchrun (torch), DeepSpeed's.
LAUNCHER_TABLES = {"torchrun": ("torchrun", "torchrun"), "deepspeed": ("deepspeed", "deepspeed")}


def launcher_part(tokens: list[str], flags: dict[str, Any]) -> list[str]:
    """Return the launcher's own words: up to its script, or through `-m MODULE`."""
    i = 1
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-"):
            return tokens[:i]  # the script the launcher runs
        rec = _lookup(flags, token.partition("=")[0])
        takes = rec is None or rec.get("takes_value", True)
        i += 1 + (1 if takes and "=" not in token else 0)
        if token in ("-m", "--module") and rec is not None and rec.get("takes_value", True):
            return tokens[:i]
    return tokens


def check_launch(text: str) -> list[str]:
    """Return the problems of the launcher commands of a config (torchrun, deepspeed ...)."""
    problems: list[str] = []
    for block in command_blocks(text):
        tokens = cli_tokens(block)
        if not tokens or tokens[0] not in LAUNCHER_TABLES:
            continue
        engine, name = LAUNCHER_TABLES[tokens[0]]
        data = table(engine)
        if data is None:
            problems.append(f"no table for the launcher {name}")
            continue
        command = data["commands"][name]
        problems.extend(check_cli(shlex.join(launcher_part(tokens, command["flags"])),
                                  command, name))
    return problems


def _without_launcher(engine_id: str, text: str) -> str:
    """Return a command line from the engine's own command on (a launcher in front dropped)."""
    name = CLI_COMMANDS.get(engine_id, "")
    tokens = cli_tokens(text)
    if tokens[:1] and tokens[0] in LAUNCHERS and name:
        first = name.split()[0]
        if first in tokens:
            return shlex.join(tokens[tokens.index(first):])
    return text


# The routers a disaggregated prefill/decode launch puts in front, with the flags each takes
# (they are not the engine's own command): vLLM's proxy in its source tree
# (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py parse_args, nargs="+" lists) and
# the sglang-router package in PD mode (docs.sglang.ai pd_disaggregation: --prefill URL
# [BOOTSTRAP_PORT], --decode URL).
ROUTERS = {
    "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py": {
        "--port", "--host", "--prefiller-hosts", "--prefiller-ports", "--decoder-hosts",
        "--decoder-ports"},
    "sglang_router.launch_router": {"--pd-disaggregation", "--prefill", "--decode", "--host",
                                    "--port"},
}
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def router_of(tokens: list[str]) -> str | None:
    """Return the router a command runs (a ROUTERS key), or None."""
    for token in tokens[:3]:
        if token in ROUTERS:
            return token
    return None


def check_router(block: str) -> list[str]:
    """Return the problems of a router command: each flag must be one the router takes."""
    tokens = cli_tokens(block)
    router = router_of(tokens)
    if router is None:
        return [f"not a known router: {block[:60]!r}"]
    return [f"{router} takes no {t}" for t in tokens if t.startswith("--")
            and t.partition("=")[0] not in ROUTERS[router]]


def without_env(text: str) -> str:
    """Return a command line without the KEY=value assignments in front of it."""
    tokens = cli_tokens(text)
    while tokens and _ENV.match(tokens[0]):
        tokens = tokens[1:]
    return shlex.join(tokens)


def check_config(engine_id: str, fmt: str, text: str, version: str | None = None) -> list[str]:
    """Return the problems of one rendered config text of an engine (empty: it checks out).

    version: the release the config's flags are said in (EngineConfig.version).
    """
    data = table(engine_id, version)
    if data is None:
        return []
    if fmt == "cli" and len(command_blocks(text)) != 1:
        return [p for block in command_blocks(text)
                for p in (check_router(block) if router_of(cli_tokens(block))
                          else check_config(engine_id, fmt, block, version))]
    if fmt == "cli":
        text = _without_launcher(engine_id, without_env(command_blocks(text)[0]))
    commands = data["commands"]
    if fmt == "cli":
        name = CLI_COMMANDS.get(engine_id)
        # An engine with several tools (mlx-lm serves with mlx_lm.server and trains with
        # mlx_lm.lora): the table command the text starts with.
        # MLC's phone route runs several of its subcommands (mlc_llm convert_weight ...): the
        # longest table command the text starts with.
        tokens = cli_tokens(text)
        starts = [c for c in commands if tokens[:len(c.split())] == c.split()]
        if starts:
            name = max(starts, key=lambda c: len(c.split()))
        if engine_id == "megatron":
            tokens = cli_tokens(text)
            start = tokens.index("pretrain_gpt.py") if "pretrain_gpt.py" in tokens else 0
            text = shlex.join(tokens[start:])
        return check_cli(text, commands[name], name) if name in commands \
            else [f"no table for {engine_id}'s command {name!r}"]
    if fmt == "toml":
        return check_keys(tomllib.loads(text), commands[TABLE_COMMANDS[engine_id]], engine_id)
    if fmt == "json":
        return check_keys(json.loads(text), commands[TABLE_COMMANDS[engine_id]], engine_id)
    if engine_id in TABLE_COMMANDS:
        return check_python(text, {TABLE_COMMANDS[engine_id]: commands[TABLE_COMMANDS[engine_id]]})
    return check_python(text, commands)


def check_notes(engine_id: str, notes: list[str]) -> list[str]:
    """Return the problems of the settings the notes put in a file the command line names."""
    data = table(engine_id)
    file = NOTE_FILES.get(engine_id)
    if data is None or file is None:
        return []
    pattern = re.compile(re.escape(file) + r"(?: \([^)]*\))?: (.*?)(?:\s+\(|;|$)")
    problems: list[str] = []
    for note in notes:
        for match in pattern.finditer(note):
            try:
                parsed = yaml.safe_load(match.group(1))
            except yaml.YAMLError as exc:
                problems.append(f"{file}: not YAML: {match.group(1)!r} ({exc})")
                continue
            if not isinstance(parsed, dict):
                problems.append(f"{file}: not a mapping: {match.group(1)!r}")
                continue
            problems.extend(check_keys(parsed, data["commands"][file], file))
    return problems


def check_rendered(rendered: RenderedConfig) -> list[str]:
    """Return the problems of a RenderedConfig: its text, its launch and the files its notes
    fill."""
    launch = check_launch(rendered.launch) + \
        (check_launch(rendered.text) if rendered.format == "cli" else [])
    return check_config(rendered.engine, rendered.format, rendered.text) + launch + \
        check_notes(rendered.engine, rendered.notes) + \
        check_files(rendered.engine, rendered.files)


def check_files(engine_id: str, files: dict[str, str]) -> list[str]:
    """Return the problems of the files a config names: YAML mappings of the file's keys."""
    data = table(engine_id)
    problems: list[str] = []
    for name, text in files.items():
        commands = data["commands"] if data is not None else {}
        if name not in commands:
            problems.append(f"{engine_id}: no table for the file {name!r}")
            continue
        parsed = yaml.safe_load(text)
        if not isinstance(parsed, dict):
            problems.append(f"{name}: not a mapping: {text!r}")
            continue
        problems.extend(check_keys(parsed, commands[name], name))
    return problems
