/* Shared by the C test programs: stop with the simulator's message when an ACL call fails. */
#ifndef NPUSIM_TEST_CHECK_H
#define NPUSIM_TEST_CHECK_H

#include <stdio.h>

#include "acl/acl.h"

#define CHECK(call)                                                                   \
    do {                                                                              \
        aclError err_ = (call);                                                       \
        if (err_ != ACL_SUCCESS) {                                                    \
            printf("%s failed with %d: %s\n", #call, err_, aclGetRecentErrMsg());     \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

#endif /* NPUSIM_TEST_CHECK_H */
