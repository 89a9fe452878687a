"""The real control plane for the legacy tests: the webhook server of tests/webhooks and the
in-process operator of tests/controllers, on the suite's complete control plane."""

from tests.controllers.conftest import harness, operator
from tests.webhooks.conftest import webhook_namespace, webhook_server

__all__ = ["harness", "operator", "webhook_namespace", "webhook_server"]
