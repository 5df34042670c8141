/*
 * acl_op.h: part of CANN's header set that npu-sim does not implement (operator
 * and model execution). It is shipped empty so that programs which include
 * acl/acl.h, as CANN's samples do, compile unchanged against npu-rs's headers.
 */
#ifndef NPU_RS_ACL_ACL_OP_H
#define NPU_RS_ACL_ACL_OP_H
#endif /* NPU_RS_ACL_ACL_OP_H */
