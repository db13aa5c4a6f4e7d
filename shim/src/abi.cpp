// The extern "C" layer: argument checks, handle wrapping and the catch-all that turns every C++ failure
// into a status code and the thread's last error. Nothing throws past this file.
#include <cstring>
#include <new>
#include <string>

#include "shim.hpp"

struct trtshim_stream {
  std::unique_ptr<trtshim::Stream> impl;
};
struct trtshim_event {
  std::unique_ptr<trtshim::Event> impl;
};
struct trtshim_engine {
  std::unique_ptr<trtshim::Engine> impl;
};
struct trtshim_context {
  std::unique_ptr<trtshim::Context> impl;
  trtshim_stream* stream;
};

namespace {

thread_local std::string t_last_error;

trtshim_status report(trtshim_status status, const std::string& message, char* err, size_t err_len) {
  try {
    t_last_error = message;
  } catch (...) {
    // Out of memory while storing the message: keep the status.
  }
  if (err && err_len > 0) {
    size_t n = message.size() < err_len - 1 ? message.size() : err_len - 1;
    std::memcpy(err, message.data(), n);
    err[n] = '\0';
  }
  return status;
}

template <class F>
trtshim_status guard(char* err, size_t err_len, F&& body) noexcept {
  try {
    body();
    return TRTSHIM_OK;
  } catch (const trtshim::Error& e) {
    return report(e.status(), e.what(), err, err_len);
  } catch (const std::bad_alloc&) {
    return report(TRTSHIM_OUT_OF_MEMORY, "Out of host memory", err, err_len);
  } catch (const std::exception& e) {
    return report(TRTSHIM_INTERNAL, std::string("Internal error: ") + e.what(), err, err_len);
  } catch (...) {
    return report(TRTSHIM_INTERNAL, "Internal error: unknown exception", err, err_len);
  }
}

template <class F>
trtshim_status guard(F&& body) noexcept {
  return guard(nullptr, 0, std::forward<F>(body));
}

void need(const void* p, const char* what) {
  if (!p) trtshim::fail(TRTSHIM_INVALID_ARGUMENT, std::string("Argument '") + what + "' is NULL");
}

trtshim::Shape toShape(int32_t nb_dims, const int64_t* dims) {
  if (nb_dims < 0 || nb_dims > TRTSHIM_MAX_DIMS) {
    trtshim::fail(TRTSHIM_INVALID_ARGUMENT, "Rank " + std::to_string(nb_dims) + " is outside 0.." +
                                                std::to_string(TRTSHIM_MAX_DIMS));
  }
  if (nb_dims > 0) need(dims, "dims");
  return trtshim::Shape(dims, dims + nb_dims);
}

void fromShape(const trtshim::Shape& shape, int32_t* nb_dims, int64_t* dims) {
  if (shape.size() > TRTSHIM_MAX_DIMS) trtshim::fail(TRTSHIM_UNSUPPORTED, "Shape has more than 8 dims");
  *nb_dims = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); i++) dims[i] = shape[i];
}

}  // namespace

extern "C" {

uint32_t trtshim_abi_version(void) { return TRTSHIM_ABI_VERSION; }

const char* trtshim_build_kind(void) {
  try {
    return trtshim::runtime().kind();
  } catch (...) {
    return "unknown";
  }
}

const char* trtshim_last_error(void) { return t_last_error.c_str(); }

trtshim_status trtshim_device_count(int32_t* count) {
  return guard([&] {
    need(count, "count");
    *count = trtshim::runtime().deviceCount();
  });
}

trtshim_status trtshim_device_get_properties(int32_t device, trtshim_device_properties* props) {
  return guard([&] {
    need(props, "props");
    auto& rt = trtshim::runtime();
    trtshim::checkDevice(rt, device);
    std::memset(props, 0, sizeof *props);
    rt.properties(device, *props);
  });
}

trtshim_status trtshim_device_memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
  return guard([&] {
    need(free_bytes, "free_bytes");
    need(total_bytes, "total_bytes");
    auto& rt = trtshim::runtime();
    trtshim::checkDevice(rt, device);
    rt.memoryInfo(device, *free_bytes, *total_bytes);
  });
}

trtshim_status trtshim_device_utilization(int32_t device, uint32_t* percent) {
  return guard([&] {
    need(percent, "percent");
    auto& rt = trtshim::runtime();
    trtshim::checkDevice(rt, device);
    *percent = rt.utilization(device);
  });
}

trtshim_status trtshim_device_power(int32_t device, uint64_t* usage_mw, uint64_t* limit_mw, uint64_t* energy_mj) {
  return guard([&] {
    need(usage_mw, "usage_mw");
    need(limit_mw, "limit_mw");
    need(energy_mj, "energy_mj");
    auto& rt = trtshim::runtime();
    trtshim::checkDevice(rt, device);
    trtshim::PowerReading r = rt.power(device);
    *usage_mw = r.usage_mw;
    *limit_mw = r.limit_mw;
    *energy_mj = r.energy_mj;
  });
}

trtshim_status trtshim_stream_create(int32_t device, trtshim_stream** out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    auto& rt = trtshim::runtime();
    trtshim::checkDevice(rt, device);
    auto s = std::make_unique<trtshim_stream>();
    s->impl = rt.createStream(device);
    *out = s.release();
  });
}

trtshim_status trtshim_stream_destroy(trtshim_stream* stream) {
  return guard([&] { delete stream; });
}

trtshim_status trtshim_stream_synchronize(trtshim_stream* stream, char* err, size_t err_len) {
  return guard(err, err_len, [&] {
    need(stream, "stream");
    stream->impl->synchronize();
  });
}

trtshim_status trtshim_event_create(int32_t device, trtshim_event** out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    auto& rt = trtshim::runtime();
    trtshim::checkDevice(rt, device);
    auto e = std::make_unique<trtshim_event>();
    e->impl = rt.createEvent(device);
    *out = e.release();
  });
}

trtshim_status trtshim_event_destroy(trtshim_event* event) {
  return guard([&] { delete event; });
}

trtshim_status trtshim_event_record(trtshim_event* event, trtshim_stream* stream) {
  return guard([&] {
    need(event, "event");
    need(stream, "stream");
    event->impl->record(*stream->impl);
  });
}

trtshim_status trtshim_event_query(trtshim_event* event, int32_t* done) {
  return guard([&] {
    need(event, "event");
    need(done, "done");
    *done = event->impl->query() ? 1 : 0;
  });
}

trtshim_status trtshim_event_synchronize(trtshim_event* event, char* err, size_t err_len) {
  return guard(err, err_len, [&] {
    need(event, "event");
    event->impl->synchronize();
  });
}

trtshim_status trtshim_event_elapsed_ms(trtshim_event* start, trtshim_event* end, float* ms) {
  return guard([&] {
    need(start, "start");
    need(end, "end");
    need(ms, "ms");
    *ms = end->impl->elapsedSince(*start->impl);
  });
}

trtshim_status trtshim_malloc_device(int32_t device, uint64_t size, void** ptr) {
  return guard([&] {
    need(ptr, "ptr");
    *ptr = nullptr;
    auto& rt = trtshim::runtime();
    trtshim::checkDevice(rt, device);
    *ptr = rt.mallocDevice(device, static_cast<size_t>(size));
  });
}

trtshim_status trtshim_free_device(void* ptr) {
  return guard([&] {
    if (ptr) trtshim::runtime().freeDevice(ptr);
  });
}

trtshim_status trtshim_malloc_host(uint64_t size, void** ptr) {
  return guard([&] {
    need(ptr, "ptr");
    *ptr = nullptr;
    *ptr = trtshim::runtime().mallocHost(static_cast<size_t>(size));
  });
}

trtshim_status trtshim_free_host(void* ptr) {
  return guard([&] {
    if (ptr) trtshim::runtime().freeHost(ptr);
  });
}

static trtshim_status copyAsync(void* dst, const void* src, uint64_t size, trtshim_stream* stream,
                                trtshim::CopyKind kind) {
  return guard([&] {
    need(stream, "stream");
    if (size == 0) return;
    need(dst, "dst");
    need(src, "src");
    stream->impl->copyAsync(dst, src, static_cast<size_t>(size), kind);
  });
}

trtshim_status trtshim_memcpy_h2d_async(void* dst_device, const void* src_host, uint64_t size,
                                        trtshim_stream* stream) {
  return copyAsync(dst_device, src_host, size, stream, trtshim::CopyKind::HostToDevice);
}

trtshim_status trtshim_memcpy_d2h_async(void* dst_host, const void* src_device, uint64_t size,
                                        trtshim_stream* stream) {
  return copyAsync(dst_host, src_device, size, stream, trtshim::CopyKind::DeviceToHost);
}

trtshim_status trtshim_memcpy_d2d_async(void* dst_device, const void* src_device, uint64_t size,
                                        trtshim_stream* stream) {
  return copyAsync(dst_device, src_device, size, stream, trtshim::CopyKind::DeviceToDevice);
}

trtshim_status trtshim_ipc_get_handle(void* dev_ptr, uint8_t* handle) {
  return guard([&] {
    need(dev_ptr, "dev_ptr");
    need(handle, "handle");
    trtshim::runtime().ipcGetHandle(dev_ptr, handle);
  });
}

trtshim_status trtshim_ipc_open(int32_t device, const uint8_t* handle, void** ptr) {
  return guard([&] {
    need(handle, "handle");
    need(ptr, "ptr");
    *ptr = nullptr;
    auto& rt = trtshim::runtime();
    trtshim::checkDevice(rt, device);
    *ptr = rt.ipcOpen(device, handle);
  });
}

trtshim_status trtshim_ipc_close(void* ptr) {
  return guard([&] {
    need(ptr, "ptr");
    trtshim::runtime().ipcClose(ptr);
  });
}

trtshim_status trtshim_engine_deserialize(int32_t device, const void* data, uint64_t size, trtshim_engine** out,
                                          char* err, size_t err_len) {
  return guard(err, err_len, [&] {
    need(out, "out");
    *out = nullptr;
    need(data, "data");
    auto& rt = trtshim::runtime();
    trtshim::checkDevice(rt, device);
    auto e = std::make_unique<trtshim_engine>();
    e->impl = rt.deserialize(device, data, static_cast<size_t>(size));
    *out = e.release();
  });
}

trtshim_status trtshim_engine_destroy(trtshim_engine* engine) {
  return guard([&] { delete engine; });
}

trtshim_status trtshim_engine_io_count(trtshim_engine* engine, int32_t* count) {
  return guard([&] {
    need(engine, "engine");
    need(count, "count");
    *count = engine->impl->ioCount();
  });
}

trtshim_status trtshim_engine_io_name(trtshim_engine* engine, int32_t index, char* name, size_t name_len) {
  return guard([&] {
    need(engine, "engine");
    need(name, "name");
    const auto& io = engine->impl->io(index);
    if (io.name.size() + 1 > name_len) {
      trtshim::fail(TRTSHIM_INVALID_ARGUMENT, "Name buffer of " + std::to_string(name_len) +
                                                  " bytes is too small for '" + io.name + "'");
    }
    std::memcpy(name, io.name.c_str(), io.name.size() + 1);
  });
}

trtshim_status trtshim_engine_io_desc(trtshim_engine* engine, const char* name, int32_t* mode, int32_t* dtype,
                                      int32_t* nb_dims, int64_t* dims) {
  return guard([&] {
    need(engine, "engine");
    need(name, "name");
    need(mode, "mode");
    need(dtype, "dtype");
    need(nb_dims, "nb_dims");
    need(dims, "dims");
    const auto& io = engine->impl->io(std::string(name));
    *mode = io.mode;
    *dtype = io.dtype;
    fromShape(io.dims, nb_dims, dims);
  });
}

trtshim_status trtshim_engine_profile_count(trtshim_engine* engine, int32_t* count) {
  return guard([&] {
    need(engine, "engine");
    need(count, "count");
    *count = engine->impl->profileCount();
  });
}

trtshim_status trtshim_engine_profile_shape(trtshim_engine* engine, int32_t profile, const char* input,
                                            int32_t which, int32_t* nb_dims, int64_t* dims) {
  return guard([&] {
    need(engine, "engine");
    need(input, "input");
    need(nb_dims, "nb_dims");
    need(dims, "dims");
    if (which < TRTSHIM_PROFILE_MIN || which > TRTSHIM_PROFILE_MAX) {
      trtshim::fail(TRTSHIM_INVALID_ARGUMENT, "Profile selector " + std::to_string(which) + " is not 0, 1 or 2");
    }
    fromShape(engine->impl->profileShape(profile, std::string(input), which), nb_dims, dims);
  });
}

trtshim_status trtshim_context_create(trtshim_engine* engine, int32_t profile, trtshim_stream* stream,
                                      trtshim_context** out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    need(engine, "engine");
    need(stream, "stream");
    auto c = std::make_unique<trtshim_context>();
    c->impl = engine->impl->createContext(profile, *stream->impl);
    c->stream = stream;
    *out = c.release();
  });
}

trtshim_status trtshim_context_destroy(trtshim_context* context) {
  return guard([&] {
    if (!context) return;
    std::unique_ptr<trtshim_context> owned(context);
    try {
      context->stream->impl->synchronize();
    } catch (const trtshim::Error&) {
      // A failed execution was already reported (or never will be); the context goes either way.
    }
  });
}

trtshim_status trtshim_context_set_input_shape(trtshim_context* context, const char* name, int32_t nb_dims,
                                               const int64_t* dims) {
  return guard([&] {
    need(context, "context");
    need(name, "name");
    context->impl->setInputShape(std::string(name), toShape(nb_dims, dims));
  });
}

trtshim_status trtshim_context_set_tensor_address(trtshim_context* context, const char* name, void* ptr) {
  return guard([&] {
    need(context, "context");
    need(name, "name");
    context->impl->setTensorAddress(std::string(name), ptr);
  });
}

trtshim_status trtshim_context_tensor_shape(trtshim_context* context, const char* name, int32_t* nb_dims,
                                            int64_t* dims) {
  return guard([&] {
    need(context, "context");
    need(name, "name");
    need(nb_dims, "nb_dims");
    need(dims, "dims");
    fromShape(context->impl->tensorShape(std::string(name)), nb_dims, dims);
  });
}

trtshim_status trtshim_context_enqueue(trtshim_context* context, char* err, size_t err_len) {
  return guard(err, err_len, [&] {
    need(context, "context");
    context->impl->enqueue();
  });
}

}  // extern "C"
