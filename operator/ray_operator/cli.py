"""The `ray-operator` command: run the operator, manage the embedded local control plane, or
convert RayClusters of Ray's legacy operator.

ray-operator run [flags]                  the operator (see `ray-operator run --help`)
ray-operator dev [flags]                  what `make run` does: a local control plane unless
                                          KUBECONFIG is set, the CRDs, then the operator (and
                                          the local Ray agent: on the local plane, or with
                                          --local-ray)
ray-operator local-cluster start|stop|status [--dir DIR]
ray-operator convert FILE|- [-o yaml|json]
                                          RayClusters of Ray's legacy operator
                                          (cluster.ray.io/v1) as ray.io/v1 RayClusters
ray-operator --version                    the version (also /metrics' ray_operator_build_info
                                          and the image's org.opencontainers.image.version)

`dev` and `local-cluster` are development commands: the embedded control plane and the local Ray
agent they run stay in the source checkout (the wheel and the image ship the operator only), and
from a wheel they say so instead of starting.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ray_operator import __version__
from ray_operator.flags import Flag, add_flags, positive_int
from ray_operator.lean_imports import defer_unneeded_imports

if TYPE_CHECKING:
    from ray_operator.components import ComponentFactory
    from ray_operator.dashboard.resolver import DashboardResolver
    from ray_operator.localcluster.controlplane import LocalControlPlane
    from ray_operator.localray.agent import LocalRayOptions, LocalRayRegistry
    from ray_operator.localray.kubelet.server import KubeletEndpointOptions
    from ray_operator.runtime.controller import ControllerFactory
    from ray_operator.settings import Settings
    from ray_operator.validation.limits import ClusterLimits
    from ray_operator.webhooks import WebhookOptions


def main(argv: Sequence[str] | None = None) -> int:
    # Before anything imports them (see lean_imports): a few MiB of idle memory.
    defer_unneeded_imports()
    parser = _build_parser()
    args = parser.parse_args(argv)
    command: int = args.handler(args)
    return command


def _build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """`ray-operator`'s parser; flag defaults from `environ`'s RAY_OPERATOR_* twins (default:
    the process's environment; tests/flags_reference.py passes none, for the code's defaults)."""
    from ray_operator.settings import add_run_arguments
    from ray_operator.webhooks import add_webhook_arguments

    parser = argparse.ArgumentParser(
        prog="ray-operator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the operator")
    add_run_arguments(run, environ=environ)
    add_webhook_arguments(run, environ=environ)
    run.set_defaults(handler=_run)

    dev = commands.add_parser(
        "dev", help="local control plane (unless KUBECONFIG is set) + CRDs + the operator"
    )
    add_run_arguments(dev, environ=environ)
    add_webhook_arguments(dev, environ=environ)
    add_flags(dev, DEV_FLAGS, environ=environ)
    dev.set_defaults(handler=_development_command("dev", _dev))

    local = commands.add_parser("local-cluster", help="the embedded local control plane")
    local_commands = local.add_subparsers(required=True, metavar="ACTION")
    for action, handler, text in (
        (
            "start",
            _local_start,
            "start etcd, kube-apiserver, kube-scheduler, kube-controller-manager and KWOK",
        ),
        ("stop", _local_stop, "stop every component"),
        ("status", _local_status, "tell whether it runs and where its kubeconfig is"),
    ):
        sub = local_commands.add_parser(action, help=text)
        sub.add_argument(
            "--dir",
            type=Path,
            default=_local_cluster_state_dir(),
            help="state directory (default: %(default)s)",
        )
        sub.set_defaults(handler=_development_command(f"local-cluster {action}", handler))
    convert = commands.add_parser(
        "convert",
        help="convert RayClusters of Ray's legacy operator (cluster.ray.io/v1) to ray.io/v1",
    )
    convert.add_argument("file", metavar="FILE", help="YAML documents to convert; - for stdin")
    convert.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json"),
        default="yaml",
        help="output format (default: %(default)s)",
    )
    convert.set_defaults(handler=_convert)
    return parser


# The development tools are packages of the source checkout that the wheel leaves out
# (pyproject's packages.find): `dev` and `local-cluster` need both.
DEVELOPMENT_TOOLS = ("ray_operator.localcluster", "ray_operator.localray")


def development_tools_installed() -> bool:
    """Whether the embedded control plane and the local Ray agent are importable: in a source
    checkout (the editable install of `make run`), not in the wheel or the image."""
    return all(importlib.util.find_spec(name) is not None for name in DEVELOPMENT_TOOLS)


def _development_command(
    command: str, handler: Callable[[argparse.Namespace], int]
) -> Callable[[argparse.Namespace], int]:
    """`handler`, refusing with a sentence rather than a traceback where the development tools
    are not installed."""

    def run_if_installed(args: argparse.Namespace) -> int:
        if not development_tools_installed():
            raise SystemExit(
                f"ray-operator {command} is a development command: it runs from a source "
                "checkout of ray-operator (`make run`), not from the wheel or the image, which "
                "ship the operator only (`ray-operator run`)"
            )
        return handler(args)

    return run_if_installed


def _local_cluster_state_dir() -> Path | None:
    """`local-cluster`'s default state directory, beside the built binaries; None without the
    development tools (the command then only says where it runs)."""
    if not development_tools_installed():
        return None
    from ray_operator.localcluster.binaries import default_cache_dir

    return default_cache_dir() / "local-cluster"


def _convert(args: argparse.Namespace) -> int:
    from ray_operator.legacy.convert_command import run_convert

    return run_convert(args.file, output=args.output, stdout=sys.stdout, stderr=sys.stderr)


def _executable_file(text: str) -> Path:
    path = Path(text).expanduser().absolute()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r} is not an executable file")
    return path


DEV_FLAGS = (
    Flag(
        "dir",
        convert=Path,
        default=Path(".local-cluster"),
        twin=False,
        help="where the local control plane keeps its state (default: %(default)s)",
    ),
    Flag(
        "local-ray",
        switch=True,
        default=None,
        twin=False,
        help="give the head, worker and RayJob submitter Pods the operator creates on the fake "
        "node real local Ray processes, run as you (default: on with the embedded control plane, "
        "off when KUBECONFIG names another cluster; --no-local-ray for the API behaviour only)",
    ),
    Flag(
        "local-ray-max-clusters",
        convert=positive_int,
        default=4,
        twin=False,
        help="local Ray clusters at once, about 1 GiB per head (default: %(default)s)",
    ),
    Flag(
        "local-ray-max-nodes",
        convert=positive_int,
        default=10,
        twin=False,
        help="local Ray nodes (heads and workers) at once, 0.3-0.6 GiB per worker "
        "(default: %(default)s)",
    ),
    Flag(
        "local-ray-executable",
        convert=_executable_file,
        default=None,
        metavar="PATH",
        help="the `ray` local Ray nodes run; its directory's `python` runs their entrypoints and "
        "runtime environments, as a Ray image's Python does in a cluster (default: the `ray` "
        "beside this Python; env RAY_OPERATOR_LOCAL_RAY_EXECUTABLE)",
    ),
)
"""The flags `dev` adds to `run`'s (read by `_dev` and `_local_ray_options`; no dataclass)."""


def _run(
    args: argparse.Namespace,
    *,
    local_ray: LocalRayOptions | None = None,
    kubelet: KubeletEndpointOptions | None = None,
) -> int:
    from ray_operator.app import run
    from ray_operator.settings import cluster_limits, settings_from_args
    from ray_operator.webhooks import webhook_options_from_args

    try:
        settings = settings_from_args(args)
        webhooks = webhook_options_from_args(
            args, port=settings.webhook_port, default_namespace=settings.lease_namespace
        )
    except ValueError as error:
        raise SystemExit(f"ray-operator run: {error}") from None
    # One ClusterLimits for the webhook and the controllers: they hold specs to the same rules.
    limits = cluster_limits(settings)
    components = components_for(settings, webhooks, limits=limits)
    registry = None
    if local_ray is not None:
        from ray_operator.localray.agent import LocalRayRegistry, local_ray_component
        from ray_operator.localray.scope import CreatedObjects

        # Shared by the agent and the controllers (see LocalRayRegistry).
        registry = LocalRayRegistry(CreatedObjects(local_ray.directory / "created.json"))
        agent = local_ray_component(registry=registry, options=local_ray)
        if kubelet is not None:
            from ray_operator.localray.kubelet.component import with_kubelet_endpoint

            components.append(with_kubelet_endpoint(agent, kubelet))
        else:
            components.append(agent)
    return run(
        settings,
        controllers=controllers_for(settings, local_ray=registry, limits=limits),
        components=components,
    )


def components_for(
    settings: Settings, webhooks: WebhookOptions, *, limits: ClusterLimits | None = None
) -> list[ComponentFactory]:
    """What runs beside the controllers: the admission webhooks (holding specs to `limits`, by
    default the settings') and the RayServeGraph event endpoint, each when turned on."""
    from ray_operator.servegraph.events import serve_graph_events_component

    components: list[ComponentFactory] = []
    if webhooks.enabled:
        from ray_operator.webhooks.component import webhook_component

        components.append(webhook_component(webhooks, limits=limits))
    if settings.serve_graph_events_port:
        components.append(
            serve_graph_events_component(
                host=settings.serve_graph_events_address, port=settings.serve_graph_events_port
            )
        )
    return components


def controllers_for(
    settings: Settings,
    *,
    local_ray: LocalRayRegistry | None = None,
    limits: ClusterLimits | None = None,
) -> list[ControllerFactory]:
    """The RayCluster, RayJob, RayService and RayServeGraph controllers, reaching dashboards
    (local Ray clusters first, when the agent runs) and fetching graph documents as
    configured; the RayCronJob controller unless its feature gate is off; the legacy
    RayCluster controller with `--legacy-clusters`."""
    from ray_operator.builders.pods import PodOptions
    from ray_operator.controllers.raycluster import RayClusterController
    from ray_operator.controllers.rayjob import rayjob_controller
    from ray_operator.controllers.rayservegraph import rayservegraph_controller
    from ray_operator.controllers.rayservice import rayservice_controller
    from ray_operator.dashboard.resolver import resolver_from_overrides
    from ray_operator.features import RAY_CRON_JOB as RAY_CRON_JOB_GATE
    from ray_operator.settings import cluster_limits
    from ray_operator.spec.fetch_types import FetchPolicy

    if limits is None:
        limits = cluster_limits(settings)
    resolver: DashboardResolver = resolver_from_overrides(
        settings.dashboard_url_overrides, settings.serve_proxy_url_overrides
    )
    if local_ray is not None:
        from ray_operator.localray.agent import LocalRayResolver

        resolver = LocalRayResolver(local_ray, fallback=resolver)
    optional: list[ControllerFactory] = []
    if settings.feature_gates.enabled(RAY_CRON_JOB_GATE):
        from ray_operator.controllers.raycronjob import raycronjob_controller

        optional.append(raycronjob_controller(limits=limits))
    if settings.legacy_clusters:
        from ray_operator.controllers.legacy_raycluster import legacy_raycluster_controller

        optional.append(legacy_raycluster_controller(limits=limits))
    factories: list[ControllerFactory] = [
        *optional,
        functools.partial(
            RayClusterController,
            limits=limits,
            pod_options=PodOptions(batch_scheduler=settings.batch_scheduler),
        ),
        rayjob_controller(
            resolver=resolver, limits=limits, batch_scheduler=settings.batch_scheduler
        ),
        rayservice_controller(resolver=resolver, limits=limits),
        rayservegraph_controller(
            policy=FetchPolicy(
                allowed_hosts=frozenset(settings.serve_graph_allowed_hosts),
                allow_loopback=settings.serve_graph_allow_loopback,
                max_concurrent_fetches=settings.serve_graph_max_concurrent_fetches,
                max_concurrent_fetches_per_namespace=(
                    settings.serve_graph_max_concurrent_fetches_per_namespace
                ),
            ),
            limits=limits,
        ),
    ]
    if local_ray is None:
        return factories
    from ray_operator.localray.agent import recording_creations

    # The agent runs only the Pods (and submitter Jobs' Pods) these controllers create.
    return [recording_creations(factory, registry=local_ray) for factory in factories]


def _dev(args: argparse.Namespace) -> int:
    from ray_operator.localcluster.controlplane import LocalControlPlane
    from ray_operator.localray.scope import local_ray_wanted
    from ray_operator.settings import listen_on_loopback

    args.health_addr = listen_on_loopback(args.health_addr)
    args.metrics_addr = listen_on_loopback(args.metrics_addr)
    control_plane = None
    embedded = not (args.kubeconfig or os.environ.get("KUBECONFIG"))
    # Decided by what this process starts, never by anything the cluster could claim.
    args.local_ray = local_ray_wanted(args.local_ray, embedded_control_plane=embedded)
    if embedded:
        control_plane = LocalControlPlane(args.dir, ray_job_submitters_run_locally=args.local_ray)
        print(f"Starting the embedded control plane in {control_plane.directory} ...", flush=True)
        control_plane.start()
        args.kubeconfig = str(control_plane.kubeconfig)
        # Outside a cluster the operator registers its webhooks with a url: pointing at itself,
        # so the local control plane validates and defaults as a real install does.
        if args.webhooks is not False and args.webhook_port != 0 and not args.webhook_url_base:
            args.webhook_url_base = f"https://127.0.0.1:{args.webhook_port}"
    kubeconfig = args.kubeconfig or os.environ["KUBECONFIG"]
    try:
        install_crds(Path(kubeconfig), legacy=args.legacy_clusters)
        print(
            f"\nCRDs installed. In another shell:\n    export KUBECONFIG={kubeconfig}\n"
            "    kubectl apply -f samples/ray-cluster.mini.yaml\n"
            "    kubectl get rayclusters.ray.io,pods\n",
            flush=True,
        )
        if args.legacy_clusters:
            print(
                "Legacy cluster.ray.io/v1 RayClusters are served too:\n"
                "    kubectl apply -f samples/legacy/ray-cluster.legacy.yaml\n"
                "    kubectl get rayclusters.cluster.ray.io\n",
                flush=True,
            )
        local_ray = _local_ray_options(args, control_plane)
        kubelet = None
        if local_ray is not None and control_plane is not None:
            kubelet = _kubelet_endpoint_options(control_plane)
        return _run(args, local_ray=local_ray, kubelet=kubelet)
    finally:
        if control_plane is not None:
            print("Stopping the embedded control plane ...", flush=True)
            control_plane.stop()


def _kubelet_endpoint_options(control_plane: LocalControlPlane) -> KubeletEndpointOptions:
    """The fake node's kubelet endpoint (`kubectl logs`, `exec`, `port-forward` of local Pods),
    only ever for the plane this process started."""
    from ray_operator.localray.kubelet.server import KubeletEndpointOptions

    return KubeletEndpointOptions(credentials=control_plane.kubelet_credentials())


def _local_ray_options(
    args: argparse.Namespace, control_plane: LocalControlPlane | None
) -> LocalRayOptions | None:
    from ray_operator.localcluster.controlplane import FAKE_NODE_NAME
    from ray_operator.localray.agent import LocalRayOptions, ray_beside_this_python
    from ray_operator.localray.plan import KubeAccess
    from ray_operator.localray.scope import external_cluster_warning
    from ray_operator.settings import settings_from_args

    if not args.local_ray:
        if control_plane is None:
            print(
                "Local Ray is off: KUBECONFIG names a cluster ray-operator dev did not start "
                "(--local-ray would run Ray Pods of that cluster on this machine).",
                flush=True,
            )
        return None
    if control_plane is None:
        warning = external_cluster_warning(
            kubeconfig=args.kubeconfig or os.environ["KUBECONFIG"],
            node_name=FAKE_NODE_NAME,
            namespaces=settings_from_args(args).namespaces,
        )
        print(warning, file=sys.stderr, flush=True)
    print(
        "Local Ray is on: head, worker and RayJob submitter Pods the operator creates on the fake "
        f"node get real Ray processes (at most {args.local_ray_max_clusters} clusters, "
        f"{args.local_ray_max_nodes} nodes; --no-local-ray turns it off). Their addresses are "
        "printed here and in each Pod's events.",
        flush=True,
    )
    access = None
    if control_plane is not None:
        ca, cert, key = control_plane.admin_credentials()
        access = KubeAccess(
            host="127.0.0.1",
            port=control_plane.ports.apiserver,
            ca_file=str(ca),
            cert_file=str(cert),
            key_file=str(key),
        )
    return LocalRayOptions(
        directory=(args.dir / "local-ray").resolve(),
        node_name=FAKE_NODE_NAME,
        max_clusters=args.local_ray_max_clusters,
        max_nodes=args.local_ray_max_nodes,
        kube_access=access,
        ray_executable=str(args.local_ray_executable or ray_beside_this_python()),
    )


def install_crds(kubeconfig: Path, *, legacy: bool = False) -> None:
    """Apply crd/ (crd/legacy/ too when `legacy`) with server-side apply and wait until the API
    server serves the kinds."""
    from ray_operator.crds import crd_files, crd_names

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise SystemExit("kubectl is needed to install the CRDs; put it on the PATH")
    base = [kubectl, "--kubeconfig", str(kubeconfig)]
    subprocess.run(
        [
            *base,
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=ray-operator",
            *(f"--filename={path}" for path in crd_files(legacy=legacy)),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wait = [
        *base,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *(f"crd/{name}" for name in crd_names(legacy=legacy)),
    ]
    # A CRD applied a moment ago may have no conditions yet, which `kubectl wait` takes for an
    # error rather than for "not yet": ask again a few times.
    for attempt in range(5):
        waited = subprocess.run(wait, check=False, capture_output=True, text=True)
        if waited.returncode == 0:
            return
        time.sleep(0.5 * (attempt + 1))
    raise SystemExit(f"the CRDs did not become established: {waited.stderr.strip()}")


def _local_start(args: argparse.Namespace) -> int:
    from ray_operator.localcluster.controlplane import LocalControlPlane

    control_plane = LocalControlPlane(args.dir)
    control_plane.start()
    print(control_plane.kubeconfig)
    return 0


def _local_stop(args: argparse.Namespace) -> int:
    from ray_operator.localcluster.controlplane import LocalControlPlane

    control_plane = LocalControlPlane(args.dir)
    if not control_plane.load_state():
        print(f"no local control plane recorded in {control_plane.directory}", file=sys.stderr)
        return 0
    control_plane.stop()
    print(f"stopped the local control plane in {control_plane.directory}")
    return 0


def _local_status(args: argparse.Namespace) -> int:
    from ray_operator.localcluster.controlplane import LocalControlPlane

    control_plane = LocalControlPlane(args.dir)
    if not control_plane.load_state():
        print(f"not running (nothing recorded in {control_plane.directory})")
        return 1
    for name, alive in control_plane.running_components().items():
        print(f"{name:24} {'running' if alive else 'NOT RUNNING'}")
    ready = control_plane.is_ready()
    print(f"{'readyz':24} {'ok' if ready else 'not ready'}")
    print(f"{'kubeconfig':24} {control_plane.kubeconfig}")
    return 0 if ready and all(control_plane.running_components().values()) else 1


if __name__ == "__main__":
    sys.exit(main())
