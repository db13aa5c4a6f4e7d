// The plain C++ layer behind trtshim.h: one abstract runtime (devices, memory, streams, events, IPC) and
// engines with execution contexts. mock.cpp implements it on the CPU, cuda.cpp over cudart and
// tensorrt.cpp the engines over nvinfer. Everything here may throw; only abi.cpp faces C callers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "trtshim.h"

namespace trtshim {

/** A failure with the ABI status it maps to. */
class Error : public std::runtime_error {
 public:
  Error(trtshim_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  trtshim_status status() const { return status_; }

 private:
  trtshim_status status_;
};

[[noreturn]] inline void fail(trtshim_status status, const std::string& message) { throw Error(status, message); }

/** A tensor shape. */
using Shape = std::vector<int64_t>;

/** "[1,-1,4]" */
std::string formatShape(const Shape& shape);

/** The datatype name (FP32, INT64, ...) of a TRTSHIM_DTYPE_* value; "INVALID" otherwise. */
const char* dtypeName(int32_t dtype);
/** The TRTSHIM_DTYPE_* value of a name, TRTSHIM_DTYPE_INVALID when unknown. */
int32_t dtypeFromName(const std::string& name);
/** Bytes per element, 0 for unknown types (and FP8 counts 1). */
size_t dtypeSize(int32_t dtype);

enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };

class Stream {
 public:
  virtual ~Stream() = default;
  virtual int32_t device() const = 0;
  /** Waits for queued work; throws the first asynchronous failure since the last call. */
  virtual void synchronize() = 0;
  virtual void copyAsync(void* dst, const void* src, size_t size, CopyKind kind) = 0;
  /** The native handle (cudaStream_t in the CUDA build, nullptr in the mock). */
  virtual void* native() { return nullptr; }
};

class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& stream) = 0;
  virtual bool query() = 0;
  virtual void synchronize() = 0;
  /** Milliseconds from `start` to this event; both completed. */
  virtual float elapsedSince(Event& start) = 0;
};

/** An I/O tensor of an engine as it describes itself. */
struct TensorDesc {
  std::string name;
  int32_t mode = TRTSHIM_IO_NONE;
  int32_t dtype = TRTSHIM_DTYPE_INVALID;
  Shape dims;
};

class Context {
 public:
  virtual ~Context() = default;
  virtual void setInputShape(const std::string& name, const Shape& shape) = 0;
  virtual void setTensorAddress(const std::string& name, void* ptr) = 0;
  virtual Shape tensorShape(const std::string& name) = 0;
  virtual void enqueue() = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual int32_t ioCount() const = 0;
  virtual const TensorDesc& io(int32_t index) const = 0;
  virtual const TensorDesc& io(const std::string& name) const = 0;
  virtual int32_t profileCount() const = 0;
  virtual Shape profileShape(int32_t profile, const std::string& input, int32_t which) const = 0;
  virtual std::unique_ptr<Context> createContext(int32_t profile, Stream& stream) = 0;
};

/** A device's power reading (trtshim_device_power). */
struct PowerReading {
  uint64_t usage_mw = 0;   // power drawn now, milliwatts
  uint64_t limit_mw = 0;   // enforced power limit, milliwatts
  uint64_t energy_mj = 0;  // energy since the driver loaded, millijoules
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual const char* kind() const = 0;
  virtual int32_t deviceCount() = 0;
  virtual void properties(int32_t device, trtshim_device_properties& props) = 0;
  virtual void memoryInfo(int32_t device, uint64_t& free_bytes, uint64_t& total_bytes) = 0;
  virtual uint32_t utilization(int32_t device) = 0;
  /** Throws UNSUPPORTED when the device or the build has no power reading. */
  virtual PowerReading power(int32_t device) = 0;
  virtual std::unique_ptr<Stream> createStream(int32_t device) = 0;
  virtual std::unique_ptr<Event> createEvent(int32_t device) = 0;
  virtual void* mallocDevice(int32_t device, size_t size) = 0;
  virtual void freeDevice(void* ptr) = 0;
  virtual void* mallocHost(size_t size) = 0;
  virtual void freeHost(void* ptr) = 0;
  virtual void ipcGetHandle(void* ptr, uint8_t* handle) = 0;
  virtual void* ipcOpen(int32_t device, const uint8_t* handle) = 0;
  virtual void ipcClose(void* ptr) = 0;
  virtual std::unique_ptr<Engine> deserialize(int32_t device, const void* data, size_t size) = 0;
};

/** The runtime of this build (defined by mock.cpp or cuda.cpp). */
Runtime& runtime();

/** Checks a device index against deviceCount(); throws NOT_FOUND. */
void checkDevice(Runtime& rt, int32_t device);

/** Checks that an input shape lies within [min, max] of a profile; throws OUT_OF_RANGE with the reason. */
void checkProfile(const std::string& input, const Shape& shape, int32_t profile, const Shape& min,
                  const Shape& max);

}  // namespace trtshim
