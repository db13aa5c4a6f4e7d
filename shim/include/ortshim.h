/*
 * ortshim: a small C ABI over ONNX Runtime's C API, for Deno.dlopen. dinfer runs ONNX models on the server's
 * thread through it: a run is a handful of direct calls (feed each input, fetch each output, run, copy each
 * output out), with no JavaScript objects made or read by native code.
 *
 * ONNX Runtime itself is not linked: ortshim_init loads the library that onnxruntime-node ships (the same file,
 * so the same process-wide environment) and binds the C API's function table.
 *
 * Rules that hold for every function:
 *  - A function that returns int32_t returns 0 on success and -1 on failure; the message is then the
 *    session's last error (ortshim_error), or the library's for ortshim_init.
 *  - Nothing throws across the boundary. A NULL session fails (-1; nothing for the functions without result).
 *  - A session is used by one thread at a time. Sessions on different threads are independent.
 *  - Strings passed in are borrowed for the duration of the call only.
 *  - Input data is borrowed from the caller from ortshim_feed until ortshim_clear: it must stay where it is
 *    and unchanged until then. Data of 64 bytes or less is copied at once (a JavaScript engine may keep such
 *    small arrays in its moving heap).
 *  - Element types are ONNX's numbers (1 float, 2 uint8, 3 int8, 4 uint16, 5 int16, 6 int32, 7 int64, 8 string,
 *    9 bool, 10 float16, 11 double, 12 uint32, 13 uint64, 16 bfloat16).
 *  - String tensors cross as their elements end to end, each a 4-byte little-endian length and its bytes (the
 *    layout of Triton's BYTES). ONNX Runtime keeps strings as C strings: an input element ends at its first
 *    NUL byte.
 */
#ifndef ORTSHIM_H
#define ORTSHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ORTSHIM_API __attribute__((visibility("default")))

/** The ABI version: bumped on any incompatible change of this header. */
#define ORTSHIM_ABI_VERSION 1
/** The most dims of a tensor. */
#define ORTSHIM_MAX_DIMS 16

typedef struct ortshim_session ortshim_session;

/** Session options set with ortshim_option_int. */
enum ortshim_option {
  ORTSHIM_INTRA_OP_THREADS = 1,  /* value: threads (0: ONNX Runtime's default) */
  ORTSHIM_INTER_OP_THREADS = 2,  /* value: threads (0: ONNX Runtime's default) */
  ORTSHIM_EXECUTION_MODE = 3,    /* value: 0 sequential, 1 parallel */
  ORTSHIM_CPU_MEM_ARENA = 4,     /* value: 0 off, 1 on */
  ORTSHIM_GRAPH_OPTIMIZATION = 5, /* value: 0 disabled, 1 basic, 2 extended, 99 all */
  ORTSHIM_LOG_SEVERITY = 6,      /* value: 0 verbose .. 4 fatal */
};

ORTSHIM_API int32_t ortshim_abi_version(void);

/**
 * Loads ONNX Runtime from `lib_path` and creates (or joins) the process's ONNX Runtime environment. Safe to call
 * more than once and from several threads; later calls return the first call's result.
 */
ORTSHIM_API int32_t ortshim_init(const char* lib_path);

/** Copies the last error (NUL-terminated, truncated to `len`) of `session`, or of ortshim_init when NULL. */
ORTSHIM_API void ortshim_error(const ortshim_session* session, char* buf, size_t len);

/** A new session with default options and no model; NULL when ortshim_init has not succeeded. */
ORTSHIM_API ortshim_session* ortshim_session_create(void);
ORTSHIM_API int32_t ortshim_option_int(ortshim_session* session, int32_t option, int32_t value);
/** A session configuration entry (ONNX Runtime's "session.*" keys). */
ORTSHIM_API int32_t ortshim_option_entry(ortshim_session* session, const char* key, const char* value);
/** Loads the model; the options are fixed from then on. */
ORTSHIM_API int32_t ortshim_session_load(ortshim_session* session, const char* model_path);
/** How many inputs (outputs: 0) or outputs (outputs: 1) the loaded model has; runs refer to them by index. */
ORTSHIM_API int32_t ortshim_session_count(ortshim_session* session, int32_t outputs);
/**
 * Describes input (outputs: 0) or output (outputs: 1) `index` of the loaded model: its name into `name` (`len`
 * bytes), and info[0] 1 for a tensor (0 otherwise), info[1] its element type, info[2] its dims count, then the
 * dims (-1 for a dynamic one).
 */
ORTSHIM_API int32_t ortshim_session_value(ortshim_session* session, int32_t outputs, int32_t index, char* name,
                                          size_t len, double* info);
ORTSHIM_API void ortshim_session_destroy(ortshim_session* session);

/**
 * Feeds input `input` (an index into the model's inputs) to the next run: `byte_len` bytes of `elem_type`
 * elements at `data`, shaped by the `ndims` dims in `dims`.
 */
ORTSHIM_API int32_t ortshim_feed(ortshim_session* session, int32_t input, int32_t elem_type, const uint8_t* data,
                                 double byte_len, const double* dims, int32_t ndims);
/** Asks the next run for output `output` (an index into the model's outputs). */
ORTSHIM_API int32_t ortshim_fetch(ortshim_session* session, int32_t output);
/** Runs the fed inputs for the fetched outputs. */
ORTSHIM_API int32_t ortshim_run(ortshim_session* session);
/**
 * Describes the run's k-th fetched output: info[0] its element type, info[1] its size in bytes, info[2] its
 * dims count, then the dims.
 */
ORTSHIM_API int32_t ortshim_output(ortshim_session* session, int32_t k, double* info);
/** Copies the run's k-th fetched output, whose size ortshim_output gave, into `dst`. */
ORTSHIM_API int32_t ortshim_output_copy(ortshim_session* session, int32_t k, uint8_t* dst, double byte_len);
/** Ends a run: lets go of the inputs (and their borrowed data) and of the outputs. */
ORTSHIM_API void ortshim_clear(ortshim_session* session);

#ifdef __cplusplus
}
#endif

#endif
