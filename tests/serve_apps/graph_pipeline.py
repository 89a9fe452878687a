"""A user's three-step Serve pipeline, written as plain Python for the RayServeGraph tests.

Nothing here is wired: the graph document says which deployment gets a handle to which
(`Preprocess(model=…)`, `Model(post=…)`), and the operator's builder binds them inside Ray.
`GET /?x=2` → Preprocess adds 1 → Model multiplies by `factor` → Postprocess formats
`<label>=<value>`: with factor 3 and label "out" the answer is `out=9`.

Two styles on purpose: `Preprocess` and `Model` are plain classes (the builder makes them
deployments), `Postprocess` is already decorated (the builder renames it). Nothing reserves a
CPU: the shared test head has two.
"""

from __future__ import annotations

from typing import Any

from ray import serve


class Preprocess:
    def __init__(self, model: Any) -> None:
        self.model = model

    async def __call__(self, request: Any) -> str:
        x = float(request.query_params.get("x", "0"))
        return str(await self.model.remote(x + 1))


class Model:
    def __init__(self, factor: int, post: Any) -> None:
        # The graph sends `factor: 3`; a Struct number arrives as a double, the compiler makes
        # integral ones ints again — checked here so a regression shows in the answer.
        if not isinstance(factor, int):
            raise TypeError(f"factor should arrive as an int, got {factor!r}")
        self.factor = factor
        self.post = post

    async def __call__(self, x: float) -> str:
        return str(await self.post.remote(x * self.factor))


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Postprocess:
    def __init__(self, label: str = "result") -> None:
        self.label = label

    def __call__(self, y: float) -> str:
        return f"{self.label}={y:g}"
