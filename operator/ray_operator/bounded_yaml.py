"""Every YAML text a user writes is read here: typed as KubeRay's Go reads it, bounded as Go bounds
it, and bounded further where Go's bound is not enough for us.

Who calls: admission and the controllers for `RayService.spec.serveConfigV2` and
`RayJob.spec.runtimeEnvYAML` (`load_go_yaml`), and `ray-operator convert` for the documents it
converts (`load_documents`). No other module reads YAML a user controls (import-linter holds
`yaml` to this module and the dumpers).

**Typing.** KubeRay reads both fields with apimachinery's `yaml.Unmarshal` (sigs.k8s.io/yaml over
go.yaml.in/yaml/v2) into `map[string]interface{}` and sends Ray the JSON of that. PyYAML's
`safe_load` disagrees with it on plain scalars users write every day, so `GoYamlLoader` resolves
plain scalars with yaml.v2's table:

- `2024-01-01` is a `datetime.date` to PyYAML (which json cannot encode); yaml.v2 leaves a
  timestamp decoded into `interface{}` a string, and Ray gets the string;
- `5e-3` (no dot) is a string to PyYAML, a float to Go (the YAML 1.2 float pattern);
- `12:30` is the sexagesimal integer 750 to PyYAML, a string to Go;
- `y`, `Y`, `n`, `N` are booleans to yaml.v2 (as are yes/no/on/off, which PyYAML shares).

**Bounds.** PyYAML builds one object per anchor and shares it, so a 500-byte "billion laughs"
loads in microseconds, and the first `json.dumps`, hash or error message that walks the value
writes gigabytes. yaml.v2 refuses such a document while decoding it. Here, before anything is
built, the text's event stream is read once (`_BoundsCheck`: the parser keeps its own stack, so
nothing recurses, and each anchor's expanded size is kept, so an alias costs O(1): the check is
linear in the text and expands nothing). Refused, with Go's words (`YamlBoundsError`, an
`UnreadableYamlError` as is a text that does not parse):

- more than `MAX_DEPTH` nested collections: "yaml: exceeded max depth of 100". yaml.v2 allows
  10000, but PyYAML's composer recurses per level (in C under libyaml, whose own limit of 1000
  exists only since 0.2.5; older ones exhaust the C stack), and so do Python's json and our
  walkers;
- an alias inside its own anchor ("yaml: anchor 'a' value contains itself"), or to no anchor;
- yaml.v2's rule on aliases ("yaml: document contains excessive aliasing"): in decode.go every
  node decoded counts, those decoded through an alias count as aliased, and past 1000 decodes
  (100 of them aliased) the aliased share may not exceed `_allowed_alias_ratio`. It is computed
  here from the counts yaml.v2 would reach, checked where it could first fail: after each alias
  (within one, both counts only grow) and after each node outside aliases;
- an expanded size (nodes plus scalar characters, every alias expanded) beyond `MAX_EXPANSION`
  times the text, or `MIN_EXPANDED_SIZE` for a short one: "yaml: document contains excessive
  aliasing (it expands beyond 16 times its size)". Aliases of one long scalar pass yaml.v2's
  count of nodes; without aliases no text comes near this bound.

So whatever walks a loaded value (json, hashes, validation, messages) is linear in the text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import struct
from collections.abc import Iterator
from typing import Any, ClassVar

import yaml
import yaml.constructor

__all__ = [
    "MAX_DEPTH",
    "MAX_EXPANSION",
    "MIN_EXPANDED_SIZE",
    "GoYamlLoader",
    "UnreadableYamlError",
    "YamlBoundsError",
    "check_bounds",
    "load_documents",
    "load_go_yaml",
]

MAX_DEPTH = 100
"""Most collections nested in one another (a Serve config or runtime env needs about ten)."""
MAX_EXPANSION = 16
"""How many times its own length a text may expand to (nodes plus scalar characters)."""
MIN_EXPANDED_SIZE = 256 * 1024
"""What any text may expand to, however short (a small config that reuses one block often)."""

# go.yaml.in/yaml/v2 decode.go: between these decode counts the allowed aliased share falls
# from 99% to 10%.
_GO_ALIAS_RATIO_LOW = 400_000
_GO_ALIAS_RATIO_HIGH = 4_000_000
_GO_MIN_ALIASED = 100
_GO_MIN_DECODED = 1000
_SHOWN_ANCHOR_LENGTH = 40
_MESSAGE_LENGTH = 200
_INT64_MIN = -(2**63)
_UINT64_MAX = 2**64 - 1
_UINT64_DIGITS = 20

_SafeBase: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_NULL = "tag:yaml.org,2002:null"
_MERGE = "tag:yaml.org,2002:merge"


class UnreadableYamlError(ValueError):
    """A user's YAML that cannot be read; the message says why in one line of at most 200
    characters: `not valid YAML: ` and the parser's words, or Go's words for a bound."""


class YamlBoundsError(UnreadableYamlError):
    """The text is YAML, but reading it would cost more than its size allows; the message is
    Go's (`yaml: document contains excessive aliasing`, ...)."""


# --- reading -----------------------------------------------------------------------------------


def load_go_yaml(text: str) -> Any:
    """The one document of `text`, as sigs.k8s.io/yaml decodes it into `interface{}`; raises
    `UnreadableYamlError` (`YamlBoundsError` beyond a bound of the module doc)."""
    with _read_errors():
        check_bounds(text)
        return yaml.load(text, Loader=GoYamlLoader)  # a SafeLoader: no arbitrary objects


def load_documents(text: str) -> list[Any]:
    """Every non-empty document of `text`, typed as PyYAML's safe loader types them; raises as
    `load_go_yaml` does (the expanded size counts over all documents)."""
    with _read_errors():
        check_bounds(text)
        documents = yaml.load_all(text, Loader=_SafeBase)
        return [document for document in documents if document is not None]


def check_bounds(text: str) -> None:
    """Raise `YamlBoundsError` when `text` is beyond a bound (module doc); linear in `text`.
    A text that does not parse raises the parser's `yaml.YAMLError`."""
    check = _BoundsCheck(text_length=len(text))
    for event in yaml.parse(text, Loader=_SafeBase):
        check.take(event)


@contextlib.contextmanager
def _read_errors() -> Iterator[None]:
    """Whatever PyYAML raises as `UnreadableYamlError`: its errors, and the `ValueError` of
    Python's int (CVE-2020-10735: more than 4300 digits) or of a bad base64."""
    try:
        yield
    except UnreadableYamlError:
        raise
    except (yaml.YAMLError, ValueError) as error:
        first_line = " ".join(str(error).split())[:_MESSAGE_LENGTH]
        raise UnreadableYamlError(f"not valid YAML: {first_line}") from None


# --- the bounds, from the event stream ---------------------------------------------------------


def _allowed_alias_ratio(decodes: int) -> float:
    """yaml.v2's `allowedAliasRatio`: 99% of small documents may come from aliases, falling
    linearly to 10% between 400,000 and 4,000,000 decoded nodes."""
    if decodes <= _GO_ALIAS_RATIO_LOW:
        return 0.99
    if decodes >= _GO_ALIAS_RATIO_HIGH:
        return 0.10
    span = _GO_ALIAS_RATIO_HIGH - _GO_ALIAS_RATIO_LOW
    return 0.99 - 0.89 * ((decodes - _GO_ALIAS_RATIO_LOW) / span)


@dataclasses.dataclass(frozen=True)
class _Expansion:
    """What a node stands for with every alias in it expanded, counted, never built."""

    size: int
    """Nodes plus scalar characters."""
    decodes: int
    """The calls of yaml.v2's `unmarshal` it costs (merge keys and merge lists cost none)."""


@dataclasses.dataclass
class _OpenCollection:
    """A sequence or mapping whose end event is still to come."""

    anchor: str | None
    is_mapping: bool
    size: int
    decodes: int
    next_is_key: bool = True
    """In a mapping: whether the next node is a key (else a value)."""
    next_is_merged: bool = False
    """In a mapping: whether the next node is the value of a merge key `<<`."""


_ANCHOR_OPEN = None
"""In `_BoundsCheck.anchors`: the anchored collection has not ended yet."""


class _BoundsCheck:
    """Reads one stream's events, keeping yaml.v2's counts and the expanded size; raises
    `YamlBoundsError` at the first event beyond a bound."""

    def __init__(self, *, text_length: int) -> None:
        self.limit = max(MIN_EXPANDED_SIZE, MAX_EXPANSION * text_length)
        self.stream_size = 0
        self._start_document()

    def take(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.ScalarEvent):
            self._scalar(event)
        elif isinstance(event, yaml.AliasEvent):
            self._alias(event)
        elif isinstance(event, yaml.CollectionStartEvent):
            self._collection_start(event)
        elif isinstance(event, yaml.CollectionEndEvent):
            self._collection_end()
        elif isinstance(event, yaml.DocumentStartEvent):
            self._start_document()

    def _start_document(self) -> None:
        self.anchors: dict[str, _Expansion | None] = {}
        self.open: list[_OpenCollection] = []
        self.decodes = 1  # yaml.v2 decodes the document node too
        self.aliased = 0

    def _scalar(self, event: yaml.ScalarEvent) -> None:
        merge_key = self._next_is_key() and _is_merge_key(event)
        decodes = 0 if merge_key else 1
        self._count_decodes(decodes)
        expansion = _Expansion(size=1 + len(event.value), decodes=decodes)
        if event.anchor is not None:
            self.anchors[event.anchor] = expansion
        self._add_to_parent(expansion, merge_key=merge_key)

    def _alias(self, event: yaml.AliasEvent) -> None:
        name = str(event.anchor)
        if name not in self.anchors:
            raise YamlBoundsError(f"yaml: unknown anchor {_shown_anchor(name)} referenced")
        target = self.anchors[name]
        if target is None:  # _ANCHOR_OPEN
            raise YamlBoundsError(f"yaml: anchor {_shown_anchor(name)} value contains itself")
        # Decoding the alias node, then all of its target under the alias.
        self.decodes += 1 + target.decodes
        self.aliased += target.decodes
        self._check_go_aliasing()
        self._add_to_parent(_Expansion(size=target.size, decodes=1 + target.decodes))

    def _collection_start(self, event: yaml.CollectionStartEvent) -> None:
        if len(self.open) >= MAX_DEPTH:
            raise YamlBoundsError(f"yaml: exceeded max depth of {MAX_DEPTH}")
        # yaml.v2 decodes the entries of a merge list, never the list itself.
        merge_list = isinstance(event, yaml.SequenceStartEvent) and self._next_is_merged()
        decodes = 0 if merge_list else 1
        self._count_decodes(decodes)
        is_mapping = isinstance(event, yaml.MappingStartEvent)
        self.open.append(_OpenCollection(event.anchor, is_mapping, size=1, decodes=decodes))
        if event.anchor is not None:
            self.anchors[event.anchor] = _ANCHOR_OPEN

    def _collection_end(self) -> None:
        ended = self.open.pop()
        expansion = _Expansion(size=ended.size, decodes=ended.decodes)
        if ended.anchor is not None:
            self.anchors[ended.anchor] = expansion
        self._add_to_parent(expansion)

    def _next_is_key(self) -> bool:
        return bool(self.open) and self.open[-1].is_mapping and self.open[-1].next_is_key

    def _next_is_merged(self) -> bool:
        return bool(self.open) and self.open[-1].next_is_merged

    def _count_decodes(self, decodes: int) -> None:
        """A node decoded outside any alias: only the total grows (the aliased share falls, but
        the allowed share may fall faster in yaml.v2's sliding range)."""
        self.decodes += decodes
        if decodes:
            self._check_go_aliasing()

    def _check_go_aliasing(self) -> None:
        if (
            self.aliased > _GO_MIN_ALIASED
            and self.decodes > _GO_MIN_DECODED
            and self.aliased / self.decodes > _allowed_alias_ratio(self.decodes)
        ):
            raise YamlBoundsError("yaml: document contains excessive aliasing")

    def _add_to_parent(self, expansion: _Expansion, *, merge_key: bool = False) -> None:
        if not self.open:
            self.stream_size += expansion.size
            self._check_size(self.stream_size)
            return
        parent = self.open[-1]
        parent.size += expansion.size
        parent.decodes += expansion.decodes
        self._check_size(parent.size)
        if parent.is_mapping:
            parent.next_is_merged = merge_key
            parent.next_is_key = not parent.next_is_key

    def _check_size(self, size: int) -> None:
        # A part is never larger than the whole: refusing the first part beyond the limit
        # refuses the document, and keeps every count below the limit.
        if size > self.limit:
            raise YamlBoundsError(
                "yaml: document contains excessive aliasing "
                f"(it expands beyond {MAX_EXPANSION} times its size)"
            )


def _is_merge_key(event: yaml.ScalarEvent) -> bool:
    """yaml.v2's `isMerge`: a plain `<<`, or one tagged `!!merge`."""
    plain = event.tag is None and event.implicit[0]
    return event.value == "<<" and (plain or event.tag == _MERGE)


def _shown_anchor(name: str) -> str:
    if len(name) > _SHOWN_ANCHOR_LENGTH:
        name = name[:_SHOWN_ANCHOR_LENGTH] + "..."
    return f"'{name}'"


# --- typing: yaml.v2's resolution of plain scalars --------------------------------------------

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
        re.compile(
            r"^[-+]?(?:0b[01][01_]*|0x[0-9a-fA-F][0-9a-fA-F_]*|0o[0-7_]+|0[0-7_]*|[1-9][0-9_]*)$"
        ),
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

# yaml.v2's `yamlStyleFloat`, which decides whether an integer too large for 64 bits is a float.
_GO_FLOAT_SYNTAX = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


def _go_resolvers() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}
    for tag, pattern, first in _GO_IMPLICIT:
        for character in first:
            resolvers.setdefault(character, []).append((tag, pattern))
        if tag == _NULL:
            resolvers.setdefault("", []).append((tag, pattern))  # the empty scalar
    return resolvers


class GoYamlLoader(_SafeBase):  # type: ignore[misc]
    """A SafeLoader that reads as KubeRay's Go does (see the module doc), on libyaml's parser when
    PyYAML has it (several times faster for a config of a megabyte). Unbounded by itself: read
    user text with `load_go_yaml`."""

    yaml_implicit_resolvers: ClassVar[dict[Any, list[tuple[str, re.Pattern[str]]]]] = (
        _go_resolvers()
    )
    bool_values: ClassVar[dict[str, bool]] = {
        **yaml.SafeLoader.bool_values,
        "y": True,
        "n": False,
    }

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[str, Any]:
        """Keys as sigs.k8s.io/yaml writes them into JSON, each as it is read (so `1:` and
        `true:` stay two keys): `y: 2` beside `x: 1` is `"true": 2`, not a `True` that no
        sorted JSON encoder can put beside a string."""
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)  # merge keys, as SafeConstructor does
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = _go_json_key(self.construct_object(key_node, deep=deep), key_node)
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int | float | str:
        """yaml.v2's `resolve` of an integer: int64 or uint64, else a float64 when it is one,
        else the text (so never Python's 4300-digit ValueError)."""
        text = str(self.construct_scalar(node))
        plain = text.replace("_", "")
        unsigned = plain.lstrip("+-")
        value: int | None
        if unsigned.startswith("0o"):
            value = int(plain.replace("0o", "", 1), 8)  # yaml.v2 reads Go's 0o prefix too
        elif len(unsigned) <= _UINT64_DIGITS:
            value = super().construct_yaml_int(node)
        else:
            value = None
        if value is not None and _INT64_MIN <= value <= _UINT64_MAX:
            return value
        if _GO_FLOAT_SYNTAX.match(plain) and not math.isinf(number := float(plain)):
            return number
        return text

    def construct_go_string(self, node: yaml.ScalarNode) -> str:
        """An explicit `!!timestamp`: yaml.v2 decodes it into `interface{}` as the text."""
        return str(self.construct_scalar(node))

    def construct_go_binary(self, node: yaml.ScalarNode) -> str:
        """An explicit `!!binary`: yaml.v2 decodes the bytes into a Go string, which Go's JSON
        writes with U+FFFD for what is not UTF-8."""
        data: bytes = self.construct_yaml_binary(node)
        return data.decode("utf-8", errors="replace")


# PyYAML's constructors are looked up by tag, not by method name. Besides integers: the explicit
# tags PyYAML builds into what JSON cannot hold, or holds otherwise than Go.
GoYamlLoader.add_constructor(_INT, GoYamlLoader.construct_yaml_int)
GoYamlLoader.add_constructor("tag:yaml.org,2002:timestamp", GoYamlLoader.construct_go_string)
GoYamlLoader.add_constructor("tag:yaml.org,2002:binary", GoYamlLoader.construct_go_binary)
GoYamlLoader.add_constructor("tag:yaml.org,2002:set", GoYamlLoader.construct_yaml_map)
GoYamlLoader.add_constructor("tag:yaml.org,2002:omap", GoYamlLoader.construct_yaml_seq)
GoYamlLoader.add_constructor("tag:yaml.org,2002:pairs", GoYamlLoader.construct_yaml_seq)


def _go_json_key(key: Any, node: yaml.Node) -> str:
    """sigs.k8s.io/yaml's `convertToJSONableObject` of a map key."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        return _go_float32_text(key)
    raise yaml.constructor.ConstructorError(
        None,
        None,
        f"unsupported map key of type: {_GO_TYPE_NAMES.get(type(key), 'unknown')}",
        node.start_mark,
    )


_GO_TYPE_NAMES = {type(None): "<nil>"}
_FLOAT32 = struct.Struct("f")


def _go_float32_text(value: float) -> str:
    """Go's `strconv.FormatFloat(value, 'g', -1, 32)`, with yaml's names for the infinities."""
    if math.isnan(value):
        return ".nan"
    try:
        single = _FLOAT32.unpack(_FLOAT32.pack(value))[0]
    except OverflowError:
        single = math.copysign(math.inf, value)
    if math.isinf(single):
        return ".inf" if single > 0 else "-.inf"
    if single == 0:
        return "-0" if math.copysign(1.0, single) < 0 else "0"
    sign = "-" if single < 0 else ""
    digits, exponent = _shortest_float32_digits(abs(single))
    if exponent < -4 or exponent >= 6:  # Go's %g: precision 6 decides when shortest
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    point = exponent + 1
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _shortest_float32_digits(value: float) -> tuple[str, int]:
    """The fewest significant digits that read back as the same float32, and the decimal
    exponent of the first."""
    for precision in range(9):  # nine digits always suffice for a float32
        text = f"{value:.{precision}e}"
        if _FLOAT32.unpack(_FLOAT32.pack(float(text)))[0] == value:
            break
    mantissa, _, exponent = text.partition("e")
    return mantissa.replace(".", "").rstrip("0") or "0", int(exponent)
