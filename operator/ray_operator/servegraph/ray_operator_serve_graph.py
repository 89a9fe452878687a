"""Builds a RayServeGraph's Serve application inside Ray: the DAG of `serve.deployment(...).bind()`.

Serve's declarative config cannot bind one deployment's handle into another, but its
`import_path` may name an application builder: a function of one parameter that Serve calls with
the application's `args`. The operator compiles a ServeGraph into
`import_path: ray_operator_serve_graph:build` with the graph's code-shaped part in `args`
(`GraphArgs`); scaling and resources go into the application's `deployments:` overrides, which
Serve applies on top of what `build` returns.

This file is shipped as it is: the operator puts its text in a ConfigMap that is mounted into the
Ray containers and put on their PYTHONPATH (no custom image). Hence:
- it imports nothing from `ray_operator` (that package is not in the Ray image), and imports Ray
  only inside `build`, so the operator (which has no Ray) can import `GraphArgs` to test against;
- it runs on the Ray image's Python (3.9 or newer): no `X | Y` annotations, no `match`;
- it must NOT use `from __future__ import annotations`. Serve validates `args` with the pydantic
  class annotated on the builder's parameter only when `inspect.isclass(annotation)` holds
  (ray/serve/_private/api.py, `call_user_app_builder_with_args_if_necessary`). Under the future
  import the annotation is the string "GraphArgs": Serve then passes a plain dict, `build` fails
  on `args.deployments` and the application never comes up. A test fails if the import appears.
"""

import importlib
from graphlib import TopologicalSorter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

GRAPH_FORMAT = "ray-operator.io/v1alpha1"
"""The schema of `args` this module reads (the operator writes it into `args.format`)."""


class DeploymentArgs(BaseModel):
    """One deployment: what to import, how to construct it, which handles it receives."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    import_path: str
    """`package.module:attribute`: a class, a function or an already decorated deployment."""
    init_args: list[Any] = Field(default_factory=list)
    init_kwargs: dict[str, Any] = Field(default_factory=dict)
    handles: dict[str, str] = Field(default_factory=dict)
    """Keyword argument name → the deployment whose handle it receives."""


class GraphArgs(BaseModel):
    """The application's `args`: the deployments, their wiring and the ingress."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["ray-operator.io/v1alpha1"]
    ingress: str
    deployments: list[DeploymentArgs]

    @model_validator(mode="after")
    def _names_resolve(self) -> "GraphArgs":
        names = [deployment.name for deployment in self.deployments]
        if len(set(names)) != len(names):
            raise ValueError("deployment names must be unique")
        if self.ingress not in names:
            raise ValueError(f"ingress {self.ingress!r} is not a deployment")
        for deployment in self.deployments:
            for argument, callee in deployment.handles.items():
                if callee not in names:
                    raise ValueError(f"{deployment.name}.{argument}: unknown deployment {callee!r}")
        return self


def build(args: GraphArgs) -> Any:
    """Serve's application builder: bind every deployment, callees first; the ingress's app."""
    from ray import serve
    from ray.serve import Deployment

    by_name = {deployment.name: deployment for deployment in args.deployments}
    # Callees are bound before their callers, so a caller's handles exist when it is bound.
    order = TopologicalSorter(
        {deployment.name: set(deployment.handles.values()) for deployment in args.deployments}
    ).static_order()
    bound: dict[str, Any] = {}
    for name in order:
        described = by_name[name]
        target = _load(described.import_path)
        # An already decorated deployment keeps its own options; a plain class or function
        # becomes one. Either way it is renamed to the graph's name, which the application's
        # `deployments:` overrides (scaling, resources) refer to.
        if isinstance(target, Deployment):
            deployment = target.options(name=name)
        else:
            deployment = serve.deployment(name=name)(target)
        handles = {argument: bound[callee] for argument, callee in described.handles.items()}
        bound[name] = deployment.bind(*described.init_args, **described.init_kwargs, **handles)
    return bound[args.ingress]


def _load(import_path: str) -> Any:
    module_name, _, attribute = import_path.partition(":")
    return getattr(importlib.import_module(module_name), attribute)
