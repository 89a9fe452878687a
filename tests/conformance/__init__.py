"""KubeRay's own end-to-end suites run against `ray-operator dev`: our standing conformance check.

Kept under tests/ rather than in the operator package: it is test tooling that needs a checkout
(Go, kubectl, the tests' own `ray-operator dev` launcher), it must never ship in the operator's
wheel or image, and the KubeRay test binaries it builds are cached outside the repository, never
committed. `make conformance` runs `python -m tests.conformance`; `test_kuberay_e2e.py` runs the
part that fits in CI's time.
"""
