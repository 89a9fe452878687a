"""A tiny Ray Serve app for the RayService tests: its answer depends on `user_config`.

Imported by the Ray head by module name (`greeter:app`): tests/serve_apps is on the head's
PYTHONPATH. `GET /` answers `<greeting>, world! (<color>)` where both words come from the
deployment's `user_config`, so a serveConfigV2 edit is visible in the HTTP answer.
"""

from __future__ import annotations

from typing import Any

from ray import serve


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Greeter:
    def __init__(self) -> None:
        self.greeting = "Hello"
        self.color = "none"

    def reconfigure(self, config: dict[str, Any]) -> None:
        self.greeting = str(config.get("greeting", "Hello"))
        self.color = str(config.get("color", "none"))

    async def __call__(self, request: Any) -> str:
        return f"{self.greeting}, world! ({self.color})"


app = Greeter.bind()
