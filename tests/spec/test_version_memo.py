"""The per-version memo (`spec.version_memo`): a value is kept for one (uid, resourceVersion) of an
object, per key, and is gone once the object changes, is re-created or is forgotten."""

from __future__ import annotations

from typing import Any

from ray_operator.spec.version_memo import VersionMemo, object_version


def obj(uid: str = "u1", version: str = "10") -> dict[str, Any]:
    return {"metadata": {"name": "c", "uid": uid, "resourceVersion": version}}


def test_the_value_of_the_same_version_is_remembered() -> None:
    memo: VersionMemo[str, list[str]] = VersionMemo()
    assert memo.get("ns/c", obj()) is None
    remembered = memo.remember("ns/c", obj(), ["a problem"])
    assert remembered == ["a problem"]
    assert memo.get("ns/c", obj()) == ["a problem"]


def test_a_new_resource_version_or_a_new_uid_is_not_the_remembered_version() -> None:
    memo: VersionMemo[str, str] = VersionMemo()
    memo.remember("ns/c", obj(), "")
    assert memo.get("ns/c", obj(version="11")) is None
    assert memo.get("ns/c", obj(uid="u2")) is None
    assert memo.get("ns/other", obj()) is None


def test_remembering_a_newer_version_replaces_the_older_one() -> None:
    memo: VersionMemo[str, str] = VersionMemo()
    memo.remember("ns/c", obj(version="10"), "old")
    memo.remember("ns/c", obj(version="11"), "new")
    assert memo.get("ns/c", obj(version="11")) == "new"
    assert memo.get("ns/c", obj(version="10")) is None


def test_a_forgotten_key_is_computed_again() -> None:
    memo: VersionMemo[str, str] = VersionMemo()
    memo.remember("ns/c", obj(), "value")
    memo.forget("ns/c")
    memo.forget("ns/never-seen")
    assert memo.get("ns/c", obj()) is None


def test_metadata_without_uid_or_resource_version_reads_as_empty_strings() -> None:
    assert object_version({"metadata": {}}) == ("", "")
    assert object_version(obj()) == ("u1", "10")
