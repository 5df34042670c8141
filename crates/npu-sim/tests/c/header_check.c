/*
 * Compiled with -Wall -Wextra -Werror -pedantic: npu-sim's headers must be warning-free, and
 * a program using CANN's names must compile against them unchanged.
 */
#include <stdio.h>

#include "acl/acl.h"
#include "npusim/control.h"

int main(void)
{
    aclrtRunMode mode = ACL_DEVICE;
    uint32_t count = 0;
    if (aclrtGetRunMode(&mode) != ACL_SUCCESS || aclrtGetDeviceCount(&count) != ACL_SUCCESS) {
        return 1;
    }
    /* Error handling as in CANN's 1_error_handling example: the error is reported once. */
    aclError first = aclrtGetRunMode(NULL);
    aclError peek = aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL);
    aclError last = aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    const char *message = aclGetRecentErrMsg();
    aclError again = aclrtGetLastError(ACL_RT_THREAD_LEVEL);
    const char *none = aclGetRecentErrMsg();
    printf("soc %s, mode %d, devices %u\n", aclrtGetSocName(), (int)mode, count);
    printf("error %d, peek %d, last %d, message %s, then %d, %s\n", first, peek, last,
           message != NULL ? "set" : "NULL", again, none != NULL ? "set" : "NULL");
    /* Names acl_rt.h declares that no function takes: they must still be there to use. */
    enum aclrtMemPgType page = HUGE1G_PAGE_TYPE;
    enum aclrtMemType memory = P2P_DDR_TYPE;
    struct MemAttrMapping mapping = {HUGE_PAGE_TYPE, HBM_TYPE, false, ACL_MEM_HUGE};
    printf("page type %d, memory type %d, mapping %u %u %d %d, %u addresses per device\n",
           (int)page, (int)memory, mapping.pgType, mapping.memType, (int)mapping.isHostAlloc,
           (int)mapping.memAttr, ACL_RT_MAX_RECORD_PA_NUM_PER_DEV);
    return 0;
}
