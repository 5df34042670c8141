/*
 * Includes nothing but acl/acl_rt.h, as runtime-only programs written for CANN do: it brings
 * the base types, both error-code headers and the initialisation and version functions. Built
 * as C and as C++ by tests/c_programs.rs.
 */
#include "acl/acl_rt.h"

#include <stdio.h>

int main(void)
{
    int32_t version = 0;
    uint32_t count = 0;
    char pkg[] = "runtime";
    if (aclInit(NULL) != ACL_SUCCESS || aclrtGetDeviceCount(&count) != ACL_RT_SUCCESS ||
        aclsysGetVersionNum(pkg, &version) != ACL_SUCCESS) {
        printf("failed: %s\n", aclGetRecentErrMsg());
        return 1;
    }
    printf("devices %u, version known %d, ge code %u, rt code %d\n", count, version > 0,
           (unsigned)ACL_ERROR_GE_PARAM_INVALID, ACL_ERROR_RT_PARAM_INVALID);
    return aclFinalize() == ACL_SUCCESS ? 0 : 1;
}
