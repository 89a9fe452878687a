"""Control-plane binaries for the embedded local cluster: found, or built once and cached.

The envtest convention comes first: when ``KUBEBUILDER_ASSETS`` names a folder holding a
binary, that binary is used. Otherwise each binary is built from the Go module proxy at a
pinned version into ``~/.cache/ray-operator/bin/<name>/<version>/`` and reused from there.

kube-apiserver, kube-scheduler and kube-controller-manager cannot be ``go install``-ed:
k8s.io/kubernetes requires its staging modules at ``v0.0.0`` and points them at ``./staging``
with replace directives, which only work inside its own repository. So we write a tiny wrapper
module that requires k8s.io/kubernetes and replaces each staging module with its published
``v0.<minor>.<patch>`` tag. etcd's server module carries replace directives too, so it also gets
a wrapper module (kept apart from the Kubernetes one: they pin different grpc/otel versions).

This module uses only the standard library, so it can run before the virtualenv exists.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

KUBERNETES_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.7.0"
# Not part of the plane: the chart's tests (`helm lint`, `helm template`, `helm install`) use it.
HELM_VERSION = "v3.22.0"
# Not part of the plane either: KubeRay's `kubectl ray` plugin, run against the operator by
# tests/deploy/test_kubectl_ray_plugin.py, at the KubeRay version the conformance suites pin. Since
# KubeRay v1.5 it is the package `kubectl-plugin/cmd` of KubeRay's root module.
KUBECTL_RAY_VERSION = "v1.5.0"
KUBERAY_ROOT_MODULE = "github.com/ray-project/kuberay"
# Where the proxy refuses that module (it does on some registries), a KubeRay checkout or git
# directory named here is built instead.
KUBERAY_SOURCE_ENV = "KUBERAY_SOURCE"
# What of that source the plugin's build reads: the root module and the ray-operator module its
# replace directive points at (a mirror may lack other, large files).
KUBECTL_RAY_SOURCE_PATHS = ("go.mod", "go.sum", "kubectl-plugin", "ray-operator")
# Not part of the plane either: `promtool check rules` / `test rules` on config/prometheus's alerts.
# Prometheus's Go module is versioned v0.<3 + minor>.<patch>: this is Prometheus v3.16.0.
PROMTOOL_VERSION = "v0.316.0"

GO_BUILD_ENV = {"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
GO_BUILD_FLAGS = ("-trimpath", "-tags", "grpcnotrace")


class BinaryBuildError(RuntimeError):
    """A control-plane binary could not be found or built."""


@dataclasses.dataclass(frozen=True)
class ControlPlaneBinaries:
    """Paths of the executables the local control plane runs."""

    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    kwok: Path


def default_cache_dir() -> Path:
    """Where built binaries are kept: $RAY_OPERATOR_CACHE, else $XDG_CACHE_HOME/ray-operator."""
    explicit = os.environ.get("RAY_OPERATOR_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ray-operator"


def ensure_binaries(
    cache_dir: Path | None = None, *, progress: TextIO = sys.stderr
) -> ControlPlaneBinaries:
    """Return every control-plane binary, building the missing ones (minutes, once)."""
    cache = cache_dir or default_cache_dir()
    builds = (
        ("etcd", ETCD_VERSION, _build_etcd),
        ("kube-apiserver", KUBERNETES_VERSION, _build_kubernetes_command),
        ("kube-scheduler", KUBERNETES_VERSION, _build_kubernetes_command),
        ("kube-controller-manager", KUBERNETES_VERSION, _build_kubernetes_command),
        ("kwok", KWOK_VERSION, _build_kwok),
    )
    paths: dict[str, Path] = {}
    for name, version, build in builds:
        found = _from_kubebuilder_assets(name)
        if found is not None:
            print(f"[binaries] {name}: using {found} (KUBEBUILDER_ASSETS)", file=progress)
            paths[name] = found
            continue
        target = cache / "bin" / name / version / name
        if _is_executable(target):
            print(f"[binaries] {name} {version}: cached at {target}, no rebuild", file=progress)
        else:
            print(
                f"[binaries] {name} {version}: building (first time only, takes minutes)",
                file=progress,
            )
            started = time.monotonic()
            build(name, version, target, cache / "src", progress)
            took = time.monotonic() - started
            print(f"[binaries] {name} {version}: built in {took:.0f}s -> {target}", file=progress)
        paths[name] = target
    return ControlPlaneBinaries(
        etcd=paths["etcd"],
        kube_apiserver=paths["kube-apiserver"],
        kube_scheduler=paths["kube-scheduler"],
        kube_controller_manager=paths["kube-controller-manager"],
        kwok=paths["kwok"],
    )


def ensure_helm(cache_dir: Path | None = None, *, progress: TextIO = sys.stderr) -> Path:
    """Return the pinned `helm`, building it from the Go module proxy the first time (minutes).

    Whatever `helm` is on PATH is not used: the chart is checked with one known version.
    """
    cache = cache_dir or default_cache_dir()
    target = cache / "bin" / "helm" / HELM_VERSION / "helm"
    if not _is_executable(target):
        print(f"[binaries] helm {HELM_VERSION}: building (first time only)", file=progress)
        started = time.monotonic()
        _build_helm("helm", HELM_VERSION, target, cache / "src", progress)
        took = time.monotonic() - started
        print(f"[binaries] helm {HELM_VERSION}: built in {took:.0f}s -> {target}", file=progress)
    return target


def ensure_kubectl_ray(cache_dir: Path | None = None, *, progress: TextIO = sys.stderr) -> Path:
    """Return KubeRay's pinned `kubectl-ray` plugin, building it from the Go module proxy the first
    time (minutes). Raises BinaryBuildError, with the proxy's answer, when it cannot be built."""
    cache = cache_dir or default_cache_dir()
    target = cache / "bin" / "kubectl-ray" / KUBECTL_RAY_VERSION / "kubectl-ray"
    if not _is_executable(target):
        print(
            f"[binaries] kubectl-ray {KUBECTL_RAY_VERSION}: building (first time only)",
            file=progress,
        )
        started = time.monotonic()
        _build_kubectl_ray(KUBECTL_RAY_VERSION, target, cache / "src", progress)
        took = time.monotonic() - started
        print(
            f"[binaries] kubectl-ray {KUBECTL_RAY_VERSION}: built in {took:.0f}s -> {target}",
            file=progress,
        )
    return target


def ensure_promtool(cache_dir: Path | None = None, *, progress: TextIO = sys.stderr) -> Path:
    """Return the pinned `promtool`, building it from the Go module proxy the first time
    (several minutes: Prometheus is a large module)."""
    cache = cache_dir or default_cache_dir()
    target = cache / "bin" / "promtool" / PROMTOOL_VERSION / "promtool"
    if not _is_executable(target):
        print(f"[binaries] promtool {PROMTOOL_VERSION}: building (first time only)", file=progress)
        started = time.monotonic()
        _build_go_command(
            "promtool", ("github.com/prometheus/prometheus", PROMTOOL_VERSION),
            "github.com/prometheus/prometheus/cmd/promtool",
            # Without the service discoveries (cloud SDKs, client-go): rule checks need none,
            # and they are most of the build's time.
            target=target, src_root=cache / "src", ldflags="-s -w", progress=progress,
            tags=("remove_all_sd",),
        )  # fmt: skip
        took = time.monotonic() - started
        print(f"[binaries] promtool: built in {took:.0f}s -> {target}", file=progress)
    return target


def ensure_go_program(
    source: Path, name: str, cache_dir: Path | None = None, *, progress: TextIO = sys.stderr
) -> Path:
    """Return the Go program whose main package and go.mod/go.sum are in `source` (one of this
    repository's, e.g. tests/deploy/grafana_schema), built once per version of its files."""
    files = sorted(path for path in source.iterdir() if path.is_file())
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in files))
    cache = cache_dir or default_cache_dir()
    target = cache / "bin" / name / digest.hexdigest()[:16] / name
    if not _is_executable(target):
        print(f"[binaries] {name}: building from {source} (once per version)", file=progress)
        started = time.monotonic()
        _go_build(source, package=".", module="", target=target, ldflags="-s -w", progress=progress)
        took = time.monotonic() - started
        print(f"[binaries] {name}: built in {took:.0f}s -> {target}", file=progress)
    return target


def _from_kubebuilder_assets(name: str) -> Path | None:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if not assets:
        return None
    candidate = Path(assets) / name
    return candidate if _is_executable(candidate) else None


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _build_kubernetes_command(
    name: str, version: str, target: Path, src_root: Path, progress: TextIO
) -> None:
    module_dir = src_root / f"kubernetes-{version}"
    module_dir.mkdir(parents=True, exist_ok=True)
    staging = _kubernetes_staging_modules(version)
    staging_version = "v0." + version.removeprefix("v1.")
    replaces = "\n".join(f"replace {m} => {m} {staging_version}" for m in staging)
    _write_go_module(
        module_dir,
        module="ray-operator.local/kubernetes-build",
        requires=[("k8s.io/kubernetes", version)],
        extra=replaces,
    )
    major, minor = version.removeprefix("v").split(".")[:2]
    version_vars = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        version_vars += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    _go_build(
        module_dir,
        package=f"k8s.io/kubernetes/cmd/{name}",
        target=target,
        ldflags=" ".join(["-s", "-w", *version_vars]),
        progress=progress,
    )


def _build_etcd(name: str, version: str, target: Path, src_root: Path, progress: TextIO) -> None:
    _build_go_command(
        "etcd", ("go.etcd.io/etcd/server/v3", version), "go.etcd.io/etcd/server/v3",
        target=target, src_root=src_root, ldflags="-s -w", progress=progress,
    )  # fmt: skip


def _build_kwok(name: str, version: str, target: Path, src_root: Path, progress: TextIO) -> None:
    _build_go_command(
        "kwok", ("sigs.k8s.io/kwok", version), "sigs.k8s.io/kwok/cmd/kwok",
        target=target, src_root=src_root, ldflags="-s -w", progress=progress,
    )  # fmt: skip


def _build_helm(name: str, version: str, target: Path, src_root: Path, progress: TextIO) -> None:
    # As helm's own Makefile does: `helm version` names the release, and `helm template`/`lint`
    # assume the Kubernetes version of its client-go (else v1.20, which charts may refuse).
    minor = _helm_kubernetes_minor(version)
    flags = [
        "-s -w",
        f"-X helm.sh/helm/v3/internal/version.version={version}",
        *(
            f"-X helm.sh/helm/v3/pkg/{package}.k8sVersion{part}={value}"
            for package in ("chartutil", "lint/rules")
            for part, value in (("Major", "1"), ("Minor", minor))
        ),
    ]
    _build_go_command(
        "helm", ("helm.sh/helm/v3", version), "helm.sh/helm/v3/cmd/helm",
        target=target, src_root=src_root, ldflags=" ".join(flags), progress=progress,
    )  # fmt: skip


def _build_kubectl_ray(version: str, target: Path, src_root: Path, progress: TextIO) -> None:
    source = os.environ.get(KUBERAY_SOURCE_ENV)
    if source:
        _build_kubectl_ray_from_source(Path(source), version, target, src_root, progress)
        return
    # KubeRay's root module points its ray-operator module at ./ray-operator with a replace
    # directive, which only works inside its repository: name the published one instead. The
    # version variable is the one KubeRay's release build sets (`kubectl ray version` prints it).
    operator_module = f"{KUBERAY_ROOT_MODULE}/ray-operator"
    module_dir = src_root / f"kubectl-ray-{version}"
    module_dir.mkdir(parents=True, exist_ok=True)
    _write_go_module(
        module_dir,
        module="ray-operator.local/kubectl-ray-build",
        requires=[(KUBERAY_ROOT_MODULE, version)],
        extra=f"replace {operator_module} => {operator_module} {version}",
    )
    plugin = f"{KUBERAY_ROOT_MODULE}/kubectl-plugin"
    _go_build(
        module_dir,
        package=f"{plugin}/cmd",
        module=KUBERAY_ROOT_MODULE,
        target=target,
        ldflags=f"-s -w -X {plugin}/pkg/cmd/version.Version={version}",
        progress=progress,
    )


def _build_kubectl_ray_from_source(
    source: Path, version: str, target: Path, src_root: Path, progress: TextIO
) -> None:
    """Build from a KubeRay checkout, or from a KubeRay git directory at the tag `version`, for
    machines whose module proxy refuses KubeRay's root module (its deps still come from the
    proxy). A checkout is trusted to be at `version`; a git directory is read at that tag."""
    if not (source / "kubectl-plugin").is_dir():
        checkout = src_root / f"kuberay-{version}"
        if not (checkout / "kubectl-plugin").is_dir():
            checkout.mkdir(parents=True, exist_ok=True)
            archive = subprocess.run(
                [
                    "git",
                    f"--git-dir={source}",
                    "archive",
                    "--format=tar",
                    version,
                    *KUBECTL_RAY_SOURCE_PATHS,
                ],
                capture_output=True,
                check=False,
            )
            if archive.returncode != 0:
                detail = archive.stderr.decode(errors="replace")[-2000:]
                raise BinaryBuildError(
                    f"{KUBERAY_SOURCE_ENV}={source} is neither a KubeRay checkout nor a git "
                    f"directory with the tag {version}: {detail}"
                )
            subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive.stdout, check=True)
        source = checkout
    plugin = f"{KUBERAY_ROOT_MODULE}/kubectl-plugin"
    _go_build(
        source,
        package="./kubectl-plugin/cmd",
        module="",
        target=target,
        ldflags=f"-s -w -X {plugin}/pkg/cmd/version.Version={version}",
        progress=progress,
    )


def _build_go_command(
    name: str,
    requirement: tuple[str, str],
    package: str,
    *,
    target: Path,
    src_root: Path,
    ldflags: str,
    progress: TextIO,
    tags: tuple[str, ...] = (),
) -> None:
    """Build `package` of the module `requirement` (path, version) through a wrapper module of
    its own under `src_root` (modules with replace directives only build that way), with the
    build `tags` besides GO_BUILD_FLAGS' own."""
    module_dir = src_root / f"{name}-{requirement[1]}"
    module_dir.mkdir(parents=True, exist_ok=True)
    _write_go_module(module_dir, module=f"ray-operator.local/{name}-build", requires=[requirement])
    _go_build(
        module_dir, package=package, target=target, ldflags=ldflags, progress=progress, tags=tags
    )


def _helm_kubernetes_minor(version: str) -> str:
    """The Kubernetes minor version of the client-go helm `version` requires (v0.X.Y: X)."""
    info = json.loads(_run_go(["mod", "download", "-json", f"helm.sh/helm/v3@{version}"], cwd=None))
    found = re.search(r"^\s*k8s\.io/client-go v0\.(\d+)\.", Path(info["GoMod"]).read_text(), re.M)
    if found is None:
        raise BinaryBuildError(f"no k8s.io/client-go requirement in helm.sh/helm/v3@{version}")
    return found.group(1)


def _kubernetes_staging_modules(version: str) -> list[str]:
    """Read the staging module names from that Kubernetes version's own go.mod."""
    info = json.loads(
        _run_go(["mod", "download", "-json", f"k8s.io/kubernetes@{version}"], cwd=None)
    )
    go_mod = Path(info["GoMod"]).read_text()
    modules = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", go_mod, re.MULTILINE)
    if not modules:
        raise BinaryBuildError(f"no staging replace directives in k8s.io/kubernetes@{version}")
    return sorted(set(modules))


def _write_go_module(
    module_dir: Path, *, module: str, requires: list[tuple[str, str]], extra: str = ""
) -> None:
    lines = [f"module {module}", "", "go 1.24.0", ""]
    lines += [f"require {path} {version}" for path, version in requires]
    text = "\n".join(lines) + "\n\n" + extra + "\n"
    go_mod = module_dir / "go.mod"
    if not go_mod.exists() or go_mod.read_text() != text:
        go_mod.write_text(text)
        (module_dir / "go.sum").unlink(missing_ok=True)


def _go_build(
    module_dir: Path,
    *,
    package: str,
    target: Path,
    ldflags: str,
    progress: TextIO,
    module: str | None = None,
    tags: tuple[str, ...] = (),
) -> None:
    """`module`: the module that holds `package` (default: the path before `/cmd/`; empty when
    `module_dir` is that module's own source, whose requirements the build itself downloads)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    if module != "":
        _run_go(["mod", "download", module or package.split("/cmd/")[0]], cwd=module_dir)
    flags = list(GO_BUILD_FLAGS)
    if tags:
        flags[flags.index("-tags") + 1] += "," + ",".join(tags)
    command = [
        "build",
        "-v",
        *flags,
        "-ldflags",
        ldflags,
        "-o",
        str(partial),
        package,
    ]
    _run_go_with_progress(command, cwd=module_dir, label=target.name, progress=progress)
    partial.replace(target)


def _go_executable() -> str:
    go = shutil.which("go")
    if go is None:
        raise BinaryBuildError(
            "Go is needed to build the local control plane once (or set KUBEBUILDER_ASSETS)"
        )
    return go


def _run_go(args: list[str], *, cwd: Path | None) -> str:
    env = {**os.environ, **GO_BUILD_ENV}
    result = subprocess.run(
        [_go_executable(), *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BinaryBuildError(f"go {' '.join(args)} failed:\n{result.stderr[-4000:]}")
    return result.stdout


def _run_go_with_progress(args: list[str], *, cwd: Path, label: str, progress: TextIO) -> None:
    """Run ``go build -v`` and turn its package list into a progress line every 100 packages."""
    env = {**os.environ, **GO_BUILD_ENV}
    process = subprocess.Popen(
        [_go_executable(), *args],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    tail: collections.deque[str] = collections.deque(maxlen=40)
    for compiled, line in enumerate(process.stderr, start=1):
        tail.append(line)
        if compiled % 100 == 0:
            print(
                f"[binaries] {label}: {compiled} packages compiled so far",
                file=progress,
                flush=True,
            )
    if process.wait() != 0:
        raise BinaryBuildError(f"building {label} failed:\n{''.join(tail)}")


if __name__ == "__main__":
    if sys.argv[1:] == ["helm"]:
        print(ensure_helm())
    elif sys.argv[1:] == ["kubectl-ray"]:
        try:
            print(ensure_kubectl_ray())
        except BinaryBuildError as error:
            sys.exit(f"[binaries] kubectl-ray {KUBECTL_RAY_VERSION} cannot be built: {error}")
    elif sys.argv[1:] == ["promtool"]:
        print(ensure_promtool())
    elif sys.argv[1:2] == ["go-program"] and len(sys.argv) == 4:
        print(ensure_go_program(Path(sys.argv[2]), sys.argv[3]))
    else:
        found = ensure_binaries()
        print(json.dumps({k: str(v) for k, v in dataclasses.asdict(found).items()}))
