"""One declaration per command-line flag, and what is made of it.

`settings.RUN_FLAGS`, `webhooks.options.WEBHOOK_FLAGS` and `cli.DEV_FLAGS` are tables of `Flag`:
each entry is a flag's name, type, default, help and environment twin, and the field of a frozen
options dataclass (`Settings`, `WebhookOptions`) its value fills. From a table, `add_flags` adds
the argparse arguments (defaults from the environment twins) and `flag_fields` reads the parsed
values back as that dataclass's fields; tests/flags_reference.py documents the same tables.
Adding a flag is one entry plus its use.

Every twin is `RAY_OPERATOR_<FLAG>` (`--lease-name`: `RAY_OPERATOR_LEASE_NAME`); a flag on the
command line wins. Switches take true/false/1/0/yes/no/on/off from the environment, repeatable
flags a comma-separated list. The twin of a repeatable flag is either its default, which the
flags then add to (`Twin.DEFAULT`), or read only when the flag is not given at all
(`Twin.UNSET`: the flags replace it).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

ENV_PREFIX = "RAY_OPERATOR_"


class Twin(enum.Enum):
    """How a flag's `RAY_OPERATOR_<FLAG>` environment variable is read."""

    NONE = "none"
    """No twin."""
    DEFAULT = "default"
    """Read while the parser is built: converted, it is the flag's default."""
    UNSET = "unset"
    """Read after parsing, when the (repeatable) flag was not given: the flags replace it."""


class _FieldDefault:
    def __repr__(self) -> str:
        return "FIELD_DEFAULT"


FIELD_DEFAULT: Any = _FieldDefault()
"""A `Flag.default` meaning: the default of the dataclass field the flag fills."""


@dataclasses.dataclass(frozen=True, slots=True)
class Flag:
    """One command-line flag: `--<name>` (and `--no-<name>` for a switch)."""

    name: str
    """The flag without its dashes: `lease-name`."""
    _: dataclasses.KW_ONLY
    help: str
    """argparse's help (`%(default)s` is the code's default)."""
    convert: Callable[[str], Any] | None = None
    """Converts the command line's text (argparse's `type`) and the twin's; None: kept as text."""
    default: Any = FIELD_DEFAULT
    """The code's default, before any environment variable."""
    twin: Twin = Twin.DEFAULT
    """How `RAY_OPERATOR_<NAME>` is read."""
    twin_convert: Callable[[str], Any] | None = None
    """Converts the twin when `convert` should not (None: `convert`, parse_boolean for a
    switch, `comma_list` for a repeatable flag)."""
    default_env: str | None = None
    """Another variable that, when set, replaces `default` (the twin still wins over it)."""
    switch: bool = False
    """`--<name>/--no-<name>` (argparse's BooleanOptionalAction)."""
    repeatable: bool = False
    """May be given more than once; the values are collected into a list."""
    action: type[argparse.Action] | None = None
    """A custom argparse action (for a value flag)."""
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    dest: str = ""
    """The attribute of the parsed arguments; empty: the name with `_` for `-`."""
    field: str | None = ""
    """The dataclass field the value fills; empty: `dest`; None: none (read by hand)."""
    finish: Callable[[Any], Any] | None = None
    """Turns the parsed value into the field's value; None: as parsed."""

    def __post_init__(self) -> None:
        if not self.dest:
            object.__setattr__(self, "dest", self.name.replace("-", "_"))
        if self.field == "":
            object.__setattr__(self, "field", self.dest)

    @property
    def option(self) -> str:
        return f"--{self.name}"

    @property
    def environment(self) -> str | None:
        """`RAY_OPERATOR_<NAME>`, or None for a flag without a twin."""
        return None if self.twin is Twin.NONE else environment_name(self.name)

    def code_default(self, options: type[Any] | None) -> Any:
        """`default`, or the default of its field of the dataclass `options`."""
        if self.default is not FIELD_DEFAULT:
            return self.default
        if options is None or self.field is None:
            raise TypeError(f"{self.option}: FIELD_DEFAULT names no dataclass field")
        for field in dataclasses.fields(options):
            if field.name != self.field:
                continue
            if field.default_factory is not dataclasses.MISSING:
                return field.default_factory()
            if field.default is not dataclasses.MISSING:
                return field.default
        raise TypeError(f"{self.option}: {options.__name__}.{self.field} has no default")

    def parser_default(self, options: type[Any] | None, environ: Mapping[str, str]) -> Any:
        """The argparse default: the twin converted, else `default_env`, else the code's."""
        raw = environ.get(environment_name(self.name))
        if self.twin is Twin.DEFAULT and raw is not None:
            return self._twin_convert()(raw)
        if self.default_env is not None and self.default_env in environ:
            return environ[self.default_env]
        if self.twin is Twin.UNSET:
            return None  # a list default would be added to by `append`; read after parsing
        return self.code_default(options)

    def _twin_convert(self) -> Callable[[str], Any]:
        if self.twin_convert is not None:
            return self.twin_convert
        if self.switch:
            return parse_boolean
        if self.repeatable:
            return comma_list
        return self.convert or str

    def argument(self, options: type[Any] | None, environ: Mapping[str, str]) -> dict[str, Any]:
        """`add_argument`'s keywords for this flag."""
        keywords: dict[str, Any] = {
            "dest": self.dest,
            "default": self.parser_default(options, environ),
            "help": self.help,
        }
        if self.switch:
            return keywords | {"action": argparse.BooleanOptionalAction}
        if self.repeatable:
            keywords["action"] = "append"
        elif self.action is not None:
            keywords["action"] = self.action
        optional = {"type": self.convert, "choices": self.choices, "metavar": self.metavar}
        return keywords | {key: value for key, value in optional.items() if value is not None}

    def value(self, args: argparse.Namespace, environ: Mapping[str, str]) -> Any:
        """The field's value from parsed `args` (a `Twin.UNSET` twin read now)."""
        parsed = getattr(args, self.dest)
        if parsed is None and self.twin is Twin.UNSET:
            parsed = comma_list(environ.get(environment_name(self.name), ""))
        return parsed if self.finish is None else self.finish(parsed)


def add_flags(
    parser: argparse.ArgumentParser,
    flags: Iterable[Flag],
    *,
    options: type[Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Add `flags` to `parser`, their defaults from `environ` (default: the process's) or from
    the fields of the dataclass `options`."""
    environ = os.environ if environ is None else environ
    for flag in flags:
        parser.add_argument(flag.option, **flag.argument(options, environ))


def flag_fields(
    args: argparse.Namespace, flags: Iterable[Flag], *, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The dataclass fields `flags` fill, from parsed `args`: `{field: value}`."""
    environ = os.environ if environ is None else environ
    return {flag.field: flag.value(args, environ) for flag in flags if flag.field is not None}


def environment_name(flag: str) -> str:
    """`RAY_OPERATOR_LEASE_NAME` for `lease-name` or `--lease-name`."""
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


def parse_boolean(raw: str) -> bool:
    """true/false, 1/0, yes/no, on/off (any case), as a switch's twin."""
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {raw!r}")


def comma_list(raw: str) -> list[str]:
    """`a, b,,c` as `["a", "b", "c"]`: a repeatable flag's twin."""
    return [item.strip() for item in raw.split(",") if item.strip()]


def positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def port_number(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to 65535, got {value}")
    return value


def optional_path(value: str | None) -> Path | None:
    """A path flag's value: None when not given (or empty)."""
    return Path(value) if value else None
