# The two commands of the README: `make run` and `make test`. Everything else is a step of theirs.
#
# The full suite runs on the image's Python (3.12); the other versions that pyproject's
# requires-python admits get `make pythons`. Each is found on PATH or under pyenv
# (.ci/find-python), or named: `make PYTHON=/path/to/python3.12`.
SUITE_PYTHON := 3.12
OTHER_PYTHONS := 3.11 3.13
# Local Ray nodes (make run's, and the suite's) run a Python of their own, as a Ray Pod runs its
# image's and not the operator's: KubeRay's samples install runtime envs that build there
# (ray-job.sample.yaml's pendulum==2.1.2 builds for 3.11, not 3.12). Their `ray` is
# RAY_NODES_RAY; set it to run another.
RAY_NODES_PYTHON := 3.11
RAY_NODES_VENV := .venv-ray-nodes
RAY_NODES_RAY ?= $(CURDIR)/$(RAY_NODES_VENV)/bin/ray
ifndef PYTHON
PYTHON := $(shell .ci/find-python $(SUITE_PYTHON) 2>/dev/null)
endif
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed-stamp
# pip installs exactly the lock's files (requirements/*.txt, exported from uv.lock by `make lock`),
# binary wheels checked against their hashes; pip's cache is kept, so a second build downloads
# nothing.
PIP_INSTALL_LOCKED := pip install --quiet --require-hashes --no-deps --only-binary :all: -r

# The version has one place, ray_operator/__init__.py (pyproject reads it too).
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' operator/ray_operator/__init__.py)
IMG ?= ray-operator:$(VERSION)
CONTAINER_TOOL ?= docker

.PHONY: run test lint typecheck pytest pythons ray-nodes binaries helm kubectl-ray dashboard-tools chart \
	generate lock bench conformance docs flags-reference clean docker-build docker-push deploy undeploy version

$(INSTALLED): pyproject.toml requirements/all.txt
	@test -n "$(PYTHON)" || .ci/find-python $(SUITE_PYTHON)
	@echo "== creating the virtualenv in $(VENV) ($(PYTHON)) and installing ray-operator with every extra"
	$(PYTHON) -m venv --clear $(VENV)
	$(BIN)/$(PIP_INSTALL_LOCKED) requirements/all.txt
	$(BIN)/pip install --quiet --no-deps -e .
	@touch $@

## run: the operator against an embedded local control plane (or $$KUBECONFIG's cluster), with
## local Ray; flags of `ray-operator dev` in RUN_ARGS (e.g. RUN_ARGS=--no-local-ray)
run: $(INSTALLED) ray-nodes binaries
	RAY_OPERATOR_LOCAL_RAY_EXECUTABLE=$(RAY_NODES_RAY) $(BIN)/ray-operator dev $(RUN_ARGS)

## ray-nodes: the virtualenv local Ray nodes run (RAY_NODES_PYTHON, Ray from the lock)
ray-nodes: $(RAY_NODES_VENV)/.installed-stamp
$(RAY_NODES_VENV)/.installed-stamp: requirements/ray-nodes.txt
	python=$$(.ci/find-python $(RAY_NODES_PYTHON)) && $$python -m venv --clear $(RAY_NODES_VENV)
	$(RAY_NODES_VENV)/bin/$(PIP_INSTALL_LOCKED) requirements/ray-nodes.txt
	@touch $@

## test: lint, type-check, the other Pythons' reduced set, the docs site, then the whole test suite
## against a real kube-apiserver
test: lint typecheck pythons docs binaries helm kubectl-ray dashboard-tools pytest

lint: $(INSTALLED)
	$(BIN)/ruff check operator tests
	$(BIN)/ruff format --check operator tests
	$(BIN)/lint-imports

typecheck: $(INSTALLED)
	$(BIN)/mypy

## pythons: on each of OTHER_PYTHONS, in a virtualenv of its own (.venv-pyX.Y) with the locked
## runtime and test dependencies but no Ray: every module imported, and the tests of the pure
## layers (pyproject's "Pure layers" import-linter contract) that need no Ray; and mypy for that version
## (--python-version: that Python's standard library; run from $(VENV), which has Ray's types)
PURE_LAYER_TESTS := tests/spec tests/builders tests/status tests/planning tests/validation tests/cron tests/bounded_yaml \
	tests/bounded_json tests/legacy tests/localray/test_plan.py tests/localray/test_redis_plan.py \
	tests/localray/test_volumes.py tests/runtime/test_feature_gates.py
pythons: $(addprefix python-,$(OTHER_PYTHONS))

python-%: .venv-py%/.installed-stamp $(INSTALLED)
	@echo "== Python $*: import every module, mypy --python-version $*, the pure layers' tests"
	.venv-py$*/bin/python -m tests.import_every_module
	$(BIN)/mypy --python-version $*
	.venv-py$*/bin/pytest -q -p no:cacheprovider -m 'not needs_ray' \
		--deselect tests/legacy/test_on_control_plane.py $(PURE_LAYER_TESTS)

# Kept: make would delete a pattern rule's intermediate stamp, and rebuild the venv every run.
.PRECIOUS: .venv-py%/.installed-stamp
.venv-py%/.installed-stamp: pyproject.toml requirements/pure.txt
	python=$$(.ci/find-python $*) && $$python -m venv --clear .venv-py$*
	.venv-py$*/bin/$(PIP_INSTALL_LOCKED) requirements/pure.txt
	.venv-py$*/bin/pip install --quiet --no-deps -e .
	@touch $@

## binaries: build (once, then cached) etcd, kube-apiserver, kube-scheduler and KWOK
binaries: $(INSTALLED)
	$(BIN)/python -m ray_operator.localcluster.binaries

## helm: build (once, then cached) the pinned helm the chart's tests use (`helm lint`, `helm
## template`, `helm install` in tests/deploy/test_helm_chart.py)
helm: $(INSTALLED)
	$(BIN)/python -m ray_operator.localcluster.binaries helm

## kubectl-ray: build (once, then cached) KubeRay's pinned `kubectl ray` plugin, which
## tests/deploy/test_kubectl_ray_plugin.py runs against the operator. Where the Go module proxy does
## not serve KubeRay's root module, KUBERAY_SOURCE=<checkout or git dir> builds it from source;
## without it the build fails, make goes on and that test module is skipped.
kubectl-ray: $(INSTALLED)
	-$(BIN)/python -m ray_operator.localcluster.binaries kubectl-ray

## dashboard-tools: build (once, then cached) the pinned promtool and the Grafana dashboard
## schema check (tests/deploy/grafana_schema) of tests/deploy/test_dashboards_and_alerts.py
dashboard-tools: $(INSTALLED)
	$(BIN)/python -m ray_operator.localcluster.binaries promtool
	$(BIN)/python -m ray_operator.localcluster.binaries go-program tests/deploy/grafana_schema grafana-dashboard-check

## chart: lint charts/ray-operator and package it into dist/ (the links to config/ and the CRDs
## become files in the package)
chart: helm
	$$($(BIN)/python -m ray_operator.localcluster.binaries helm) lint --strict charts/ray-operator
	$$($(BIN)/python -m ray_operator.localcluster.binaries helm) package charts/ray-operator -d dist

## pytest: the bytecode of the source tree first. The suite starts the operator in a subprocess
## many times, and where PYTHONDONTWRITEBYTECODE is set (CI here) each start would compile every
## module from source again.
pytest: $(INSTALLED) ray-nodes
	$(BIN)/python -m compileall -q -j 0 operator generated tests
	RAY_OPERATOR_LOCAL_RAY_EXECUTABLE=$(RAY_NODES_RAY) $(BIN)/pytest -v --durations=10

## lock: after a change to the dependencies in pyproject.toml: update uv.lock (one resolution for
## every Python requires-python admits; the versions already locked are kept unless
## LOCK_ARGS=--upgrade or --upgrade-package NAME) and export requirements/ from it: runtime.txt
## (the image), pure.txt (`make pythons`), all.txt (the virtualenv), ray-nodes.txt (local Ray nodes)
lock: $(INSTALLED)
	$(BIN)/uv lock $(LOCK_ARGS)
	$(call export_locked,runtime)
	$(call export_locked,pure,--extra test)
	$(call export_locked,all,--all-extras)
	$(call export_locked,ray-nodes,--extra test-ray)

# requirements/$(1).txt exported from uv.lock (with the extras $(2)); a file that comes out the same
# keeps its date, since the virtualenvs are rebuilt when theirs is newer
export_locked = $(BIN)/uv export --frozen --quiet --no-emit-project --format requirements-txt $(2) \
	>requirements/$(1).txt.new && if cmp -s requirements/$(1).txt.new requirements/$(1).txt; \
	then rm requirements/$(1).txt.new; else mv requirements/$(1).txt.new requirements/$(1).txt; fi

## docs: build the docs site (docs/, mkdocs.yml) into .site/, strictly: a broken link or anchor, or a
## page missing from the nav, fails
docs: $(INSTALLED)
	$(BIN)/mkdocs build --strict --site-dir .site

## flags-reference: rewrite docs/reference/flags.md from the operator's argparse parsers (after
## adding or changing a flag; tests/deploy/test_docs.py fails while the page is stale)
flags-reference: $(INSTALLED)
	$(BIN)/python -m tests.flags_reference

## version: print the version (ray_operator/__init__.py)
version:
	@echo $(VERSION)

## bench: the benchmarks (M1-M6) against an embedded control plane; prints a table (--json too)
bench: $(INSTALLED) binaries
	$(BIN)/python -m ray_operator.bench $(BENCH_ARGS)

## conformance: KubeRay's own e2e suites (pinned version, built once from the Go module proxy)
## against a fresh `ray-operator dev`; writes .conformance/conformance.md and .json
## (flags in CONFORMANCE_ARGS, e.g. CONFORMANCE_ARGS="--suite sampleyaml --run TestRayJob")
conformance: $(INSTALLED) binaries
	$(BIN)/python -m tests.conformance $(CONFORMANCE_ARGS)

## generate: rebuild crd/ and generated/ from their sources
generate: $(INSTALLED)
	$(BIN)/python -m ray_operator.apigen

## docker-build: build the operator image $(IMG) (needs a Docker engine)
docker-build:
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) \
		--build-arg REVISION=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown) -t $(IMG) .

docker-push:
	$(CONTAINER_TOOL) push $(IMG)

## deploy: install CRDs, RBAC, the operator and its webhooks on $$KUBECONFIG's cluster
deploy:
	kubectl apply --server-side -k config/default

undeploy:
	kubectl delete -k config/default --ignore-not-found

clean:
	rm -rf $(VENV) $(RAY_NODES_VENV) $(addprefix .venv-py,$(OTHER_PYTHONS)) .mypy_cache .ruff_cache .pytest_cache .local-cluster .conformance .site dist
