"""How --help looks: conventional names for arguments, no `<bool>` after a flag.

typer 0.29 shows every option's type, also `<bool>` after a flag that takes no value, and
writes required arguments as `{name}`. The command and group classes here keep typer's help
but show flags bare and arguments as NAME / [NAME], as click, git and pip do.
"""

from __future__ import annotations

import shutil
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import DefaultPlaceholder


class FlagOption(TyperOption):
    """A boolean flag: its help row shows no `<bool>` type (a flag takes no value)."""

    def display_type_rich(self, ctx: Any) -> str | None:
        """Show no type for a flag."""
        return None


class NamedArgument(TyperArgument):
    """An argument shown as NAME in the usage line and the help (not typer's `{name}`)."""

    @property
    def display_name_raw(self) -> str:
        """NAME, upper-cased, unless a metavar was given."""
        return self.metavar if self.metavar is not None else (self.name or "arg").upper()

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")


def tidy(params: list[Any]) -> list[Any]:
    """Give flags and arguments their conventional help look (in place); return params."""
    for param in params:
        if type(param) is TyperOption and param.is_flag and not param.count:
            param.__class__ = FlagOption
        elif type(param) is TyperArgument:
            param.__class__ = NamedArgument
    return params


# Below this many columns typer's four-column option table leaves the help ~20 characters
# wide and breaks words (`inconcl usive`); the plain layout (click's) reads there instead.
NARROW_COLUMNS = 100


def narrow() -> bool:
    """Tell whether the terminal (or $COLUMNS) is too narrow for typer's option table."""
    return shutil.get_terminal_size((80, 24)).columns < NARROW_COLUMNS


def plain_when_narrow(command: Any, ctx: Any, formatter: Any, format_help: Any) -> None:
    """Run typer's format_help, in its plain (click) layout when the terminal is narrow."""
    if not narrow():
        format_help(ctx, formatter)
        return
    mode = command.rich_markup_mode
    command.rich_markup_mode = None  # typer's own switch to click's layout
    start = len(formatter.buffer)
    try:
        format_help(ctx, formatter)
    finally:
        command.rich_markup_mode = mode
    # help texts escape '[' for rich ('\\[default: 1]'); plain text shows it as is
    formatter.buffer[start:] = [part.replace("\\[", "[") for part in formatter.buffer[start:]]


class HwCommand(TyperCommand):
    """A command whose help shows flags bare and arguments as NAME."""

    def get_params(self, ctx: Any) -> list[Any]:
        """Return the params (help option included), tidied for the help."""
        return tidy(super().get_params(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Write the help: typer's table when wide, click's option list when narrow."""
        plain_when_narrow(self, ctx, formatter, super().format_help)


class HwSubGroup(TyperGroup):
    """A command group (profiles) whose help shows flags bare."""

    def get_params(self, ctx: Any) -> list[Any]:
        """Return the params (help option included), tidied for the help."""
        return tidy(super().get_params(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Write the help: typer's table when wide, click's layout when narrow."""
        plain_when_narrow(self, ctx, formatter, super().format_help)


def use_tidy_classes(app: Any) -> None:
    """Make every command and sub-group of a typer app use the classes above (unless set)."""
    for info in app.registered_commands:
        if _unset(info.cls, TyperCommand):
            info.cls = HwCommand
    for group in app.registered_groups:
        instance = group.typer_instance
        if instance is None:
            continue
        if _unset(group.cls, TyperGroup) and _unset(instance.info.cls, TyperGroup):
            group.cls = HwSubGroup
        use_tidy_classes(instance)


def _unset(cls: Any, default: type) -> bool:
    """Tell whether a typer class setting is left at typer's default (None, a placeholder)."""
    return cls is None or cls is default or isinstance(cls, DefaultPlaceholder)
