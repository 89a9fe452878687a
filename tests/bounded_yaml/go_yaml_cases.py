"""KubeRay's Go YAML's own answers, read from go_yaml_cases.json (made by oracle/make_cases.py)."""

from __future__ import annotations

import dataclasses
import json
import pathlib

CASES_FILE = pathlib.Path(__file__).with_name("go_yaml_cases.json")


@dataclasses.dataclass(frozen=True)
class GoYamlCase:
    name: str
    text: str
    error: str
    """sigs.k8s.io/yaml's error (its first 300 characters), or "" when it decoded the text."""
    json_length: int
    """The length of the canonical JSON of what it decoded (keys sorted, no spaces)."""
    json_sha256: str
    json: str | None
    """That JSON itself, when it is short."""


def load_cases() -> list[GoYamlCase]:
    return [
        GoYamlCase(
            name=case["name"],
            text=case["text"],
            error=case.get("error", ""),
            json_length=case.get("json_length", 0),
            json_sha256=case.get("json_sha256", ""),
            json=case.get("json"),
        )
        for case in json.loads(CASES_FILE.read_text())
    ]


def canonical_json(text: str) -> str:
    """JSON text as the cases keep it: every number a float64 (sigs.k8s.io/yaml decodes numbers
    into float64, so KubeRay's `3` and `3.0` are one value), keys sorted, no spaces."""
    value = json.loads(text, parse_int=float)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
