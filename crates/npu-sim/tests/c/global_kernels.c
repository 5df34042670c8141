/*
 * A kernel library with a device global, built as a shared object by tests/c_programs.rs: the
 * program sets the global with a copy, and the kernel reads it.
 */
#include <stdint.h>

#include "npusim/kernel.h"

/* What add_bias adds: element i gets bias[i % 4]. */
NPUSIM_KERNEL float bias[4];
NPUSIM_GLOBAL(bias);

typedef struct AddBiasArgs {
    float *x;
    uint64_t n;
} AddBiasArgs;

NPUSIM_KERNEL_ARGS_SIZE(add_bias, sizeof(AddBiasArgs));

NPUSIM_KERNEL int32_t add_bias(uint32_t blockIdx, uint32_t blockNum, void *args)
{
    const AddBiasArgs *a = (const AddBiasArgs *)args;
    for (uint64_t i = blockIdx; i < a->n; i += blockNum) {
        a->x[i] += bias[i % 4];
    }
    return 0;
}
