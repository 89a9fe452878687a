"""The in-process operator of tests/controllers on the suite's complete control plane, whose
kube-controller-manager runs the namespace controller: deleting a namespace really empties it."""

from tests.controllers.conftest import harness, operator

__all__ = ["harness", "operator"]
