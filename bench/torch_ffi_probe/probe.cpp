// A measurement probe, not a backend: the smallest C ABI over libtorch that runs a TorchScript model with one
// FP32 input and one FP32 output, so that bench/torch_ffi_probe/probe_bench.ts can time a call through
// Deno.dlopen against the PyTorch backend's stub round trip. Build: see probe_bench.ts.
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <cstring>
#include <string>

namespace {
thread_local std::string last_error;
}

extern "C" {

const char* probe_last_error() { return last_error.c_str(); }

// Loads a TorchScript file; returns an opaque handle, or null (see probe_last_error).
void* probe_load(const char* path, int threads) {
  try {
    if (threads > 0) at::set_num_threads(threads);
    auto* m = new torch::jit::Module(torch::jit::load(path));
    m->eval();
    return m;
  } catch (const std::exception& e) {
    last_error = e.what();
    return nullptr;
  }
}

// Runs forward on a [rows, cols] FP32 input; copies the FP32 output into out (out_len floats). Returns the
// number of output floats, or -1 (see probe_last_error).
int64_t probe_forward(void* handle, const float* in, int64_t rows, int64_t cols, float* out, int64_t out_len) {
  try {
    c10::InferenceMode guard;
    auto* m = static_cast<torch::jit::Module*>(handle);
    auto x = torch::from_blob(const_cast<float*>(in), {rows, cols}, torch::kFloat32);
    auto y = m->forward({x}).toTensor().contiguous();
    int64_t n = y.numel();
    if (n > out_len) {
      last_error = "output larger than the buffer";
      return -1;
    }
    std::memcpy(out, y.data_ptr<float>(), n * sizeof(float));
    return n;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -1;
  }
}

void probe_free(void* handle) { delete static_cast<torch::jit::Module*>(handle); }
}
