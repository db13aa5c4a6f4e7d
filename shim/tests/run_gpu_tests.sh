#!/usr/bin/env bash
# Builds libtrtshim over CUDA (and TensorRT where NvInfer.h is found, or TENSORRT_ROOT says where) into
# build/shim-gpu and runs the C++ tests there: mock_test always, cuda_test on the GPU (skipped without one).
#   shim/tests/run_gpu_tests.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
trt=OFF
if [[ -n "${TENSORRT_ROOT:-}" && -f "$TENSORRT_ROOT/include/NvInfer.h" ]] || [[ -f /usr/include/x86_64-linux-gnu/NvInfer.h ]] ||
  [[ -f /usr/include/NvInfer.h ]]; then
  trt=ON
fi
echo "run_gpu_tests: CUDA ON, TensorRT $trt"
cmake -S shim -B build/shim-gpu -DCMAKE_BUILD_TYPE=Release -DTRTSHIM_WITH_CUDA=ON -DTRTSHIM_WITH_TENSORRT=$trt >/dev/null
cmake --build build/shim-gpu -j "$(nproc)" >/dev/null
(cd build/shim-gpu && ctest --output-on-failure)
