/* An init callback calling AscendCL back from inside aclInit: the dump functions, which need
 * AscendCL initialised, work there; aclInit and the finalisations are refused, since the
 * initialisation has not finished. Each call comes back; alarm() ends the program should one
 * of them hang (they waited for the lock aclInit holds while it runs its callbacks). */
#define _POSIX_C_SOURCE 200809L

#include <unistd.h>

#include "check.h"

static aclError on_init(const char *config, size_t len, void *data) {
    (void)config;
    (void)len;
    (void)data;
    uint64_t left = 99;
    aclError begin = aclmdlInitDump();
    aclError end = aclmdlFinalizeDump();
    aclError init = aclInit(NULL);
    aclError finalize = aclFinalize();
    aclError reference = aclFinalizeReference(&left);
    printf("inside aclInit: dump %d/%d, aclInit %d, aclFinalize %d, aclFinalizeReference %d (%llu)\n",
           begin, end, init, finalize, reference, (unsigned long long)left);
    return ACL_SUCCESS;
}

int main(void) {
    alarm(20);
    CHECK(aclInitCallbackRegister(ACL_REG_TYPE_OTHER, on_init, NULL));
    CHECK(aclInit(NULL));
    CHECK(aclInitCallbackUnRegister(ACL_REG_TYPE_OTHER, on_init));
    /* One reference: the refused aclInit inside was not counted. */
    uint64_t left = 99;
    CHECK(aclFinalizeReference(&left));
    printf("references left: %llu\n", (unsigned long long)left);
    printf("init callback calls ok\n");
    return 0;
}
