/* aclrtBinaryLoadFromFile with a path relative to the current directory loads the file there:
 * a kernel library by its bare name, and a file in the current directory that happens to share
 * its name with a system library is that file (not a shared object: 100003), not the system
 * library the dynamic loader's search path would give for a bare name. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "npusim/control.h"

int main(void) {
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));

    char dir[4096];
    snprintf(dir, sizeof dir, "%s", npusimKernelLibraryPath());
    char *slash = strrchr(dir, '/');
    if (slash == NULL) {
        printf("the kernel library path %s is not absolute\n", dir);
        return 1;
    }
    *slash = '\0';
    const char *name = slash + 1;
    if (chdir(dir) != 0) {
        printf("cannot enter %s\n", dir);
        return 1;
    }
    aclrtBinHandle bin = NULL;
    CHECK(aclrtBinaryLoadFromFile(name, NULL, &bin));
    aclrtFuncHandle func = NULL;
    CHECK(aclrtBinaryGetFunction(bin, "scale_f32", &func));
    printf("kernel library by its bare name: loaded\n");
    CHECK(aclrtBinaryUnLoad(bin));

    char scratch[] = "/tmp/npusim-relative-XXXXXX";
    if (mkdtemp(scratch) == NULL || chdir(scratch) != 0) {
        printf("cannot make a scratch directory\n");
        return 1;
    }
    FILE *file = fopen("libc.so.6", "w");
    if (file == NULL) {
        printf("cannot write a file in %s\n", scratch);
        return 1;
    }
    fputs("not a shared object\n", file);
    fclose(file);
    printf("a text file named libc.so.6: %d\n", aclrtBinaryLoadFromFile("libc.so.6", NULL, &bin));
    unlink("libc.so.6");
    if (chdir("/") == 0) {
        rmdir(scratch);
    }
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("relative load ok\n");
    return 0;
}
