/*
 * acl_rt_allocator.h: the custom device-memory allocator API (aclrtAllocator*),
 * in its own header as on CANN, which includes it from acl_rt.h. It declares only
 * what npu-sim implements of that API.
 */
#ifndef NPU_RS_ACL_RT_ALLOCATOR_H
#define NPU_RS_ACL_RT_ALLOCATOR_H

#include "acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif /* NPU_RS_ACL_RT_ALLOCATOR_H */
