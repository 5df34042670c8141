/*
 * Device variables by symbol from C: the program links the kernel library of global_kernels.c
 * (so `bias` is a variable it can take the address of, as a program compiled together with its
 * kernels can on CANN), loads the same library as a binary, and reaches the variable through
 * aclrtGetSymbolAddress / aclrtGetSymbolSize / aclrtMemcpyToSymbol[Async] /
 * aclrtMemcpyFromSymbol[Async].
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "acl/acl.h"
#include "check.h"

extern float bias[4];
int32_t add_bias(uint32_t blockIdx, uint32_t blockNum, void *args);

int main(void)
{
    aclrtBinHandle bin = NULL;
    void *address = NULL, *pinned = NULL;
    size_t size = 0;
    float values[4] = { 5.0f, 6.0f, 7.0f, 8.0f }, back[4] = { 0 };

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    printf("before the binary is loaded: %d\n", aclrtGetSymbolSize(bias, &size));
    (void)aclGetRecentErrMsg();
    CHECK(aclrtBinaryLoadFromFile(getenv("NPUSIM_GLOBALS_SO"), NULL, &bin));
    CHECK(aclrtGetSymbolAddress(bias, &address));
    CHECK(aclrtGetSymbolSize(bias, &size));
    void *global = NULL;
    size_t global_size = 0;
    CHECK(aclrtBinaryGetGlobal(bin, "bias", &global, &global_size));
    printf("symbol: %zu bytes, the binary's global: %s\n", size, global == address ? "same" : "different");
    aclrtFuncHandle by_symbol = NULL, by_name = NULL;
    CHECK(aclrtGetFuncBySymbol((const void *)add_bias, &by_symbol));
    CHECK(aclrtBinaryGetFunction(bin, "add_bias", &by_name));
    printf("kernel by symbol: %s\n", by_symbol == by_name ? "the binary's function" : "another function");

    CHECK(aclrtMemcpyToSymbol(bias, values, sizeof values, 0, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK(aclrtMemcpyFromSymbol(back, sizeof back, bias, 2 * sizeof(float), 2 * sizeof(float),
                                ACL_MEMCPY_DEVICE_TO_HOST));
    printf("read at offset 8: %g %g; the variable holds %g\n", back[0], back[1], bias[3]);

    CHECK(aclrtMallocHost(&pinned, sizeof values));
    ((float *)pinned)[0] = 9.0f;
    CHECK(aclrtMemcpyToSymbolAsync(bias, pinned, sizeof(float), 0, ACL_MEMCPY_DEFAULT, NULL));
    CHECK(aclrtMemcpyFromSymbolAsync(back, sizeof back, bias, sizeof(float), 0, ACL_MEMCPY_DEFAULT, NULL));
    CHECK(aclrtSynchronizeStream(NULL));
    printf("async round trip: %g\n", back[0]);

    printf("past the end: %d\n", aclrtMemcpyToSymbol(bias, values, sizeof values, 4, ACL_MEMCPY_HOST_TO_DEVICE));
    printf("wrong kind: %d\n", aclrtMemcpyToSymbol(bias, values, 4, 0, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("not a device variable: %d\n", aclrtGetSymbolAddress(values, &address));
    (void)aclGetRecentErrMsg();

    CHECK(aclrtFreeHost(pinned));
    CHECK(aclrtBinaryUnLoad(bin));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("symbol flow ok\n");
    return 0;
}
