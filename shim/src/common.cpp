// Helpers shared by every build: shape formatting, datatype tables, device and profile checks.
#include <cstring>
#include <sstream>

#include "shim.hpp"

namespace trtshim {

namespace {
struct DtypeInfo {
  int32_t value;
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {TRTSHIM_DTYPE_FP32, "FP32", 4}, {TRTSHIM_DTYPE_FP16, "FP16", 2},   {TRTSHIM_DTYPE_BF16, "BF16", 2},
    {TRTSHIM_DTYPE_INT8, "INT8", 1}, {TRTSHIM_DTYPE_UINT8, "UINT8", 1}, {TRTSHIM_DTYPE_INT32, "INT32", 4},
    {TRTSHIM_DTYPE_INT64, "INT64", 8}, {TRTSHIM_DTYPE_BOOL, "BOOL", 1}, {TRTSHIM_DTYPE_FP8, "FP8", 1},
};
}  // namespace

std::string formatShape(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); i++) out << (i ? "," : "") << shape[i];
  out << ']';
  return out.str();
}

const char* dtypeName(int32_t dtype) {
  for (const auto& d : kDtypes)
    if (d.value == dtype) return d.name;
  return "INVALID";
}

int32_t dtypeFromName(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.value;
  return TRTSHIM_DTYPE_INVALID;
}

size_t dtypeSize(int32_t dtype) {
  for (const auto& d : kDtypes)
    if (d.value == dtype) return d.size;
  return 0;
}

void checkDevice(Runtime& rt, int32_t device) {
  int32_t count = rt.deviceCount();
  if (device < 0 || device >= count) {
    fail(TRTSHIM_NOT_FOUND,
         "Device " + std::to_string(device) + " does not exist (" + std::to_string(count) + " devices)");
  }
}

void checkProfile(const std::string& input, const Shape& shape, int32_t profile, const Shape& min,
                  const Shape& max) {
  bool ok = shape.size() == min.size() && shape.size() == max.size();
  for (size_t i = 0; ok && i < shape.size(); i++) ok = shape[i] >= min[i] && shape[i] <= max[i];
  if (!ok) {
    fail(TRTSHIM_OUT_OF_RANGE, "Input '" + input + "' shape " + formatShape(shape) +
                                   " is outside optimisation profile " + std::to_string(profile) + ": min " +
                                   formatShape(min) + ", max " + formatShape(max));
  }
}

}  // namespace trtshim
