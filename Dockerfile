# syntax=docker/dockerfile:1
#
# dinfer container images.
#
#   docker build -t dinfer:cpu .                    # default target "cpu": Debian slim, ONNX Runtime on the CPU
#   docker build -t dinfer:gpu --target=gpu .       # CUDA + TensorRT runtime with libtrtshim (see docs/deploy.md)
#
# Both serve the model repository mounted at /models (the image holds examples/models there, so a run
# without a mount serves the bundled examples):
#
#   docker run --rm -p 8000-8002:8000-8002 -v "$PWD/models:/models:ro" dinfer:cpu
#
# Extra arguments after the image name are passed to the server (Triton's flags, e.g. --log-verbose=1).
# The build context is filtered by .dockerignore, which lists what the image may contain.

ARG NODE_IMAGE=node:22-bookworm-slim
ARG DEBIAN_IMAGE=debian:bookworm-slim
# The GPU images must agree on the CUDA major version (13, as on our build machines). NGC's TensorRT
# containers 25.08 and later are built on CUDA 13.0.
ARG TENSORRT_IMAGE=nvcr.io/nvidia/tensorrt:25.10-py3
ARG CUDA_RUNTIME_IMAGE=nvcr.io/nvidia/cuda:13.0.1-runtime-ubuntu24.04

# ---------------------------------------------------------------------------------------------------------
# build: the pinned Deno (npm package `deno`, tools/deno/package-lock.json), the npm dependencies from
# deno.lock, and the application assembled in /app with a warm Deno cache.
FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY tools/deno/package.json tools/deno/package-lock.json tools/deno/
# The platform package @deno/linux-x64-glibc carries the binary; install scripts are not needed.
RUN cd tools/deno \
 && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error \
 && install -m 0755 node_modules/@deno/linux-x64-glibc/deno /usr/local/bin/deno \
 && deno --version

COPY . .
ENV DENO_DIR=/app/.cache/deno DENO_NO_UPDATE_CHECK=1
# ffi/ holds the libtrtshim bindings (the library itself is only in the gpu image).
RUN mkdir -p /app/examples \
 && cp -r main.ts mod.ts deno.json deno.lock server protos /app/ \
 && cp -r examples/models /app/examples/models \
 && if [ -d ffi ]; then cp -r ffi /app/; fi
WORKDIR /app
# npm dependencies exactly as locked. Lifecycle scripts are skipped (Deno runs none without
# --allow-scripts): onnxruntime-node's only downloads CUDA libraries, and its linux-x64 CPU library ships in
# the package. The other platforms' ONNX Runtime builds (about 240 MB) are removed.
RUN deno install --frozen \
 && ort="$(echo node_modules/.deno/onnxruntime-node@*/node_modules/onnxruntime-node/bin/napi-v6)" \
 && test -f "$ort/linux/x64/libonnxruntime.so.1" \
 && rm -rf "$ort/darwin" "$ort/win32" "$ort/linux/arm64" \
 && deno cache main.ts $(find server -name '*.ts') \
 && rm -rf "$DENO_DIR/npm"

# ---------------------------------------------------------------------------------------------------------
# ortshim-build: libortshim (shim/src/ortshim.cpp, CMake, C++17), through which models run on the server's
# thread; it needs no ONNX Runtime headers or libraries to build (it loads onnxruntime-node's at run time).
FROM ${DEBIAN_IMAGE} AS ortshim-build
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake g++ make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY shim shim
RUN cmake -S shim -B build/shim -DCMAKE_BUILD_TYPE=Release -DTRTSHIM_BUILD_TESTS=OFF \
 && cmake --build build/shim --target ortshim -j "$(nproc)"

# ---------------------------------------------------------------------------------------------------------
# cpu (default): Debian slim with python3 + numpy for the Python backend's stub processes.
FROM ${DEBIAN_IMAGE} AS cpu
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-numpy \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 dinfer \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin dinfer
COPY --from=build /usr/local/bin/deno /usr/local/bin/deno
COPY --from=build /app /app
COPY --from=ortshim-build /src/build/shim/libortshim.so /app/build/shim/libortshim.so
COPY --from=build /app/examples/models /models
ENV DENO_DIR=/app/.cache/deno DENO_NO_UPDATE_CHECK=1 HOME=/tmp
WORKDIR /app
# A numeric user, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
EXPOSE 8000 8001 8002
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python3", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready', timeout=4).status != 200)"]
# Every permission but --allow-import: the server never loads code from the network. --cached-only keeps it
# from trying.
ENTRYPOINT ["deno", "run", "--cached-only", "--allow-net", "--allow-read", "--allow-write", "--allow-env", "--allow-sys", "--allow-ffi", "--allow-run", "/app/main.ts", "--model-repository=/models"]

# ---------------------------------------------------------------------------------------------------------
# gpu-build: libtrtshim (shim/, CMake, C++17) against CUDA and TensorRT. The shim arrives with the libtrtshim
# issue; until then this stage (and so the gpu target) fails at the cmake step, while the default cpu
# target never builds it.
FROM ${TENSORRT_IMAGE} AS gpu-build
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake g++ make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S shim -B build/shim -DCMAKE_BUILD_TYPE=Release -DTRTSHIM_WITH_TENSORRT=ON -DTRTSHIM_BUILD_TESTS=OFF \
 && cmake --build build/shim -j "$(nproc)" \
 && mkdir -p /out/lib \
 && cp build/shim/libtrtshim.so /out/ \
 && trt="$(dirname "$(ldconfig -p | awk '/libnvinfer\.so\.10 /{print $NF; exit}')")" \
 && cp -P "$trt"/libnvinfer.so.10* "$trt"/libnvinfer_plugin.so.10* /out/lib/

# ---------------------------------------------------------------------------------------------------------
# gpu: CUDA runtime + the TensorRT runtime libraries (libnvinfer, libnvinfer_plugin; not the builder
# resources, so plans are built elsewhere, e.g. with trtexec), the same app as cpu, and the shim where the
# launcher builds it (build/shim/libtrtshim.so under the app root).
FROM ${CUDA_RUNTIME_IMAGE} AS gpu
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-numpy \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 dinfer \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin dinfer
COPY --from=gpu-build /out/lib/ /usr/local/lib/tensorrt/
RUN echo /usr/local/lib/tensorrt > /etc/ld.so.conf.d/tensorrt.conf && ldconfig
COPY --from=build /usr/local/bin/deno /usr/local/bin/deno
COPY --from=build /app /app
COPY --from=gpu-build /out/libtrtshim.so /app/build/shim/libtrtshim.so
COPY --from=ortshim-build /src/build/shim/libortshim.so /app/build/shim/libortshim.so
COPY --from=build /app/examples/models /models
ENV DENO_DIR=/app/.cache/deno DENO_NO_UPDATE_CHECK=1 HOME=/tmp DINFER_TRTSHIM=/app/build/shim/libtrtshim.so \
    NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
WORKDIR /app
USER 10001:10001
EXPOSE 8000 8001 8002
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
  CMD ["python3", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready', timeout=4).status != 200)"]
ENTRYPOINT ["deno", "run", "--cached-only", "--allow-net", "--allow-read", "--allow-write", "--allow-env", "--allow-sys", "--allow-ffi", "--allow-run", "/app/main.ts", "--model-repository=/models"]

# The default target is the last stage named on the command line or, without --target, the last stage of
# the file: re-state cpu so that a plain `docker build .` gives the CPU image.
FROM cpu
