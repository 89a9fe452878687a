"""The operator's manager container in a built install, and its args as `ray-operator run` parses
them ($(POD_NAMESPACE) filled in): what the deploy tests check an install runs."""

from __future__ import annotations

import argparse

from ray_operator.settings import add_run_arguments
from ray_operator.webhooks import add_webhook_arguments

from tests.deploy.manifests import Manifest, the


def manager_container(manifests: list[Manifest]) -> Manifest:
    deployment = the(manifests, "Deployment", "ray-operator")
    containers: list[Manifest] = deployment["spec"]["template"]["spec"]["containers"]
    assert [container["name"] for container in containers] == ["manager"]
    return containers[0]


def parse_run_arguments(args: list[str]) -> argparse.Namespace:
    """The manager's args as `ray-operator run` parses them ($(POD_NAMESPACE) filled in)."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_run_arguments(parser)
    add_webhook_arguments(parser)
    return parser.parse_args([arg.replace("$(POD_NAMESPACE)", "pod-ns") for arg in args])
