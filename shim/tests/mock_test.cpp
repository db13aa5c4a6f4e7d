// Unit tests of the MOCK build through the C ABI (and the ABI rules: statuses, last error, NULL handling).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "trtshim.h"

namespace {

int g_failures = 0;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      g_failures++;                                                          \
    }                                                                        \
  } while (0)

#define CHECK_OK(call)                                                                          \
  do {                                                                                          \
    trtshim_status s_ = (call);                                                                 \
    if (s_ != TRTSHIM_OK) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #call, s_, trtshim_last_error()); \
      g_failures++;                                                                             \
    }                                                                                           \
  } while (0)

void checkError(trtshim_status got, trtshim_status want, const std::string& message, int line) {
  if (got != want || message != trtshim_last_error()) {
    std::fprintf(stderr, "line %d: got status %d '%s', want %d '%s'\n", line, got, trtshim_last_error(), want,
                 message.c_str());
    g_failures++;
  }
}
#define CHECK_ERROR(call, status, message) checkError((call), (status), (message), __LINE__)

const char* kAddSub = R"(trtshim-mock-engine 1
# the "simple" model: two dynamic-batch inputs, their sum and difference
input INPUT0 INT32 -1,4
input INPUT1 INT32 -1,4
output OUTPUT0 INT32 -1,4
output OUTPUT1 INT32 -1,4
op add INPUT0 INPUT1 OUTPUT0
op sub INPUT0 INPUT1 OUTPUT1
profile 0 INPUT0 1,4 2,4 8,4
profile 0 INPUT1 1,4 2,4 8,4
)";

const char* kMatmul = R"(trtshim-mock-engine 1
input A FP32 -1,-1,3
input B FP32 3,2
output C FP32 -1,-1,2
op matmul A B C
profile 0 A 1,1,3 2,2,3 4,5,3
)";

trtshim_engine* load(const char* text) {
  trtshim_engine* e = nullptr;
  CHECK_OK(trtshim_engine_deserialize(0, text, std::strlen(text), &e, nullptr, 0));
  return e;
}

void testMeta() {
  CHECK(trtshim_abi_version() == TRTSHIM_ABI_VERSION);
  CHECK(std::string(trtshim_build_kind()) == "mock");
  CHECK(offsetof(trtshim_device_properties, total_memory) == 272);
  CHECK(offsetof(trtshim_device_properties, pci_bus_id) == 292);
  CHECK(sizeof(trtshim_device_properties) == 296);
}

void testDevices() {
  int32_t n = -1;
  CHECK_OK(trtshim_device_count(&n));
  CHECK(n == 1);
  trtshim_device_properties p;
  CHECK_OK(trtshim_device_get_properties(0, &p));
  CHECK(std::string(p.name) == "dinfer mock device");
  CHECK(p.cc_major == 0 && p.cc_minor == 0);
  setenv("TRTSHIM_MOCK_COMPUTE_CAPABILITY", "8.6", 1);
  CHECK_OK(trtshim_device_get_properties(0, &p));
  CHECK(p.cc_major == 8 && p.cc_minor == 6);
  unsetenv("TRTSHIM_MOCK_COMPUTE_CAPABILITY");
  CHECK_ERROR(trtshim_device_get_properties(1, &p), TRTSHIM_NOT_FOUND, "Device 1 does not exist (1 devices)");
  CHECK_ERROR(trtshim_device_count(nullptr), TRTSHIM_INVALID_ARGUMENT, "Argument 'count' is NULL");
  uint64_t freeBytes = 0, total = 0;
  CHECK_OK(trtshim_device_memory_info(0, &freeBytes, &total));
  void* d = nullptr;
  CHECK_OK(trtshim_malloc_device(0, 1000, &d));
  uint64_t free2 = 0;
  CHECK_OK(trtshim_device_memory_info(0, &free2, &total));
  CHECK(freeBytes - free2 == 1000);
  CHECK_OK(trtshim_free_device(d));
  CHECK_ERROR(trtshim_free_device(&n), TRTSHIM_INVALID_ARGUMENT,
              "Pointer was not allocated by trtshim_malloc_device");
  uint32_t util = 99;
  CHECK_OK(trtshim_device_utilization(0, &util));
  CHECK(util == 0);
}

void testPower() {
  const char* vars[] = {"TRTSHIM_MOCK_POWER_MW", "TRTSHIM_MOCK_POWER_LIMIT_MW", "TRTSHIM_MOCK_ENERGY_MJ"};
  uint64_t usage = 7, limit = 7, energy = 7;
  const std::string none =
      "has no power reading: TRTSHIM_MOCK_POWER_MW, TRTSHIM_MOCK_POWER_LIMIT_MW and TRTSHIM_MOCK_ENERGY_MJ must "
      "each give it a value";
  // Unset: UNSUPPORTED, outputs untouched.
  CHECK_ERROR(trtshim_device_power(0, &usage, &limit, &energy), TRTSHIM_UNSUPPORTED, "Device 0 " + none);
  CHECK(usage == 7 && limit == 7 && energy == 7);
  // One value for every device.
  setenv(vars[0], "123456", 1);
  setenv(vars[1], "300000", 1);
  CHECK_ERROR(trtshim_device_power(0, &usage, &limit, &energy), TRTSHIM_UNSUPPORTED, "Device 0 " + none);
  setenv(vars[2], "5000000000", 1);
  CHECK_OK(trtshim_device_power(0, &usage, &limit, &energy));
  CHECK(usage == 123456 && limit == 300000 && energy == 5000000000ull);
  // A list gives each device its own; a device without an entry (empty or past the end) has none.
  setenv("TRTSHIM_MOCK_DEVICE_COUNT", "3", 1);
  setenv(vars[0], "100,200,", 1);
  setenv(vars[1], "1000,2000", 1);
  setenv(vars[2], "7", 1);
  CHECK_OK(trtshim_device_power(1, &usage, &limit, &energy));
  CHECK(usage == 200 && limit == 2000 && energy == 7);
  CHECK_ERROR(trtshim_device_power(2, &usage, &limit, &energy), TRTSHIM_UNSUPPORTED, "Device 2 " + none);
  setenv(vars[0], "100,,300", 1);
  CHECK_ERROR(trtshim_device_power(1, &usage, &limit, &energy), TRTSHIM_UNSUPPORTED, "Device 1 " + none);
  CHECK_ERROR(trtshim_device_power(3, &usage, &limit, &energy), TRTSHIM_NOT_FOUND,
              "Device 3 does not exist (3 devices)");
  setenv(vars[0], "12.5", 1);
  CHECK_ERROR(trtshim_device_power(0, &usage, &limit, &energy), TRTSHIM_INVALID_ARGUMENT,
              "Cannot read TRTSHIM_MOCK_POWER_MW='12.5': '12.5' is not a non-negative integer");
  setenv(vars[0], "-1", 1);
  CHECK_ERROR(trtshim_device_power(0, &usage, &limit, &energy), TRTSHIM_INVALID_ARGUMENT,
              "Cannot read TRTSHIM_MOCK_POWER_MW='-1': '-1' is not a non-negative integer");
  CHECK_ERROR(trtshim_device_power(0, nullptr, &limit, &energy), TRTSHIM_INVALID_ARGUMENT,
              "Argument 'usage_mw' is NULL");
  unsetenv("TRTSHIM_MOCK_DEVICE_COUNT");
  for (const char* v : vars) unsetenv(v);
}

void testCopiesAndEvents() {
  trtshim_stream* s = nullptr;
  CHECK_OK(trtshim_stream_create(0, &s));
  void *h = nullptr, *d = nullptr, *back = nullptr;
  CHECK_OK(trtshim_malloc_host(64, &h));
  CHECK_OK(trtshim_malloc_host(64, &back));
  CHECK_OK(trtshim_malloc_device(0, 64, &d));
  for (int i = 0; i < 64; i++) static_cast<uint8_t*>(h)[i] = static_cast<uint8_t>(i);
  trtshim_event *e0 = nullptr, *e1 = nullptr;
  CHECK_OK(trtshim_event_create(0, &e0));
  CHECK_OK(trtshim_event_create(0, &e1));
  CHECK_OK(trtshim_event_record(e0, s));
  CHECK_OK(trtshim_memcpy_h2d_async(d, h, 64, s));
  CHECK_OK(trtshim_memcpy_d2h_async(back, d, 64, s));
  CHECK_OK(trtshim_event_record(e1, s));
  CHECK_OK(trtshim_event_synchronize(e1, nullptr, 0));
  int32_t done = 0;
  CHECK_OK(trtshim_event_query(e1, &done));
  CHECK(done == 1);
  float ms = -1;
  CHECK_OK(trtshim_event_elapsed_ms(e0, e1, &ms));
  CHECK(ms >= 0);
  CHECK_OK(trtshim_stream_synchronize(s, nullptr, 0));
  CHECK(std::memcmp(h, back, 64) == 0);
  uint8_t handle[TRTSHIM_IPC_HANDLE_SIZE];
  CHECK_OK(trtshim_ipc_get_handle(d, handle));
  void* opened = nullptr;
  CHECK_OK(trtshim_ipc_open(0, handle, &opened));
  CHECK(opened == d);
  CHECK_OK(trtshim_ipc_close(opened));
  CHECK_OK(trtshim_event_destroy(e0));
  CHECK_OK(trtshim_event_destroy(e1));
  CHECK_OK(trtshim_free_device(d));
  CHECK_OK(trtshim_free_host(h));
  CHECK_OK(trtshim_free_host(back));
  CHECK_OK(trtshim_stream_destroy(s));
  CHECK_OK(trtshim_stream_destroy(nullptr));
}

void testEngineDescription() {
  trtshim_engine* e = load(kAddSub);
  int32_t n = 0;
  CHECK_OK(trtshim_engine_io_count(e, &n));
  CHECK(n == 4);
  char name[64];
  CHECK_OK(trtshim_engine_io_name(e, 2, name, sizeof name));
  CHECK(std::string(name) == "OUTPUT0");
  int32_t mode, dtype, nb;
  int64_t dims[TRTSHIM_MAX_DIMS];
  CHECK_OK(trtshim_engine_io_desc(e, "OUTPUT1", &mode, &dtype, &nb, dims));
  CHECK(mode == TRTSHIM_IO_OUTPUT && dtype == TRTSHIM_DTYPE_INT32 && nb == 2 && dims[0] == -1 && dims[1] == 4);
  CHECK_OK(trtshim_engine_profile_count(e, &n));
  CHECK(n == 1);
  CHECK_OK(trtshim_engine_profile_shape(e, 0, "INPUT0", TRTSHIM_PROFILE_MAX, &nb, dims));
  CHECK(nb == 2 && dims[0] == 8 && dims[1] == 4);
  CHECK_ERROR(trtshim_engine_io_desc(e, "NOPE", &mode, &dtype, &nb, dims), TRTSHIM_NOT_FOUND,
              "Unknown tensor 'NOPE'");
  CHECK_ERROR(trtshim_engine_io_name(e, 9, name, sizeof name), TRTSHIM_NOT_FOUND,
              "I/O tensor index 9 is outside 0..3");
  CHECK_OK(trtshim_engine_destroy(e));
}

void testParseErrors() {
  trtshim_engine* e = nullptr;
  char err[256] = "";
  const char* bad = "trtshim-mock-engine 1\ninput A FP99 4\n";
  CHECK_ERROR(trtshim_engine_deserialize(0, bad, std::strlen(bad), &e, err, sizeof err), TRTSHIM_INVALID_ARGUMENT,
              "Cannot deserialize mock engine: line 2: unknown datatype 'FP99'");
  CHECK(std::string(err) == "Cannot deserialize mock engine: line 2: unknown datatype 'FP99'");
  CHECK(e == nullptr);
  const char* plan = "\x7f" "ELF binary";
  CHECK_ERROR(trtshim_engine_deserialize(0, plan, std::strlen(plan), &e, nullptr, 0), TRTSHIM_INVALID_ARGUMENT,
              "Cannot deserialize mock engine: line 1: expected the header 'trtshim-mock-engine 1'");
  const char* noProfile = "trtshim-mock-engine 1\ninput A FP32 -1\noutput B FP32 -1\nop identity A B\n";
  CHECK_ERROR(trtshim_engine_deserialize(0, noProfile, std::strlen(noProfile), &e, nullptr, 0),
              TRTSHIM_INVALID_ARGUMENT,
              "Cannot deserialize mock engine: profile 0 gives no shapes for dynamic input 'A'");
  const char* cc = "trtshim-mock-engine 1\ncompute_capability 9.0\ninput A FP32 2\noutput B FP32 2\nop identity A B\n";
  CHECK_ERROR(trtshim_engine_deserialize(0, cc, std::strlen(cc), &e, nullptr, 0), TRTSHIM_UNSUPPORTED,
              "Cannot deserialize mock engine: it was built for compute capability 9.0 but device 0 has 0.0");
  CHECK_ERROR(trtshim_engine_deserialize(0, nullptr, 0, &e, nullptr, 0), TRTSHIM_INVALID_ARGUMENT,
              "Argument 'data' is NULL");
}

void testAddSub() {
  trtshim_engine* e = load(kAddSub);
  trtshim_stream* s = nullptr;
  CHECK_OK(trtshim_stream_create(0, &s));
  trtshim_context* c = nullptr;
  CHECK_OK(trtshim_context_create(e, 0, s, &c));
  int64_t shape[2] = {2, 4};
  CHECK_OK(trtshim_context_set_input_shape(c, "INPUT0", 2, shape));
  CHECK_OK(trtshim_context_set_input_shape(c, "INPUT1", 2, shape));
  int64_t big[2] = {9, 4};
  CHECK_ERROR(trtshim_context_set_input_shape(c, "INPUT0", 2, big), TRTSHIM_OUT_OF_RANGE,
              "Input 'INPUT0' shape [9,4] is outside optimisation profile 0: min [1,4], max [8,4]");
  int32_t nb;
  int64_t dims[TRTSHIM_MAX_DIMS];
  CHECK_OK(trtshim_context_tensor_shape(c, "OUTPUT0", &nb, dims));
  CHECK(nb == 2 && dims[0] == 2 && dims[1] == 4);
  std::vector<int32_t> a(8), b(8), sum(8), diff(8);
  for (int i = 0; i < 8; i++) {
    a[i] = i;
    b[i] = 1;
  }
  CHECK_ERROR(trtshim_context_enqueue(c, nullptr, 0), TRTSHIM_INVALID_ARGUMENT,
              "Cannot enqueue: tensor 'INPUT0' has no address");
  CHECK_OK(trtshim_context_set_tensor_address(c, "INPUT0", a.data()));
  CHECK_OK(trtshim_context_set_tensor_address(c, "INPUT1", b.data()));
  CHECK_OK(trtshim_context_set_tensor_address(c, "OUTPUT0", sum.data()));
  CHECK_OK(trtshim_context_set_tensor_address(c, "OUTPUT1", diff.data()));
  CHECK_OK(trtshim_context_enqueue(c, nullptr, 0));
  CHECK_OK(trtshim_stream_synchronize(s, nullptr, 0));
  for (int i = 0; i < 8; i++) CHECK(sum[i] == i + 1 && diff[i] == i - 1);
  CHECK_OK(trtshim_context_destroy(c));
  CHECK_OK(trtshim_stream_destroy(s));
  CHECK_OK(trtshim_engine_destroy(e));
}

void testMatmulAndAsyncError() {
  trtshim_engine* e = load(kMatmul);
  trtshim_stream* s = nullptr;
  CHECK_OK(trtshim_stream_create(0, &s));
  trtshim_context* c = nullptr;
  CHECK_OK(trtshim_context_create(e, 0, s, &c));
  int64_t shape[3] = {2, 2, 3};
  CHECK_OK(trtshim_context_set_input_shape(c, "A", 3, shape));
  int32_t nb;
  int64_t dims[TRTSHIM_MAX_DIMS];
  CHECK_OK(trtshim_context_tensor_shape(c, "C", &nb, dims));
  CHECK(nb == 3 && dims[0] == 2 && dims[1] == 2 && dims[2] == 2);
  std::vector<float> a = {1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 1, 0};
  std::vector<float> b = {1, 0, 0, 1, 1, 1};
  std::vector<float> out(8, -1);
  CHECK_OK(trtshim_context_set_tensor_address(c, "A", a.data()));
  CHECK_OK(trtshim_context_set_tensor_address(c, "B", b.data()));
  CHECK_OK(trtshim_context_set_tensor_address(c, "C", out.data()));
  CHECK_OK(trtshim_context_enqueue(c, nullptr, 0));
  CHECK_OK(trtshim_stream_synchronize(s, nullptr, 0));
  std::vector<float> want = {4, 5, 10, 11, 1, 0, 0, 1};
  CHECK(out == want);
  CHECK_ERROR(trtshim_context_create(e, 3, s, &c), TRTSHIM_NOT_FOUND,
              "Optimisation profile 3 does not exist (1 profiles)");
  CHECK(c == nullptr);
  CHECK_OK(trtshim_stream_destroy(s));
  CHECK_OK(trtshim_engine_destroy(e));
}

void testConcurrentStreams() {
  const char* slow = "trtshim-mock-engine 1\ndelay_ms 100\ninput A INT64 2\noutput B INT64 2\nop identity A B\n";
  trtshim_engine* e = load(slow);
  trtshim_stream *s0 = nullptr, *s1 = nullptr;
  CHECK_OK(trtshim_stream_create(0, &s0));
  CHECK_OK(trtshim_stream_create(0, &s1));
  trtshim_context *c0 = nullptr, *c1 = nullptr;
  CHECK_OK(trtshim_context_create(e, 0, s0, &c0));
  CHECK_OK(trtshim_context_create(e, 0, s1, &c1));
  int64_t in[2] = {7, 8}, o0[2] = {}, o1[2] = {};
  for (auto [c, o] : {std::pair{c0, o0}, std::pair{c1, o1}}) {
    CHECK_OK(trtshim_context_set_tensor_address(c, "A", in));
    CHECK_OK(trtshim_context_set_tensor_address(c, "B", o));
  }
  auto t0 = std::chrono::steady_clock::now();
  CHECK_OK(trtshim_context_enqueue(c0, nullptr, 0));
  CHECK_OK(trtshim_context_enqueue(c1, nullptr, 0));
  uint32_t util = 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK_OK(trtshim_device_utilization(0, &util));
  CHECK(util == 100);
  CHECK_OK(trtshim_stream_synchronize(s0, nullptr, 0));
  CHECK_OK(trtshim_stream_synchronize(s1, nullptr, 0));
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(ms < 190);  // both ran at once
  CHECK(o0[1] == 8 && o1[0] == 7);
  CHECK_OK(trtshim_context_destroy(c0));
  CHECK_OK(trtshim_context_destroy(c1));
  CHECK_OK(trtshim_stream_destroy(s0));
  CHECK_OK(trtshim_stream_destroy(s1));
  CHECK_OK(trtshim_engine_destroy(e));
}

}  // namespace

int main() {
  testMeta();
  testDevices();
  testPower();
  testCopiesAndEvents();
  testEngineDescription();
  testParseErrors();
  testAddSub();
  testMatmulAndAsyncError();
  testConcurrentStreams();
  if (g_failures) {
    std::fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("mock_test: all checks passed\n");
  return 0;
}
