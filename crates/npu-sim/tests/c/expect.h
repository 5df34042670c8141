/* Shared by the C test programs that count checks instead of stopping at the first failure:
 * each check that fails prints a line, and the program ends by printing how many ran. */
#ifndef NPUSIM_TEST_EXPECT_H
#define NPUSIM_TEST_EXPECT_H

#include <stdio.h>

#include "acl/acl.h"

static int g_checked;
static int g_wrong;

/* A call returned `want`; otherwise the simulator's message says why not. */
static inline void expect(const char *call, aclError got, aclError want)
{
    ++g_checked;
    if (got != want) {
        ++g_wrong;
        const char *message = aclGetRecentErrMsg();
        printf("%s returned %d, expected %d: %s\n", call, (int)got, (int)want,
               message != NULL ? message : "");
    }
}

/* For a refusal whose code the reference does not name: any failure. */
static inline void fails(const char *call, aclError got)
{
    ++g_checked;
    if (got == ACL_SUCCESS) {
        ++g_wrong;
        printf("%s succeeded, expected a failure\n", call);
    } else {
        (void)aclGetRecentErrMsg();
    }
}

static inline void holds(const char *what, int ok)
{
    ++g_checked;
    if (!ok) {
        ++g_wrong;
        printf("%s does not hold\n", what);
    }
}

/* The last line: how many `what` were checked and how many were wrong. */
static inline void checks_done(const char *what)
{
    printf("%d %s checked, %d wrong\n", g_checked, what, g_wrong);
}

#define EXPECT(call, want) expect(#call, (call), (want))
#define FAILS(call) fails(#call, (call))
#define HOLDS(condition) holds(#condition, (condition))

#endif /* NPUSIM_TEST_EXPECT_H */
