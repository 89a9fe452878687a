"""Specification: every YAML a user writes is read within bounds, and what passes reads as before.

`bounded_yaml` reads the text's events once before anything is built: nesting deeper than 100, an
alias inside its own anchor, yaml.v2's "excessive aliasing" rule, and an expansion beyond 16
times the text (at least 256 KiB) are refused with Go's words. What it lets through expands to
at most a constant factor of the text, so json.dumps, hashes and messages of it stay linear.
Agreement with Go itself, case by case, is test_agrees_with_go_yaml.py.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest
import yaml
from hypothesis import event, given, settings
from hypothesis import strategies as st
from ray_operator.bounded_yaml import (
    MAX_DEPTH,
    MAX_EXPANSION,
    MIN_EXPANDED_SIZE,
    GoYamlLoader,
    UnreadableYamlError,
    YamlBoundsError,
    check_bounds,
    load_documents,
    load_go_yaml,
)

EXCESSIVE_ALIASING = "yaml: document contains excessive aliasing"

ORDINARY = {
    "serve config with anchors and merges": """\
applications:
  - name: fruit
    import_path: fruit.deployment_graph
    route_prefix: /fruit
    runtime_env: &env {pip: [numpy, pandas], env_vars: {LEVEL: debug}}
    deployments:
      - &mango {name: MangoStand, num_replicas: 2, user_config: {price: 3}}
      - {<<: *mango, name: OrangeStand}
  - name: math
    import_path: conditional_dag.serve_dag
    route_prefix: /calc
    runtime_env: *env
""",
    "runtime env with a shared list": """\
working_dir: https://github.com/ray-project/kuberay/archive/master.zip
pip: &deps [requests==2.26.0, pendulum==2.1.2]
conda: {dependencies: *deps}
env_vars: {counter_name: test_counter}
""",
    "merge list overriding in order": "a: &a {x: 1, z: 1}\nb: &b {x: 2, w: 2}\nc: {<<: [*a, *b]}\n",
    "no aliases at all": "applications: [{name: a, import_path: m:app}]\n",
}


def billion_laughs(levels: int, width: int = 10) -> str:
    lines = ['l0: &l0 ["lol"]']
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def aliases_of_a_long_scalar(length: int, aliases: int) -> str:
    return f"s: &s {'x' * length}\nl: [" + ", ".join(["*s"] * aliases) + "]\n"


def block_nesting(depth: int) -> str:
    return "".join(" " * level + "k:\n" for level in range(depth))


# --- what passes reads as before ---------------------------------------------------------------


@pytest.mark.parametrize("text", ORDINARY.values(), ids=ORDINARY.keys())
def test_ordinary_documents_with_a_few_aliases_read_as_without_bounds(text: str) -> None:
    assert load_go_yaml(text) == yaml.load(text, Loader=GoYamlLoader)
    assert load_documents(text) == [yaml.safe_load(text)]


def test_a_merge_copies_the_anchored_mapping_and_later_keys_win() -> None:
    config = load_go_yaml(ORDINARY["serve config with anchors and merges"])
    mango, orange = config["applications"][0]["deployments"]
    assert orange == {**mango, "name": "OrangeStand"}
    assert config["applications"][1]["runtime_env"] == config["applications"][0]["runtime_env"]


def test_keys_are_strings_as_kuberay_writes_them_so_sorted_json_works() -> None:
    # `y` is yaml.v2's boolean: as a key beside `x` it once broke json.dumps(sort_keys=True) of
    # every RayService whose Serve config said `{x: 1, y: 2}` (a TypeError on each reconcile).
    value = load_go_yaml("user_config: {x: 1, y: 2, 1: a, 1.5: b, 1e6: c}\n")
    assert value == {"user_config": {"x": 1, "true": 2, "1": "a", "1.5": "b", "1e+06": "c"}}
    assert json.dumps(value, sort_keys=True)


def test_a_null_key_is_refused_as_kuberay_refuses_it() -> None:
    with pytest.raises(UnreadableYamlError, match="unsupported map key of type: <nil>"):
        load_go_yaml("~: d\n")


def test_explicit_tags_load_as_json_values() -> None:
    value = load_go_yaml("a: !!timestamp 2024-01-01\nb: !!binary aGk=\nc: !!set {x}\n")
    assert value == {"a": "2024-01-01", "b": "hi", "c": {"x": None}}


def test_integers_beyond_64_bits_read_as_go_reads_them_not_as_a_4300_digit_error() -> None:
    value = load_go_yaml(f"a: 18446744073709551616\nb: {'9' * 5000}\nc: 0o17\n")
    assert value == {"a": 1.8446744073709552e19, "b": "9" * 5000, "c": 15}


# --- what is refused ---------------------------------------------------------------------------


@pytest.mark.parametrize("levels", [4, 5, 7, 9])
def test_a_billion_laughs_is_refused_with_gos_words(levels: int) -> None:
    with pytest.raises(YamlBoundsError, match=f"^{EXCESSIVE_ALIASING}$"):
        load_go_yaml(billion_laughs(levels))


def test_three_levels_of_laughs_are_what_go_accepts_and_so_do_we() -> None:
    assert len(json.dumps(load_go_yaml(billion_laughs(3)))) < 20_000


def test_aliases_of_one_long_scalar_are_refused_by_the_size_bound() -> None:
    # 1000 aliases of 1000 characters: yaml.v2 counts 1000 nodes and lets a megabyte through.
    text = aliases_of_a_long_scalar(1000, 1000)
    assert MAX_EXPANSION * len(text) < 1000 * 1000
    with pytest.raises(YamlBoundsError) as refused:
        load_go_yaml(text)
    assert str(refused.value) == (
        f"{EXCESSIVE_ALIASING} (it expands beyond {MAX_EXPANSION} times its size)"
    )


def test_a_short_text_may_expand_to_the_minimum_size() -> None:
    text = aliases_of_a_long_scalar(1000, 100)  # 100 KB from 5 KB
    assert MAX_EXPANSION * len(text) < 100 * 1000 < MIN_EXPANDED_SIZE
    assert len(load_go_yaml(text)["l"]) == 100


def test_the_size_bound_counts_every_document_of_a_stream() -> None:
    document = aliases_of_a_long_scalar(1000, 100)
    assert len(load_documents(document)) == 1
    with pytest.raises(YamlBoundsError):
        load_documents("---\n".join([document] * 4))


def test_an_alias_inside_its_own_anchor_is_refused() -> None:
    with pytest.raises(YamlBoundsError, match=r"^yaml: anchor 'a' value contains itself$"):
        load_go_yaml("a: &a [1, *a]\n")


def test_an_unknown_anchor_is_refused_with_its_name_cut_short() -> None:
    with pytest.raises(YamlBoundsError) as refused:
        load_go_yaml(f"a: *{'n' * 10_000}\n")
    assert str(refused.value) == f"yaml: unknown anchor '{'n' * 40}...' referenced"


def test_nesting_beyond_the_bound_is_refused_before_anything_is_built() -> None:
    assert load_go_yaml(block_nesting(MAX_DEPTH))
    with pytest.raises(YamlBoundsError, match=f"^yaml: exceeded max depth of {MAX_DEPTH}$"):
        load_go_yaml(block_nesting(MAX_DEPTH + 1))


@pytest.mark.parametrize("text", ["[" * 1_000_000, "{a: " * 300_000, block_nesting(20_000)])
def test_absurd_nesting_is_refused_without_recursion(text: str) -> None:
    """libyaml's own limit (1000 levels, since 0.2.5) or ours: either way the recursive composer
    never sees it, and the answer is an error, not a crash."""
    with pytest.raises(UnreadableYamlError):
        load_go_yaml(text)


def test_text_that_is_not_yaml_is_refused_in_one_short_line() -> None:
    with pytest.raises(UnreadableYamlError) as refused:
        load_go_yaml("a: [1, 2\n" + "b" * 10_000)
    message = str(refused.value)
    assert message.startswith("not valid YAML: ")
    assert "\n" not in message
    assert len(message) <= 200 + len("not valid YAML: ")


# --- the check itself is linear and expands nothing --------------------------------------------


def test_refusing_a_nine_level_bomb_allocates_about_what_the_text_does() -> None:
    text = billion_laughs(9)  # a billion "lol"s, 466 bytes
    tracemalloc.start()
    try:
        with pytest.raises(YamlBoundsError):
            check_bounds(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024


def test_a_chain_of_doubling_aliases_is_refused_at_once() -> None:
    """200 levels, each two aliases of the one before: 2**200 nodes expanded. Counted once per
    node, never expanded, it is refused as soon as the counts say so (this test would not end
    otherwise)."""
    lines = ["l0: &l0 x"] + [f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]" for i in range(1, 200)]
    with pytest.raises(YamlBoundsError, match=f"^{EXCESSIVE_ALIASING}"):
        check_bounds("\n".join(lines))


def test_checking_a_megabyte_config_holds_no_more_than_the_parser_s_copy_of_it() -> None:
    """The parser keeps the text as UTF-8; the check adds its nesting and anchors, not a tree
    (which is dozens of times the text)."""
    application = (
        "  - {name: app%d, import_path: 'mod.sub:app', route_prefix: /r%d,"
        " deployments: [{name: D, num_replicas: 2, user_config: {x: 1, y: [1, 2, 3]}}]}\n"
    )
    text = "applications:\n" + "".join(application % (i, i) for i in range(8000))
    assert len(text) > 1_000_000
    tracemalloc.start()
    try:
        check_bounds(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(text)


# --- any alias graph: refused, or at most a constant factor of its text ------------------------

JSON_PER_SIZE = 3
"""JSON characters per unit of expanded size at most: a scalar's quotes and comma."""


@st.composite
def alias_graphs(draw: st.DrawFn) -> str:
    """Anchored lists and mappings, each of scalars and aliases of earlier anchors, and a last
    entry that aliases some of them: the shapes of every bomb above, in random sizes."""
    printable = st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"])
    scalars = st.text(printable, max_size=draw(st.sampled_from([3, 40, 2000])))
    lines = []
    for level in range(draw(st.integers(1, 12))):
        items = []
        for _ in range(draw(st.integers(1, 12))):
            if level and draw(st.booleans()):
                items.append(f"*a{draw(st.integers(0, level - 1))}")
            else:
                items.append(json.dumps(draw(scalars), ensure_ascii=False))
        body = ", ".join(items)
        if draw(st.booleans()):
            body = "{" + ", ".join(f"k{i}: {item}" for i, item in enumerate(items)) + "}"
        else:
            body = f"[{body}]"
        lines.append(f"a{level}: &a{level} {body}")
    aliases = ", ".join(f"*a{draw(st.integers(0, len(lines) - 1))}" for _ in range(12))
    return "\n".join([*lines, f"top: [{aliases}]"]) + "\n"


@settings(max_examples=300, deadline=None)
@given(alias_graphs())
def test_any_alias_graph_is_refused_or_expands_at_most_a_constant_factor(text: str) -> None:
    try:
        value = load_go_yaml(text)
    except YamlBoundsError as error:
        event(str(error)[:60])
        return
    except UnreadableYamlError:
        event("not YAML (a character YAML does not allow)")
        return
    event("loaded")
    limit = max(MIN_EXPANDED_SIZE, MAX_EXPANSION * len(text))
    assert len(json.dumps(value, ensure_ascii=False)) <= JSON_PER_SIZE * limit
