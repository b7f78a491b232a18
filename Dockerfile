# The qosmos image: `qosmos operator run`, `qosmos extender serve`, `qosmos sidecar run` (the Helm
# chart's operator, extender and node agent), plus the kubectl-qosmos plugin.
#
#   docker build -t registry.example.com/qosmos:0.1.0 .
#   docker build --build-arg BASE=python:3.12-slim-bookworm -t ... .
#
# BASE: a Debian bookworm image with Python 3.11 (the lock's interpreter): python:3.11-slim-bookworm,
# pinned by digest so a rebuild gets the same base (refresh: `docker buildx imagetools inspect
# python:3.11-slim-bookworm`), or debian:bookworm with Debian's python3 and python3-venv. PIP_ARGS:
# extra pip options, e.g. for an offline build from a wheelhouse in the context:
# --build-arg PIP_ARGS="--no-index --find-links /src/wheels".
ARG BASE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

FROM ${BASE} AS build
ARG PIP_ARGS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# Debian's python3 needs python3-venv; the python:* images have venv built in
RUN python3 -m venv /opt/qosmos || (apt-get update && apt-get install -y --no-install-recommends python3-venv \
      && rm -rf /var/lib/apt/lists/* && python3 -m venv /opt/qosmos)
WORKDIR /src
# the source tree (.dockerignore leaves out tests, docs, the chart); a wheels/ folder comes along
COPY . .
# Dependencies from requirements.lock only, each file checked against its sha256 (hack/image/lock.sh
# writes it: pyproject's dependencies, the gpu extra for NVML, the build requirements); then qosmos
# itself with no dependency resolution and no build isolation (setuptools comes from the lock).
# -P: /src holds the component folder operator/, which would shadow the stdlib module of that name
RUN /opt/qosmos/bin/pip install ${PIP_ARGS} --require-hashes --no-deps -r requirements.lock \
 && /opt/qosmos/bin/pip install ${PIP_ARGS} --no-deps --no-build-isolation ".[gpu]" \
 && /opt/qosmos/bin/pip check \
 && /opt/qosmos/bin/python -P -m compileall -q /opt/qosmos

FROM ${BASE}
# tc (iproute2) for the node agent's network split (SODA §V-E); libgomp1: LightGBM's OpenMP runtime
# (the QSSF duration predictor), which its manylinux wheel does not bundle
RUN apt-get update && apt-get install -y --no-install-recommends iproute2 libgomp1 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/qosmos /opt/qosmos
ENV PATH=/opt/qosmos/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The chart runs the operator and the extender as 65532 and the node agent as root.
USER 65532:65532
ENTRYPOINT ["qosmos"]
CMD ["--help"]
