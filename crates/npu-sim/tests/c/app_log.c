/* Application log records through CANN's ACL_APP_LOG macro (aclAppLog): every level, with
 * integer, string and double arguments (more of each than the argument registers hold, so
 * both the vector registers and the stack carry some), records at and past the 1024-byte
 * limit, and the calls that write nothing. What reaches stdout depends on the environment
 * (ASCEND_SLOG_PRINT_TO_STDOUT, ASCEND_GLOBAL_LOG_LEVEL); tests/c_programs.rs checks it. */

#include <stdio.h>
#include <string.h>

#include "acl/acl.h"

int main(void)
{
    /* Printed before the first record: with stdout redirected, the program's own buffered
     * output must still come first. */
    printf("app log start\n");

    ACL_APP_LOG(ACL_DEBUG, "debug %d %s %.2f", 10, "ten", 0.5);
    ACL_APP_LOG(ACL_INFO, "info %d %s %.2f", 11, "eleven", 1.25);
    ACL_APP_LOG(ACL_WARNING, "warning %d %s %.2f", 12, "twelve", -2.75);
    ACL_APP_LOG(ACL_ERROR, "error %d %s %.2f", 13, "thirteen", 3.5);

    /* Ten doubles (eight travel in vector registers, two on the stack) between integers that
     * overflow the integer registers. */
    ACL_APP_LOG(ACL_INFO, "many %d %d %.1f %.1f %.1f %.1f %.1f %.1f %.1f %.1f %.1f %.1f %ld %s %u", 1,
                2, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, -1234567890123L, "end", 77u);

    /* The reference's example, and a record without arguments (the macro drops the comma). */
    uint32_t modelId = 1;
    ACL_APP_LOG(ACL_INFO, "load model success, modelId is %u", modelId);
    ACL_APP_LOG(ACL_ERROR, "no arguments");

    /* 1023 bytes fit exactly; 1024 and more are cut to 1023 ending in the mark. */
    static char text[2001];
    memset(text, 'y', 1023);
    text[1023] = '\0';
    ACL_APP_LOG(ACL_WARNING, "%s", text);
    memset(text, 'z', 1024);
    text[1024] = '\0';
    ACL_APP_LOG(ACL_WARNING, "%s", text);
    memset(text, 'x', 2000);
    text[2000] = '\0';
    ACL_APP_LOG(ACL_ERROR, "long %s", text);

    /* No function or file name: printed as empty. */
    aclAppLog(ACL_ERROR, NULL, NULL, 7, "anonymous %d", 7);

    /* Write nothing: a level outside aclLogLevel, a NULL format. */
    aclAppLog((aclLogLevel)7, __FUNCTION__, __FILE__, __LINE__, "level seven %d", 7);
    aclAppLog((aclLogLevel)-1, __FUNCTION__, __FILE__, __LINE__, "level minus one");
    aclAppLog(ACL_ERROR, __FUNCTION__, __FILE__, __LINE__, NULL);

    printf("app log ok\n");
    return 0;
}
