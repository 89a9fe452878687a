"""The bytes Go's `encoding/json.Marshal` writes for a typed value decoded from JSON.

KubeRay hashes `json.Marshal` of its typed `RayClusterSpec` (read from the API server), so the
hash of the same spec here needs the same bytes. `marshal(value, type_name)` takes the value as
the API server sends it (a JSON-shaped mapping) and replays, over the field layout generated from
KubeRay's Go types (`ray_io.go_layout`), both Go steps: decoding into the typed struct and encoding
it again. What that means, rule by rule:

- struct fields in Go declaration order (embedded structs flattened), unknown fields dropped
  (the decoder ignores them); an absent or null field is Go's zero value;
- `omitempty` drops false, 0, "", nil pointers and empty slices and maps, never a struct value;
  `omitzero` drops a zero value; any other nil pointer, slice or map is written as `null`, and a
  struct value is always written, with its own zero fields (`"scaleStrategy":{}`);
- map keys sorted; strings escaped as Go does (`<`, `>`, `&`, U+2028, U+2029 as \\u escapes,
  control characters as \\b \\f \\n \\r \\t or \\u00xx, everything else raw UTF-8);
- `resource.Quantity` in its canonical form (see `quantity.go_json_quantity`), `IntOrString` as
  the number or string it was decoded from, `metav1.Time` as RFC 3339 in UTC (null when zero).

A value Go would refuse to decode (a string for an integer, an integer out of its Go range, a
malformed quantity) raises `GoDecodeError`: KubeRay could not read such an object at all.

Cost: O(size of the value), one pass. Recursion follows the Go types, not the input: the types
reachable from RayClusterSpec are not recursive (building an encoder refuses a recursive one), so
the depth is bounded by their nesting, whatever the input; the input itself is bounded by etcd's
1.5 MiB object limit.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from ray_io import go_layout

from ray_operator.spec.quantity import InvalidQuantityError, go_json_quantity

Encoder = Callable[[Any, list[str]], None]

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}
# Characters after which a string needs more than quotes around it: what JSON must escape, what
# Go escapes besides (HTML-significant characters and the two JavaScript line separators), and
# lone surrogates, which Go's decoder has already turned into U+FFFD.
_NEEDS_ESCAPING = re.compile('[\x00-\x1f"\\\\<>&\u2028\u2029\ud800-\udfff]')
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_GO_ONLY_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


class GoDecodeError(ValueError):
    """A value Go's `encoding/json` would refuse to decode into the field's type; `path` names
    the field from the root (`headGroupSpec.template.spec.containers[0].resources.limits[cpu]`)."""

    def __init__(self, reason: str, path: str = "") -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.reason = reason
        self.path = path

    def within(self, step: str) -> GoDecodeError:
        """The same error one level up: `step` is a field name, `[index]` or `[key]`."""
        path = (
            step + self.path
            if self.path.startswith("[") or not self.path
            else step + "." + self.path
        )
        return GoDecodeError(self.reason, path.lstrip("."))


class UnsupportedGoTypeError(TypeError):
    """The generated layout has a type or option this encoder does not model."""


def marshal(value: Mapping[str, Any] | None, type_name: str = go_layout.ROOT) -> bytes:
    """`json.Marshal` of `value` decoded into the Go struct `type_name` (see the module doc)."""
    out: list[str] = []
    _encoder(type_name)(value, out)
    return "".join(out).encode()


def go_string(text: str) -> str:
    """`text` as a Go JSON string literal, quotes included."""
    if _NEEDS_ESCAPING.search(text) is None:
        return f'"{text}"'
    text = _LONE_SURROGATE.sub("\ufffd", text)
    # Python's escapes for quotes, backslashes and control characters are Go's (short forms for
    # \b \f \n \r \t, lowercase \u00xx otherwise); Go escapes five more characters.
    return json.dumps(text, ensure_ascii=False).translate(_GO_ONLY_ESCAPES)


@functools.cache
def _encoder(type_ref: str) -> Encoder:
    """The encoder of one type of the layout language, built once per distinct type and shared
    by every field of that type (a few hundred closures in all)."""
    if type_ref.startswith("*"):
        return _pointer_encoder(_encoder(type_ref[1:]))
    if type_ref.startswith("[]"):
        return _slice_encoder(_encoder(type_ref[2:]))
    if type_ref.startswith("map[string]"):
        return _map_encoder(_encoder(type_ref[len("map[string]") :]))
    if type_ref in _SCALARS:
        return _SCALARS[type_ref]
    if type_ref in _INT_RANGES:
        return _int_encoder(type_ref)
    if type_ref in go_layout.STRUCTS:
        if type_ref in _being_built:
            raise UnsupportedGoTypeError(f"{type_ref} is recursive: its depth would follow input")
        _being_built.add(type_ref)
        try:
            return _struct_encoder(type_ref)
        finally:
            _being_built.discard(type_ref)
    raise UnsupportedGoTypeError(f"type {type_ref!r} is not modelled by the Go JSON encoder")


_being_built: set[str] = set()


def _pointer_encoder(element: Encoder) -> Encoder:
    def encode(value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
        else:
            element(value, out)

    return encode


def _slice_encoder(element: Encoder) -> Encoder:
    def encode(value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
            return
        if not isinstance(value, list):
            raise GoDecodeError(f"expected a JSON array, got {_kind(value)}")
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            try:
                element(item, out)
            except GoDecodeError as error:
                raise error.within(f"[{index}]") from None
        out.append("]")

    return encode


def _map_encoder(element: Encoder) -> Encoder:
    def encode(value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
            return
        if not _is_object(value):
            raise GoDecodeError(f"expected a JSON object, got {_kind(value)}")
        out.append("{")
        # Go sorts by the UTF-8 bytes of the keys: for valid text, code point order.
        for index, key in enumerate(sorted(_LONE_SURROGATE.sub("\ufffd", k) for k in value)):
            if index:
                out.append(",")
            out.append(go_string(key))
            out.append(":")
            try:
                element(_map_value(value, key), out)
            except GoDecodeError as error:
                raise error.within(f"[{key}]") from None
        out.append("}")

    return encode


def _map_value(value: Mapping[str, Any], key: str) -> Any:
    # Only a key with a lone surrogate was rewritten: find the original (rare, and harmless).
    if key in value:
        return value[key]
    return next(v for k, v in value.items() if _LONE_SURROGATE.sub("\ufffd", k) == key)


def _struct_encoder(name: str) -> Encoder:
    fields = tuple(
        (
            json_name,
            f'"{json_name}":',
            f',"{json_name}":',
            _encoder(type_ref),
            _omit(type_ref, flags),
        )
        for json_name, type_ref, flags in go_layout.STRUCTS[name]
    )
    position = {field[0]: index for index, field in enumerate(fields)}
    # What an absent field writes is fixed per field: computed once. Then a struct costs
    # O(fields present + fields always written), not O(all fields) (Volume has 30).
    zero_written = {
        index: _zero(field[3]) for index, field in enumerate(fields) if field[4] is None
    }
    zero_struct = "{" + ",".join(fields[i][1] + text for i, text in zero_written.items()) + "}"

    def encode(value: Any, out: list[str]) -> None:
        if value is None or (_is_object(value) and not value):
            out.append(zero_struct)
            return
        if not _is_object(value):
            raise GoDecodeError(f"expected a JSON object for {name}, got {_kind(value)}")
        present = {position[key] for key in value if key in position}
        out.append("{")
        first = True
        for index in sorted(present.union(zero_written)):
            json_name, prefix, comma_prefix, field_encoder, omit = fields[index]
            field_value = value.get(json_name)
            if field_value is None and index in zero_written:
                out.append((prefix if first else comma_prefix) + zero_written[index])
                first = False
                continue
            if omit is not None and omit(field_value):
                continue
            out.append(prefix if first else comma_prefix)
            first = False
            try:
                field_encoder(field_value, out)
            except GoDecodeError as error:
                raise error.within(json_name) from None
        out.append("}")

    return encode


def _is_object(value: Any) -> bool:
    # `type() is dict` first: what JSON decoding gives, and much cheaper than an ABC check.
    return type(value) is dict or isinstance(value, Mapping)


def _zero(encode: Encoder) -> str:
    out: list[str] = []
    encode(None, out)
    return "".join(out)


def _omit(type_ref: str, flags: int) -> Callable[[Any], bool] | None:
    """The test that drops a field, or None when it is always written."""
    if flags & go_layout.OMITZERO:
        if type_ref == "Time" or type_ref.startswith("*"):
            return _is_null
        raise UnsupportedGoTypeError(f"omitzero on {type_ref!r} is not modelled")
    if not flags & go_layout.OMITEMPTY:
        return None
    if type_ref.startswith("*"):
        return _is_null  # a pointer to {} or false is not nil
    if type_ref.startswith(("[]", "map[")):
        return _is_empty_container
    if type_ref in ("bool", "string") or type_ref in _INT_RANGES:
        return _is_empty_scalar
    return None  # a struct value, or a type with its own marshaler: omitempty never drops it


def _is_null(value: Any) -> bool:
    return value is None


def _is_empty_container(value: Any) -> bool:
    return value is None or ((type(value) is list or _is_object(value)) and len(value) == 0)


def _is_empty_scalar(value: Any) -> bool:
    return value is None or value is False or value == "" or (type(value) is int and value == 0)


def _encode_bool(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("false")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    else:
        raise GoDecodeError(f"expected a boolean, got {_kind(value)}")


def _encode_string(value: Any, out: list[str]) -> None:
    if value is None:
        out.append('""')
    elif isinstance(value, str):
        out.append(go_string(value))
    else:
        raise GoDecodeError(f"expected a string, got {_kind(value)}")


def _int_encoder(type_ref: str) -> Encoder:
    low, high = _INT_RANGES[type_ref]

    def encode(value: Any, out: list[str]) -> None:
        if value is None:
            out.append("0")
        elif type(value) is int and low <= value <= high:
            out.append(str(value))
        elif type(value) is int:
            raise GoDecodeError(f"out of the {type_ref} range")
        else:
            raise GoDecodeError(f"expected an {type_ref}, got {_kind(value)}")

    return encode


def _encode_quantity(value: Any, out: list[str]) -> None:
    if value is None:
        out.append('"0"')  # the zero Quantity
        return
    try:
        out.append(go_string(go_json_quantity(value)))
    except InvalidQuantityError as error:
        raise GoDecodeError(f"invalid quantity: {error}") from None


def _encode_int_or_string(value: Any, out: list[str]) -> None:
    # IntOrString decodes a JSON string as a string, anything else as an int32.
    if isinstance(value, str):
        out.append(go_string(value))
    else:
        _INT32(value, out)


def _encode_time(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
        return
    if not isinstance(value, str):
        raise GoDecodeError(f"expected an RFC 3339 time, got {_kind(value)}")
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise GoDecodeError("expected an RFC 3339 time") from None
    if parsed.tzinfo is None:
        raise GoDecodeError("expected an RFC 3339 time with a time zone")
    # metav1.Time keeps whole seconds, in UTC.
    utc = parsed.astimezone(datetime.UTC)
    out.append(utc.strftime('"%Y-%m-%dT%H:%M:%SZ"'))


def _refuse_fields_v1(value: Any, out: list[str]) -> None:
    # managedFields inside a Pod template: the CRD's embedded metadata schema prunes them, so a
    # stored object never has them; raw JSON spelling could not be reproduced from a dict anyway.
    if value is not None:
        raise GoDecodeError("managedFields in an embedded object are not modelled")
    out.append("null")


_INT32 = _int_encoder("int32")
_SCALARS: dict[str, Encoder] = {
    "bool": _encode_bool,
    "string": _encode_string,
    "Quantity": _encode_quantity,
    "IntOrString": _encode_int_or_string,
    "Time": _encode_time,
    "FieldsV1": _refuse_fields_v1,
}


def _kind(value: Any) -> str:
    return type(value).__name__


# Built at import (under the import lock): no thread ever sees a half-built encoder table.
_encoder(go_layout.ROOT)
