#!/usr/bin/env bash
# Builds the TensorRT flavour of libtrtshim (CUDA + TensorRT) into build/shim-trt.
#   shim/tests/build_tensorrt.sh           build (fetching the headers first when needed)
#   shim/tests/build_tensorrt.sh --fetch   only fetch the headers
# With TENSORRT_ROOT holding include/NvInfer.h and lib/libnvinfer.so, that TensorRT is used. Otherwise the
# TensorRT 10.14.1 headers come from PyPI: the kernel-lens 2.0.1 wheel (235 KB, pinned by its hash) carries
# NVIDIA's Apache-2.0 headers in kernel_lens/include/tensorrt/; they are unpacked into build/tensorrt/include
# and the library is linked against a stub libnvinfer (tests/nvinfer_stub.cpp, -DTRTSHIM_NVINFER_STUB=ON):
# a check that the TensorRT layer compiles and links, not a library that can run plans. libnvinfer itself
# is not on PyPI (NVIDIA's tensorrt-*-libs packages there only point to NVIDIA's own index).
# Exits 77 (skip), the reason on stderr, without the CUDA toolkit or when the wheel cannot be downloaded.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

WHEEL=kernel-lens==2.0.1
SHA256=07cc714e8b5e7f34b672f7c7fad93febe7c747be5837ba276b1527370134ffe0
HEADERS="$root/build/tensorrt"

skip() {
  echo "build_tensorrt: $*" >&2
  exit 77
}

fetch_headers() {
  local stamp="$HEADERS/include/.from-$WHEEL"
  [[ -f "$stamp" && -f "$HEADERS/include/NvInfer.h" ]] && return 0
  command -v python3 >/dev/null || skip "no python3 to download $WHEEL"
  local tmp
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' RETURN
  printf '%s --hash=sha256:%s\n' "$WHEEL" "$SHA256" >"$tmp/requirements.txt"
  if ! python3 -m pip download --quiet --retries 2 --timeout 30 --no-deps --only-binary=:all: --require-hashes \
    -r "$tmp/requirements.txt" -d "$tmp/wheel" >"$tmp/pip.log" 2>&1; then
    if grep -q "DO NOT MATCH THE HASHES" "$tmp/pip.log"; then
      cat "$tmp/pip.log" >&2
      echo "build_tensorrt: $WHEEL does not match its pinned sha256" >&2
      exit 1
    fi
    local why
    why="$(grep '^ERROR' "$tmp/pip.log" | tail -n1 || true)"
    skip "cannot download $WHEEL from PyPI: ${why:-$(tail -n1 "$tmp/pip.log")}"
  fi
  rm -rf "$HEADERS/include"
  mkdir -p "$HEADERS/include"
  python3 - "$tmp"/wheel/*.whl "$HEADERS/include" <<'PY'
import pathlib, sys, zipfile
wheel, dest = sys.argv[1], pathlib.Path(sys.argv[2])
prefix = "kernel_lens/include/tensorrt/"
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and n.endswith(".h")]
    if not any(n.endswith("/NvInfer.h") for n in names):
        sys.exit(f"build_tensorrt: {wheel} has no {prefix}NvInfer.h")
    for n in names:
        (dest / n[len(prefix):]).write_bytes(z.read(n))
PY
  touch "$stamp"
}

nvcc="$(command -v nvcc || true)"
[[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
[[ -n "$nvcc" ]] || skip "no CUDA toolkit (nvcc)"

stub=ON
trt_root="$HEADERS"
if [[ -n "${TENSORRT_ROOT:-}" && -f "$TENSORRT_ROOT/include/NvInfer.h" ]] &&
  compgen -G "$TENSORRT_ROOT/lib*/libnvinfer.so*" >/dev/null; then
  stub=OFF
  trt_root="$TENSORRT_ROOT"
else
  fetch_headers
fi
[[ "${1:-}" == "--fetch" ]] && exit 0

echo "build_tensorrt: TensorRT from $trt_root$([[ $stub == ON ]] && echo ', stub libnvinfer (compile and link check)')"
# The cached TENSORRT_* paths of an earlier configuration would win over the TENSORRT_ROOT given now.
cmake -S shim -B build/shim-trt -DCMAKE_BUILD_TYPE=Release -DTRTSHIM_WITH_TENSORRT=ON -DTRTSHIM_BUILD_TESTS=OFF \
  -DTENSORRT_ROOT="$trt_root" -DTRTSHIM_NVINFER_STUB=$stub -UTENSORRT_INCLUDE_DIR -UTENSORRT_LIBRARY \
  -DCUDAToolkit_ROOT="$(dirname "$(dirname "$nvcc")")" >/dev/null
cmake --build build/shim-trt -j "$(nproc)" --target trtshim
echo "build_tensorrt: built build/shim-trt/libtrtshim.so"
