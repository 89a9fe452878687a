"""One declaration per command-line flag, and what is made of it.

`settings.RUN_FLAGS`, `webhooks.options.WEBHOOK_FLAGS` and `cli.DEV_FLAGS` are tables of `Flag`:
each entry is a flag's name, type, default, help and environment twin, and the field of a frozen
options dataclass (`Settings`, `WebhookOptions`) its value fills. From a table, `add_flags` adds
the argparse arguments (defaults from the environment twins) and `flag_fields` reads the parsed
values back as that dataclass's fields; tests/flags_reference.py documents the same tables.
Adding a flag is one entry plus its use.

Every twin is `RAY_OPERATOR_<FLAG>` (`--lease-name`: `RAY_OPERATOR_LEASE_NAME`), and the command
line wins: the twin is used only when its flag is not given. Switches take
true/false/1/0/yes/no/on/off from the environment, repeatable flags a comma-separated list (which
flags given replace, never add to). A twin's text is converted only when the (sub)command being
parsed uses it, and a value its flag would refuse is refused as argparse refuses a bad flag (exit
status 2), naming the flag, the variable and, as argparse does, the value: no flag holds a secret.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

ENV_PREFIX = "RAY_OPERATOR_"


class _FieldDefault:
    def __repr__(self) -> str:
        return "FIELD_DEFAULT"


FIELD_DEFAULT: Any = _FieldDefault()
"""A `Flag.default` meaning: the default of the dataclass field the flag fills."""


class EnvironmentText(str):
    """A twin's text, as argparse's default of its flag.

    argparse converts a text default with the flag's `type` after parsing, only in the
    (sub)command parsed and only when the flag was not given; the `type` `Flag.argument` gives
    knows this text from the command line's by its class, and refuses it naming the variable.
    """


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
    twin: bool = True
    """Whether `RAY_OPERATOR_<NAME>` stands in for the flag when it is not given."""
    default_env: str | None = None
    """Another variable that, when set, replaces `default` (the twin still wins over it)."""
    switch: bool = False
    """`--<name>/--no-<name>` (argparse's BooleanOptionalAction)."""
    repeatable: bool = False
    """May be given more than once; the values are collected into a list."""
    action: type[argparse.Action] | None = None
    """A custom argparse action (for a value flag); one that adds to the value before it reads
    that value with `earlier_value`."""
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
        return environment_name(self.name) if self.twin else None

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
        """The argparse default: the twin's text (`EnvironmentText`), else `default_env`, else
        the code's; None for a repeatable flag, whose twin `value` reads (a list default would
        be added to by `append`)."""
        if self.repeatable:
            return None
        raw = self._twin_text(environ)
        if raw is not None:
            return EnvironmentText(raw)
        if self.default_env is not None and self.default_env in environ:
            return environ[self.default_env]
        return self.code_default(options)

    def _twin_text(self, environ: Mapping[str, str]) -> str | None:
        return None if self.environment is None else environ.get(self.environment)

    def twin_value(self, raw: str) -> Any:
        """The twin's text `raw` as the flag's value; argparse.ArgumentTypeError naming the
        variable when the flag would refuse it."""
        convert = parse_boolean if self.switch else self.convert or str
        source = f"from {self.environment}"
        try:
            value = convert(raw)
        except argparse.ArgumentTypeError as error:
            raise argparse.ArgumentTypeError(f"{source}: {error}") from None
        except (TypeError, ValueError):
            name = getattr(convert, "__name__", repr(convert))
            raise argparse.ArgumentTypeError(f"{source}: invalid {name} value: {raw!r}") from None
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(repr(choice) for choice in self.choices)
            raise argparse.ArgumentTypeError(
                f"{source}: invalid choice: {value!r} (choose from {allowed})"
            )
        return value

    def _argparse_type(self) -> Callable[[str], Any]:
        """argparse's `type`: `convert` for the command line's text, `twin_value` for the
        twin's (an `EnvironmentText` default argparse converts only when the flag is unused)."""
        convert = self.convert

        def converted(text: str) -> Any:
            if isinstance(text, EnvironmentText):
                return self.twin_value(str(text))
            return text if convert is None else convert(text)

        # argparse names it in its own refusal of the command line's text ("invalid int value").
        converted.__name__ = getattr(convert, "__name__", "str")
        return converted

    def argument(self, options: type[Any] | None, environ: Mapping[str, str]) -> dict[str, Any]:
        """`add_argument`'s keywords for this flag."""
        keywords: dict[str, Any] = {
            "dest": self.dest,
            "default": self.parser_default(options, environ),
            "help": self.help,
        }
        if self.switch:
            return keywords | {"action": _Switch, "twin_type": self._argparse_type()}
        if self.repeatable:
            keywords["action"] = "append"
        elif self.action is not None:
            keywords["action"] = self.action
        converted = self.convert if self.repeatable else self._argparse_type()
        optional = {"type": converted, "choices": self.choices, "metavar": self.metavar}
        return keywords | {key: value for key, value in optional.items() if value is not None}

    def value(self, args: argparse.Namespace, environ: Mapping[str, str]) -> Any:
        """The field's value from parsed `args`; a repeatable flag not given: its twin's list
        (empty without one)."""
        parsed = getattr(args, self.dest)
        if parsed is None and self.repeatable:
            parsed = comma_list(self._twin_text(environ) or "")
        return parsed if self.finish is None else self.finish(parsed)


class _Switch(argparse.BooleanOptionalAction):
    """`--<name>/--no-<name>` whose twin's text argparse converts with `twin_type` (the
    BooleanOptionalAction `type` keyword is deprecated since Python 3.12; the attribute is
    argparse's own)."""

    def __init__(self, *args: Any, twin_type: Callable[[str], Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.type = twin_type


def earlier_value(action: argparse.Action, namespace: argparse.Namespace) -> Any:
    """The value a custom `action` adds to: the one in `namespace`, its twin's text (which
    argparse has not converted yet) converted now, refused as argparse refuses a bad flag."""
    value = getattr(namespace, action.dest)
    if not isinstance(value, EnvironmentText) or action.type is None:
        return value
    try:
        return action.type(value)  # type: ignore[operator]  # argparse types it as str | callable
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentError(action, str(error)) from None


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
    raise argparse.ArgumentTypeError(f"not a boolean: {raw!r} (true/false, 1/0, yes/no or on/off)")


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
