/*
 * acl_base_rt.h: runtime handle types and callback typedefs of the AscendCL
 * subset implemented by npu-sim. Every handle is an opaque pointer, as on
 * CANN. Included by acl_base.h; do not include directly.
 */
#ifndef NPU_RS_ACL_BASE_RT_H
#define NPU_RS_ACL_BASE_RT_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
typedef void *aclrtBinHandle;
typedef void *aclrtFuncHandle;
typedef void *aclrtArgsHandle;
typedef void *aclrtParamHandle;

/* Host callback run by the thread subscribed with aclrtSubscribeReport. */
typedef void (*aclrtCallback)(void *userData);
/* Host function run by a runtime-owned thread (aclrtLaunchHostFunc). */
typedef void (*aclrtHostFunc)(void *args);

/* ---- custom allocators (simmem): opaque descriptors and the user's objects ---- */
typedef void *aclrtAllocatorDesc;
typedef void *aclrtAllocator;
typedef void *aclrtAllocatorBlock;
typedef void *aclrtAllocatorAddr;

#ifdef __cplusplus
}
#endif

#endif /* NPU_RS_ACL_BASE_RT_H */
