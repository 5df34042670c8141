/* The C half of aclAppLog (see src/abi/app_log.rs for why there are two halves).
 *
 * libascendcl.so exports aclAppLog as a Rust trampoline that tail-jumps here with the caller's
 * registers and stack untouched, so this function receives the C-variadic call as made. It
 * formats the record, cuts it to CANN's limit and hands the text to the Rust sink. Nothing here
 * is exported: both functions are hidden, so the trampoline's jump is a direct one. */

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "acl/acl_base_rt.h"

/* A record is at most this many bytes, the terminating NUL included (CANN's limit). */
#define NPUSIM_APP_LOG_MAX 1024

/* What ends a record that did not fit. */
static const char truncated_mark[] = "...[truncated]";

_Static_assert(sizeof truncated_mark < NPUSIM_APP_LOG_MAX, "the mark fits a record");

/* The Rust sink (src/abi/app_log.rs): the tracing log and, if asked, stdout. Exported by the
 * library, but in no header. */
void npusimAppLogWrite(int32_t level, const char *func, const char *file, uint32_t line,
                       const char *message);

__attribute__((visibility("hidden"), format(printf, 5, 6))) void npusim_app_log(
    aclLogLevel logLevel, const char *func, const char *file, uint32_t line, const char *fmt, ...);

void npusim_app_log(aclLogLevel logLevel, const char *func, const char *file, uint32_t line,
                    const char *fmt, ...)
{
    /* The enum's range, read as the int the caller passed (an enum may be unsigned). */
    const int level = (int)logLevel;
    if (level < (int)ACL_DEBUG || level > (int)ACL_ERROR || fmt == NULL) {
        return;
    }
    char message[NPUSIM_APP_LOG_MAX];
    va_list args;
    va_start(args, fmt);
    const int length = vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    if (length < 0) {
        /* A conversion the C library cannot perform: there is no record to write. */
        return;
    }
    if ((size_t)length >= sizeof message) {
        /* vsnprintf kept the first 1023 bytes; the last ones give way to the mark (its NUL is
         * the record's), so the record is exactly 1023 bytes ending in the mark. */
        memcpy(message + sizeof message - sizeof truncated_mark, truncated_mark,
               sizeof truncated_mark);
    }
    npusimAppLogWrite(level, func, file, line, message);
}

/* Writes one line to the C library's stdout and flushes it, so that it appears in order with
 * what the program printed before it, whatever stdout's buffering. Called by the Rust sink. */
__attribute__((visibility("hidden"))) void npusim_app_log_print(const char *text);

void npusim_app_log_print(const char *text)
{
    fputs(text, stdout);
    fflush(stdout);
}
