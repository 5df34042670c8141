/*
 * acl.h: the entry header of the AscendCL subset implemented by npu-sim.
 * Programs written against CANN's acl/acl.h that use only this subset compile
 * against it unchanged. Written for npu-rs from the documented CANN facts.
 */
#ifndef NPU_RS_ACL_H
#define NPU_RS_ACL_H

#include "acl_rt.h"
#include "acl_op.h"
#include "acl_mdl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Initialises AscendCL. Process-wide and reference-counted: a further call
 * while initialised counts and returns ACL_ERROR_REPEAT_INITIALIZE.
 */
ACL_FUNC_VISIBILITY aclError aclInit(const char *configPath);
/* Tears AscendCL down; a second call without aclInit returns ACL_ERROR_REPEAT_FINALIZE. */
ACL_FUNC_VISIBILITY aclError aclFinalize(void);
/* Drops one aclInit reference; tears down when it reaches zero. */
ACL_FUNC_VISIBILITY aclError aclFinalizeReference(uint64_t *refCount);

ACL_FUNC_VISIBILITY aclError aclsysGetVersionStr(char *pkgName, char *versionStr);
ACL_FUNC_VISIBILITY aclError aclsysGetVersionNum(char *pkgName, int32_t *versionNum);

#ifdef __cplusplus
}
#endif

#endif /* NPU_RS_ACL_H */
