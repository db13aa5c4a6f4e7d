// ortshim: see include/ortshim.h.
//
// ONNX Runtime's C API is a table of function pointers (OrtApi) that the library hands out through its one
// exported entry point, OrtGetApiBase. The table only ever grows at its end, so a function's slot is fixed
// for good: the slots below are those of the functions this shim calls, and ortshim_init checks the table
// against the library before any other call (a status made and read back through it).

#include "ortshim.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct OrtStatus;
struct OrtEnv;
struct OrtSession;
struct OrtSessionOptions;
struct OrtValue;
struct OrtMemoryInfo;
struct OrtTensorTypeAndShapeInfo;
struct OrtTypeInfo;
struct OrtAllocator;

// The API version requested (ONNX Runtime 1.11): every function below is in it.
constexpr uint32_t kApiVersion = 11;

// Slots of OrtApi's function table.
enum Slot : size_t {
  kCreateStatus = 0,
  kGetErrorCode = 1,
  kGetErrorMessage = 2,
  kCreateEnv = 3,
  kCreateSession = 7,
  kRun = 9,
  kCreateSessionOptions = 10,
  kSetSessionExecutionMode = 13,
  kEnableCpuMemArena = 18,
  kDisableCpuMemArena = 19,
  kSetSessionLogSeverityLevel = 22,
  kSetSessionGraphOptimizationLevel = 23,
  kSetIntraOpNumThreads = 24,
  kSetInterOpNumThreads = 25,
  kSessionGetInputCount = 30,
  kSessionGetOutputCount = 31,
  kSessionGetInputTypeInfo = 33,
  kSessionGetOutputTypeInfo = 34,
  kSessionGetInputName = 36,
  kSessionGetOutputName = 37,
  kCreateTensorAsOrtValue = 48,
  kCreateTensorWithDataAsOrtValue = 49,
  kGetTensorMutableData = 51,
  kFillStringTensor = 52,
  kGetStringTensorDataLength = 53,
  kGetStringTensorContent = 54,
  kCastTypeInfoToTensorInfo = 55,
  kGetTensorElementType = 60,
  kGetDimensionsCount = 61,
  kGetDimensions = 62,
  kGetTensorShapeElementCount = 64,
  kGetTensorTypeAndShape = 65,
  kCreateCpuMemoryInfo = 69,
  kAllocatorFree = 76,
  kGetAllocatorWithDefaultOptions = 78,
  kReleaseStatus = 93,
  kReleaseSession = 95,
  kReleaseValue = 96,
  kReleaseTypeInfo = 98,
  kReleaseTensorTypeAndShapeInfo = 99,
  kReleaseSessionOptions = 100,
  kAddSessionConfigEntry = 130,
};

struct ApiBase {
  const void* const* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)();
};

// The function types of the slots, by slot.
using CreateStatusFn = OrtStatus* (*)(int code, const char* msg);
using GetErrorCodeFn = int (*)(const OrtStatus*);
using GetErrorMessageFn = const char* (*)(const OrtStatus*);
using CreateEnvFn = OrtStatus* (*)(int level, const char* logid, OrtEnv** out);
using CreateSessionFn = OrtStatus* (*)(const OrtEnv*, const char* path, const OrtSessionOptions*, OrtSession**);
using RunFn = OrtStatus* (*)(OrtSession*, const void* run_options, const char* const* input_names,
                             const OrtValue* const* inputs, size_t n_in, const char* const* output_names,
                             size_t n_out, OrtValue** outputs);
using CreateSessionOptionsFn = OrtStatus* (*)(OrtSessionOptions**);
using OptionsIntFn = OrtStatus* (*)(OrtSessionOptions*, int);
using OptionsFn = OrtStatus* (*)(OrtSessionOptions*);
using CreateTensorWithDataFn = OrtStatus* (*)(const OrtMemoryInfo*, void* data, size_t len, const int64_t* shape,
                                              size_t shape_len, int type, OrtValue** out);
using CreateTensorFn = OrtStatus* (*)(OrtAllocator*, const int64_t* shape, size_t shape_len, int type, OrtValue** out);
using FillStringTensorFn = OrtStatus* (*)(OrtValue*, const char* const* s, size_t s_len);
using GetStringTensorDataLengthFn = OrtStatus* (*)(const OrtValue*, size_t* len);
using GetStringTensorContentFn = OrtStatus* (*)(const OrtValue*, void* s, size_t s_len, size_t* offsets, size_t offsets_len);
using GetTensorMutableDataFn = OrtStatus* (*)(OrtValue*, void** out);
using GetTensorElementTypeFn = OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, int* out);
using GetDimensionsCountFn = OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, size_t* out);
using GetDimensionsFn = OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, int64_t* out, size_t len);
using GetTensorShapeElementCountFn = OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, size_t* out);
using GetTensorTypeAndShapeFn = OrtStatus* (*)(const OrtValue*, OrtTensorTypeAndShapeInfo** out);
using CreateCpuMemoryInfoFn = OrtStatus* (*)(int allocator_type, int mem_type, OrtMemoryInfo** out);
using ReleaseStatusFn = void (*)(OrtStatus*);
using ReleaseSessionFn = void (*)(OrtSession*);
using ReleaseValueFn = void (*)(OrtValue*);
using ReleaseTensorTypeAndShapeInfoFn = void (*)(OrtTensorTypeAndShapeInfo*);
using ReleaseSessionOptionsFn = void (*)(OrtSessionOptions*);
using SessionCountFn = OrtStatus* (*)(const OrtSession*, size_t* out);
using SessionTypeInfoFn = OrtStatus* (*)(const OrtSession*, size_t index, OrtTypeInfo** out);
using SessionNameFn = OrtStatus* (*)(const OrtSession*, size_t index, OrtAllocator*, char** out);
using CastTypeInfoToTensorInfoFn = OrtStatus* (*)(const OrtTypeInfo*, const OrtTensorTypeAndShapeInfo** out);
using AllocatorFreeFn = OrtStatus* (*)(OrtAllocator*, void* p);
using GetAllocatorWithDefaultOptionsFn = OrtStatus* (*)(OrtAllocator** out);
using ReleaseTypeInfoFn = void (*)(OrtTypeInfo*);
using AddSessionConfigEntryFn = OrtStatus* (*)(OrtSessionOptions*, const char* key, const char* value);

const void* const* g_api = nullptr;
OrtEnv* g_env = nullptr;
OrtMemoryInfo* g_cpu = nullptr;
std::once_flag g_once;
int32_t g_init_result = -1;
std::string g_init_error = "ortshim_init has not been called";

template <typename Fn>
Fn fn(Slot slot) {
  return reinterpret_cast<Fn>(const_cast<void*>(g_api[slot]));
}

// A failed status's message (the status released); empty for success.
std::string take(OrtStatus* status) {
  if (status == nullptr) return {};
  std::string msg = fn<GetErrorMessageFn>(kGetErrorMessage)(status);
  fn<ReleaseStatusFn>(kReleaseStatus)(status);
  if (msg.empty()) msg = "ONNX Runtime failed without a message";
  return msg;
}

// ONNX's element type of strings: carried as length-prefixed elements (see ortshim.h).
constexpr int kString = 8;

// Bytes per element of an ONNX element type; 0 for types this shim does not carry (strings are apart).
size_t element_size(int type) {
  switch (type) {
    case 2: case 3: case 9: return 1;            // uint8, int8, bool
    case 4: case 5: case 10: case 16: return 2;  // uint16, int16, float16, bfloat16
    case 1: case 6: case 12: return 4;           // float, int32, uint32
    case 7: case 11: case 13: return 8;          // int64, double, uint64
    default: return 0;
  }
}

void init_once(const char* lib_path) {
  if (lib_path == nullptr) {
    g_init_error = "no ONNX Runtime library named";
    return;
  }
  void* lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    g_init_error = std::string("cannot load ONNX Runtime from '") + lib_path + "': " + (why ? why : "unknown error");
    return;
  }
  auto get_base = reinterpret_cast<const ApiBase* (*)()>(dlsym(lib, "OrtGetApiBase"));
  if (get_base == nullptr) {
    g_init_error = std::string("'") + lib_path + "' has no OrtGetApiBase: it is not ONNX Runtime";
    return;
  }
  const ApiBase* base = get_base();
  g_api = base->GetApi(kApiVersion);
  if (g_api == nullptr) {
    g_init_error = std::string("ONNX Runtime ") + base->GetVersionString() + " does not offer API version " +
                   std::to_string(kApiVersion);
    return;
  }
  // The table is what this shim expects: a status made through it reads back its code and message.
  OrtStatus* probe = fn<CreateStatusFn>(kCreateStatus)(2, "ortshim probe");
  bool ok = probe != nullptr && fn<GetErrorCodeFn>(kGetErrorCode)(probe) == 2 &&
            std::strcmp(fn<GetErrorMessageFn>(kGetErrorMessage)(probe), "ortshim probe") == 0;
  if (probe != nullptr) fn<ReleaseStatusFn>(kReleaseStatus)(probe);
  if (!ok) {
    g_api = nullptr;
    g_init_error = std::string("ONNX Runtime ") + base->GetVersionString() + "'s C API table is not the expected one";
    return;
  }
  // An environment already made in this process (onnxruntime-node's) is shared, not duplicated.
  std::string err = take(fn<CreateEnvFn>(kCreateEnv)(2, "dinfer", &g_env));
  if (err.empty()) err = take(fn<CreateCpuMemoryInfoFn>(kCreateCpuMemoryInfo)(0, 0, &g_cpu));
  if (!err.empty()) {
    g_init_error = "cannot create the ONNX Runtime environment: " + err;
    return;
  }
  g_init_error.clear();
  g_init_result = 0;
}

void copy_out(const std::string& msg, char* buf, size_t len) {
  if (buf == nullptr || len == 0) return;
  size_t n = msg.size() < len - 1 ? msg.size() : len - 1;
  std::memcpy(buf, msg.data(), n);
  buf[n] = '\0';
}

}  // namespace

// A model input or output as the model declares it.
struct Io {
  std::string name;
  bool tensor = false;
  int type = 0;
  std::vector<int64_t> dims;
};

struct ortshim_session {
  OrtSessionOptions* options = nullptr;
  OrtSession* session = nullptr;
  std::vector<Io> inputs;
  std::vector<Io> outputs;
  // The run being prepared or just made.
  std::vector<const char*> in_names;
  std::vector<OrtValue*> in_values;
  std::vector<char> fed;
  std::vector<std::array<uint8_t, 64>> small;  // one per model input, for data of 64 bytes or less
  std::vector<const char*> out_names;
  std::vector<OrtValue*> out_values;
  std::vector<size_t> out_bytes;
  std::vector<size_t> out_counts;  // elements of each output
  std::vector<int> out_types;
  std::vector<std::string> strings;  // a string input's elements while it is filled
  std::vector<const char*> string_ptrs;
  std::string error;

  int32_t fail(std::string msg) {
    error = std::move(msg);
    return -1;
  }
  int32_t check(OrtStatus* status) {
    if (status == nullptr) return 0;
    return fail(take(status));
  }
};

namespace {

// A tensor's element type and dims from its type and shape information.
std::string describe(const OrtTensorTypeAndShapeInfo* ti, Io& io) {
  size_t ndims = 0;
  std::string err = take(fn<GetTensorElementTypeFn>(kGetTensorElementType)(ti, &io.type));
  if (err.empty()) err = take(fn<GetDimensionsCountFn>(kGetDimensionsCount)(ti, &ndims));
  if (err.empty()) {
    io.dims.assign(ndims, 0);
    err = take(fn<GetDimensionsFn>(kGetDimensions)(ti, io.dims.data(), ndims));
  }
  return err;
}

// The model's inputs (or outputs) in its order.
std::string read_io(const OrtSession* session, bool outputs, std::vector<Io>& out) {
  OrtAllocator* allocator = nullptr;
  std::string err = take(fn<GetAllocatorWithDefaultOptionsFn>(kGetAllocatorWithDefaultOptions)(&allocator));
  size_t count = 0;
  if (err.empty()) {
    err = take(fn<SessionCountFn>(outputs ? kSessionGetOutputCount : kSessionGetInputCount)(session, &count));
  }
  out.clear();
  for (size_t i = 0; err.empty() && i < count; i++) {
    Io io;
    char* name = nullptr;
    err = take(fn<SessionNameFn>(outputs ? kSessionGetOutputName : kSessionGetInputName)(session, i, allocator, &name));
    if (!err.empty()) break;
    io.name = name;
    err = take(fn<AllocatorFreeFn>(kAllocatorFree)(allocator, name));
    OrtTypeInfo* info = nullptr;
    if (err.empty()) {
      err = take(fn<SessionTypeInfoFn>(outputs ? kSessionGetOutputTypeInfo : kSessionGetInputTypeInfo)(session, i, &info));
    }
    if (!err.empty()) break;
    const OrtTensorTypeAndShapeInfo* ti = nullptr;
    err = take(fn<CastTypeInfoToTensorInfoFn>(kCastTypeInfoToTensorInfo)(info, &ti));
    if (err.empty() && ti != nullptr) {
      io.tensor = true;
      err = describe(ti, io);
    }
    fn<ReleaseTypeInfoFn>(kReleaseTypeInfo)(info);
    out.push_back(std::move(io));
  }
  return err;
}

// Feeds a string input: `count` elements, each a 4-byte little-endian length and its bytes, copied into a
// tensor ONNX Runtime allocates (its strings are C strings: an element ends at a NUL byte, as in Triton).
int32_t feed_strings(ortshim_session* s, int32_t input, const uint8_t* data, double byte_len, const int64_t* shape,
                     int32_t ndims, double count) {
  const std::string& name = s->inputs[input].name;
  // Each element takes 4 bytes at least: a shape the bytes cannot hold is refused before anything is allocated.
  if (count * 4 > byte_len) {
    return s->fail("input '" + name + "' has " + std::to_string(static_cast<uint64_t>(byte_len)) +
                   " bytes, too few for " + std::to_string(static_cast<uint64_t>(count)) + " elements");
  }
  size_t len = static_cast<size_t>(byte_len);
  size_t n = static_cast<size_t>(count);
  s->strings.assign(n, std::string());
  s->string_ptrs.assign(n, nullptr);
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (len - at < 4 || at > len) return s->fail("input '" + name + "' ends inside element " + std::to_string(i));
    uint32_t size = static_cast<uint32_t>(data[at]) | static_cast<uint32_t>(data[at + 1]) << 8 |
                    static_cast<uint32_t>(data[at + 2]) << 16 | static_cast<uint32_t>(data[at + 3]) << 24;
    at += 4;
    if (size > len - at) return s->fail("input '" + name + "' ends inside element " + std::to_string(i));
    s->strings[i].assign(reinterpret_cast<const char*>(data + at), size);
    s->string_ptrs[i] = s->strings[i].c_str();
    at += size;
  }
  if (at != len) return s->fail("input '" + name + "' has bytes after its " + std::to_string(n) + " elements");
  OrtAllocator* allocator = nullptr;
  OrtValue* value = nullptr;
  if (s->check(fn<GetAllocatorWithDefaultOptionsFn>(kGetAllocatorWithDefaultOptions)(&allocator)) != 0) return -1;
  if (s->check(fn<CreateTensorFn>(kCreateTensorAsOrtValue)(allocator, shape, static_cast<size_t>(ndims), kString,
                                                          &value)) != 0) {
    return -1;
  }
  if (n > 0 && s->check(fn<FillStringTensorFn>(kFillStringTensor)(value, s->string_ptrs.data(), n)) != 0) {
    fn<ReleaseValueFn>(kReleaseValue)(value);
    return -1;
  }
  s->strings.clear();
  s->string_ptrs.clear();
  s->fed[input] = 1;
  s->in_names.push_back(name.c_str());
  s->in_values.push_back(value);
  return 0;
}

}  // namespace

extern "C" {

int32_t ortshim_abi_version(void) { return ORTSHIM_ABI_VERSION; }

int32_t ortshim_init(const char* lib_path) {
  std::call_once(g_once, [lib_path] { init_once(lib_path); });
  return g_init_result;
}

void ortshim_error(const ortshim_session* session, char* buf, size_t len) {
  copy_out(session != nullptr ? session->error : g_init_error, buf, len);
}

ortshim_session* ortshim_session_create(void) {
  if (g_init_result != 0) return nullptr;
  auto* s = new (std::nothrow) ortshim_session();
  if (s == nullptr) return nullptr;
  if (!take(fn<CreateSessionOptionsFn>(kCreateSessionOptions)(&s->options)).empty()) {
    delete s;
    return nullptr;
  }
  return s;
}

int32_t ortshim_option_int(ortshim_session* s, int32_t option, int32_t value) {
  if (s == nullptr) return -1;
  if (s->options == nullptr) return s->fail("the session's options are fixed once its model is loaded");
  switch (option) {
    case ORTSHIM_INTRA_OP_THREADS: return s->check(fn<OptionsIntFn>(kSetIntraOpNumThreads)(s->options, value));
    case ORTSHIM_INTER_OP_THREADS: return s->check(fn<OptionsIntFn>(kSetInterOpNumThreads)(s->options, value));
    case ORTSHIM_EXECUTION_MODE:
      if (value != 0 && value != 1) return s->fail("execution mode " + std::to_string(value) + " is not 0 or 1");
      return s->check(fn<OptionsIntFn>(kSetSessionExecutionMode)(s->options, value));
    case ORTSHIM_CPU_MEM_ARENA:
      return s->check(fn<OptionsFn>(value ? kEnableCpuMemArena : kDisableCpuMemArena)(s->options));
    case ORTSHIM_GRAPH_OPTIMIZATION:
      if (value != 0 && value != 1 && value != 2 && value != 99) {
        return s->fail("graph optimization level " + std::to_string(value) + " is not 0, 1, 2 or 99");
      }
      return s->check(fn<OptionsIntFn>(kSetSessionGraphOptimizationLevel)(s->options, value));
    case ORTSHIM_LOG_SEVERITY:
      if (value < 0 || value > 4) return s->fail("log severity " + std::to_string(value) + " is not 0 to 4");
      return s->check(fn<OptionsIntFn>(kSetSessionLogSeverityLevel)(s->options, value));
    default: return s->fail("unknown option " + std::to_string(option));
  }
}

int32_t ortshim_option_entry(ortshim_session* s, const char* key, const char* value) {
  if (s == nullptr) return -1;
  if (s->options == nullptr) return s->fail("the session's options are fixed once its model is loaded");
  return s->check(fn<AddSessionConfigEntryFn>(kAddSessionConfigEntry)(s->options, key, value));
}

int32_t ortshim_session_load(ortshim_session* s, const char* model_path) {
  if (s == nullptr) return -1;
  if (s->session != nullptr) return s->fail("the session has a model already");
  if (s->check(fn<CreateSessionFn>(kCreateSession)(g_env, model_path, s->options, &s->session)) != 0) return -1;
  fn<ReleaseSessionOptionsFn>(kReleaseSessionOptions)(s->options);
  s->options = nullptr;
  std::string err = read_io(s->session, false, s->inputs);
  if (err.empty()) err = read_io(s->session, true, s->outputs);
  if (!err.empty()) {
    // No half-described model: the session goes, and runs are refused as for a session without one.
    fn<ReleaseSessionFn>(kReleaseSession)(s->session);
    s->session = nullptr;
    s->inputs.clear();
    s->outputs.clear();
    return s->fail("cannot read the model's inputs and outputs: " + err);
  }
  s->fed.assign(s->inputs.size(), 0);
  s->small.assign(s->inputs.size(), {});
  return 0;
}

int32_t ortshim_session_count(ortshim_session* s, int32_t outputs) {
  if (s == nullptr) return -1;
  return static_cast<int32_t>(outputs ? s->outputs.size() : s->inputs.size());
}

int32_t ortshim_session_value(ortshim_session* s, int32_t outputs, int32_t index, char* name, size_t len,
                              double* info) {
  if (s == nullptr) return -1;
  const std::vector<Io>& list = outputs ? s->outputs : s->inputs;
  if (index < 0 || static_cast<size_t>(index) >= list.size()) {
    return s->fail("the model has no " + std::string(outputs ? "output " : "input ") + std::to_string(index));
  }
  const Io& io = list[index];
  if (io.name.size() + 1 > len) return s->fail("the name of " + io.name + " is longer than the buffer");
  if (io.dims.size() > ORTSHIM_MAX_DIMS) return s->fail("'" + io.name + "' has too many dims");
  copy_out(io.name, name, len);
  info[0] = io.tensor ? 1 : 0;
  info[1] = io.type;
  info[2] = static_cast<double>(io.dims.size());
  for (size_t i = 0; i < io.dims.size(); i++) info[3 + i] = static_cast<double>(io.dims[i]);
  return 0;
}

void ortshim_session_destroy(ortshim_session* s) {
  if (s == nullptr) return;
  ortshim_clear(s);
  if (s->session != nullptr) fn<ReleaseSessionFn>(kReleaseSession)(s->session);
  if (s->options != nullptr) fn<ReleaseSessionOptionsFn>(kReleaseSessionOptions)(s->options);
  delete s;
}

static int32_t feed_impl(ortshim_session* s, int32_t input, int32_t elem_type, const uint8_t* data,
                         double byte_len, const double* dims, int32_t ndims);

int32_t ortshim_feed(ortshim_session* s, int32_t input, int32_t elem_type, const uint8_t* data, double byte_len,
                     const double* dims, int32_t ndims) {
  if (s == nullptr) return -1;
  try {
    return feed_impl(s, input, elem_type, data, byte_len, dims, ndims);
  } catch (const std::exception& e) {
    return s->fail(std::string("cannot feed the input: ") + e.what());
  }
}

static int32_t feed_impl(ortshim_session* s, int32_t input, int32_t elem_type, const uint8_t* data,
                         double byte_len, const double* dims, int32_t ndims) {
  if (input < 0 || static_cast<size_t>(input) >= s->inputs.size()) {
    return s->fail("the model has no input " + std::to_string(input));
  }
  const std::string& name = s->inputs[input].name;
  if (s->fed[input]) return s->fail("input '" + name + "' is fed twice");
  size_t size = elem_type == kString ? 1 : element_size(elem_type);
  if (size == 0) return s->fail("input '" + name + "' has element type " + std::to_string(elem_type) + ", not carried");
  if (ndims < 0 || ndims > ORTSHIM_MAX_DIMS) return s->fail("input '" + name + "' has too many dims");
  std::array<int64_t, ORTSHIM_MAX_DIMS> shape{};
  double count = 1;
  for (int32_t i = 0; i < ndims; i++) {
    double d = dims[i];
    if (!(d >= 0) || d != std::floor(d) || d > 9007199254740991.0) {
      return s->fail("input '" + name + "' has an invalid dim");
    }
    shape[i] = static_cast<int64_t>(d);
    count *= d;
  }
  if (elem_type == kString) return feed_strings(s, input, data, byte_len, shape.data(), ndims, count);
  if (count * static_cast<double>(size) != byte_len) {
    return s->fail("input '" + name + "' has " + std::to_string(static_cast<uint64_t>(byte_len)) +
                   " bytes where its shape needs " + std::to_string(static_cast<uint64_t>(count * size)));
  }
  void* at = const_cast<uint8_t*>(data);
  size_t len = static_cast<size_t>(byte_len);
  if (len <= 64) {
    if (len > 0) std::memcpy(s->small[input].data(), data, len);
    at = s->small[input].data();
  }
  OrtValue* value = nullptr;
  if (s->check(fn<CreateTensorWithDataFn>(kCreateTensorWithDataAsOrtValue)(
          g_cpu, at, len, shape.data(), static_cast<size_t>(ndims), elem_type, &value)) != 0) {
    return -1;
  }
  s->fed[input] = 1;
  s->in_names.push_back(name.c_str());
  s->in_values.push_back(value);
  return 0;
}

int32_t ortshim_fetch(ortshim_session* s, int32_t output) {
  if (s == nullptr) return -1;
  if (output < 0 || static_cast<size_t>(output) >= s->outputs.size()) {
    return s->fail("the model has no output " + std::to_string(output));
  }
  s->out_names.push_back(s->outputs[output].name.c_str());
  s->out_values.push_back(nullptr);
  return 0;
}

int32_t ortshim_run(ortshim_session* s) {
  if (s == nullptr) return -1;
  if (s->session == nullptr) return s->fail("the session has no model");
  s->out_bytes.assign(s->out_values.size(), 0);
  s->out_counts.assign(s->out_values.size(), 0);
  s->out_types.assign(s->out_values.size(), 0);
  return s->check(fn<RunFn>(kRun)(s->session, nullptr, s->in_names.data(), s->in_values.data(),
                                  s->in_values.size(), s->out_names.data(), s->out_names.size(),
                                  s->out_values.data()));
}

int32_t ortshim_output(ortshim_session* s, int32_t k, double* info) {
  if (s == nullptr) return -1;
  if (k < 0 || static_cast<size_t>(k) >= s->out_values.size() || s->out_values[k] == nullptr) {
    return s->fail("the run has no output " + std::to_string(k));
  }
  OrtTensorTypeAndShapeInfo* ti = nullptr;
  if (s->check(fn<GetTensorTypeAndShapeFn>(kGetTensorTypeAndShape)(s->out_values[k], &ti)) != 0) return -1;
  int type = 0;
  size_t ndims = 0;
  size_t count = 0;
  std::array<int64_t, ORTSHIM_MAX_DIMS> dims{};
  std::string err = take(fn<GetTensorElementTypeFn>(kGetTensorElementType)(ti, &type));
  if (err.empty()) err = take(fn<GetDimensionsCountFn>(kGetDimensionsCount)(ti, &ndims));
  if (err.empty() && ndims > ORTSHIM_MAX_DIMS) err = "output '" + std::string(s->out_names[k]) + "' has too many dims";
  if (err.empty()) err = take(fn<GetDimensionsFn>(kGetDimensions)(ti, dims.data(), ndims));
  if (err.empty()) err = take(fn<GetTensorShapeElementCountFn>(kGetTensorShapeElementCount)(ti, &count));
  fn<ReleaseTensorTypeAndShapeInfoFn>(kReleaseTensorTypeAndShapeInfo)(ti);
  if (!err.empty()) return s->fail(err);
  size_t bytes = 0;
  if (type == kString) {
    // Length-prefixed: 4 bytes per element and the strings' bytes.
    size_t data_len = 0;
    if (s->check(fn<GetStringTensorDataLengthFn>(kGetStringTensorDataLength)(s->out_values[k], &data_len)) != 0) {
      return -1;
    }
    bytes = data_len + 4 * count;
  } else {
    size_t size = element_size(type);
    if (size == 0) {
      return s->fail("output '" + std::string(s->out_names[k]) + "' has element type " + std::to_string(type) +
                     ", not carried");
    }
    bytes = count * size;
  }
  s->out_bytes[k] = bytes;
  s->out_counts[k] = count;
  s->out_types[k] = type;
  info[0] = type;
  info[1] = static_cast<double>(bytes);
  info[2] = static_cast<double>(ndims);
  for (size_t i = 0; i < ndims; i++) info[3 + i] = static_cast<double>(dims[i]);
  return 0;
}

static int32_t output_copy_impl(ortshim_session* s, int32_t k, uint8_t* dst, double byte_len);

int32_t ortshim_output_copy(ortshim_session* s, int32_t k, uint8_t* dst, double byte_len) {
  if (s == nullptr) return -1;
  try {
    return output_copy_impl(s, k, dst, byte_len);
  } catch (const std::exception& e) {
    return s->fail(std::string("cannot copy the output: ") + e.what());
  }
}

static int32_t output_copy_impl(ortshim_session* s, int32_t k, uint8_t* dst, double byte_len) {
  if (k < 0 || static_cast<size_t>(k) >= s->out_values.size() || s->out_values[k] == nullptr) {
    return s->fail("the run has no output " + std::to_string(k));
  }
  if (static_cast<double>(s->out_bytes[k]) != byte_len) return s->fail("the output's size is not " +
                                                                        std::to_string(byte_len));
  if (byte_len == 0) return 0;
  size_t n = s->out_counts[k];
  if (s->out_types[k] == kString) {
    // Each element's bytes, then each element written out behind its length.
    size_t data_len = s->out_bytes[k] - 4 * n;
    std::vector<char> content(data_len + 1);
    std::vector<size_t> offsets(n > 0 ? n : 1);
    if (s->check(fn<GetStringTensorContentFn>(kGetStringTensorContent)(s->out_values[k], content.data(), data_len,
                                                                      offsets.data(), n)) != 0) {
      return -1;
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
      size_t end = i + 1 < n ? offsets[i + 1] : data_len;
      uint32_t size = static_cast<uint32_t>(end - offsets[i]);
      dst[at] = size & 0xff;
      dst[at + 1] = (size >> 8) & 0xff;
      dst[at + 2] = (size >> 16) & 0xff;
      dst[at + 3] = (size >> 24) & 0xff;
      std::memcpy(dst + at + 4, content.data() + offsets[i], size);
      at += 4 + size;
    }
    return 0;
  }
  void* data = nullptr;
  if (s->check(fn<GetTensorMutableDataFn>(kGetTensorMutableData)(s->out_values[k], &data)) != 0) return -1;
  std::memcpy(dst, data, s->out_bytes[k]);
  return 0;
}

void ortshim_clear(ortshim_session* s) {
  if (s == nullptr) return;
  for (OrtValue* v : s->in_values) fn<ReleaseValueFn>(kReleaseValue)(v);
  for (OrtValue* v : s->out_values) {
    if (v != nullptr) fn<ReleaseValueFn>(kReleaseValue)(v);
  }
  s->in_names.clear();
  s->in_values.clear();
  s->out_names.clear();
  s->out_values.clear();
  std::fill(s->fed.begin(), s->fed.end(), 0);
}

}  // extern "C"
