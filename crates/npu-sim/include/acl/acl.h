/*
 * acl.h: the entry header of the AscendCL subset implemented by npu-sim. Programs
 * written against CANN's acl/acl.h that use only this subset compile against it
 * unchanged. Like CANN's, it only gathers the area headers; every declaration lives
 * in the header CANN declares it in.
 */
#ifndef NPU_RS_ACL_H
#define NPU_RS_ACL_H

#include "acl_rt.h"
#include "acl_op.h"
#include "acl_mdl.h"

#endif /* NPU_RS_ACL_H */
