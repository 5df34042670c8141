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
    /* The values aclrtGetDeviceInfo's connection and form-factor attributes are named by. */
    printf("connect types %d %d %d, form factors %d %d %d %d\n", ACL_HOST_DEVICE_CONNECT_TYPE_PCIE,
           ACL_HOST_DEVICE_CONNECT_TYPE_HCCS, ACL_HOST_DEVICE_CONNECT_TYPE_UB,
           ACL_DEVICE_FORM_FACTOR_POD, ACL_DEVICE_FORM_FACTOR_A_K, ACL_DEVICE_FORM_FACTOR_A_X,
           ACL_DEVICE_FORM_FACTOR_PCIE_CARD);
    return aclFinalize() == ACL_SUCCESS ? 0 : 1;
}
