"""`ray-operator convert FILE|-`: the YAML around `conversion.convert_legacy_cluster`.

Reads one or many YAML documents, converts every legacy RayCluster, passes every other document
through as parsed, and writes them to stdout as YAML (or one JSON document, as kubectl does).
Warnings go to stderr, one line each. When any document has problems, every problem of every
document goes to stderr, stdout stays empty, and the exit code is 2.

Input is bounded: at most 16 MiB, read by the operator's one loader for user YAML
(`bounded_yaml.load_documents`): a "billion laughs" document is refused before anything is
built, as Go's YAML refuses it (`yaml: document contains excessive aliasing`).
"""

from __future__ import annotations

import datetime
import json
import sys
from dataclasses import dataclass
from typing import IO, Any

import yaml

from ray_operator.bounded_yaml import UnreadableYamlError, YamlBoundsError
from ray_operator.bounded_yaml import load_documents as load_yaml_documents
from ray_operator.legacy.conversion import (
    LegacyConversionError,
    convert_legacy_cluster,
    is_legacy_cluster,
)

MAX_INPUT_BYTES = 16 * 2**20
USAGE_ERROR = 2


class InputError(ValueError):
    """The input cannot be read as YAML documents; the message says why."""


class _Dumper(yaml.SafeDumper):
    """Writes shared parts out in full, never as anchors: output a reader can apply anywhere."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


# A YAML set (`!!set`) iterates in hash order, which changes from run to run: written sorted, the
# output bytes stay the same.
_Dumper.add_representer(set, lambda dumper, data: dumper.represent_set(sorted(data, key=str)))


@dataclass(frozen=True)
class ConvertedDocuments:
    """The documents to write, and the lines for stderr."""

    documents: list[Any]
    warnings: list[str]
    problems: list[str]


def run_convert(source: str, *, output: str, stdout: IO[str], stderr: IO[str]) -> int:
    """Convert `source` (a path, or `-` for stdin) and write the result; the exit code."""
    try:
        documents = load_documents(_read_input(source), name=source)
    except InputError as error:
        print(f"ray-operator convert: {error}", file=stderr)
        return USAGE_ERROR
    converted = convert_documents(documents)
    for line in [*converted.warnings, *converted.problems]:
        print(line, file=stderr)
    if converted.problems:
        return USAGE_ERROR
    try:
        text = render(converted.documents, output=output)
    except ValueError as error:
        print(f"ray-operator convert: cannot write {output}: {error}", file=stderr)
        return USAGE_ERROR
    stdout.write(text)
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


def load_documents(text: str, *, name: str = "-") -> list[Any]:
    """The non-empty YAML documents of `text` (read from `name`); InputError when it is not
    bounded YAML."""
    try:
        return load_yaml_documents(text)
    except YamlBoundsError as error:
        raise InputError(str(error)) from None
    except UnreadableYamlError as error:
        raise InputError(str(error).replace('"<unicode string>"', name)) from None


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
        # allow_nan=False: YAML's .inf and .nan have no JSON form.
        text = json.dumps(body, indent=4, ensure_ascii=False, allow_nan=False, default=_json_scalar)
        return text + "\n"
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
    raise ValueError(f"cannot write a {type(value).__name__} as JSON")
