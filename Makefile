# The two commands of the README: `make run` and `make test`. Everything else is a step of theirs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed-stamp

IMG ?= ray-operator:0.1.0
CONTAINER_TOOL ?= docker

.PHONY: run test lint typecheck pytest binaries helm kubectl-ray dashboard-tools chart generate bench \
	conformance clean \
	docker-build docker-push deploy undeploy

$(INSTALLED): pyproject.toml
	@echo "== creating the virtualenv in $(VENV) and installing ray-operator with its test/dev extras"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dev]'
	@touch $@

## run: the operator against an embedded local control plane (or $$KUBECONFIG's cluster), with
## local Ray; flags of `ray-operator dev` in RUN_ARGS (e.g. RUN_ARGS=--no-local-ray)
run: $(INSTALLED) binaries
	$(BIN)/ray-operator dev $(RUN_ARGS)

## test: lint, type-check, then the whole test suite against a real kube-apiserver
test: lint typecheck binaries helm kubectl-ray dashboard-tools pytest

lint: $(INSTALLED)
	$(BIN)/ruff check operator tests
	$(BIN)/ruff format --check operator tests
	$(BIN)/lint-imports

typecheck: $(INSTALLED)
	$(BIN)/mypy

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

pytest: $(INSTALLED)
	$(BIN)/pytest -v --durations=10

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
	$(CONTAINER_TOOL) build --build-arg REVISION=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown) -t $(IMG) .

docker-push:
	$(CONTAINER_TOOL) push $(IMG)

## deploy: install CRDs, RBAC, the operator and its webhooks on $$KUBECONFIG's cluster
deploy:
	kubectl apply --server-side -k config/default

undeploy:
	kubectl delete -k config/default --ignore-not-found

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .local-cluster .conformance dist
