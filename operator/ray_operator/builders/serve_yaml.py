"""How `serveConfigV2` is read: the scalars typed as KubeRay's Go YAML types them.

KubeRay reads the config with apimachinery's `yaml.Unmarshal` (sigs.k8s.io/yaml over
go.yaml.in/yaml/v2) into a `map[string]interface{}` and PUTs it to Ray Serve as JSON. PyYAML's
`safe_load` disagrees with it on plain scalars that users write every day:

- `2024-01-01` is a `datetime.date` to PyYAML (which json cannot encode: the PUT never happens);
  yaml.v2 leaves a timestamp decoded into `interface{}` a string, and Serve gets the string;
- `5e-3` (no dot) is a string to PyYAML, a float to Go (the YAML 1.2 float pattern);
- `12:30` is the sexagesimal integer 750 to PyYAML, a string to Go;
- `y`, `Y`, `n`, `N` are booleans to yaml.v2 (as are yes/no/on/off, which PyYAML shares).

`ServeConfigLoader` resolves plain scalars with Go's table, so admission (`validation.serve_config`)
and the controller (`builders.rayservice.serve_config`) see one and the same value, the one KubeRay
would send. It is a SafeLoader (no arbitrary objects), on libyaml's parser when PyYAML has it
(several times faster for a config of a megabyte).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import yaml

_SafeBase: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_NULL = "tag:yaml.org,2002:null"
_MERGE = "tag:yaml.org,2002:merge"

# go.yaml.in/yaml/v2 resolve.go: its boolean and null words, strconv.ParseInt(…, 0, 64) after
# dropping underscores (no sexagesimal), and its `yamlStyleFloat` (the exponent needs no dot).
# Which first characters can start each is what PyYAML's resolver indexes them by.
_GO_IMPLICIT: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        _BOOL,
        re.compile(
            r"^(?:y|Y|yes|Yes|YES|true|True|TRUE|on|On|ON"
            r"|n|N|no|No|NO|false|False|FALSE|off|Off|OFF)$"
        ),
        "yYnNtTfFoO",
    ),
    (_NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), "~nN"),
    (
        _INT,
        re.compile(r"^[-+]?(?:0b[01][01_]*|0x[0-9a-fA-F][0-9a-fA-F_]*|0[0-7_]*|[1-9][0-9_]*)$"),
        "-+0123456789",
    ),
    (
        _FLOAT,
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        "-+0123456789.",
    ),
    (_MERGE, re.compile(r"^(?:<<)$"), "<"),
)


def _go_resolvers() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}
    for tag, pattern, first in _GO_IMPLICIT:
        for character in first:
            resolvers.setdefault(character, []).append((tag, pattern))
        if tag == _NULL:
            resolvers.setdefault("", []).append((tag, pattern))  # the empty scalar
    return resolvers


class ServeConfigLoader(_SafeBase):  # type: ignore[misc]
    """A SafeLoader that types plain scalars as KubeRay's Go YAML does (see the module doc)."""

    yaml_implicit_resolvers: ClassVar[dict[Any, list[tuple[str, re.Pattern[str]]]]] = (
        _go_resolvers()
    )
    bool_values: ClassVar[dict[str, bool]] = {
        **yaml.SafeLoader.bool_values,
        "y": True,
        "n": False,
    }


def load_serve_config(text: str) -> Any:
    """`text` parsed as KubeRay parses `serveConfigV2`; raises `yaml.YAMLError` (or
    `RecursionError` for absurd nesting) when it does not parse."""
    return yaml.load(text, Loader=ServeConfigLoader)  # a SafeLoader: no arbitrary objects
