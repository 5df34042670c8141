/*
 * Graph-engine error codes. npu-sim implements no graph engine; this file
 * exists because acl/acl_base.h includes it on CANN, so programs that include
 * it keep compiling against npu-rs's header set.
 */
#ifndef NPU_RS_ACL_GE_ERROR_CODES_H
#define NPU_RS_ACL_GE_ERROR_CODES_H
#endif /* NPU_RS_ACL_GE_ERROR_CODES_H */
