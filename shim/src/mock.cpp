// The MOCK runtime: the whole ABI on the CPU. "Device" memory is host memory, devices are described by
// environment variables (TRTSHIM_MOCK_DEVICE_COUNT, TRTSHIM_MOCK_COMPUTE_CAPABILITY, TRTSHIM_MOCK_MEMORY, and
// the power reading TRTSHIM_MOCK_POWER_MW, TRTSHIM_MOCK_POWER_LIMIT_MW, TRTSHIM_MOCK_ENERGY_MJ), and every
// stream is a worker thread that runs its queue in order.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "mock.hpp"

namespace trtshim {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kIpcMagic[16] = "trtshim-mock-ip";  // 15 chars + NUL
constexpr int kMaxDevices = 16;

int64_t envInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long long n = std::strtoll(v, &end, 10);
  return (end && *end == '\0' && n >= 0) ? n : fallback;
}

/** "8.6" from TRTSHIM_MOCK_COMPUTE_CAPABILITY, "0.0" by default. */
void computeCapability(int32_t& major, int32_t& minor) {
  major = 0;
  minor = 0;
  const char* v = std::getenv("TRTSHIM_MOCK_COMPUTE_CAPABILITY");
  if (v && *v) std::sscanf(v, "%d.%d", &major, &minor);
}

/**
 * A device's entry of a power variable: one number for every device, or a comma-separated list with device
 * i's number at i. False when the variable is unset, or the list has no (or an empty) entry for the device;
 * an entry that is not a non-negative integer fails with INVALID_ARGUMENT naming the variable.
 */
bool envDeviceValue(const char* name, int32_t device, uint64_t& out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  std::string list(v);
  std::string entry = list;
  if (list.find(',') != std::string::npos) {
    size_t start = 0;
    for (int32_t i = 0; i < device; i++) {
      size_t comma = list.find(',', start);
      if (comma == std::string::npos) return false;
      start = comma + 1;
    }
    size_t end = list.find(',', start);
    entry = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
  }
  if (entry.empty()) return false;
  if (entry.find_first_not_of("0123456789") != std::string::npos || entry.size() > 19) {
    fail(TRTSHIM_INVALID_ARGUMENT,
         std::string("Cannot read ") + name + "='" + list + "': '" + entry + "' is not a non-negative integer");
  }
  out = std::strtoull(entry.c_str(), nullptr, 10);
  return true;
}

std::atomic<int> g_busy[kMaxDevices];
std::atomic<int> g_streams[kMaxDevices];

class MockStream : public Stream {
 public:
  explicit MockStream(int32_t device) : device_(device), worker_([this] { loop(); }) { g_streams[device_]++; }

  ~MockStream() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    worker_.join();
    g_streams[device_]--;
  }

  int32_t device() const override { return device_; }

  /** Queues a task; a task that throws records the stream's error (the first one until synchronize). */
  void push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
    }
    wake_.notify_all();
  }

  void synchronize() override {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return queue_.empty() && !running_; });
    if (errorStatus_ != TRTSHIM_OK) {
      Error e(errorStatus_, error_);
      errorStatus_ = TRTSHIM_OK;
      error_.clear();
      throw e;
    }
  }

  void copyAsync(void* dst, const void* src, size_t size, CopyKind) override {
    push([dst, src, size] { std::memmove(dst, src, size); });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      auto task = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      lock.unlock();
      g_busy[device_]++;
      trtshim_status status = TRTSHIM_OK;
      std::string message;
      try {
        task();
      } catch (const Error& e) {
        status = e.status();
        message = e.what();
      } catch (const std::exception& e) {
        status = TRTSHIM_RUNTIME_ERROR;
        message = std::string("Execution failed: ") + e.what();
      } catch (...) {
        status = TRTSHIM_RUNTIME_ERROR;
        message = "Execution failed: unknown exception";
      }
      g_busy[device_]--;
      lock.lock();
      running_ = false;
      if (status != TRTSHIM_OK && errorStatus_ == TRTSHIM_OK) {
        errorStatus_ = status;
        error_ = message;
      }
      if (queue_.empty()) idle_.notify_all();
    }
  }

  int32_t device_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;
  bool stop_ = false;
  trtshim_status errorStatus_ = TRTSHIM_OK;
  std::string error_;
  std::thread worker_;  // last: starts after the other members exist
};

struct EventState {
  std::mutex mutex;
  std::condition_variable done;
  uint64_t recorded = 0, completed = 0;
  Clock::time_point at;
};

class MockEvent : public Event {
 public:
  void record(Stream& stream) override {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      ticket = ++state_->recorded;
    }
    auto state = state_;
    static_cast<MockStream&>(stream).push([state, ticket] {
      std::lock_guard<std::mutex> lock(state->mutex);
      if (ticket > state->completed) {
        state->completed = ticket;
        state->at = Clock::now();
      }
      state->done.notify_all();
    });
  }

  bool query() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->completed >= state_->recorded;
  }

  void synchronize() override {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->done.wait(lock, [this] { return state_->completed >= state_->recorded; });
  }

  float elapsedSince(Event& startEvent) override {
    auto& start = static_cast<MockEvent&>(startEvent);
    if (!query() || !start.query() || state_->completed == 0 || start.state_->completed == 0) {
      fail(TRTSHIM_INVALID_ARGUMENT, "Both events must be recorded and completed");
    }
    std::chrono::duration<float, std::milli> d = state_->at - start.state_->at;
    return d.count();
  }

 private:
  std::shared_ptr<EventState> state_ = std::make_shared<EventState>();
};

class MockContext : public Context {
 public:
  MockContext(std::shared_ptr<const mock::Model> model, int32_t profile, MockStream& stream)
      : model_(std::move(model)), profile_(profile), stream_(stream) {
    for (const auto& d : model_->io) {
      if (d.mode == TRTSHIM_IO_INPUT) {
        bool dynamic = false;
        for (auto v : d.dims) dynamic = dynamic || v < 0;
        if (!dynamic) shapes_[d.name] = d.dims;
      }
    }
  }

  void setInputShape(const std::string& name, const Shape& shape) override {
    const TensorDesc& d = desc(name);
    if (d.mode != TRTSHIM_IO_INPUT) fail(TRTSHIM_INVALID_ARGUMENT, "Tensor '" + name + "' is not an input");
    const auto& p = model_->profiles[static_cast<size_t>(profile_)].at(name);
    checkProfile(name, shape, profile_, p.min, p.max);
    shapes_[name] = shape;
  }

  void setTensorAddress(const std::string& name, void* ptr) override {
    desc(name);
    addresses_[name] = ptr;
  }

  Shape tensorShape(const std::string& name) override {
    const TensorDesc& d = desc(name);
    if (d.mode == TRTSHIM_IO_INPUT) {
      auto it = shapes_.find(name);
      return it == shapes_.end() ? d.dims : it->second;
    }
    for (const auto& io : model_->io) {
      if (io.mode == TRTSHIM_IO_INPUT && !shapes_.count(io.name)) return d.dims;  // not all known yet
    }
    return mock::inferShapes(*model_, shapes_).at(name);
  }

  void enqueue() override {
    for (const auto& io : model_->io) {
      if (io.mode == TRTSHIM_IO_INPUT && !shapes_.count(io.name)) {
        fail(TRTSHIM_INVALID_ARGUMENT, "Cannot enqueue: the shape of input '" + io.name + "' is not set");
      }
    }
    auto shapes = mock::inferShapes(*model_, shapes_);
    for (const auto& io : model_->io) {
      auto it = addresses_.find(io.name);
      int64_t n = 1;
      for (auto v : shapes.at(io.name)) n *= v;
      if (n > 0 && (it == addresses_.end() || it->second == nullptr)) {
        fail(TRTSHIM_INVALID_ARGUMENT, "Cannot enqueue: tensor '" + io.name + "' has no address");
      }
    }
    auto model = model_;
    auto addresses = addresses_;
    stream_.push([model, shapes, addresses] {
      if (model->delayMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(model->delayMs));
      mock::execute(*model, shapes, addresses);
    });
  }

 private:
  const TensorDesc& desc(const std::string& name) const {
    const TensorDesc* d = model_->find(name);
    if (!d) fail(TRTSHIM_NOT_FOUND, "Unknown tensor '" + name + "'");
    return *d;
  }

  std::shared_ptr<const mock::Model> model_;
  int32_t profile_;
  MockStream& stream_;
  std::map<std::string, Shape> shapes_;
  std::map<std::string, void*> addresses_;
};

class MockEngine : public Engine {
 public:
  explicit MockEngine(mock::Model model) : model_(std::make_shared<const mock::Model>(std::move(model))) {}

  int32_t ioCount() const override { return static_cast<int32_t>(model_->io.size()); }

  const TensorDesc& io(int32_t index) const override {
    if (index < 0 || index >= ioCount()) {
      fail(TRTSHIM_NOT_FOUND, "I/O tensor index " + std::to_string(index) + " is outside 0.." +
                                  std::to_string(ioCount() - 1));
    }
    return model_->io[static_cast<size_t>(index)];
  }

  const TensorDesc& io(const std::string& name) const override {
    const TensorDesc* d = model_->find(name);
    if (!d) fail(TRTSHIM_NOT_FOUND, "Unknown tensor '" + name + "'");
    return *d;
  }

  int32_t profileCount() const override { return static_cast<int32_t>(model_->profiles.size()); }

  Shape profileShape(int32_t profile, const std::string& input, int32_t which) const override {
    checkProfileIndex(profile);
    const TensorDesc& d = io(input);
    if (d.mode != TRTSHIM_IO_INPUT) fail(TRTSHIM_INVALID_ARGUMENT, "Tensor '" + input + "' is not an input");
    const auto& p = model_->profiles[static_cast<size_t>(profile)].at(input);
    return which == TRTSHIM_PROFILE_MIN ? p.min : which == TRTSHIM_PROFILE_OPT ? p.opt : p.max;
  }

  std::unique_ptr<Context> createContext(int32_t profile, Stream& stream) override {
    checkProfileIndex(profile);
    return std::make_unique<MockContext>(model_, profile, static_cast<MockStream&>(stream));
  }

 private:
  void checkProfileIndex(int32_t profile) const {
    if (profile < 0 || profile >= profileCount()) {
      fail(TRTSHIM_NOT_FOUND, "Optimisation profile " + std::to_string(profile) + " does not exist (" +
                                  std::to_string(profileCount()) + " profiles)");
    }
  }

  std::shared_ptr<const mock::Model> model_;
};

class MockRuntime : public Runtime {
 public:
  const char* kind() const override { return "mock"; }

  int32_t deviceCount() override {
    int64_t n = envInt("TRTSHIM_MOCK_DEVICE_COUNT", 1);
    return static_cast<int32_t>(n > kMaxDevices ? kMaxDevices : n);
  }

  void properties(int32_t device, trtshim_device_properties& props) override {
    std::snprintf(props.name, sizeof props.name, "dinfer mock device");
    const char tag[] = "dinfer-mock-dev";  // 15 bytes + the device index
    std::memcpy(props.uuid, tag, 15);
    props.uuid[15] = static_cast<uint8_t>(device);
    props.total_memory = totalMemory();
    computeCapability(props.cc_major, props.cc_minor);
    props.multiprocessor_count = 1;
    props.pci_bus_id = device;
  }

  void memoryInfo(int32_t device, uint64_t& free_bytes, uint64_t& total_bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    total_bytes = totalMemory();
    uint64_t used = used_[device];
    free_bytes = used > total_bytes ? 0 : total_bytes - used;
  }

  uint32_t utilization(int32_t device) override {
    int streams = g_streams[device].load();
    if (streams <= 0) return 0;
    return static_cast<uint32_t>(100 * g_busy[device].load() / streams);
  }

  PowerReading power(int32_t device) override {
    PowerReading r;
    bool usage = envDeviceValue("TRTSHIM_MOCK_POWER_MW", device, r.usage_mw);
    bool limit = envDeviceValue("TRTSHIM_MOCK_POWER_LIMIT_MW", device, r.limit_mw);
    bool energy = envDeviceValue("TRTSHIM_MOCK_ENERGY_MJ", device, r.energy_mj);
    if (!usage || !limit || !energy) {
      fail(TRTSHIM_UNSUPPORTED, "Device " + std::to_string(device) +
                                    " has no power reading: TRTSHIM_MOCK_POWER_MW, TRTSHIM_MOCK_POWER_LIMIT_MW and "
                                    "TRTSHIM_MOCK_ENERGY_MJ must each give it a value");
    }
    return r;
  }

  std::unique_ptr<Stream> createStream(int32_t device) override { return std::make_unique<MockStream>(device); }

  std::unique_ptr<Event> createEvent(int32_t) override { return std::make_unique<MockEvent>(); }

  void* mallocDevice(int32_t device, size_t size) override {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t total = totalMemory();
    if (used_[device] + size > total) {
      fail(TRTSHIM_OUT_OF_MEMORY, "Cannot allocate " + std::to_string(size) + " bytes on device " +
                                      std::to_string(device) + ": out of device memory");
    }
    void* p = std::calloc(size ? size : 1, 1);
    if (!p) fail(TRTSHIM_OUT_OF_MEMORY, "Cannot allocate " + std::to_string(size) + " bytes: out of memory");
    blocks_[p] = Block{device, size, false};
    used_[device] += size;
    return p;
  }

  void freeDevice(void* ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end() || it->second.host) {
      fail(TRTSHIM_INVALID_ARGUMENT, "Pointer was not allocated by trtshim_malloc_device");
    }
    used_[it->second.device] -= it->second.size;
    blocks_.erase(it);
    std::free(ptr);
  }

  void* mallocHost(size_t size) override {
    void* p = std::calloc(size ? size : 1, 1);
    if (!p) fail(TRTSHIM_OUT_OF_MEMORY, "Cannot allocate " + std::to_string(size) + " bytes: out of memory");
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_[p] = Block{-1, size, true};
    return p;
  }

  void freeHost(void* ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end() || !it->second.host) {
      fail(TRTSHIM_INVALID_ARGUMENT, "Pointer was not allocated by trtshim_malloc_host");
    }
    blocks_.erase(it);
    std::free(ptr);
  }

  void ipcGetHandle(void* ptr, uint8_t* handle) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end() || it->second.host) {
      fail(TRTSHIM_INVALID_ARGUMENT, "Pointer is not the start of a device allocation");
    }
    std::memset(handle, 0, TRTSHIM_IPC_HANDLE_SIZE);
    std::memcpy(handle, kIpcMagic, 16);
    int64_t pid = static_cast<int64_t>(getpid());
    uint64_t address = reinterpret_cast<uintptr_t>(ptr);
    std::memcpy(handle + 16, &pid, 8);
    std::memcpy(handle + 24, &address, 8);
  }

  void* ipcOpen(int32_t, const uint8_t* handle) override {
    if (std::memcmp(handle, kIpcMagic, 16) != 0) fail(TRTSHIM_INVALID_ARGUMENT, "Not a mock IPC handle");
    int64_t pid;
    uint64_t address;
    std::memcpy(&pid, handle + 16, 8);
    std::memcpy(&address, handle + 24, 8);
    if (pid != static_cast<int64_t>(getpid())) {
      fail(TRTSHIM_UNSUPPORTED, "The mock opens IPC handles only in the process that exported them");
    }
    void* ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
    std::lock_guard<std::mutex> lock(mutex_);
    if (!blocks_.count(ptr)) fail(TRTSHIM_INVALID_ARGUMENT, "The IPC handle's allocation was freed");
    opened_[ptr]++;
    return ptr;
  }

  void ipcClose(void* ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = opened_.find(ptr);
    if (it == opened_.end()) fail(TRTSHIM_INVALID_ARGUMENT, "Pointer was not opened by trtshim_ipc_open");
    if (--it->second == 0) opened_.erase(it);
  }

  std::unique_ptr<Engine> deserialize(int32_t device, const void* data, size_t size) override {
    mock::Model model = mock::parse(std::string(static_cast<const char*>(data), size));
    if (!model.computeCapability.empty()) {
      int32_t major, minor;
      computeCapability(major, minor);
      std::string have = std::to_string(major) + "." + std::to_string(minor);
      if (have != model.computeCapability) {
        fail(TRTSHIM_UNSUPPORTED, "Cannot deserialize mock engine: it was built for compute capability " +
                                      model.computeCapability + " but device " + std::to_string(device) +
                                      " has " + have);
      }
    }
    return std::make_unique<MockEngine>(std::move(model));
  }

 private:
  struct Block {
    int32_t device;
    size_t size;
    bool host;
  };

  static uint64_t totalMemory() { return static_cast<uint64_t>(envInt("TRTSHIM_MOCK_MEMORY", 16ll << 30)); }

  std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;
  std::unordered_map<void*, int> opened_;
  uint64_t used_[kMaxDevices] = {};
};

}  // namespace

Runtime& runtime() {
  static MockRuntime instance;
  return instance;
}

}  // namespace trtshim
