// libtorchshim: the C ABI of include/torchshim.h over libtorch. C++ exceptions end at this file's functions.
#include "torchshim.h"

#include <ATen/Parallel.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <cstring>
#include <string>
#include <vector>

struct torchshim_module {
  torch::jit::Module module;
  int32_t optimized;
  int32_t intra_threads;
};

struct torchshim_result {
  std::vector<at::Tensor> tensors;
};

namespace {

int32_t fail(char* err, size_t err_len, const std::string& why) {
  if (err != nullptr && err_len > 0) {
    size_t n = std::min(why.size(), err_len - 1);
    std::memcpy(err, why.data(), n);
    err[n] = '\0';
  }
  return -1;
}

// The message of a torch error: TorchScript tracebacks end with the exception's own line.
std::string reason(const std::exception& e) {
  std::string text = e.what();
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    size_t a = line.find_first_not_of(" \t\r");
    if (a != std::string::npos) lines.push_back(line.substr(a));
    start = end + 1;
  }
  return lines.empty() ? std::string("unknown error") : lines.back();
}

bool scalar_type(int32_t code, at::ScalarType* out) {
  switch (code) {
    case TORCHSHIM_BOOL: *out = at::kBool; return true;
    case TORCHSHIM_UINT8: *out = at::kByte; return true;
    case TORCHSHIM_INT8: *out = at::kChar; return true;
    case TORCHSHIM_INT16: *out = at::kShort; return true;
    case TORCHSHIM_INT32: *out = at::kInt; return true;
    case TORCHSHIM_INT64: *out = at::kLong; return true;
    case TORCHSHIM_FP16: *out = at::kHalf; return true;
    case TORCHSHIM_FP32: *out = at::kFloat; return true;
    case TORCHSHIM_FP64: *out = at::kDouble; return true;
    default: return false;
  }
}

int32_t code_of(at::ScalarType t) {
  switch (t) {
    case at::kBool: return TORCHSHIM_BOOL;
    case at::kByte: return TORCHSHIM_UINT8;
    case at::kChar: return TORCHSHIM_INT8;
    case at::kShort: return TORCHSHIM_INT16;
    case at::kInt: return TORCHSHIM_INT32;
    case at::kLong: return TORCHSHIM_INT64;
    case at::kHalf: return TORCHSHIM_FP16;
    case at::kFloat: return TORCHSHIM_FP32;
    case at::kDouble: return TORCHSHIM_FP64;
    default: return -1;
  }
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

extern "C" {
#pragma GCC visibility push(default)

uint32_t torchshim_abi_version(void) { return TORCHSHIM_ABI_VERSION; }

int32_t torchshim_configure(int32_t jit_executor, int32_t jit_profiling, int32_t texpr_fuser, int32_t inter_threads,
                            char* err, size_t err_len) {
  try {
    if (jit_executor >= 0) torch::jit::getExecutorMode() = jit_executor != 0;
    if (jit_profiling >= 0) torch::jit::getProfilingMode() = jit_profiling != 0;
    if (texpr_fuser >= 0) torch::jit::setTensorExprFuserEnabled(texpr_fuser != 0);
    // The inter-op pool can be sized once, before it starts; later calls change nothing (as in Triton, the
    // first model that sets it wins).
    if (inter_threads > 0) {
      try {
        at::set_num_interop_threads(inter_threads);
      } catch (const std::exception&) {
      }
    }
    return 0;
  } catch (const std::exception& e) {
    return fail(err, err_len, reason(e));
  }
}

int32_t torchshim_load(const char* path, const char* device, int32_t optimized, int32_t intra_threads,
                       torchshim_module** out, char* err, size_t err_len) {
  try {
    std::string dev = device == nullptr ? "" : device;
    auto m = dev.empty() ? torch::jit::load(path) : torch::jit::load(path, torch::Device(dev));
    m.eval();
    *out = new torchshim_module{std::move(m), optimized, intra_threads};
    return 0;
  } catch (const std::exception& e) {
    std::string first = e.what();
    first = first.substr(0, first.find('\n'));
    size_t dot = first.find(". ");
    if (dot != std::string::npos) first = first.substr(0, dot);
    return fail(err, err_len, first);
  }
}

int32_t torchshim_signature(const torchshim_module* module, char* buf, size_t buf_len, char* err, size_t err_len) {
  try {
    const auto& schema = module->module.get_method("forward").function().getSchema();
    std::string json = "[";
    bool first = true;
    for (const auto& a : schema.arguments()) {
      if (a.type()->kind() == c10::TypeKind::ClassType) continue;  // self
      const char* kind = a.type()->kind() == c10::TypeKind::TensorType ? "tensor"
                         : a.type()->kind() == c10::TypeKind::DictType ? "dict"
                                                                       : "other";
      if (!first) json += ",";
      json += "{\"name\":";
      json += json_string(a.name());
      json += ",\"kind\":\"";
      json += kind;
      json += "\",\"type\":";
      json += json_string(a.type()->str());
      json += "}";
      first = false;
    }
    json += "]";
    if (json.size() + 1 > buf_len) return fail(err, err_len, "the signature does not fit the buffer");
    std::memcpy(buf, json.c_str(), json.size() + 1);
    return 0;
  } catch (const std::exception& e) {
    return fail(err, err_len, reason(e));
  }
}

int32_t torchshim_forward(torchshim_module* module, int32_t count, const int32_t* dtypes, const int32_t* ranks,
                          const int64_t* shapes, const uint64_t* data, const char* names, int32_t dict_input,
                          int32_t inference_mode, torchshim_result** out, char* err, size_t err_len) {
  try {
    // Per-thread settings, on the thread this call runs on.
    if (module->optimized >= 0) torch::jit::setGraphExecutorOptimize(module->optimized != 0);
    if (module->intra_threads > 0 && at::get_num_threads() != module->intra_threads) {
      at::set_num_threads(module->intra_threads);
    }
    std::vector<at::Tensor> inputs;
    inputs.reserve(count);
    for (int32_t i = 0; i < count; i++) {
      at::ScalarType t;
      if (!scalar_type(dtypes[i], &t)) return fail(err, err_len, "unknown datatype code " + std::to_string(dtypes[i]));
      if (ranks[i] < 0 || ranks[i] > TORCHSHIM_MAX_DIMS) return fail(err, err_len, "rank out of range");
      std::vector<int64_t> shape(shapes + i * TORCHSHIM_MAX_DIMS, shapes + i * TORCHSHIM_MAX_DIMS + ranks[i]);
      void* ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(data[i]));
      inputs.push_back(torch::from_blob(ptr, shape, at::TensorOptions().dtype(t)));
    }
    std::vector<c10::IValue> args;
    if (dict_input != 0) {
      c10::Dict<std::string, at::Tensor> dict;
      const char* name = names;
      for (int32_t i = 0; i < count; i++) {
        dict.insert(std::string(name), inputs[i]);
        name += std::strlen(name) + 1;
      }
      args.emplace_back(dict);
    } else {
      for (auto& t : inputs) args.emplace_back(t);
    }
    c10::IValue result;
    if (inference_mode != 0) {
      c10::InferenceMode guard;
      result = module->module.forward(args);
    } else {
      torch::NoGradGuard guard;
      result = module->module.forward(args);
    }
    auto r = std::make_unique<torchshim_result>();
    auto take = [&](const c10::IValue& v) -> bool {
      if (!v.isTensor()) return false;
      r->tensors.push_back(v.toTensor().to(at::kCPU).contiguous());
      return true;
    };
    if (result.isTuple()) {
      for (const auto& v : result.toTuple()->elements()) {
        if (!take(v)) return fail(err, err_len, "forward returned a tuple holding a " + v.tagKind() + "; only Tensors are supported");
      }
    } else if (!take(result)) {
      return fail(err, err_len, "forward returned " + result.tagKind() + "; only a Tensor or a tuple of Tensors is supported");
    }
    *out = r.release();
    return 0;
  } catch (const std::exception& e) {
    return fail(err, err_len, reason(e));
  }
}

int32_t torchshim_result_count(const torchshim_result* result) { return static_cast<int32_t>(result->tensors.size()); }

int32_t torchshim_result_describe(const torchshim_result* result, int32_t index, int32_t* dtype, int32_t* rank,
                                  int64_t* shape, uint64_t* nbytes, char* err, size_t err_len) {
  if (index < 0 || index >= static_cast<int32_t>(result->tensors.size())) return fail(err, err_len, "no such output");
  const auto& t = result->tensors[index];
  if (t.dim() > TORCHSHIM_MAX_DIMS) return fail(err, err_len, "the output has more than 8 dimensions");
  *dtype = code_of(t.scalar_type());
  *rank = static_cast<int32_t>(t.dim());
  for (int64_t d = 0; d < t.dim(); d++) shape[d] = t.size(d);
  *nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
  return 0;
}

int32_t torchshim_result_copy(const torchshim_result* result, int32_t index, void* dst, uint64_t nbytes, char* err,
                              size_t err_len) {
  if (index < 0 || index >= static_cast<int32_t>(result->tensors.size())) return fail(err, err_len, "no such output");
  const auto& t = result->tensors[index];
  uint64_t have = static_cast<uint64_t>(t.numel()) * t.element_size();
  if (have != nbytes) return fail(err, err_len, "the buffer size does not match the output");
  if (nbytes > 0) std::memcpy(dst, t.data_ptr(), nbytes);
  return 0;
}

void torchshim_result_free(torchshim_result* result) { delete result; }
void torchshim_module_free(torchshim_module* module) { delete module; }
#pragma GCC visibility pop
}
