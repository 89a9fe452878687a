# syntax=docker/dockerfile:1
# The ray-operator image: `docker build -t ray-operator:0.1.0 .` (or `make docker-build`).
#
# Stage 1 builds a wheel of the project (both source roots, operator/ and generated/, less the
# development tools: see pyproject.toml) and installs it with its runtime dependencies into a
# virtualenv; stage 2 is the same slim Python with that virtualenv and nothing else: no compiler,
# no pip, no sources, no test or dev extras, no development tools. The dependencies are exactly
# those of the lock (requirements/runtime.txt, exported from uv.lock by `make lock`), checked
# against their hashes and taken as binary wheels (they ship them for linux/amd64 and
# linux/arm64), so two builds a week apart install the same files and neither stage needs a
# compiler.

# Pinned: bump deliberately (and the digest with it, when you pin one).
ARG PYTHON_IMAGE=python:3.12.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY requirements/runtime.txt requirements/runtime.txt
COPY operator/ operator/
COPY generated/ generated/
# The wheel first (build isolation fetches the setuptools that pyproject.toml asks for), then a
# virtualenv without pip of its own holding the locked dependencies and the wheel, which adds
# none (--no-deps), and `pip check` that they satisfy it. The image runs Python with
# PYTHONOPTIMIZE=2 (below), which reads `.opt-2.pyc` files: they are compiled here, so the
# read-only root filesystem never needs a write and no start compiles a module.
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/ray-operator \
 && pip --python /opt/ray-operator/bin/python install --no-compile \
        --require-hashes --no-deps --only-binary :all: -r requirements/runtime.txt \
 && pip --python /opt/ray-operator/bin/python install --no-compile --no-deps /wheels/*.whl \
 && pip --python /opt/ray-operator/bin/python check \
 && /opt/ray-operator/bin/python -m compileall -q -j 0 -o 2 /opt/ray-operator/lib

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="ray-operator" \
      org.opencontainers.image.description="A Kubernetes operator for Ray (ray.io/v1: RayCluster, RayJob, RayService), on asyncio." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# pip is only needed to build; an operator image that can install packages is a gift to an
# attacker.
RUN python -m pip uninstall --yes pip
COPY --from=build /opt/ray-operator /opt/ray-operator
# Settings for memory at rest (operator/ray_operator/bench/RESULTS.md, "Idle memory"):
# - PYTHONOPTIMIZE=2 drops docstrings (and asserts) from the loaded code: 1.7 MiB of the idle
#   operator's RSS, held for nothing. The operator's asserts only narrow types for mypy.
# - No CA bundle file, the CA directory only: aiohttp builds its default TLS context when it is
#   imported, and with the bundle OpenSSL parses every public CA into it (1.7 MiB) although the
#   operator verifies the API server and its fetches with contexts of its own. From the
#   directory (hashed names), OpenSSL reads a CA when a verification needs it, so a TLS peer
#   is verified against the same system CAs.
# - frozenlist (aiohttp's signal lists) in pure Python: its compiled extension is C++, the one
#   module that loads the C++ runtime into the process (1.2 MiB); aiohttp iterates those lists
#   (mostly empty) once per request at most.
ENV PATH=/opt/ray-operator/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONOPTIMIZE=2 \
    SSL_CERT_FILE=/dev/null \
    SSL_CERT_DIR=/etc/ssl/certs \
    FROZENLIST_NO_EXTENSIONS=1
# A numeric, unprivileged user that owns nothing in the image (the root filesystem is mounted
# read-only in config/manager anyway); numeric so that runAsNonRoot can verify it.
USER 65532:65532
# The probes /healthz and /readyz (8082), /metrics (8080), the admission webhooks (9443).
EXPOSE 8080 8082 9443
ENTRYPOINT ["ray-operator", "run"]
