/*
 * acl_rt_memory_soma.h: the stream-ordered memory pools (aclrtMemPool*), in their
 * own header as on CANN. acl.h does not include it (nor does CANN's): programs that
 * use the pools include it themselves. It declares only what npu-sim implements.
 */
#ifndef NPU_RS_ACL_RT_MEMORY_SOMA_H
#define NPU_RS_ACL_RT_MEMORY_SOMA_H

#include <stddef.h>
#include "acl_base.h"
#include "acl_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif /* NPU_RS_ACL_RT_MEMORY_SOMA_H */
