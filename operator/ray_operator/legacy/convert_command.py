"""`ray-operator convert FILE|-`: the YAML around `conversion.convert_legacy_cluster`.

Reads one or many YAML documents, converts every legacy RayCluster, passes every other document
through as parsed, and writes them to stdout as YAML (or one JSON document, as kubectl does).
Warnings go to stderr, one line each. When any document has problems, every problem of every
document goes to stderr, stdout stays empty, and the exit code is 2.

Input is bounded: at most 16 MiB, and YAML aliases may not expand it beyond a few times that
(a "billion laughs" document is refused while it is parsed, not after it filled the memory).
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import yaml

from ray_operator.legacy.conversion import (
    LegacyConversionError,
    convert_legacy_cluster,
    is_legacy_cluster,
)

MAX_INPUT_BYTES = 16 * 2**20
# Aliases let a small document stand for a huge tree. Counted as nodes plus scalar characters,
# the expanded documents may be at most this big (a plain 16 MiB document stays below it).
MAX_EXPANDED_SIZE = 4 * MAX_INPUT_BYTES
USAGE_ERROR = 2

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class InputError(ValueError):
    """The input cannot be read as YAML documents; the message says why."""


class _BoundedLoader(_Loader):  # type: ignore[valid-type,misc]
    """A safe loader that refuses documents whose aliases expand beyond MAX_EXPANDED_SIZE."""

    expanded = 0

    def construct_document(self, node: yaml.Node) -> Any:
        self.expanded += _expanded_size(node, limit=MAX_EXPANDED_SIZE - self.expanded)
        return super().construct_document(node)


class _Dumper(yaml.SafeDumper):
    """Writes shared parts out in full, never as anchors: output a reader can apply anywhere."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


@dataclass(frozen=True)
class ConvertedDocuments:
    """The documents to write, and the lines for stderr."""

    documents: list[Any]
    warnings: list[str]
    problems: list[str]


def run_convert(source: str, *, output: str, stdout: IO[str], stderr: IO[str]) -> int:
    """Convert `source` (a path, or `-` for stdin) and write the result; the exit code."""
    try:
        text = _read_input(source)
        documents = load_documents(text)
    except InputError as error:
        print(f"ray-operator convert: {error}", file=stderr)
        return USAGE_ERROR
    converted = convert_documents(documents)
    for line in [*converted.warnings, *converted.problems]:
        print(line, file=stderr)
    if converted.problems:
        return USAGE_ERROR
    stdout.write(render(converted.documents, output=output))
    return 0


def _read_input(source: str) -> str:
    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(source, "rb") as file:
                data = file.read(MAX_INPUT_BYTES + 1)
    except OSError as error:
        raise InputError(f"cannot read {source}: {error.strerror}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"{source} is larger than {MAX_INPUT_BYTES // 2**20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{source} is not UTF-8 text") from None


def load_documents(text: str) -> list[Any]:
    """The non-empty YAML documents of `text`; InputError when it is not bounded YAML."""
    try:
        return [
            document
            for document in yaml.load_all(text, Loader=_BoundedLoader)
            if document is not None
        ]
    except yaml.YAMLError as error:
        raise InputError(f"not YAML: {_first_line(error)}") from None
    except RecursionError:
        raise InputError("not YAML this operator reads: nested too deeply") from None


def convert_documents(documents: list[Any]) -> ConvertedDocuments:
    """Every legacy RayCluster converted, every other document as it is; messages prefixed with
    the document's index (from 1)."""
    result = ConvertedDocuments(documents=[], warnings=[], problems=[])
    for index, document in enumerate(documents, start=1):
        if not is_legacy_cluster(document):
            result.documents.append(document)
            continue
        try:
            conversion = convert_legacy_cluster(document)
        except LegacyConversionError as error:
            result.problems.extend(f"document {index}: {problem}" for problem in error.problems)
            continue
        result.documents.append(conversion.cluster)
        result.warnings.extend(f"document {index}: {warning}" for warning in conversion.warnings)
    return result


def render(documents: list[Any], *, output: str) -> str:
    """YAML documents separated by `---`, or one JSON document (a List when there are several)."""
    if output == "json":
        single = len(documents) == 1
        body = documents[0] if single else {"apiVersion": "v1", "kind": "List", "items": documents}
        return json.dumps(body, indent=4, ensure_ascii=False, default=_json_scalar) + "\n"
    if not documents:
        return ""
    return yaml.dump_all(
        documents, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )


def _json_scalar(value: Any) -> str:
    """YAML scalars JSON lacks, as the strings Kubernetes would read them as."""
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, bytes):
        import base64

        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


def _expanded_size(root: yaml.Node, *, limit: int) -> int:
    """Nodes plus scalar characters of `root` with every alias expanded, computed once per node
    (so linear in the document); InputError beyond `limit`."""
    sizes: dict[int, int] = {}
    for node in _post_order(root):
        if isinstance(node, yaml.ScalarNode):
            size = 1 + len(node.value)
        else:
            children = [sizes.get(id(child)) for child in _children(node)]
            if None in children:
                raise yaml.YAMLError("an alias refers to the node it is in")
            size = 1 + sum(child for child in children if child is not None)
        if size > limit:
            raise yaml.YAMLError(
                "its aliases expand it beyond "
                f"{MAX_EXPANDED_SIZE // MAX_INPUT_BYTES} times the largest input"
            )
        sizes[id(node)] = size
    return sizes[id(root)]


def _post_order(root: yaml.Node) -> Iterator[yaml.Node]:
    """Each node once, children first, without recursion (documents may nest deeply)."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            yield node
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for child in _children(node):
            if id(child) not in seen:
                stack.append((child, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _first_line(error: yaml.YAMLError) -> str:
    return " ".join(str(error).split())[:300]
