/*
 * acl_platform.h: queries of the AI processor's hardware description, as CANN
 * declares them (a header of its own, which acl.h does not include).
 * Prototypes and values are CANN's; the comments are ours and state the
 * behaviour npu-sim reproduces.
 */
#ifndef NPU_RS_ACL_PLATFORM_H
#define NPU_RS_ACL_PLATFORM_H

#include <stdint.h>
#include "acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What aclplatformGetDeviceInfo reports: counts, sizes in bytes and frequencies in MHz as
 * decimal text, the SoC and AI core versions as names, the NPU architecture as an
 * aclplatformNpuArch number and the memory type as an aclplatformLocalMemType number. */
typedef enum aclplatformDevInfo {
    ACL_PLATFORM_AICORE_CNT = 0,
    ACL_PLATFORM_AICORE_UB_SIZE = 1,
    ACL_PLATFORM_CUBE_CORE_CNT = 2,
    ACL_PLATFORM_VECTOR_CORE_CNT = 3,
    ACL_PLATFORM_L2_SIZE = 4,
    ACL_PLATFORM_MEMORY_SIZE = 5,
    ACL_PLATFORM_CUBE_FREQ = 6,
    ACL_PLATFORM_VEC_FREQ = 7,
    ACL_PLATFORM_BT_SIZE = 8,
    ACL_PLATFORM_L0_A_SIZE = 9,
    ACL_PLATFORM_L0_B_SIZE = 10,
    ACL_PLATFORM_L0_C_SIZE = 11,
    ACL_PLATFORM_L1_SIZE = 12,
    ACL_PLATFORM_SOC_VERSION = 13,
    ACL_PLATFORM_AIC_VERSION = 14,
    ACL_PLATFORM_NPU_ARCH = 15,
    ACL_PLATFORM_MEMORY_TYPE = 16,
} aclplatformDevInfo;

typedef enum aclplatformCoreType {
    ACL_PLATFORM_CORE_TYPE_AI_CORE = 0,
    ACL_PLATFORM_CORE_TYPE_VECTOR_CORE = 1,
} aclplatformCoreType;

/* Writes one item of the simulated AI processor's description, NUL-terminated, into
 * value[0..maxLen). NULL value → 100000; an item outside aclplatformDevInfo → 100000; a
 * text (with its NUL) longer than maxLen → 100000, nothing written. */
aclError aclplatformGetDeviceInfo(aclplatformDevInfo infoType, char *value, uint32_t maxLen);

/* Writes what the core type's instruction set says of one instruction. The simulator keeps no
 * instruction table (its kernels are host code): after the checks of its arguments (NULL
 * instruction or value, a core type outside aclplatformCoreType → 100000) every instruction
 * is one it does not know → 100000. */
aclError aclplatformGetInstructionInfo(aclplatformCoreType type, const char *instruction, char *value,
    uint32_t maxLen);

/* NPU architecture versions (an Atlas A2 is DAV_2201). */
typedef enum aclplatformNpuArch {
    DAV_1001 = 1001,
    DAV_2002 = 2002,
    DAV_2102 = 2102,
    DAV_2201 = 2201,
    DAV_3002 = 3002,
    DAV_3003 = 3003,
    DAV_3004 = 3004,
    DAV_3102 = 3102,
    DAV_3113 = 3113,
    DAV_3505 = 3505,
    DAV_3510 = 3510,
    DAV_5102 = 5102,
    DAV_5162 = 5162,
    DAV_RESV = 0xFFFF
} aclplatformNpuArch;

/* Memories of the processor; ACL_PLATFORM_MEMORY_TYPE reports the device memory's (HBM on an
 * Atlas A2). */
typedef enum aclplatformLocalMemType {
    L0_A = 0,
    L0_B = 1,
    L0_C = 2,
    L1 = 3,
    L2 = 4,
    UB = 5,
    HBM = 6
} aclplatformLocalMemType;

#ifdef __cplusplus
}
#endif

#endif /* NPU_RS_ACL_PLATFORM_H */
