/*
 * acl_base.h: gathers the base headers, as CANN's does. Everything it provides is
 * declared in acl_base_rt.h (types, macros, ACL-layer error codes), acl_base_mdl.h
 * and the two error-code headers.
 */
#ifndef NPU_RS_ACL_BASE_H
#define NPU_RS_ACL_BASE_H

#include "acl_base_rt.h"
#include "acl_base_mdl.h"
#include "error_codes/rt_error_codes.h"
#include "error_codes/ge_error_codes.h"

#endif /* NPU_RS_ACL_BASE_H */
