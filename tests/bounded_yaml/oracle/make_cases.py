"""Regenerate ../go_yaml_cases.json: what KubeRay's Go YAML makes of hand-picked and random texts.

    cd tests/bounded_yaml/oracle && python make_cases.py

Needs Go (the module proxy fetches sigs.k8s.io/yaml v1.6.0 and go.yaml.in/yaml/v2 v2.4.2, pinned
by go.sum); the tests only read the JSON, so they do not. The random cases come from a fixed
seed, so regenerating gives the same file unless the libraries or Go changed.

Each case keeps Go's error (cut at 300 characters), or the length and SHA-256 of the canonical
JSON of the decoded value (`canonical_json`), and that JSON itself when it is short.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import random
import subprocess
import sys
from typing import Any

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository, for tests.bounded_yaml

from tests.bounded_yaml.go_yaml_cases import canonical_json  # noqa: E402

OUTPUT = HERE.parent / "go_yaml_cases.json"
SEED = 20261201
RANDOM_GRAPHS = 150
RATIO_CASES = 24
SHORT_JSON = 2000
MAX_ERROR = 300

SERVE_CONFIG = """\
proxy_location: EveryNode
http_options: {host: 0.0.0.0, port: 8000}
applications:
  - name: fruit
    import_path: fruit.deployment_graph
    route_prefix: /fruit
    runtime_env: &env
      working_dir: "https://github.com/ray-project/test_dag/archive/78b4a5da.zip"
      pip: [numpy==1.26.4, "pandas>=2"]
      env_vars: {LEVEL: debug, RETRIES: "3"}
    deployments:
      - &deployment
        name: MangoStand
        num_replicas: 2
        max_ongoing_requests: 5
        ray_actor_options: {num_cpus: 0.1}
        user_config: {price: 3, x: 1, y: 2}
      - <<: *deployment
        name: OrangeStand
        user_config: {price: 2}
  - name: math
    import_path: conditional_dag.serve_dag
    route_prefix: /calc
    runtime_env: *env
"""

RUNTIME_ENV = """\
working_dir: "https://github.com/ray-project/kuberay/archive/master.zip"
pip: &deps
  - requests==2.26.0
  - pendulum==2.1.2
env_vars:
  counter_name: test_counter
  started: 2024-01-01
conda: {dependencies: *deps}
"""

HAND_PICKED: list[tuple[str, str]] = [
    ("serve config with anchors and a merge", SERVE_CONFIG),
    ("runtime env with an anchor", RUNTIME_ENV),
    (
        "scalars as yaml.v2 types them",
        "a: 2024-01-01\nb: 5e-3\nc: 12:30\nd: y\ne: N\nf: 0x1F\n"
        "g: 0o17\nh: 017\ni: 1_000\nl: ~\nm: ''\nn: 0b101\no: +12\np: 1.\n"
        "q: .5\nr: 2024-01-01T10:00:00Z\ns: on\nt: Off\nu: 'yes'\n",
    ),
    (
        "keys as sigs.k8s.io/yaml writes them",
        "x: 1\ny: 2\n1: a\n1.5: b\n1e6: c\n0.0001: d\n"
        "0.00001: e\ntrue: f\nno: g\n.inf: h\n-.inf: i\n123456789: j\n",
    ),
    ("infinity, which JSON cannot write", "a: .inf\nb: -.Inf\n"),
    ("a null key", "~: a\nb: c\n"),
    ("a list key", "? [a, b]\n: c\n"),
    (
        "integers at the edges of 64 bits",
        "a: 9223372036854775807\nb: -9223372036854775808\n"
        "c: 9223372036854775808\nd: 18446744073709551615\ne: 18446744073709551616\n"
        "f: -9223372036854775809\ng: 0xFFFFFFFFFFFFFFFFFF\n",
    ),
    ("an integer of 400 digits", "a: " + "9" * 400 + "\n"),
    ("an integer of 5000 digits", "a: " + "9" * 5000 + "\n"),
    (
        "explicit tags",
        "a: !!str 12\nb: !!int '7'\nc: !!float '2'\nd: !!timestamp 2024-01-01\n"
        "e: !!binary aGVsbG8=\nf: !!set {x, y}\ng: !!omap [{p: 1}, {q: 2}]\n"
        "h: !!pairs [{p: 1}, {p: 2}]\ni: !!null ''\nj: !!bool 'true'\n",
    ),
    ("binary that is not UTF-8", "a: !!binary /w==\n"),
    (
        "merges override in order",
        "b1: &b1 {x: 1, y: 1}\nb2: &b2 {y: 2, z: 2}\nm: {<<: [*b1, *b2], z: 3}\nq: {'<<': 5}\n",
    ),
    ("a merge of a scalar", "s: &s 5\nm: {<<: *s}\n"),
    ("an alias inside its own anchor", "a: &a [1, *a]\n"),
    ("an unknown anchor", "a: *nope\n"),
    ("an anchor redefined", "a: &x 1\nb: &x 2\nc: *x\n"),
    ("anchors of scalars, keys and values", "a: &k key\n*k : &v value\nc: *v\n"),
    ("a sequence at the top", "- a\n- &b [1, 2]\n- *b\n"),
    ("a scalar at the top", "just text\n"),
    ("an empty document", ""),
    ("two documents", "a: 1\n---\nb: 2\n"),
    ("not YAML", "a: [1, 2\n"),
    ("tabs", "a:\n\tb: 1\n"),
    ("duplicate keys", "a: 1\na: 2\n"),
    ("nested 99 deep", "a: " + "[" * 99 + "]" * 99 + "\n"),
    ("nested 100 deep", "[" * 100 + "]" * 100 + "\n"),
    ("nested 101 deep", "[" * 101 + "]" * 101 + "\n"),
    ("nested 1000 deep", "[" * 1000 + "]" * 1000 + "\n"),
    ("nested 10001 deep", "[" * 10001 + "]" * 10001 + "\n"),
    ("block nesting 150 deep", "".join(" " * i + "k:\n" for i in range(150))),
]


def bomb(levels: int, width: int = 10, *, scalar: str = '"lol"') -> str:
    """The billion laughs: each level a list of `width` aliases of the one before."""
    lines = [f"l0: &l0 [{scalar}]"]
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


BOMBS: list[tuple[str, str]] = [
    *((f"billion laughs, {levels} levels of 10", bomb(levels)) for levels in range(1, 10)),
    (
        "billion laughs of mappings",
        "a: &a {x: 1}\n"
        + "".join(
            f"{c}: &{c} {{" + ", ".join(f"k{i}: *{p}" for i in range(10)) + "}\n"
            for p, c in zip("abcdef", "bcdefg", strict=True)
        ),
    ),
    (
        "billion laughs through merges",
        "a: &a {x: 1}\n"
        + "".join(
            f"{c}: &{c} {{<<: [" + ", ".join([f"*{p}"] * 10) + "], y: 1}\n"
            for p, c in zip("abcdef", "bcdefg", strict=True)
        ),
    ),
    (
        "100 aliases of a 1000-character scalar",
        f"s: &s {'x' * 1000}\nl: [" + ", ".join(["*s"] * 100) + "]\n",
    ),
    (
        "1000 aliases of a 1000-character scalar",
        f"s: &s {'x' * 1000}\nl: [" + ", ".join(["*s"] * 1000) + "]\n",
    ),
    (
        "10 aliases of a 10-entry list",
        "s: &s [" + ", ".join("x" * 10) + "]\nl: [" + ", ".join(["*s"] * 10) + "]\n",
    ),
]


def random_graph(rng: random.Random) -> str:
    """Levels of anchored lists or mappings, each aliasing earlier levels, with plain padding
    before or after, and sometimes a merge."""
    levels, width = rng.randint(1, 7), rng.randint(1, 12)
    scalar = rng.choice(["x", "lol", "1", "true", "2024-01-01", "w" * rng.randint(1, 300)])
    lines = [f"l0: &l0 {scalar}"]
    kinds = {0: "scalar"}
    for level in range(1, levels + 1):
        items = [
            f"*l{rng.randint(max(0, level - 2), level - 1)}" if rng.random() < 0.9 else "p"
            for _ in range(width)
        ]
        kind = rng.choice(["list", "list", "map"])
        if kind == "list":
            body = "[" + ", ".join(items) + "]"
        else:
            entries = [f"k{i}: {item}" for i, item in enumerate(items)]
            if kinds[level - 1] == "map" and rng.random() < 0.5:
                entries.insert(0, f"<<: *l{level - 1}")
            body = "{" + ", ".join(entries) + "}"
        kinds[level] = kind
        lines.append(f"l{level}: &l{level} {body}")
    padding = "pad: [" + ",".join("0" * rng.choice([0, 10, 300, 1500])) + "]"
    lines.insert(0 if rng.random() < 0.5 else len(lines), padding)
    return "\n".join(lines) + "\n"


def ratio_case(rng: random.Random) -> str:
    """Plain padding and m aliases of a 1000-entry list, m near where yaml.v2's aliased share
    crosses its limit (0.99 up to 400,000 decodes, less beyond), before or after the padding."""
    padding = rng.randint(0, 3000)
    threshold = (0.99 * padding + 990) / 9.01  # 1000 m / (padding + 1001 m) = 0.99, about
    aliases = max(1, int(threshold * rng.uniform(0.85, 1.15)))
    target = "x: &x [" + ",".join("1" * 1000) + "]"
    used = "y: [" + ",".join(["*x"] * aliases) + "]"
    pad = "pad: [" + ",".join("0" * padding) + "]"
    parts = [target, pad, used] if rng.random() < 0.5 else [target, used, pad]
    return "\n".join(parts) + "\n"


def cases() -> list[dict[str, str]]:
    rng = random.Random(SEED)
    named = [*HAND_PICKED, *BOMBS]
    named += [(f"random alias graph {i}", random_graph(rng)) for i in range(RANDOM_GRAPHS)]
    named += [(f"aliased share near the limit {i}", ratio_case(rng)) for i in range(RATIO_CASES)]
    return [{"name": name, "text": text} for name, text in named]


def summarized(case: dict[str, Any]) -> dict[str, Any]:
    """Go's answer as the test file keeps it (see the module doc)."""
    kept: dict[str, Any] = {"name": case["name"], "text": case["text"]}
    if case["error"]:
        kept["error"] = case["error"][:MAX_ERROR]
        return kept
    canonical = canonical_json(case["json"])
    kept["json_length"] = len(canonical)
    kept["json_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    if len(canonical) <= SHORT_JSON:
        kept["json"] = canonical
    return kept


def main() -> None:
    sys.setrecursionlimit(10_000)  # Go decodes 1000 levels; Python's json recurses per level
    answered = subprocess.run(
        ["go", "run", "."],
        cwd=HERE,
        input=json.dumps(cases()),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    OUTPUT.write_text(json.dumps([summarized(case) for case in json.loads(answered)], indent=1))


if __name__ == "__main__":
    main()
