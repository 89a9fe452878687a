"""Specification: config/batch-scheduler/<name>, one kustomize component per batch scheduler, is
off in config/default; added to its components, each turns on `--batch-scheduler=<name>`, and
Volcano's and scheduler-plugins' grant the operator what it does to their PodGroups and nothing
more (YuniKorn and KAI grant nothing: the operator only labels Pods for them). The API server
accepts the result."""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, Kubectl
from tests.deploy.manager import manager_container, parse_run_arguments
from tests.deploy.manifests import (
    CONFIG,
    DEFAULT_NAMESPACE,
    Manifest,
    apply_server_side,
    authorized,
    build,
    grant_to_the_operator,
    of_kind,
    service_account_user,
    the,
)

OPERATOR = service_account_user(DEFAULT_NAMESPACE)
SCHEDULERS = ("volcano", "yunikorn", "scheduler-plugins", "kai-scheduler")
PODGROUPS = {
    "volcano": "podgroups.scheduling.volcano.sh",
    "scheduler-plugins": "podgroups.scheduling.x-k8s.io",
}
VERBS = {
    "volcano": ("get", "list", "watch", "create", "patch"),
    "scheduler-plugins": ("get", "list", "watch", "create"),
}


def with_component(directory: Path, scheduler: str) -> list[Manifest]:
    """config/default with config/batch-scheduler/<scheduler> added to its components."""
    shutil.copytree(CONFIG, directory / "config")
    shutil.copytree(REPO_ROOT / "crd", directory / "crd")
    kustomization = directory / "config" / "default" / "kustomization.yaml"
    text, count = re.subn(
        r"^replacements:",
        f"components:\n  - ../batch-scheduler/{scheduler}\nreplacements:",
        kustomization.read_text(),
        flags=re.M,
    )
    assert count == 1
    kustomization.write_text(text)
    return build(directory / "config" / "default")


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Manifest]]:
    # Each build is a `kubectl kustomize` process that spends seconds of CPU on the CRDs' YAML:
    # run them side by side, so that two cores build two at a time.
    directories = {name: tmp_path_factory.mktemp(name) for name in SCHEDULERS}
    with ThreadPoolExecutor(max_workers=len(SCHEDULERS)) as pool:
        built = {name: pool.submit(with_component, directories[name], name) for name in SCHEDULERS}
        return {name: future.result() for name, future in built.items()}


def test_the_default_install_has_no_batch_scheduler() -> None:
    default = build(CONFIG / "default")
    assert parse_run_arguments(manager_container(default)["args"]).batch_scheduler == ""
    assert not [m for m in default if "batch-scheduler" in m["metadata"]["name"]]


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_each_component_turns_its_scheduler_on(
    installs: dict[str, list[Manifest]], scheduler: str
) -> None:
    args = manager_container(installs[scheduler])["args"]
    assert parse_run_arguments(args).batch_scheduler == scheduler


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_only_podgroup_schedulers_grant_anything_and_only_on_their_podgroups(
    installs: dict[str, list[Manifest]], scheduler: str
) -> None:
    name = f"ray-operator-batch-scheduler-{scheduler}"
    roles = [
        m for m in of_kind(installs[scheduler], "ClusterRole") if m["metadata"]["name"] == name
    ]
    if scheduler not in PODGROUPS:
        assert not roles
        return
    group = PODGROUPS[scheduler].partition(".")[2]
    assert [rule["apiGroups"] for rule in roles[0]["rules"]] == [[group]]
    binding = the(installs[scheduler], "ClusterRoleBinding", name)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ray-operator", "namespace": DEFAULT_NAMESPACE}
    ]


@pytest.mark.parametrize("scheduler", ["volcano", "scheduler-plugins"])
def test_the_operator_may_do_what_it_does_to_podgroups_and_nothing_more(
    installs: dict[str, list[Manifest]], scheduler: str, kubectl: Kubectl, namespace: str
) -> None:
    install = installs[scheduler]
    name = f"ray-operator-batch-scheduler-{scheduler}"
    grant_to_the_operator(kubectl, install, name)
    resource = PODGROUPS[scheduler]
    needs = [(verb, resource, None) for verb in VERBS[scheduler]]
    never = [
        (verb, resource, None) for verb in ("delete", "update") if verb not in VERBS[scheduler]
    ]
    never.append(("get", "queues.scheduling.volcano.sh", None))
    answers = authorized(kubectl, OPERATOR, [*needs, *never], namespace=namespace)
    assert [case for case, allowed in answers.items() if not allowed] == [
        f"{verb} {resource}" for verb, resource, _ in never
    ]


def test_the_api_server_accepts_the_install_with_a_component(
    installs: dict[str, list[Manifest]], kubectl: Kubectl
) -> None:
    install = installs["volcano"]
    apply_server_side(kubectl, of_kind(install, "Namespace"), dry_run=False)
    output = apply_server_side(kubectl, install, dry_run=True)
    assert output.count("(server dry run)") == len(install)
