/*
 * npusim/kernel.h: the kernel ABI of npu-sim, the software Ascend device of npu-rs.
 *
 * On the simulator a kernel is a host function. A launch with numBlocks blocks calls it once
 * per block (in parallel where the host has cores), with the block's index, the block count and
 * a pointer to the packed arguments (the launch's args buffer; NULL when the launch passes no
 * arguments). Returning 0 means success; any other value is a trap: the launch fails with
 * ACL_ERROR_RT_AICORE_EXCEPTION (507015), or ACL_ERROR_RT_VECTOR_CORE_EXCEPTION (507035) when
 * launched on the AIV engine.
 *
 * The signature carries no argument size, so a kernel declares how many bytes of arguments it
 * reads with NPUSIM_KERNEL_ARGS_SIZE (below): the simulator refuses a launch passing fewer with
 * ACL_ERROR_RT_PARAM_INVALID (107000), and the kernel never sees a NULL or short buffer.
 *
 * Build a kernel library as an ordinary shared object exporting such functions by name:
 *     cc -shared -fPIC -I<npu-sim>/include -o libmykernels.so mykernels.c
 * load it with aclrtBinaryLoadFromFile (or aclrtBinaryLoadFromData with the file's bytes) and
 * resolve kernels with aclrtBinaryGetFunction(bin, "name", &func).
 */
#ifndef NPUSIM_KERNEL_H
#define NPUSIM_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NPUSIM_KERNEL __attribute__((visibility("default")))

/* The signature every simulated kernel has. */
typedef int32_t (*npusimKernel)(uint32_t blockIdx, uint32_t blockNum, void *args);

/*
 * Declares that the kernel `kernel` of this library reads `size` bytes of arguments, e.g.
 *     NPUSIM_KERNEL_ARGS_SIZE(vector_add_f32, sizeof(npusimVectorAddArgs));
 * at file scope. It defines the exported constant npusimArgsSize_<kernel>, which
 * aclrtBinaryGetFunction reads. A kernel without it gets whatever its launches pass.
 */
#ifdef __cplusplus
#define NPUSIM_EXTERN_C extern "C"
#else
#define NPUSIM_EXTERN_C extern
#endif
#define NPUSIM_KERNEL_ARGS_SIZE(kernel, size)                                      \
    NPUSIM_EXTERN_C NPUSIM_KERNEL const uint64_t npusimArgsSize_##kernel;            \
    const uint64_t npusimArgsSize_##kernel = (size)

/*
 * Declares the kernel's parameter list, the sizes of its parameters in order (at most 128, none
 * 0), e.g.
 *     NPUSIM_KERNEL_PARAMS(scale_f32, sizeof(float *), sizeof(uint64_t), sizeof(float),
 *                          sizeof(uint32_t));
 * The parameters are laid out as the fields of a C struct (each at the next offset aligned to
 * its size rounded up to a power of two, at most 8), which is what aclrtFunctionGetParamCount,
 * aclrtFunctionGetParamInfo and aclrtLaunchKernelWithArgsArray use; a launch must pass at
 * least up to the end of the last one. It defines the exported zero-terminated array
 * npusimParams_<kernel>.
 */
#define NPUSIM_KERNEL_PARAMS(kernel, ...)                                          \
    NPUSIM_EXTERN_C NPUSIM_KERNEL const uint64_t npusimParams_##kernel[];            \
    const uint64_t npusimParams_##kernel[] = { __VA_ARGS__, 0 }

/*
 * Declares a variable of this library as a device global, e.g.
 *     NPUSIM_KERNEL float bias[64];
 *     NPUSIM_GLOBAL(bias);
 * at file scope (the variable must be exported: external linkage, default visibility). It
 * defines the exported constant npusimGlobalSize_<name> (the variable's size), which
 * aclrtBinaryGetGlobal reads. The variable is the global's device memory: the library's kernels
 * use it directly, and while a binary of the library is loaded copies and memsets reach its
 * address as device memory.
 */
#define NPUSIM_GLOBAL(name)                                                        \
    NPUSIM_EXTERN_C NPUSIM_KERNEL const uint64_t npusimGlobalSize_##name;            \
    const uint64_t npusimGlobalSize_##name = sizeof(name)

/* vector_add_f32: c[i] = a[i] + b[i] for i < n. */
typedef struct npusimVectorAddArgs {
    const float *a;
    const float *b;
    float *c;
    uint64_t n;
} npusimVectorAddArgs;

/* scale_f32: x[i] *= alpha for i < n, in place. */
typedef struct npusimScaleArgs {
    float *x;
    uint64_t n;
    float alpha;
    uint32_t reserved;
} npusimScaleArgs;

/*
 * reduce_sum_f32: partials[blockIdx] = sum of the block's share of x[0..n). A full sum is two
 * launches: B blocks over x into B partials, then 1 block over the B partials.
 */
typedef struct npusimReduceSumArgs {
    const float *x;
    float *partials;
    uint64_t n;
} npusimReduceSumArgs;

/* The share of n elements block blockIdx of blockNum handles: [*begin, *end). */
static inline void npusimBlockRange(uint32_t blockIdx, uint32_t blockNum, uint64_t n, uint64_t *begin,
                                    uint64_t *end)
{
    uint64_t chunk = blockNum == 0 ? n : (n + blockNum - 1) / blockNum;
    uint64_t first = (uint64_t)blockIdx * chunk;
    *begin = first < n ? first : n;
    *end = (n - *begin) < chunk ? n : *begin + chunk;
}

#ifdef __cplusplus
}
#endif

#endif /* NPUSIM_KERNEL_H */
