"""Writes docs/reference/flags.md from the operator's own argparse parsers (`make flags-reference`).

`python -m tests.flags_reference` builds `ray-operator`'s parser (`cli._build_parser()`) and
tables every flag of `run` and `dev`: its spellings, its environment twin, its default and its
help. A development tool, so it lives beside the tests, not in the package.

The parser is built from the operator's flag tables (`settings.RUN_FLAGS`,
`webhooks.options.WEBHOOK_FLAGS`, `cli.DEV_FLAGS`, see `ray_operator.flags`) with an empty
environment, so the defaults are the code's, never the environment's; which flags have a
`RAY_OPERATOR_<FLAG>` twin is read from the same tables.
`tests/deploy/test_docs.py` fails when the committed page differs from what this writes.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_operator import cli, settings
from ray_operator.features import FeatureGates
from ray_operator.flags import environment_name
from ray_operator.webhooks import options as webhook_options

REPO_ROOT = Path(__file__).resolve().parents[1]
PAGE = REPO_ROOT / "docs" / "reference" / "flags.md"
SUBCOMMANDS = ("run", "dev")

HEADER = """\
# Flags reference

Generated from the operator's own argparse parsers by `make flags-reference`
(`python -m tests.flags_reference`): do not edit by hand; `tests/deploy/test_docs.py` fails when
this page and the parsers disagree. Every flag with an environment twin can also come from that
variable, read only when the flag is not given (the command line wins, and a repeatable flag
given replaces the variable's list); repeatable flags take a comma-separated list from the
environment, booleans `true`/`false`/`1`/`0`/`yes`/`no`/`on`/`off`. A value there that the flag
would refuse stops the command that uses the flag, as a bad flag does (exit status 2, naming the
flag and the variable). Defaults are the code's, before any environment variable.
"""


@dataclass(frozen=True)
class Flag:
    """One row of the reference."""

    spellings: tuple[str, ...]
    environment: str | None
    default: str
    help: str


def environment_twins() -> set[str]:
    """The flags with a `RAY_OPERATOR_<FLAG>` twin, as the operator's flag tables declare them."""
    tables = (settings.RUN_FLAGS, webhook_options.WEBHOOK_FLAGS, cli.DEV_FLAGS)
    return {flag.name for table in tables for flag in table if flag.environment is not None}


def subcommand_parsers() -> tuple[dict[str, argparse.ArgumentParser], set[str]]:
    """`run`'s and `dev`'s parsers, built with the code's defaults, and the flags with twins."""
    parser = cli._build_parser(environ={})
    subparsers = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    parsers = {name: subparsers.choices[name] for name in SUBCOMMANDS}
    return parsers, environment_twins()


def _name(action: argparse.Action) -> str:
    """`leader-elect` for `--leader-elect` / `--no-leader-elect`: the first spelling."""
    return action.option_strings[0].removeprefix("--")


def _default(value: Any) -> str:
    if value is None or value == [] or value == "":
        return "—"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, (list, tuple)):
        return ", ".join(f"`{item}`" for item in value)
    if isinstance(value, FeatureGates):
        overrides = ",".join(f"{gate}={str(on).lower()}" for gate, on in value.overrides.items())
        return f"`{overrides}`" if overrides else "the gates' own defaults"
    return f"`{value}`"


def _cell(text: str) -> str:
    """Help text as one table cell: one line, `|` escaped, `<placeholder>` not taken for HTML."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def flags(parser: argparse.ArgumentParser, twins: set[str]) -> list[Flag]:
    """The parser's flags in declaration order (help and suppressed flags left out)."""
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        name = _name(action)
        rows.append(
            Flag(
                spellings=tuple(action.option_strings),
                environment=environment_name(name) if name in twins else None,
                default=_default(action.default),
                help=_cell(formatter._expand_help(action) if action.help else ""),
            )
        )
    return rows


def _table(rows: list[Flag]) -> str:
    lines = ["| Flag | Environment | Default | What |", "| --- | --- | --- | --- |"]
    for row in rows:
        spellings = ", ".join(f"`{spelling}`" for spelling in row.spellings)
        environment = f"`{row.environment}`" if row.environment else "—"
        lines.append(f"| {spellings} | {environment} | {row.default} | {row.help} |")
    return "\n".join(lines) + "\n"


def render(parsers: dict[str, argparse.ArgumentParser], twins: set[str]) -> str:
    """The page: `run`'s flags, then the flags `dev` adds to them."""
    run = flags(parsers["run"], twins)
    dev_only = [row for row in flags(parsers["dev"], twins) if row not in run]
    return (
        f"{HEADER}\n"
        "## `ray-operator run`\n\n"
        "The operator (`config/manager` runs it in a Pod; `make run` runs `dev`).\n\n"
        f"{_table(run)}\n"
        "## `ray-operator dev`\n\n"
        "What `make run` starts: a local control plane (unless `KUBECONFIG` is set), the CRDs and\n"
        "the operator. Every flag of `run`, and these:\n\n"
        f"{_table(dev_only)}"
    )


def generate() -> str:
    """The page as the parsers say it should read."""
    parsers, twins = subcommand_parsers()
    return render(parsers, twins)


def main() -> None:
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(generate())
    print(f"wrote {PAGE.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
