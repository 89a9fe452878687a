"""Helpers of the deploy tests: build the config/ overlays, apply them, and ask RBAC questions.

Also `operator_kubeconfig`: a kubeconfig that authenticates as the operator's ServiceAccount
(a bearer token from the TokenRequest API, as a Pod would mount), so that the operator can be
run against the control plane with exactly the rights config/rbac gives it.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO_ROOT, Kubectl

CONFIG = REPO_ROOT / "config"
DEFAULT_NAMESPACE = "ray-operator-system"
SERVICE_ACCOUNT = "ray-operator"
LEASE_NAME = "ray-operator-leader"
WEBHOOK_CERT_SECRET = "ray-operator-webhook-server-cert"
WEBHOOK_CONFIGURATIONS = {
    "MutatingWebhookConfiguration": "ray-operator-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "ray-operator-validating-webhook-configuration",
}
# Each CRD is about 1 MB: the C loader parses them in a fraction of the pure-Python time.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Manifest = dict[str, Any]


def kustomize(directory: Path) -> str:
    """`kubectl kustomize directory` (no flags: what a user runs), raising with its stderr."""
    result = subprocess.run(
        ["kubectl", "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed: {result.stderr.strip()}")
    return result.stdout


def build(directory: Path) -> list[Manifest]:
    """The objects `kubectl kustomize directory` makes (built once per run: treat as read-only)."""
    return list(_build(directory.resolve()))


@functools.cache
def _build(directory: Path) -> tuple[Manifest, ...]:
    # Overlays with the CRDs are several MB of YAML: build and parse each only once.
    return tuple(doc for doc in yaml.load_all(kustomize(directory), Loader=_Loader) if doc)


def to_yaml(manifests: Iterable[Manifest]) -> str:
    """A multi-document YAML stream for `kubectl apply -f -`."""
    return yaml.safe_dump_all(list(manifests), sort_keys=False)


def apply_server_side(
    kubectl: Kubectl, manifests: Iterable[Manifest], *, dry_run: bool, validate: str = "strict"
) -> str:
    """`kubectl apply --server-side` (optionally `--dry-run=server`) of `manifests`, refused
    when a field is unknown or duplicated (`validate`, kubectl's default)."""
    args = ["apply", "--server-side", "--field-manager=deploy-tests", f"--validate={validate}"]
    args += ["-f", "-"]
    if dry_run:
        # The fixture installed the same CRDs under another field manager; ownership is not
        # what a dry run checks, acceptance is.
        args += ["--dry-run=server", "--force-conflicts"]
    return kubectl(*args, input_text=to_yaml(manifests))


def grant_to_the_operator(kubectl: Kubectl, install: list[Manifest], *roles: str) -> None:
    """Apply the install's Namespaces, then the operator's ServiceAccount and the ClusterRoles
    and ClusterRoleBindings named `roles`: the grants an RBAC question about a component needs."""
    apply_server_side(kubectl, of_kind(install, "Namespace"), dry_run=False)
    grants = [
        m
        for m in install
        if m["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
        and m["metadata"]["name"] in (SERVICE_ACCOUNT, *roles)
    ]
    apply_server_side(kubectl, grants, dry_run=False)


def ensure_namespace(kubectl: Kubectl, name: str) -> None:
    """Create namespace `name` unless it exists."""
    kubectl(
        "apply",
        "-f",
        "-",
        input_text=f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n",
    )


def of_kind(manifests: Iterable[Manifest], *kinds: str) -> list[Manifest]:
    """The manifests whose kind is one of `kinds`."""
    return [manifest for manifest in manifests if manifest["kind"] in kinds]


def the(manifests: Iterable[Manifest], kind: str, name: str | None = None) -> Manifest:
    """The one manifest of `kind` (and `name`); fails if there is not exactly one."""
    found = [
        manifest
        for manifest in of_kind(manifests, kind)
        if name is None or manifest["metadata"]["name"] == name
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def service_account_user(namespace: str, name: str = SERVICE_ACCOUNT) -> str:
    """The user name Kubernetes gives a ServiceAccount, for `--as`."""
    return f"system:serviceaccount:{namespace}:{name}"


def can_i(
    kubectl: Kubectl,
    user: str,
    verb: str,
    resource: str,
    *,
    namespace: str | None = None,
    subresource: str | None = None,
) -> bool:
    """`kubectl auth can-i` as `user` (impersonated); `namespace=None`: in all namespaces."""
    args = ["auth", "can-i", verb, resource, f"--as={user}"]
    args += ["--all-namespaces"] if namespace is None else ["-n", namespace]
    if subresource:
        args.append(f"--subresource={subresource}")
    result = kubectl.run(*args)
    answer = result.stdout.strip()
    # can-i exits 1 for "no"; anything else that is not a plain yes/no is a broken question.
    if answer not in ("yes", "no"):
        raise AssertionError(f"kubectl {' '.join(args)}: {result.stdout} {result.stderr}")
    return answer == "yes"


def authorized(
    kubectl: Kubectl,
    user: str,
    cases: Iterable[tuple[str, str, str | None]],
    *,
    namespace: str,
) -> dict[str, bool]:
    """Many `can_i` questions in one request: {"verb resource[/subresource]": allowed}.

    Each is a SubjectAccessReview, which the API server answers with the same authorizer as
    `kubectl auth can-i --as`; sending them as one List spares a kubectl process per question.
    """
    cases = list(cases)
    reviews = [
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": _groups_of(user),
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": verb,
                    "resource": resource.partition(".")[0],
                    "group": resource.partition(".")[2],
                    "subresource": subresource or "",
                },
            },
        }
        for verb, resource, subresource in cases
    ]
    output = kubectl(
        "create",
        "-o",
        "json",
        "-f",
        "-",
        input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": reviews}),
    )
    answers = _json_stream(output)
    return {
        f"{verb} {resource}" + (f"/{sub}" if sub else ""): bool(answer["status"].get("allowed"))
        for (verb, resource, sub), answer in zip(cases, answers, strict=True)
    }


def _json_stream(text: str) -> list[Any]:
    """The JSON documents of `text`, one after another (kubectl prints one per created object)."""
    decoder, documents, position = json.JSONDecoder(), [], 0
    while (position := _skip_space(text, position)) < len(text):
        document, position = decoder.raw_decode(text, position)
        documents.append(document)
    return documents


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def _groups_of(user: str) -> list[str]:
    """The groups Kubernetes puts a ServiceAccount's token in (what impersonation adds too)."""
    _, _, namespace, _ = user.split(":")
    return ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]


def operator_kubeconfig(
    kubectl: Kubectl,
    path: Path,
    *,
    namespace: str,
    service_account: str = SERVICE_ACCOUNT,
    duration: str = "1h",
) -> Path:
    """Write to `path` a kubeconfig that authenticates as the ServiceAccount, not as admin.

    The token comes from the TokenRequest API (`kubectl create token`), bound to the
    ServiceAccount and expiring after `duration`; server and CA come from the admin kubeconfig.
    """
    token = kubectl(
        "create", "token", service_account, "-n", namespace, f"--duration={duration}"
    ).strip()
    admin = yaml.safe_load(kubectl.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    ca_data = cluster.get("certificate-authority-data")
    if ca_data is None:
        ca_data = base64.b64encode(Path(cluster["certificate-authority"]).read_bytes()).decode()
    user = f"{namespace}:{service_account}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "cluster",
                "cluster": {"server": cluster["server"], "certificate-authority-data": ca_data},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": user,
                "context": {"cluster": "cluster", "user": user, "namespace": namespace},
            }
        ],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    # A bearer token is a password.
    path.chmod(0o600)
    return path


def default_with_component(directory: Path, component: str, *more: str) -> Path:
    """A copy of config/default (and crd/) under `directory` with config/`component` (and the
    `more` after it) turned on as config/default/kustomization.yaml says: its `components:` line
    and each component's line un-commented. Fails when config/default does not offer one of
    them that way."""
    shutil.copytree(CONFIG, directory / "config")
    shutil.copytree(REPO_ROOT / "crd", directory / "crd")
    kustomization = directory / "config" / "default" / "kustomization.yaml"
    text = kustomization.read_text()
    text, headers = re.subn(r"^# components:$", "components:", text, flags=re.M)
    assert headers == 1, "config/default must have one `# components:` line"
    for name in (component, *more):
        line = rf"^#   - \.\./{re.escape(name)}$"
        text, lines = re.subn(line, f"  - ../{name}", text, flags=re.M)
        assert lines == 1, f"config/default must offer config/{name}, commented out"
    kustomization.write_text(text)
    return directory / "config" / "default"
