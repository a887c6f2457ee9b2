"""Option groups: a table of typer options handed to a command as one typed value.

A group is a dataclass (its fields and defaults written once) and a tuple of `Param`, one typer
option per field; `inject` turns the pair into a decorator. The command names one parameter of
the group's type and gets the built value; typer sees the options in its place::

    @output_options()
    def estimate(out: Output, device: DeviceOpt = None) -> None: ...

This module imports no workload code, so `probe` (whose start-up is a target) can use it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Param:
    """One option of a group: the parameter name, its typer annotation and its default."""

    name: str
    annotation: Any
    default: Any = None


def flag_option(*names: str, help_text: str, panel: str | None = None) -> Any:
    """Return the typer annotation of an on/off option."""
    return Annotated[bool, typer.Option(*names, help=help_text, rich_help_panel=panel)]


def file_option(*names: str, help_text: str, panel: str | None = None) -> Any:
    """Return the typer annotation of an optional file (not a folder; no default shown)."""
    return Annotated[Optional[Path],  # noqa: UP007, UP045 (typer reads it at run time)
                     typer.Option(*names, help=help_text, dir_okay=False, show_default=False,
                                  rich_help_panel=panel)]


def default_of(group: type, name: str) -> Any:
    """Return the default of a group dataclass's field: the one place it is written."""
    field = next(f for f in dataclasses.fields(group) if f.name == name)
    return field.default


def inject(params: tuple[Param, ...], target: str, build: Callable[[dict[str, Any]], Any],
           in_place: bool = False, last: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Return a decorator adding `params` to a command and passing build(values) as `target`.

    The options go where `target` stood when in_place (so --help lists them there), else after
    the command's own parameters; those named in `last` go after every parameter either way.
    """

    def decorate(func: F) -> F:
        # eval_str: the command's own annotations are strings under `from __future__ import
        # annotations`; typer needs the objects (it reads the Option out of Annotated).
        own = inspect.signature(func, eval_str=True)
        added = [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default,
                                   annotation=p.annotation) for p in params]
        names = list(own.parameters)
        at = names.index(target) if in_place else len(names)
        kept = [p for p in own.parameters.values() if p.name != target]
        before = [p for p in kept if names.index(p.name) < at]
        after = [p for p in kept if names.index(p.name) >= at]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {p.name: kwargs.pop(p.name, p.default) for p in params}
            kwargs[target] = build(values)
            return func(*args, **kwargs)

        # typer reads keyword parameters in order; none of a command's are positional-only
        here = [p for p in added if p.name not in last]
        at_end = [p for p in added if p.name in last]
        ordered = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                   for p in (*before, *here, *after, *at_end)]
        signature = own.replace(parameters=ordered)
        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        return wrapper  # type: ignore[return-value]

    return decorate


def group_options(group: type, params: tuple[Param, ...], target: str,
                  names: tuple[str, ...] = (), last: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Inject a dataclass group's options in place of `target` (only `names` when given).

    Those named in `last` go after the command's other parameters (their place in --help).
    """
    chosen = tuple(p for p in params if not names or p.name in names)
    return inject(chosen, target, lambda values: group(**values), in_place=True, last=last)
