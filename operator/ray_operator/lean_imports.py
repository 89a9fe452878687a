"""Third-party packages whose `__init__` imports far more than the operator uses, deferred.

- kubernetes-asyncio: we use it for kubeconfig, in-cluster and exec-plugin credentials, token
  refresh and `ApiClient.call_api`, never for its ~900 generated API and model modules. But its
  package `__init__` imports all of them, and so does `kubernetes_asyncio.client`'s (upstream
  issue tomplus/kubernetes_asyncio#293): importing `kubernetes_asyncio.config` costs ~36 MiB of
  RSS, a third of the idle operator, for classes we never instantiate.
- urllib3 (~2.7 MiB with what it imports): kubernetes-asyncio imports it only to build a
  basic-auth header (`urllib3.util.make_headers`) for a kubeconfig with a username and password.
- dateutil's parser (~1.8 MiB): kubernetes-asyncio's api_client imports `dateutil.parser.parse`
  to deserialize dates into models, which we never do; it gets a stand-in that loads the real
  parser on its first call.
- prometheus_client (~0.6 MiB): its `__init__` loads every exposition server (WSGI, ASGI, the
  Twisted and HTTP ones) and registers process/platform/GC collectors on a global registry we do
  not use; we need its metric types, registry and process collector (the text format is ours:
  `metrics.text_format`).

`defer_unneeded_imports()` registers these packages in `sys.modules` without running their
`__init__`. Submodules still import from the real files (the packages keep their `__path__`),
and the few names taken from the packages themselves are resolved to their defining submodules
(`LIGHT_NAMES`). Any other name (`kubernetes_asyncio.client.CoreV1Api`,
`prometheus_client.REGISTRY`, used by tests and the benchmark harness) runs the real `__init__`
once, in place, so a process that wants a whole package still gets it unchanged: the deferral
saves memory, it hides nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

LIGHT_NAMES: Mapping[str, Mapping[str, tuple[str, str]]] = {
    "kubernetes_asyncio": {},
    "kubernetes_asyncio.client": {
        "Configuration": ("kubernetes_asyncio.client.configuration", "Configuration"),
        "ApiClient": ("kubernetes_asyncio.client.api_client", "ApiClient"),
    },
    # api_client imports the models package and only reads it to deserialize into a model class,
    # which `call_api(..., _preload_content=False)` never does.
    "kubernetes_asyncio.client.models": {},
    "urllib3": {},
    "dateutil.parser": {"parse": ("ray_operator.lean_imports", "parse_date")},
    "prometheus_client": {
        "CollectorRegistry": ("prometheus_client.registry", "CollectorRegistry"),
        "Counter": ("prometheus_client.metrics", "Counter"),
        "Gauge": ("prometheus_client.metrics", "Gauge"),
        "Histogram": ("prometheus_client.metrics", "Histogram"),
        "ProcessCollector": ("prometheus_client.process_collector", "ProcessCollector"),
    },
}
"""Per deferred package: the names served from a submodule without running its `__init__`."""


def defer_unneeded_imports() -> None:
    """Register the packages of `LIGHT_NAMES` not imported yet as deferred (idempotent).

    A package already imported is left alone: it is the real one, loaded by someone who wanted
    it whole. kubernetes-asyncio's packages are deferred together or not at all.
    """
    kubernetes_loaded = "kubernetes_asyncio" in sys.modules
    for package, light_names in LIGHT_NAMES.items():
        if package in sys.modules or (kubernetes_loaded and package.startswith("kubernetes_")):
            continue
        sys.modules[package] = _deferred_package(package, light_names)


def _deferred_package(name: str, light_names: Mapping[str, tuple[str, str]]) -> ModuleType:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"{name} is not installed", name=name)
    loader = spec.loader
    package = importlib.util.module_from_spec(spec)

    def resolve(attribute: str) -> Any:
        if attribute in light_names:
            module_name, object_name = light_names[attribute]
            value = getattr(importlib.import_module(module_name), object_name)
        elif importlib.util.find_spec(f"{name}.{attribute}") is not None:
            # `from package import submodule` asks for the attribute before importing it.
            value = importlib.import_module(f"{name}.{attribute}")
        else:
            del package.__dict__["__getattr__"]
            loader.exec_module(package)  # the real __init__, once
            return getattr(package, attribute)
        setattr(package, attribute, value)
        return value

    package.__getattr__ = resolve  # type: ignore[method-assign]
    return package


def parse_date(*args: Any, **kwargs: Any) -> Any:
    """`dateutil.parser.parse` for whoever imported it from the deferred `dateutil.parser`."""
    parser = importlib.import_module("dateutil.parser._parser")  # loaded by the first call
    return parser.parse(*args, **kwargs)
