/*
 * acl_rt_memory_soma.h: stream-ordered memory allocation (memory pools), as
 * CANN declares it. Prototypes and values are CANN's; the comments are ours
 * and state the behaviour npu-sim reproduces.
 */
#ifndef NPU_RS_ACL_RT_MEMORY_SOMA_H
#define NPU_RS_ACL_RT_MEMORY_SOMA_H

#include <stddef.h>
#include "acl_base.h"
#include "acl_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void *aclrtMemPool;

/* Pool attributes: the three reuse switches (uint32_t, 0 or 1; all on by default), the release
 * threshold (uint64_t bytes of idle memory kept at a stream synchronisation, default 0), and
 * the usage counters (uint64_t; the CURRENT ones read-only, the HIGH ones reset by setting 0). */
typedef enum aclrtMemPoolAttr {
    ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES = 0x1,
    ACL_RT_MEM_POOL_REUSE_ALLOW_OPPORTUNISTIC = 0x2,
    ACL_RT_MEM_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 0x3,
    ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD = 0x4,
    ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_CURRENT = 0x5,
    ACL_RT_MEM_POOL_ATTR_RESERVED_MEM_HIGH = 0x6,
    ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT = 0x7,
    ACL_RT_MEM_POOL_ATTR_USED_MEM_HIGH = 0x8
} aclrtMemPoolAttr;

/* allocType PINNED, handleType NONE, location a device, maxSize in bytes (0: the device's
 * capacity), reserved all zero. */
typedef struct {
    aclrtMemAllocationType allocType;
    aclrtMemHandleType handleType;
    aclrtMemLocation location;
    size_t maxSize;
    unsigned char reserved[32];
} aclrtMemPoolProps;

ACL_FUNC_VISIBILITY aclError aclrtMemPoolCreate(aclrtMemPool *memPool, const aclrtMemPoolProps *poolProps);
/* Synchronises the pool's device, then releases all of the pool's memory. */
ACL_FUNC_VISIBILITY aclError aclrtMemPoolDestroy(const aclrtMemPool memPool);
ACL_FUNC_VISIBILITY aclError aclrtMemPoolSetAttr(aclrtMemPool memPool, aclrtMemPoolAttr attr, void *value);
ACL_FUNC_VISIBILITY aclError aclrtMemPoolGetAttr(aclrtMemPool memPool, aclrtMemPoolAttr attr, void *value);
/* Device memory for use on stream, from the pool (reusing memory freed earlier in stream order). */
ACL_FUNC_VISIBILITY aclError aclrtMemPoolMallocAsync(void **ptr, size_t size, aclrtMemPool memPool,
                                                     aclrtStream stream);
/* Returns pool memory to its pool once stream reaches this point. */
ACL_FUNC_VISIBILITY aclError aclrtMemPoolFreeAsync(void *ptr, aclrtStream stream);
/* Releases idle memory whose frees have executed until the pool holds at most minBytesToKeep. */
ACL_FUNC_VISIBILITY aclError aclrtMemPoolTrimTo(aclrtMemPool memPool, size_t minBytesToKeep);

#ifdef __cplusplus
}
#endif

#endif /* NPU_RS_ACL_RT_MEMORY_SOMA_H */
