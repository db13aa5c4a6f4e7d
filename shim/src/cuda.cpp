// The CUDA runtime layer over cudart: devices, memory, streams, events and IPC handles. Utilisation and the
// power reading come from NVML, loaded with dlopen when the driver provides it. Engines come from
// tensorrt.cpp when built with TensorRT; otherwise deserialize fails with UNSUPPORTED.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "shim.hpp"

namespace trtshim {

#ifdef TRTSHIM_WITH_TENSORRT
std::unique_ptr<Engine> deserializeTensorRT(int32_t device, const void* data, size_t size);
#endif

namespace {

void check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  trtshim_status status = rc == cudaErrorMemoryAllocation ? TRTSHIM_OUT_OF_MEMORY
                          : rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver
                              ? TRTSHIM_UNSUPPORTED
                              : TRTSHIM_RUNTIME_ERROR;
  fail(status, std::string(what) + " failed: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc));
}

/** Makes `device` current on this thread (callers may arrive on any thread). */
void use(int32_t device) { check(cudaSetDevice(device), "cudaSetDevice"); }

/**
 * The few NVML entry points used here, resolved at run time (no link-time dependency): utilisation, and the
 * power reading (power draw, enforced limit, total energy). Each reading needs only its own entry points, so
 * an older driver without one still gives the others. Not thread-safe: the runtime serialises the calls.
 */
class Nvml {
 public:
  static Nvml& get() {
    static Nvml instance;
    return instance;
  }

  /** Whether NVML loaded and initialised (a device can be looked up). */
  bool available() const { return ok_; }
  bool hasUtilization() const { return ok_ && rates_; }
  bool hasPower() const { return ok_ && power_ && limit_ && energy_; }

  uint32_t utilization(int32_t device) {
    void* handle = deviceHandle(device);
    Rates rates{};
    checkNvml(rates_(handle, &rates), "nvmlDeviceGetUtilizationRates");
    return rates.gpu;
  }

  PowerReading power(int32_t device) {
    void* handle = deviceHandle(device);
    unsigned int usage = 0, limit = 0;
    unsigned long long energy = 0;
    checkNvml(power_(handle, &usage), "nvmlDeviceGetPowerUsage");
    checkNvml(limit_(handle, &limit), "nvmlDeviceGetEnforcedPowerLimit");
    checkNvml(energy_(handle, &energy), "nvmlDeviceGetTotalEnergyConsumption");
    PowerReading r;
    r.usage_mw = usage;
    r.limit_mw = limit;
    r.energy_mj = energy;
    return r;
  }

 private:
  struct Rates {
    unsigned int gpu;
    unsigned int memory;
  };
  // nvmlReturn_t values that map to UNSUPPORTED: NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION,
  // NVML_ERROR_FUNCTION_NOT_FOUND; any other failure is a RUNTIME_ERROR.
  static constexpr int kNotSupported = 3;
  static constexpr int kNoPermission = 4;
  static constexpr int kFunctionNotFound = 13;
  using InitFn = int (*)();
  using ByPciFn = int (*)(const char*, void**);
  using RatesFn = int (*)(void*, Rates*);
  using UintFn = int (*)(void*, unsigned int*);          // power usage, enforced limit (mW)
  using EnergyFn = int (*)(void*, unsigned long long*);  // total energy (mJ)
  using ErrorStringFn = const char* (*)(int);

  Nvml() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return;
    auto init = reinterpret_cast<InitFn>(dlsym(lib_, "nvmlInit_v2"));
    byPci_ = reinterpret_cast<ByPciFn>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    rates_ = reinterpret_cast<RatesFn>(dlsym(lib_, "nvmlDeviceGetUtilizationRates"));
    power_ = reinterpret_cast<UintFn>(dlsym(lib_, "nvmlDeviceGetPowerUsage"));
    limit_ = reinterpret_cast<UintFn>(dlsym(lib_, "nvmlDeviceGetEnforcedPowerLimit"));
    energy_ = reinterpret_cast<EnergyFn>(dlsym(lib_, "nvmlDeviceGetTotalEnergyConsumption"));
    errorString_ = reinterpret_cast<ErrorStringFn>(dlsym(lib_, "nvmlErrorString"));
    ok_ = init && byPci_ && init() == 0;
  }

  void* deviceHandle(int32_t device) {
    char bus[32] = {};
    check(cudaDeviceGetPCIBusId(bus, sizeof bus, device), "cudaDeviceGetPCIBusId");
    void* handle = nullptr;
    if (byPci_(bus, &handle) != 0) fail(TRTSHIM_RUNTIME_ERROR, std::string("NVML does not know device ") + bus);
    return handle;
  }

  void checkNvml(int rc, const char* what) {
    if (rc == 0) return;
    const char* text = errorString_ ? errorString_(rc) : nullptr;
    std::string message = std::string(what) + " failed: " + (text ? text : "NVML error " + std::to_string(rc));
    bool unsupported = rc == kNotSupported || rc == kNoPermission || rc == kFunctionNotFound;
    fail(unsupported ? TRTSHIM_UNSUPPORTED : TRTSHIM_RUNTIME_ERROR, message);
  }

  void* lib_ = nullptr;
  ByPciFn byPci_ = nullptr;
  RatesFn rates_ = nullptr;
  UintFn power_ = nullptr;
  UintFn limit_ = nullptr;
  EnergyFn energy_ = nullptr;
  ErrorStringFn errorString_ = nullptr;
  bool ok_ = false;
};

class CudaStream : public Stream {
 public:
  explicit CudaStream(int32_t device) : device_(device) {
    use(device);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaStream() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  int32_t device() const override { return device_; }
  void synchronize() override {
    use(device_);
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void copyAsync(void* dst, const void* src, size_t size, CopyKind kind) override {
    use(device_);
    cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                       : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
    check(cudaMemcpyAsync(dst, src, size, k, stream_), "cudaMemcpyAsync");
  }
  void* native() override { return stream_; }

 private:
  int32_t device_;
  cudaStream_t stream_ = nullptr;
};

class CudaEvent : public Event {
 public:
  explicit CudaEvent(int32_t device) : device_(device) {
    use(device);
    check(cudaEventCreate(&event_), "cudaEventCreate");
  }
  ~CudaEvent() override {
    cudaSetDevice(device_);
    cudaEventDestroy(event_);
  }
  void record(Stream& stream) override {
    use(device_);
    check(cudaEventRecord(event_, static_cast<cudaStream_t>(stream.native())), "cudaEventRecord");
  }
  bool query() override {
    cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) return false;
    check(rc, "cudaEventQuery");
    return true;
  }
  void synchronize() override { check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  float elapsedSince(Event& start) override {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, static_cast<CudaEvent&>(start).event_, event_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  int32_t device_;
  cudaEvent_t event_ = nullptr;
};

class CudaRuntime : public Runtime {
 public:
  const char* kind() const override {
#ifdef TRTSHIM_WITH_TENSORRT
    return "cuda+tensorrt";
#else
    return "cuda";
#endif
  }

  int32_t deviceCount() override {
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver) {
      cudaGetLastError();  // clear
      return 0;
    }
    check(rc, "cudaGetDeviceCount");
    return n;
  }

  void properties(int32_t device, trtshim_device_properties& props) override {
    cudaDeviceProp p;
    check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    std::snprintf(props.name, sizeof props.name, "%s", p.name);
    std::memcpy(props.uuid, p.uuid.bytes, sizeof props.uuid);
    props.total_memory = p.totalGlobalMem;
    props.cc_major = p.major;
    props.cc_minor = p.minor;
    props.multiprocessor_count = p.multiProcessorCount;
    props.pci_bus_id = p.pciBusID;
  }

  void memoryInfo(int32_t device, uint64_t& free_bytes, uint64_t& total_bytes) override {
    use(device);
    size_t f = 0, t = 0;
    check(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
    free_bytes = f;
    total_bytes = t;
  }

  uint32_t utilization(int32_t device) override {
    std::lock_guard<std::mutex> lock(nvmlMutex_);
    Nvml& nvml = Nvml::get();
    if (!nvml.available()) fail(TRTSHIM_UNSUPPORTED, "Utilisation needs NVML (libnvidia-ml.so.1), not found");
    if (!nvml.hasUtilization()) fail(TRTSHIM_UNSUPPORTED, "Utilisation: NVML lacks nvmlDeviceGetUtilizationRates");
    return nvml.utilization(device);
  }

  PowerReading power(int32_t device) override {
    std::lock_guard<std::mutex> lock(nvmlMutex_);
    Nvml& nvml = Nvml::get();
    if (!nvml.available()) fail(TRTSHIM_UNSUPPORTED, "Power readings need NVML (libnvidia-ml.so.1), not found");
    if (!nvml.hasPower()) {
      fail(TRTSHIM_UNSUPPORTED,
           "Power readings: NVML lacks nvmlDeviceGetPowerUsage, nvmlDeviceGetEnforcedPowerLimit or "
           "nvmlDeviceGetTotalEnergyConsumption");
    }
    return nvml.power(device);
  }

  std::unique_ptr<Stream> createStream(int32_t device) override { return std::make_unique<CudaStream>(device); }
  std::unique_ptr<Event> createEvent(int32_t device) override { return std::make_unique<CudaEvent>(device); }

  void* mallocDevice(int32_t device, size_t size) override {
    use(device);
    void* p = nullptr;
    check(cudaMalloc(&p, size), "cudaMalloc");
    return p;
  }
  void freeDevice(void* ptr) override { check(cudaFree(ptr), "cudaFree"); }
  void* mallocHost(size_t size) override {
    void* p = nullptr;
    check(cudaMallocHost(&p, size), "cudaMallocHost");
    return p;
  }
  void freeHost(void* ptr) override { check(cudaFreeHost(ptr), "cudaFreeHost"); }

  void ipcGetHandle(void* ptr, uint8_t* handle) override {
    static_assert(sizeof(cudaIpcMemHandle_t) == TRTSHIM_IPC_HANDLE_SIZE, "IPC handle size");
    cudaIpcMemHandle_t h;
    check(cudaIpcGetMemHandle(&h, ptr), "cudaIpcGetMemHandle");
    std::memcpy(handle, &h, sizeof h);
  }
  void* ipcOpen(int32_t device, const uint8_t* handle) override {
    use(device);
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle, sizeof h);
    void* p = nullptr;
    check(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    return p;
  }
  void ipcClose(void* ptr) override { check(cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle"); }

  std::unique_ptr<Engine> deserialize(int32_t device, const void* data, size_t size) override {
#ifdef TRTSHIM_WITH_TENSORRT
    use(device);
    return deserializeTensorRT(device, data, size);
#else
    (void)device;
    (void)data;
    (void)size;
    fail(TRTSHIM_UNSUPPORTED, "Cannot deserialize a plan: libtrtshim was built without TensorRT");
#endif
  }

 private:
  std::mutex nvmlMutex_;
};

}  // namespace

Runtime& runtime() {
  static CudaRuntime instance;
  return instance;
}

}  // namespace trtshim
