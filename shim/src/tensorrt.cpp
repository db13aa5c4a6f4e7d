// The TensorRT engine layer (TensorRT 10 API): plan deserialization, I/O description, optimisation
// profiles and execution contexts on the shim's CUDA streams. Compiled only with TRTSHIM_WITH_TENSORRT.
#ifdef TRTSHIM_WITH_TENSORRT

#include <NvInferRuntime.h>
#include <cuda_runtime_api.h>

#include <mutex>

#include "shim.hpp"

namespace trtshim {
namespace {

/** Keeps TensorRT's last error message so that failures can say why. */
class Logger : public nvinfer1::ILogger {
 public:
  void log(Severity severity, const char* msg) noexcept override {
    if (severity > Severity::kERROR) return;
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      last_ = msg;
    } catch (...) {
    }
  }
  /** The last error and clears it; "no message" when TensorRT logged none. */
  std::string take() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string m = last_.empty() ? std::string("no message from TensorRT") : last_;
    last_.clear();
    return m;
  }

 private:
  std::mutex mutex_;
  std::string last_;
};

Logger& logger() {
  static Logger instance;
  return instance;
}

int32_t fromTrt(nvinfer1::DataType t) {
  switch (t) {
    case nvinfer1::DataType::kFLOAT: return TRTSHIM_DTYPE_FP32;
    case nvinfer1::DataType::kHALF: return TRTSHIM_DTYPE_FP16;
    case nvinfer1::DataType::kBF16: return TRTSHIM_DTYPE_BF16;
    case nvinfer1::DataType::kINT8: return TRTSHIM_DTYPE_INT8;
    case nvinfer1::DataType::kUINT8: return TRTSHIM_DTYPE_UINT8;
    case nvinfer1::DataType::kINT32: return TRTSHIM_DTYPE_INT32;
    case nvinfer1::DataType::kINT64: return TRTSHIM_DTYPE_INT64;
    case nvinfer1::DataType::kBOOL: return TRTSHIM_DTYPE_BOOL;
    case nvinfer1::DataType::kFP8: return TRTSHIM_DTYPE_FP8;
    default: return TRTSHIM_DTYPE_INVALID;
  }
}

Shape fromDims(const nvinfer1::Dims& d) {
  Shape s;
  for (int32_t i = 0; i < d.nbDims; i++) s.push_back(d.d[i]);
  return s;
}

nvinfer1::Dims toDims(const Shape& s) {
  if (s.size() > static_cast<size_t>(nvinfer1::Dims::MAX_DIMS)) fail(TRTSHIM_INVALID_ARGUMENT, "Too many dims");
  nvinfer1::Dims d{};
  d.nbDims = static_cast<int32_t>(s.size());
  for (size_t i = 0; i < s.size(); i++) d.d[i] = s[i];
  return d;
}

/**
 * The min, opt or max shape of an input in a profile. TensorRT describes only the inputs an optimisation profile
 * names (dynamic ones); an input of fixed shape gets its dims, as in the mock.
 */
Shape profileDims(const nvinfer1::ICudaEngine& e, const std::string& input, int32_t profile,
                  nvinfer1::OptProfileSelector which) {
  nvinfer1::Dims d = e.getProfileShape(input.c_str(), profile, which);
  if (d.nbDims < 0) d = e.getTensorShape(input.c_str());
  return fromDims(d);
}

/** What an engine and its contexts share: the runtime must outlive the engine, the engine its contexts. */
struct Plan {
  std::unique_ptr<nvinfer1::IRuntime> runtime;
  std::unique_ptr<nvinfer1::ICudaEngine> engine;
  ~Plan() {
    engine.reset();
    runtime.reset();
  }
};

class TrtContext : public Context {
 public:
  TrtContext(std::shared_ptr<Plan> plan, std::unique_ptr<nvinfer1::IExecutionContext> ctx, int32_t profile,
             Stream& stream)
      : plan_(std::move(plan)), ctx_(std::move(ctx)), profile_(profile), stream_(stream) {}

  ~TrtContext() override { ctx_.reset(); }

  void setInputShape(const std::string& name, const Shape& shape) override {
    auto& e = *plan_->engine;
    if (e.getTensorIOMode(name.c_str()) != nvinfer1::TensorIOMode::kINPUT) {
      fail(TRTSHIM_NOT_FOUND, "Unknown input '" + name + "'");
    }
    Shape min = profileDims(e, name, profile_, nvinfer1::OptProfileSelector::kMIN);
    Shape max = profileDims(e, name, profile_, nvinfer1::OptProfileSelector::kMAX);
    checkProfile(name, shape, profile_, min, max);
    if (!ctx_->setInputShape(name.c_str(), toDims(shape))) {
      fail(TRTSHIM_INVALID_ARGUMENT, "Cannot set the shape of '" + name + "': " + logger().take());
    }
  }

  void setTensorAddress(const std::string& name, void* ptr) override {
    if (plan_->engine->getTensorIOMode(name.c_str()) == nvinfer1::TensorIOMode::kNONE) {
      fail(TRTSHIM_NOT_FOUND, "Unknown tensor '" + name + "'");
    }
    if (!ctx_->setTensorAddress(name.c_str(), ptr)) {
      fail(TRTSHIM_INVALID_ARGUMENT, "Cannot set the address of '" + name + "': " + logger().take());
    }
  }

  Shape tensorShape(const std::string& name) override {
    if (plan_->engine->getTensorIOMode(name.c_str()) == nvinfer1::TensorIOMode::kNONE) {
      fail(TRTSHIM_NOT_FOUND, "Unknown tensor '" + name + "'");
    }
    return fromDims(ctx_->getTensorShape(name.c_str()));
  }

  void enqueue() override {
    cudaSetDevice(stream_.device());
    if (!ctx_->enqueueV3(static_cast<cudaStream_t>(stream_.native()))) {
      fail(TRTSHIM_RUNTIME_ERROR, "enqueueV3 failed: " + logger().take());
    }
  }

 private:
  std::shared_ptr<Plan> plan_;
  std::unique_ptr<nvinfer1::IExecutionContext> ctx_;
  int32_t profile_;
  Stream& stream_;
};

class TrtEngine : public Engine {
 public:
  explicit TrtEngine(std::shared_ptr<Plan> plan) : plan_(std::move(plan)) {
    auto& e = *plan_->engine;
    for (int32_t i = 0; i < e.getNbIOTensors(); i++) {
      TensorDesc d;
      d.name = e.getIOTensorName(i);
      auto mode = e.getTensorIOMode(d.name.c_str());
      d.mode = mode == nvinfer1::TensorIOMode::kINPUT    ? TRTSHIM_IO_INPUT
               : mode == nvinfer1::TensorIOMode::kOUTPUT ? TRTSHIM_IO_OUTPUT
                                                         : TRTSHIM_IO_NONE;
      d.dtype = fromTrt(e.getTensorDataType(d.name.c_str()));
      d.dims = fromDims(e.getTensorShape(d.name.c_str()));
      io_.push_back(d);
    }
  }

  int32_t ioCount() const override { return static_cast<int32_t>(io_.size()); }

  const TensorDesc& io(int32_t index) const override {
    if (index < 0 || index >= ioCount()) {
      fail(TRTSHIM_NOT_FOUND, "I/O tensor index " + std::to_string(index) + " is outside 0.." +
                                  std::to_string(ioCount() - 1));
    }
    return io_[static_cast<size_t>(index)];
  }

  const TensorDesc& io(const std::string& name) const override {
    for (const auto& d : io_)
      if (d.name == name) return d;
    fail(TRTSHIM_NOT_FOUND, "Unknown tensor '" + name + "'");
  }

  int32_t profileCount() const override { return plan_->engine->getNbOptimizationProfiles(); }

  Shape profileShape(int32_t profile, const std::string& input, int32_t which) const override {
    checkProfileIndex(profile);
    if (io(input).mode != TRTSHIM_IO_INPUT) fail(TRTSHIM_INVALID_ARGUMENT, "Tensor '" + input + "' is not an input");
    auto sel = which == TRTSHIM_PROFILE_MIN   ? nvinfer1::OptProfileSelector::kMIN
               : which == TRTSHIM_PROFILE_OPT ? nvinfer1::OptProfileSelector::kOPT
                                              : nvinfer1::OptProfileSelector::kMAX;
    return profileDims(*plan_->engine, input, profile, sel);
  }

  std::unique_ptr<Context> createContext(int32_t profile, Stream& stream) override {
    checkProfileIndex(profile);
    cudaSetDevice(stream.device());
    std::unique_ptr<nvinfer1::IExecutionContext> ctx(plan_->engine->createExecutionContext());
    if (!ctx) fail(TRTSHIM_RUNTIME_ERROR, "Cannot create an execution context: " + logger().take());
    auto s = static_cast<cudaStream_t>(stream.native());
    if (!ctx->setOptimizationProfileAsync(profile, s)) {
      fail(TRTSHIM_RUNTIME_ERROR, "Cannot select optimisation profile " + std::to_string(profile) + ": " +
                                      logger().take());
    }
    stream.synchronize();
    return std::make_unique<TrtContext>(plan_, std::move(ctx), profile, stream);
  }

 private:
  void checkProfileIndex(int32_t profile) const {
    if (profile < 0 || profile >= profileCount()) {
      fail(TRTSHIM_NOT_FOUND, "Optimisation profile " + std::to_string(profile) + " does not exist (" +
                                  std::to_string(profileCount()) + " profiles)");
    }
  }

  std::shared_ptr<Plan> plan_;
  std::vector<TensorDesc> io_;
};

}  // namespace

std::unique_ptr<Engine> deserializeTensorRT(int32_t device, const void* data, size_t size) {
  auto plan = std::make_shared<Plan>();
  plan->runtime.reset(nvinfer1::createInferRuntime(logger()));
  if (!plan->runtime) fail(TRTSHIM_RUNTIME_ERROR, "Cannot create the TensorRT runtime: " + logger().take());
  plan->engine.reset(plan->runtime->deserializeCudaEngine(data, size));
  if (!plan->engine) {
    fail(TRTSHIM_INVALID_ARGUMENT,
         "Cannot deserialize the plan on device " + std::to_string(device) + ": " + logger().take());
  }
  return std::make_unique<TrtEngine>(std::move(plan));
}

}  // namespace trtshim

#endif  // TRTSHIM_WITH_TENSORRT
