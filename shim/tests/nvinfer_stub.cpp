// A stand-in for libnvinfer, for checking that the TensorRT layer compiles and links where TensorRT's headers
// exist but its library does not (-DTRTSHIM_NVINFER_STUB=ON; tests/build_tensorrt.sh). It exports the entry
// points libtrtshim calls and creates no runtime, so that deserializing a plan fails with the reason below.
#define TENSORRT_BUILD_LIB 1  // TENSORRTAPI exports the definitions
#include <NvInferRuntime.h>

extern "C" TENSORRTAPI void* createInferRuntime_INTERNAL(void* logger, int32_t version) noexcept {
  (void)version;
  if (logger) {
    static_cast<nvinfer1::ILogger*>(logger)->log(
        nvinfer1::ILogger::Severity::kERROR,
        "libnvinfer is the stub of a compile and link check (-DTRTSHIM_NVINFER_STUB=ON): it cannot run plans");
  }
  return nullptr;
}

extern "C" TENSORRTAPI int32_t getInferLibVersion() noexcept { return NV_TENSORRT_VERSION; }
