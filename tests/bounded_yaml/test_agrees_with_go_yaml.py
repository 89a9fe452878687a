"""Specification: `load_go_yaml` refuses what KubeRay's Go YAML refuses, and reads the rest as it.

The answers are sigs.k8s.io/yaml's own (v1.6.0 over go.yaml.in/yaml/v2 v2.4.2, recorded in
go_yaml_cases.json by oracle/make_cases.py): the billion laughs at 1 to 9 levels, random alias
graphs (lists, mappings, merges, long scalars, padding before or after), documents whose aliased
share sits near yaml.v2's limit on both sides of its sliding range, and hand-picked ordinary ones
(a Serve config and a runtime env with anchors and merges, yaml.v2's scalar typing, keys).

Where we part from Go, on purpose, each case says why:
- our own bounds are stricter: nesting beyond 100 levels, and an expansion beyond 16 times the
  text (Go accepts 400,000 decoded nodes from any text, and aliases of one long scalar are one
  node each) — both only refuse, and only texts Go expands past these bounds;
- a second document is refused (Go silently decodes the first one only);
- infinity loads (Go decodes it, then fails to write it as JSON);
- an anchor defined twice is refused (by PyYAML's libyaml composer; Go takes the last).
"""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml
from ray_operator.bounded_yaml import (
    MAX_DEPTH,
    MAX_EXPANSION,
    MIN_EXPANDED_SIZE,
    YamlBoundsError,
    load_go_yaml,
)

from tests.bounded_yaml.go_yaml_cases import GoYamlCase, canonical_json, load_cases

CASES = load_cases()
GO_PREFIX = "error converting YAML to JSON: "
EXCESSIVE_ALIASING = "yaml: document contains excessive aliasing"
# Go's errors we answer in Go's own words (after its "error converting YAML to JSON: ").
GO_WORDS = ("yaml: anchor ", "yaml: unknown anchor ")
ACCEPTED_DIFFERENCES = {
    "two documents": "refused: Go decodes the first document and drops the rest silently",
    "infinity, which JSON cannot write": "loaded: Go fails when it writes the value as JSON",
    "an anchor redefined": "refused: libyaml's composer in PyYAML refuses it (Go takes the last)",
}
"""Where we differ from Go on purpose: what we do (`refused` or `loaded`), and why."""


def nesting_depth(text: str) -> int:
    """The deepest nesting of collections in `text`, from PyYAML's own events."""
    depth = deepest = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            deepest = max(deepest, depth)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return deepest


def expansion_limit(text: str) -> int:
    return max(MIN_EXPANDED_SIZE, MAX_EXPANSION * len(text))


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_go_yaml_agrees(case: GoYamlCase) -> None:
    if case.name in ACCEPTED_DIFFERENCES:
        assert_the_documented_difference(case, ACCEPTED_DIFFERENCES[case.name])
    elif case.error:
        assert_refused_as_go_refuses(case)
    else:
        assert_read_as_go_reads(case)


def assert_the_documented_difference(case: GoYamlCase, difference: str) -> None:
    """We do what ACCEPTED_DIFFERENCES says, and Go does the other thing."""
    if difference.startswith("refused"):
        assert not case.error, f"Go refuses {case.name!r} too: no difference to accept"
        with pytest.raises((yaml.YAMLError, ValueError)):
            load_go_yaml(case.text)
    else:
        assert case.error, f"Go reads {case.name!r} too: no difference to accept"
        load_go_yaml(case.text)


def assert_refused_as_go_refuses(case: GoYamlCase) -> None:
    go_error = case.error.removeprefix(GO_PREFIX)
    with pytest.raises((yaml.YAMLError, ValueError)) as refused:
        load_go_yaml(case.text)
    if go_error.startswith(EXCESSIVE_ALIASING):
        assert isinstance(refused.value, YamlBoundsError)
        assert str(refused.value).startswith(EXCESSIVE_ALIASING)
    elif go_error.startswith(GO_WORDS):
        assert isinstance(refused.value, YamlBoundsError)
        assert str(refused.value) == go_error


def assert_read_as_go_reads(case: GoYamlCase) -> None:
    refused: YamlBoundsError | None = None
    try:
        value = load_go_yaml(case.text)
    except YamlBoundsError as error:
        refused = error
    if refused is not None:
        # Only our stricter bounds may refuse what Go reads, and only beyond them.
        if str(refused) == f"yaml: exceeded max depth of {MAX_DEPTH}":
            assert nesting_depth(case.text) > MAX_DEPTH
        else:
            assert str(refused).startswith(EXCESSIVE_ALIASING)
            assert case.json_length > expansion_limit(case.text)
        return
    ours = canonical_json(json.dumps(value, ensure_ascii=False))
    if case.json is not None:
        assert ours == case.json
    assert len(ours) == case.json_length
    assert _sha256(ours) == case.json_sha256


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_cases_hold_both_answers() -> None:
    """The file is not all refusals, nor all bombs: each kind is there (a regenerated file that
    lost them would make the agreement above say little)."""
    errors = [case for case in CASES if case.error]
    assert sum(EXCESSIVE_ALIASING in case.error for case in errors) >= 30
    assert len(CASES) - len(errors) >= 100
    near_limit = [case for case in CASES if case.name.startswith("aliased share near")]
    assert {bool(case.error) for case in near_limit} == {True, False}
