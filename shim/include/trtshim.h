/*
 * trtshim: a small C ABI over CUDA and TensorRT (or, in the MOCK build, the CPU), for Deno.dlopen.
 *
 * Rules that hold for every function:
 *  - Every function except trtshim_abi_version, trtshim_build_kind and trtshim_last_error returns a
 *    trtshim_status; TRTSHIM_OK (0) is success, anything else sets the calling thread's last error.
 *  - trtshim_last_error() is thread-local. Functions that a caller may run on another thread (Deno's
 *    `nonblocking` calls hop to a pool thread) also copy the message into a caller-owned `err` buffer of
 *    `err_len` bytes when `err` is not NULL (always NUL-terminated, truncated to fit).
 *  - Nothing throws across the boundary: the extern "C" layer catches everything.
 *  - Handles are opaque. Whoever creates a handle owns it and must destroy it once; destroying NULL is OK.
 *  - Strings passed in are borrowed for the duration of the call only. Strings returned are copied into
 *    caller-owned buffers, except trtshim_last_error and trtshim_build_kind (see there).
 *  - Dims are int64_t arrays of at most TRTSHIM_MAX_DIMS entries; -1 marks a dynamic dimension.
 */
#ifndef TRTSHIM_H
#define TRTSHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TRTSHIM_API __declspec(dllexport)
#else
#define TRTSHIM_API __attribute__((visibility("default")))
#endif

/**
 * The ABI version: bumped on any incompatible change of this header (a function changed or removed, a
 * struct layout, a constant). Adding a function is compatible and keeps it: a caller binds a function
 * marked "added to version N" as optional, since a library of the same version built before may lack it,
 * and treats its absence as UNSUPPORTED.
 */
#define TRTSHIM_ABI_VERSION 1u
/** The most dims a tensor shape has. */
#define TRTSHIM_MAX_DIMS 8
/** The size of an IPC memory handle (as cudaIpcMemHandle_t). */
#define TRTSHIM_IPC_HANDLE_SIZE 64

typedef int32_t trtshim_status;
enum {
  TRTSHIM_OK = 0,
  TRTSHIM_INVALID_ARGUMENT = 1, /* null pointer, bad value, malformed engine, unknown handle */
  TRTSHIM_NOT_FOUND = 2,        /* unknown tensor name, device index or profile */
  TRTSHIM_OUT_OF_RANGE = 3,     /* a shape outside the optimisation profile */
  TRTSHIM_OUT_OF_MEMORY = 4,
  TRTSHIM_UNSUPPORTED = 5, /* the build or the device lacks what was asked (no TensorRT, no GPU, ...) */
  TRTSHIM_RUNTIME_ERROR = 6, /* CUDA or TensorRT failed, or an execution failed */
  TRTSHIM_INTERNAL = 7
};

/** Tensor datatypes (the shim's own numbering, independent of TensorRT's). */
enum {
  TRTSHIM_DTYPE_INVALID = 0,
  TRTSHIM_DTYPE_FP32 = 1,
  TRTSHIM_DTYPE_FP16 = 2,
  TRTSHIM_DTYPE_BF16 = 3,
  TRTSHIM_DTYPE_INT8 = 4,
  TRTSHIM_DTYPE_UINT8 = 5,
  TRTSHIM_DTYPE_INT32 = 6,
  TRTSHIM_DTYPE_INT64 = 7,
  TRTSHIM_DTYPE_BOOL = 8,
  TRTSHIM_DTYPE_FP8 = 9
};

/** Tensor I/O modes. */
enum { TRTSHIM_IO_NONE = 0, TRTSHIM_IO_INPUT = 1, TRTSHIM_IO_OUTPUT = 2 };

/** Which shape of an optimisation profile. */
enum { TRTSHIM_PROFILE_MIN = 0, TRTSHIM_PROFILE_OPT = 1, TRTSHIM_PROFILE_MAX = 2 };

/**
 * Device properties, filled by trtshim_device_get_properties. Fixed layout (offsets in bytes):
 * name 0 (256), uuid 256 (16), total_memory 272, cc_major 280, cc_minor 284, multiprocessor_count 288,
 * pci_bus_id 292, size 296.
 */
typedef struct trtshim_device_properties {
  char name[256];             /* NUL-terminated */
  uint8_t uuid[16];           /* the device UUID bytes */
  uint64_t total_memory;      /* bytes */
  int32_t cc_major;           /* compute capability */
  int32_t cc_minor;
  int32_t multiprocessor_count;
  int32_t pci_bus_id;
} trtshim_device_properties;

typedef struct trtshim_stream trtshim_stream;
typedef struct trtshim_event trtshim_event;
typedef struct trtshim_engine trtshim_engine;
typedef struct trtshim_context trtshim_context;

/* ---------------------------------------------------------------------------------------------- meta */

/** The ABI version of the library (compare with TRTSHIM_ABI_VERSION). Never fails. */
TRTSHIM_API uint32_t trtshim_abi_version(void);
/** What the library was built over: "mock", "cuda" or "cuda+tensorrt". Static string, never freed. */
TRTSHIM_API const char* trtshim_build_kind(void);
/**
 * The message of the last failed call on this thread ("" if none). Owned by the library; valid until the
 * next call on this thread.
 */
TRTSHIM_API const char* trtshim_last_error(void);

/* -------------------------------------------------------------------------------------------- devices */

/** Writes the number of devices into *count. */
TRTSHIM_API trtshim_status trtshim_device_count(int32_t* count);
/** Fills the caller-owned *props for a device. */
TRTSHIM_API trtshim_status trtshim_device_get_properties(int32_t device, trtshim_device_properties* props);
/** Writes free and total device memory in bytes. */
TRTSHIM_API trtshim_status trtshim_device_memory_info(int32_t device, uint64_t* free_bytes,
                                                      uint64_t* total_bytes);
/**
 * Writes the device's utilisation in percent (NVML when present; UNSUPPORTED without NVML on real
 * devices; the mock reports the share of streams busy right now).
 */
TRTSHIM_API trtshim_status trtshim_device_utilization(int32_t device, uint32_t* percent);
/**
 * Writes the device's power reading into caller-owned outputs: *usage_mw, the power drawn now in
 * milliwatts; *limit_mw, the enforced power limit in milliwatts; *energy_mj, the energy consumed since the
 * driver was loaded in millijoules (it only grows, until the driver reloads). All three or none: UNSUPPORTED,
 * outputs untouched, unless the device and the build can report all three (real devices need NVML and a GPU
 * with these readings; the mock: see TRTSHIM_MOCK_POWER_MW in shim/README.md).
 * Added to version 1: a library built before lacks the symbol.
 */
TRTSHIM_API trtshim_status trtshim_device_power(int32_t device, uint64_t* usage_mw, uint64_t* limit_mw,
                                                uint64_t* energy_mj);

/* -------------------------------------------------------------------------------------------- streams */

/** Creates a stream on a device; the caller owns *out and destroys it with trtshim_stream_destroy. */
TRTSHIM_API trtshim_status trtshim_stream_create(int32_t device, trtshim_stream** out);
/** Waits for the stream's work, then destroys it. NULL is accepted. */
TRTSHIM_API trtshim_status trtshim_stream_destroy(trtshim_stream* stream);
/**
 * Blocks until every operation queued on the stream has run. Reports (and clears) the first failure of an
 * asynchronous operation since the last synchronize. May take time: call it off the event loop.
 */
TRTSHIM_API trtshim_status trtshim_stream_synchronize(trtshim_stream* stream, char* err, size_t err_len);

/* --------------------------------------------------------------------------------------------- events */

/** Creates an event on a device; the caller owns *out (trtshim_event_destroy). */
TRTSHIM_API trtshim_status trtshim_event_create(int32_t device, trtshim_event** out);
/** Destroys an event. NULL is accepted. */
TRTSHIM_API trtshim_status trtshim_event_destroy(trtshim_event* event);
/** Records the event on a stream: it completes when the work queued before it has run. */
TRTSHIM_API trtshim_status trtshim_event_record(trtshim_event* event, trtshim_stream* stream);
/** Writes 1 into *done when the event has completed (or was never recorded), else 0. */
TRTSHIM_API trtshim_status trtshim_event_query(trtshim_event* event, int32_t* done);
/** Blocks until the event has completed. */
TRTSHIM_API trtshim_status trtshim_event_synchronize(trtshim_event* event, char* err, size_t err_len);
/** Writes the milliseconds between two completed events. */
TRTSHIM_API trtshim_status trtshim_event_elapsed_ms(trtshim_event* start, trtshim_event* end, float* ms);

/* --------------------------------------------------------------------------------------------- memory */

/** Allocates device memory; the caller owns *ptr and frees it with trtshim_free_device. */
TRTSHIM_API trtshim_status trtshim_malloc_device(int32_t device, uint64_t size, void** ptr);
/** Frees device memory from trtshim_malloc_device. NULL is accepted. */
TRTSHIM_API trtshim_status trtshim_free_device(void* ptr);
/** Allocates pinned host memory; the caller owns *ptr and frees it with trtshim_free_host. */
TRTSHIM_API trtshim_status trtshim_malloc_host(uint64_t size, void** ptr);
/** Frees pinned host memory from trtshim_malloc_host. NULL is accepted. */
TRTSHIM_API trtshim_status trtshim_free_host(void* ptr);
/**
 * Queues a host-to-device copy on a stream. Both buffers stay owned by the caller and must stay valid
 * (and the host buffer unchanged) until the stream has run the copy.
 */
TRTSHIM_API trtshim_status trtshim_memcpy_h2d_async(void* dst_device, const void* src_host, uint64_t size,
                                                    trtshim_stream* stream);
/** Queues a device-to-host copy on a stream (ownership as for trtshim_memcpy_h2d_async). */
TRTSHIM_API trtshim_status trtshim_memcpy_d2h_async(void* dst_host, const void* src_device, uint64_t size,
                                                    trtshim_stream* stream);
/** Queues a device-to-device copy on a stream (ownership as for trtshim_memcpy_h2d_async). */
TRTSHIM_API trtshim_status trtshim_memcpy_d2d_async(void* dst_device, const void* src_device, uint64_t size,
                                                    trtshim_stream* stream);

/* ------------------------------------------------------------------------------------------------ IPC */

/**
 * Exports an IPC handle for the allocation that starts at dev_ptr into the caller's
 * handle[TRTSHIM_IPC_HANDLE_SIZE]. The allocation stays owned by the caller.
 */
TRTSHIM_API trtshim_status trtshim_ipc_get_handle(void* dev_ptr, uint8_t* handle);
/**
 * Opens an IPC handle (from another process) on a device; writes the mapped device pointer into *ptr. The
 * caller owns the mapping and closes it with trtshim_ipc_close (not trtshim_free_device).
 */
TRTSHIM_API trtshim_status trtshim_ipc_open(int32_t device, const uint8_t* handle, void** ptr);
/** Closes a mapping from trtshim_ipc_open. */
TRTSHIM_API trtshim_status trtshim_ipc_close(void* ptr);

/* --------------------------------------------------------------------------------------------- engine */

/**
 * Deserializes a plan (the bytes of a `.plan` file, or of a mock engine file in the MOCK build) for a
 * device. The bytes are borrowed for the call; the caller owns *out (trtshim_engine_destroy). May take
 * time: call it off the event loop.
 */
TRTSHIM_API trtshim_status trtshim_engine_deserialize(int32_t device, const void* data, uint64_t size,
                                                      trtshim_engine** out, char* err, size_t err_len);
/** Destroys an engine; its contexts must be destroyed first. NULL is accepted. */
TRTSHIM_API trtshim_status trtshim_engine_destroy(trtshim_engine* engine);
/** Writes the number of I/O tensors. */
TRTSHIM_API trtshim_status trtshim_engine_io_count(trtshim_engine* engine, int32_t* count);
/** Copies the name of I/O tensor `index` into the caller's buffer (NUL-terminated; fails if too small). */
TRTSHIM_API trtshim_status trtshim_engine_io_name(trtshim_engine* engine, int32_t index, char* name,
                                                  size_t name_len);
/**
 * Describes an I/O tensor: mode (TRTSHIM_IO_*), datatype (TRTSHIM_DTYPE_*), rank and dims (-1 dynamic)
 * into caller-owned outputs; dims has room for TRTSHIM_MAX_DIMS entries.
 */
TRTSHIM_API trtshim_status trtshim_engine_io_desc(trtshim_engine* engine, const char* name, int32_t* mode,
                                                  int32_t* dtype, int32_t* nb_dims, int64_t* dims);
/** Writes the number of optimisation profiles. */
TRTSHIM_API trtshim_status trtshim_engine_profile_count(trtshim_engine* engine, int32_t* count);
/** Writes the min, opt or max (TRTSHIM_PROFILE_*) shape of an input in a profile. */
TRTSHIM_API trtshim_status trtshim_engine_profile_shape(trtshim_engine* engine, int32_t profile,
                                                        const char* input, int32_t which, int32_t* nb_dims,
                                                        int64_t* dims);

/* ------------------------------------------------------------------------------------ execution context */

/**
 * Creates an execution context of an engine with an optimisation profile, bound to a stream (the stream it
 * enqueues on). The engine and the stream must outlive the context; the caller owns *out
 * (trtshim_context_destroy).
 */
TRTSHIM_API trtshim_status trtshim_context_create(trtshim_engine* engine, int32_t profile,
                                                  trtshim_stream* stream, trtshim_context** out);
/** Destroys a context (after synchronizing its stream). NULL is accepted. */
TRTSHIM_API trtshim_status trtshim_context_destroy(trtshim_context* context);
/** Sets the shape of an input for the next enqueue; fails with OUT_OF_RANGE outside the profile. */
TRTSHIM_API trtshim_status trtshim_context_set_input_shape(trtshim_context* context, const char* name,
                                                           int32_t nb_dims, const int64_t* dims);
/**
 * Sets the device address of an I/O tensor for the next enqueue. The memory stays owned by the caller and
 * must stay valid until the stream has run the enqueue.
 */
TRTSHIM_API trtshim_status trtshim_context_set_tensor_address(trtshim_context* context, const char* name,
                                                              void* ptr);
/**
 * Writes the shape of an I/O tensor as the current input shapes make it (outputs: after every input shape
 * is set; -1 remains where the shape depends on the data).
 */
TRTSHIM_API trtshim_status trtshim_context_tensor_shape(trtshim_context* context, const char* name,
                                                        int32_t* nb_dims, int64_t* dims);
/** Queues an execution on the context's stream (asynchronous: synchronize the stream for the results). */
TRTSHIM_API trtshim_status trtshim_context_enqueue(trtshim_context* context, char* err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* TRTSHIM_H */
