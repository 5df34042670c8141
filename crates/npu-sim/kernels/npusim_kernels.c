/*
 * The kernels npu-sim ships as a shared object (built by build.rs into OUT_DIR and exposed as
 * npu_sim::kernel::LIBRARY_PATH). The same kernels exist as in-process Rust kernels; tests check
 * both paths compute the same results. Argument layouts are in npusim/kernel.h; each kernel
 * declares the size of its layout, so the simulator refuses launches with fewer bytes and the
 * kernels read whole structs. They still refuse a NULL buffer, for callers other than the
 * simulator.
 */
#include <stddef.h>

#include "npusim/kernel.h"

NPUSIM_KERNEL_ARGS_SIZE(vector_add_f32, sizeof(npusimVectorAddArgs));
NPUSIM_KERNEL_ARGS_SIZE(scale_f32, sizeof(npusimScaleArgs));
NPUSIM_KERNEL_ARGS_SIZE(reduce_sum_f32, sizeof(npusimReduceSumArgs));
NPUSIM_KERNEL_PARAMS(vector_add_f32, sizeof(const float *), sizeof(const float *), sizeof(float *),
                     sizeof(uint64_t));
NPUSIM_KERNEL_PARAMS(scale_f32, sizeof(float *), sizeof(uint64_t), sizeof(float), sizeof(uint32_t));
NPUSIM_KERNEL_PARAMS(reduce_sum_f32, sizeof(const float *), sizeof(float *), sizeof(uint64_t));

NPUSIM_KERNEL int32_t vector_add_f32(uint32_t blockIdx, uint32_t blockNum, void *args)
{
    const npusimVectorAddArgs *p = (const npusimVectorAddArgs *)args;
    uint64_t begin, end;
    if (p == NULL) {
        return 1;
    }
    npusimBlockRange(blockIdx, blockNum, p->n, &begin, &end);
    for (uint64_t i = begin; i < end; ++i) {
        p->c[i] = p->a[i] + p->b[i];
    }
    return 0;
}

NPUSIM_KERNEL int32_t scale_f32(uint32_t blockIdx, uint32_t blockNum, void *args)
{
    const npusimScaleArgs *p = (const npusimScaleArgs *)args;
    uint64_t begin, end;
    if (p == NULL) {
        return 1;
    }
    npusimBlockRange(blockIdx, blockNum, p->n, &begin, &end);
    for (uint64_t i = begin; i < end; ++i) {
        p->x[i] *= p->alpha;
    }
    return 0;
}

NPUSIM_KERNEL int32_t reduce_sum_f32(uint32_t blockIdx, uint32_t blockNum, void *args)
{
    const npusimReduceSumArgs *p = (const npusimReduceSumArgs *)args;
    uint64_t begin, end;
    float sum = 0.0f;
    if (p == NULL) {
        return 1;
    }
    npusimBlockRange(blockIdx, blockNum, p->n, &begin, &end);
    for (uint64_t i = begin; i < end; ++i) {
        sum += p->x[i];
    }
    p->partials[blockIdx] = sum;
    return 0;
}
