/*
 * libtorchshim: a C ABI over libtorch's TorchScript runtime for dinfer's PyTorch backend (bound with
 * Deno.dlopen in ffi/torchshim.ts).
 *
 * Conventions: every function that can fail returns 0 on success and -1 on failure, writing a NUL-terminated
 * reason into `err` (at most `err_len` bytes); nothing throws across this boundary. Handles are opaque and
 * owned by the caller, who frees them with the matching *_free function. Tensor datatypes are the codes below.
 */
#ifndef TORCHSHIM_H
#define TORCHSHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TORCHSHIM_ABI_VERSION 1
#define TORCHSHIM_MAX_DIMS 8

/* Datatype codes. */
enum {
  TORCHSHIM_BOOL = 0,
  TORCHSHIM_UINT8 = 1,
  TORCHSHIM_INT8 = 2,
  TORCHSHIM_INT16 = 3,
  TORCHSHIM_INT32 = 4,
  TORCHSHIM_INT64 = 5,
  TORCHSHIM_FP16 = 6,
  TORCHSHIM_FP32 = 7,
  TORCHSHIM_FP64 = 8
};

typedef struct torchshim_module torchshim_module;
typedef struct torchshim_result torchshim_result;

/* The ABI version of the library (TORCHSHIM_ABI_VERSION). */
uint32_t torchshim_abi_version(void);

/*
 * Process-wide TorchScript settings; -1 leaves a setting as it is. jit_executor: the profiling executor;
 * jit_profiling: profiling mode; texpr_fuser: the tensor expression fuser; inter_threads: torch's inter-op
 * pool (sized once per process; later values are ignored).
 */
int32_t torchshim_configure(int32_t jit_executor, int32_t jit_profiling, int32_t texpr_fuser, int32_t inter_threads,
                            char* err, size_t err_len);

/*
 * Loads a TorchScript file onto `device` ("cpu", "cuda:<n>", or "" for the devices the file names). The
 * settings that torch keeps per thread are the module's and are applied on the thread of each forward call:
 * `optimized` (the graph executor's optimizations, -1 for torch's default) and `intra_threads` (the intra-op
 * thread count, 0 for torch's default).
 */
int32_t torchshim_load(const char* path, const char* device, int32_t optimized, int32_t intra_threads,
                       torchshim_module** out, char* err, size_t err_len);

/*
 * Describes forward's arguments (without self) as JSON into `buf`:
 * [{"name":"x","kind":"tensor"|"dict"|"other","type":"Tensor"}, ...].
 */
int32_t torchshim_signature(const torchshim_module* module, char* buf, size_t buf_len, char* err, size_t err_len);

/*
 * Runs forward on `count` CPU tensors: datatype codes, ranks, shapes (TORCHSHIM_MAX_DIMS per tensor) and data
 * addresses (not copied; valid during the call). With `dict_input`, forward takes one Dict[str, Tensor] keyed
 * by `names` (count NUL-terminated strings one after another); otherwise the tensors are forward's arguments in
 * order. `inference_mode` 1 runs under InferenceMode, 0 under NoGradMode. The result holds the outputs (a
 * tensor, or each element of a returned tuple) on the CPU.
 */
int32_t torchshim_forward(torchshim_module* module, int32_t count, const int32_t* dtypes, const int32_t* ranks,
                          const int64_t* shapes, const uint64_t* data, const char* names, int32_t dict_input,
                          int32_t inference_mode, torchshim_result** out, char* err, size_t err_len);

/* The number of outputs in a result. */
int32_t torchshim_result_count(const torchshim_result* result);

/* An output's datatype code (-1 for one the ABI has no code for), rank, shape and size in bytes. */
int32_t torchshim_result_describe(const torchshim_result* result, int32_t index, int32_t* dtype, int32_t* rank,
                                  int64_t* shape, uint64_t* nbytes, char* err, size_t err_len);

/* Copies an output's bytes into `dst` (`nbytes`, as torchshim_result_describe gives them). */
int32_t torchshim_result_copy(const torchshim_result* result, int32_t index, void* dst, uint64_t nbytes, char* err,
                              size_t err_len);

void torchshim_result_free(torchshim_result* result);
void torchshim_module_free(torchshim_module* module);

#ifdef __cplusplus
}
#endif

#endif
