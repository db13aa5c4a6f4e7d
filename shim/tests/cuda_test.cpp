// Tests of the CUDA build on a real GPU: devices, memory, streams, copies, events and IPC export. Exits 77
// (ctest's skip) with the reason where there is no GPU.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "trtshim.h"

namespace {
int g_failures = 0;

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      g_failures++;                                                                 \
    }                                                                               \
  } while (0)

#define CHECK_OK(call)                                                                                     \
  do {                                                                                                     \
    trtshim_status s_ = (call);                                                                            \
    if (s_ != TRTSHIM_OK) {                                                                                \
      std::fprintf(stderr, "%s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #call, s_, trtshim_last_error()); \
      g_failures++;                                                                                        \
    }                                                                                                      \
  } while (0)
}  // namespace

int main() {
  CHECK(std::string(trtshim_build_kind()).rfind("cuda", 0) == 0);
  int32_t n = 0;
  CHECK_OK(trtshim_device_count(&n));
  if (n == 0) {
    std::printf("cuda_test: skipped: no GPU (trtshim_device_count is 0)\n");
    return 77;
  }
  trtshim_device_properties p;
  CHECK_OK(trtshim_device_get_properties(0, &p));
  std::printf("cuda_test: device 0: %s, cc %d.%d, %llu bytes\n", p.name, p.cc_major, p.cc_minor,
              static_cast<unsigned long long>(p.total_memory));
  CHECK(p.cc_major > 0 && p.total_memory > 0);
  uint64_t freeBytes = 0, total = 0;
  CHECK_OK(trtshim_device_memory_info(0, &freeBytes, &total));
  CHECK(total > 0 && freeBytes <= total);
  uint32_t util = 0;
  trtshim_status us = trtshim_device_utilization(0, &util);
  CHECK(us == TRTSHIM_OK || us == TRTSHIM_UNSUPPORTED);
  uint64_t usage = 0, limit = 0, energy = 0;
  trtshim_status ps = trtshim_device_power(0, &usage, &limit, &energy);
  CHECK(ps == TRTSHIM_OK || ps == TRTSHIM_UNSUPPORTED);
  if (ps == TRTSHIM_OK) {
    std::printf("cuda_test: device 0: %llu mW of %llu mW, %llu mJ since the driver loaded\n",
                static_cast<unsigned long long>(usage), static_cast<unsigned long long>(limit),
                static_cast<unsigned long long>(energy));
    CHECK(limit > 0 && usage > 0);
  } else {
    std::printf("cuda_test: no power reading: %s\n", trtshim_last_error());
  }

  const size_t size = 1 << 20;
  trtshim_stream* s = nullptr;
  CHECK_OK(trtshim_stream_create(0, &s));
  void *h = nullptr, *back = nullptr, *d = nullptr, *d2 = nullptr;
  CHECK_OK(trtshim_malloc_host(size, &h));
  CHECK_OK(trtshim_malloc_host(size, &back));
  CHECK_OK(trtshim_malloc_device(0, size, &d));
  CHECK_OK(trtshim_malloc_device(0, size, &d2));
  for (size_t i = 0; i < size; i++) static_cast<uint8_t*>(h)[i] = static_cast<uint8_t>(i * 7);
  trtshim_event *e0 = nullptr, *e1 = nullptr;
  CHECK_OK(trtshim_event_create(0, &e0));
  CHECK_OK(trtshim_event_create(0, &e1));
  CHECK_OK(trtshim_event_record(e0, s));
  CHECK_OK(trtshim_memcpy_h2d_async(d, h, size, s));
  CHECK_OK(trtshim_memcpy_d2d_async(d2, d, size, s));
  CHECK_OK(trtshim_memcpy_d2h_async(back, d2, size, s));
  CHECK_OK(trtshim_event_record(e1, s));
  CHECK_OK(trtshim_stream_synchronize(s, nullptr, 0));
  float ms = -1;
  CHECK_OK(trtshim_event_elapsed_ms(e0, e1, &ms));
  CHECK(ms >= 0);
  CHECK(std::memcmp(h, back, size) == 0);
  uint8_t handle[TRTSHIM_IPC_HANDLE_SIZE];
  CHECK_OK(trtshim_ipc_get_handle(d, handle));
  trtshim_engine* e = nullptr;
  const char junk[] = "not a plan";
  trtshim_status ds = trtshim_engine_deserialize(0, junk, sizeof junk, &e, nullptr, 0);
  CHECK(ds != TRTSHIM_OK && e == nullptr);
  std::printf("cuda_test: deserializing junk: %s\n", trtshim_last_error());
  CHECK_OK(trtshim_event_destroy(e0));
  CHECK_OK(trtshim_event_destroy(e1));
  CHECK_OK(trtshim_free_device(d));
  CHECK_OK(trtshim_free_device(d2));
  CHECK_OK(trtshim_free_host(h));
  CHECK_OK(trtshim_free_host(back));
  CHECK_OK(trtshim_stream_destroy(s));
  if (g_failures) {
    std::fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("cuda_test: all checks passed\n");
  return 0;
}
