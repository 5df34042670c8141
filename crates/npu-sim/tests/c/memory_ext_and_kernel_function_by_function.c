/*
 * The API reference's CMO, IPC memory, custom allocator, stream memory operation and
 * stream-ordered pool chapters (11-06 to 11-10) and the kernel chapter's device rule walked
 * function by function for the edges the other programs leave out: NULL and out-of-range
 * arguments, destroyed handles, streams and memory of another device, a pool's size limit and
 * its three reuse rules as stream order shows them, the order a value write or a prefetch
 * keeps on its stream; IPC memory imported by a second process on the exporter's device and on
 * another one (where the reference allows only asynchronous device-to-device copies of an
 * explicit kind), written there and read back by the exporter; a function resolved on one
 * device launched on another's stream; which parameter an argument handle's update and
 * placeholder buffer may name, and the launches an unfinalized or another function's handle
 * is refused; a second dump session while one is open; snapshot steps naming another process.
 * Where the reference names no code only a failure is required. Prints a line for each
 * mismatch, then how many checks ran. Compiled by tests/c_programs.rs (also against CANN's own
 * headers), which compares the output.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child_process.h"
#include "acl/acl_rt_allocator.h"
#include "acl/acl_rt_memory_soma.h"
#include "expect.h"
#include "npusim/control.h"
#include "npusim/kernel.h"

enum { BYTES = 4096, KEY_LEN = 65, MIB = 1 << 20 };

/* Where the importer writes in the exported memory: the first 64 bytes from the exporter's
 * device, the next 64 from another device, then a 64-bit word with a value write. */
enum { SAME_AT = 0, OTHER_AT = 64, WORD_AT = 128, PIECE = 64 };
static const uint64_t WORD_VALUE = 77;

static void *const SENTINEL = (void *)(uintptr_t)0x5e5e;

/* A stream of device `device`, made with that device current; device 0 is current after. */
static aclrtStream stream_of(int32_t device)
{
    aclrtStream stream = NULL;
    EXPECT(aclrtSetDevice(device), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    return stream;
}

/* A stream created and destroyed: a stale handle. */
static aclrtStream destroyed_stream(void)
{
    aclrtStream stream = NULL;
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    return stream;
}

/* Whether the `n` bytes at device address `dev` (of the current device) are all `value`. */
static int device_bytes_are(const void *dev, size_t n, unsigned char value)
{
    unsigned char host[PIECE];
    if (n > sizeof host ||
        aclrtMemcpy(host, n, dev, n, ACL_MEMCPY_DEVICE_TO_HOST) != ACL_SUCCESS) {
        return 0;
    }
    for (size_t i = 0; i < n; ++i) {
        if (host[i] != value) {
            return 0;
        }
    }
    return 1;
}

/* ---- 11-06 cache operations ---- */

static void cache_operations(aclrtStream stream, uint32_t devices)
{
    size_t desc_size = 0;
    void *src = NULL, *desc = NULL, *pinned = NULL;
    EXPECT(aclrtCmoGetDescSize(&desc_size), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&src, BYTES, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&desc, desc_size, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMallocHost(&pinned, BYTES), ACL_SUCCESS);
    /* No memory to operate on; a type the enumeration lacks; a stream that is gone. */
    FAILS(aclrtCmoAsync(src, 0, ACL_RT_CMO_TYPE_PREFETCH, stream));
    FAILS(aclrtCmoAsync(src, BYTES, (aclrtCmoType)99, stream));
    FAILS(aclrtCmoAsync(src, BYTES, ACL_RT_CMO_TYPE_PREFETCH, destroyed_stream()));
    /* The range runs past its allocation. */
    FAILS(aclrtCmoAsync(src, 16 * BYTES, ACL_RT_CMO_TYPE_PREFETCH, stream));
    FAILS(aclrtCmoSetDesc(desc, src, 0));
    /* The descriptor lives in device memory. */
    FAILS(aclrtCmoSetDesc(pinned, src, BYTES));
    EXPECT(aclrtCmoSetDesc(desc, src, BYTES), ACL_SUCCESS);
    FAILS(aclrtCmoAsyncWithDesc(pinned, ACL_RT_CMO_TYPE_PREFETCH, stream, NULL));
    FAILS(aclrtCmoAsyncWithDesc(desc, (aclrtCmoType)99, stream, NULL));
    FAILS(aclrtCmoAsyncWithDesc(desc, ACL_RT_CMO_TYPE_PREFETCH, destroyed_stream(), NULL));
    /* The barrier forms, whatever their arguments. */
    FAILS(aclrtCmoAsyncWithBarrier(NULL, BYTES, ACL_RT_CMO_TYPE_INVALID, 1, stream));
    FAILS(aclrtCmoWaitBarrier(NULL, stream, 0));

    /* A prefetch keeps its place in stream order: the memset before it, the copy after. */
    unsigned char *host = pinned;
    memset(host, 0, BYTES);
    EXPECT(aclrtMemsetAsync(src, BYTES, 0x6B, BYTES, stream), ACL_SUCCESS);
    EXPECT(aclrtCmoAsync(src, BYTES, ACL_RT_CMO_TYPE_PREFETCH, stream), ACL_SUCCESS);
    EXPECT(aclrtCmoAsyncWithDesc(desc, ACL_RT_CMO_TYPE_PREFETCH, stream, NULL), ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(host, BYTES, src, BYTES, ACL_MEMCPY_DEVICE_TO_HOST, stream),
           ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(host[0] == 0x6B && host[BYTES - 1] == 0x6B);

    /* Only the stream's own device: memory and descriptor of device 0 on device 1's stream. */
    if (devices > 1) {
        aclrtStream other = stream_of(1);
        EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
        FAILS(aclrtCmoAsync(src, BYTES, ACL_RT_CMO_TYPE_PREFETCH, other));
        FAILS(aclrtCmoAsyncWithDesc(desc, ACL_RT_CMO_TYPE_PREFETCH, other, NULL));
        EXPECT(aclrtDestroyStream(other), ACL_SUCCESS);
        EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    }
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFree(desc), ACL_SUCCESS);
    EXPECT(aclrtFree(src), ACL_SUCCESS);
}

/* ---- 11-07 IPC memory: the importer, a second process ---- */

/* argv: self, "import", the key of the exporter's device memory imported on that device, the
 * key imported on another device. */
enum { KEY_SAME = 2, KEY_OTHER, IMPORT_ARGS };

/* The importer on device 1 of memory of device 0: only asynchronous device-to-device copies
 * of an explicit kind, then its write of 0x7E through one. */
static void import_on_another_device(const char *key)
{
    void *other = SENTINEL, *local = NULL, *pinned = NULL;
    aclrtStream stream = NULL;
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    EXPECT(aclrtMalloc(&local, BYTES, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMallocHost(&pinned, BYTES), ACL_SUCCESS);
    EXPECT(aclrtIpcMemImportByKey(&other, key, ACL_RT_IPC_MEM_IMPORT_FLAG_ENABLE_PEER_ACCESS),
           ACL_SUCCESS);
    char *at = other;
    EXPECT(aclrtMemcpy(pinned, PIECE, at, PIECE, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtMemcpyAsync(at, PIECE, pinned, PIECE, ACL_MEMCPY_HOST_TO_DEVICE, stream),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtMemcpyAsync(pinned, PIECE, at, PIECE, ACL_MEMCPY_DEVICE_TO_HOST, stream),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtMemcpy2dAsync(at, PIECE, pinned, PIECE, PIECE, 1, ACL_MEMCPY_HOST_TO_DEVICE,
                              stream),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtMemcpyAsync(local, PIECE, at, PIECE, ACL_MEMCPY_DEFAULT, stream),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    EXPECT(aclrtMemcpy(local, PIECE, at, PIECE, ACL_MEMCPY_DEVICE_TO_DEVICE),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    /* What is supported: asynchronous device-to-device copies, both ways. */
    EXPECT(aclrtMemsetAsync(local, BYTES, 0x7E, BYTES, stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(at + OTHER_AT, PIECE, local, PIECE, ACL_MEMCPY_DEVICE_TO_DEVICE,
                            stream),
           ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(local, PIECE, at + WORD_AT + PIECE, PIECE,
                            ACL_MEMCPY_DEVICE_TO_DEVICE, stream),
           ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(device_bytes_are(local, PIECE, 0x5A));
    EXPECT(aclrtIpcMemClose(key), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFree(local), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
}

/* The importing process: imports, checks and writes, then prints its counts. */
static int importer(char **keys)
{
    uint32_t devices = 0;
    void *same = SENTINEL, *again = SENTINEL;
    aclrtStream stream = NULL;
    EXPECT(aclInit(NULL), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceCount(&devices), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    FAILS(aclrtIpcMemImportByKey(NULL, keys[KEY_SAME], ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT));
    FAILS(aclrtIpcMemImportByKey(&same, NULL, ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT));
    HOLDS(same == SENTINEL);
    EXPECT(aclrtIpcMemImportByKey(&same, keys[KEY_SAME], ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT),
           ACL_SUCCESS);
    /* One import of a key per process until it is closed. */
    FAILS(aclrtIpcMemImportByKey(&again, keys[KEY_SAME], ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT));
    HOLDS(again == SENTINEL);
    /* On the exporter's device every copy works, synchronous ones and the host's too. */
    char *at = same;
    HOLDS(device_bytes_are(at + SAME_AT, PIECE, 0x5A));
    unsigned char bytes[PIECE];
    memset(bytes, 0xC3, sizeof bytes);
    EXPECT(aclrtMemcpy(at + SAME_AT, PIECE, bytes, PIECE, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    EXPECT(aclrtValueWrite(at + WORD_AT, WORD_VALUE, 0, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    /* Imported memory is released by aclrtIpcMemClose, not aclrtFree. */
    FAILS(aclrtFree(same));
    if (devices > 1) {
        import_on_another_device(keys[KEY_OTHER]);
    }
    EXPECT(aclrtIpcMemClose(keys[KEY_SAME]), ACL_SUCCESS);
    FAILS(aclrtIpcMemClose(keys[KEY_SAME]));
    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    EXPECT(aclrtResetDevice(0), ACL_SUCCESS);
    EXPECT(aclFinalize(), ACL_SUCCESS);
    /* The mismatches printed first, then the counts that end the exchange. */
    char line[64];
    fflush(stdout);
    snprintf(line, sizeof line, "counts %d %d", g_checked, g_wrong);
    return write_line(1, line) == 0 ? 0 : 2;
}

/* ---- 11-07 IPC memory: the exporter ---- */

/* Runs the importer with the two keys and adds its counts; lines it prints besides are its
 * mismatches. */
static void run_importer(char *self, char *same, char *other)
{
    char *argv[IMPORT_ARGS + 1] = {self, (char *)"import", same, other, NULL};
    struct child child;
    if (spawn_self(argv, &child) != 0) {
        HOLDS(!"the importer starts");
        return;
    }
    char line[256];
    int done = 0;
    while (!done && read_line(child.from_child, line, sizeof line) == 0) {
        int checked = 0, wrong = 0;
        if (sscanf(line, "counts %d %d", &checked, &wrong) == 2) {
            g_checked += checked;
            g_wrong += wrong;
            done = 1;
        } else {
            printf("importer: %s\n", line);
        }
    }
    HOLDS(done);
    int status = -1;
    HOLDS(waitpid(child.pid, &status, 0) == child.pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
    close(child.to_child);
    close(child.from_child);
}

static void ipc_memory(char *self, aclrtStream stream, uint32_t devices)
{
    char same[KEY_LEN], other[KEY_LEN], probe[KEY_LEN];
    void *dev = NULL;
    EXPECT(aclrtMalloc(&dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMemset(dev, BYTES, 0x5A, BYTES), ACL_SUCCESS);
    const uint64_t open = ACL_RT_IPC_MEM_EXPORT_FLAG_DISABLE_PID_VALIDATION;
    /* aclrtIpcMemGetExportKey: NULL pointers, no bytes, a range past the allocation, memory
     * the runtime did not allocate. */
    FAILS(aclrtIpcMemGetExportKey(NULL, BYTES, probe, KEY_LEN, open));
    FAILS(aclrtIpcMemGetExportKey(dev, BYTES, NULL, KEY_LEN, open));
    FAILS(aclrtIpcMemGetExportKey(dev, 0, probe, KEY_LEN, open));
    FAILS(aclrtIpcMemGetExportKey(dev, 16 * BYTES, probe, KEY_LEN, open));
    FAILS(aclrtIpcMemGetExportKey(probe, sizeof probe, probe, KEY_LEN, open));
    /* A range inside the allocation may be exported. */
    char inner[KEY_LEN];
    EXPECT(aclrtIpcMemGetExportKey((char *)dev + 1024, 1024, inner, KEY_LEN, open), ACL_SUCCESS);
    EXPECT(aclrtIpcMemGetExportKey(dev, BYTES, same, KEY_LEN, open), ACL_SUCCESS);
    EXPECT(aclrtIpcMemGetExportKey(dev, BYTES, other, KEY_LEN, open), ACL_SUCCESS);
    HOLDS(strcmp(same, other) != 0 && strcmp(same, inner) != 0);
    /* The exporter does not import its own key. */
    void *own = SENTINEL;
    FAILS(aclrtIpcMemImportByKey(&own, same, ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT));
    HOLDS(own == SENTINEL);
    /* aclrtIpcMemSetImportPid: a key, pids and their number. */
    int32_t pids[2] = {(int32_t)getpid(), 0};
    FAILS(aclrtIpcMemSetImportPid(NULL, pids, 1));
    FAILS(aclrtIpcMemSetImportPid(inner, NULL, 1));
    FAILS(aclrtIpcMemSetImportPid(inner, pids, 0));
    FAILS(aclrtIpcMemSetImportPid(inner, &pids[1], 1));
    /* The super-node and link attribute functions are Atlas A3's. */
    aclrtServerPid server;
    memset(&server, 0, sizeof server);
    server.pid = pids;
    server.num = 1;
    FAILS(aclrtIpcMemImportPidInterServer(NULL, &server, 1));
    FAILS(aclrtIpcMemImportPidInterServer(inner, NULL, 1));
    EXPECT(aclrtIpcMemImportPidInterServer(inner, &server, 1), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    FAILS(aclrtIpcMemSetAttr(NULL, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK,
                             ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_SIO));
    EXPECT(aclrtIpcMemSetAttr(inner, ACL_RT_IPC_MEM_ATTR_ACCESS_LINK,
                              ACL_RT_IPC_MEM_ATTR_ACCESS_LINK_HCCS),
           ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
    /* aclrtIpcMemClose: a key this process holds, once. */
    FAILS(aclrtIpcMemClose(NULL));
    FAILS(aclrtIpcMemClose("npusim-ipc-no-such-key"));
    EXPECT(aclrtIpcMemClose(inner), ACL_SUCCESS);
    FAILS(aclrtIpcMemClose(inner));

    run_importer(self, same, other);

    /* What the importer wrote: from this device synchronously, from another asynchronously,
     * and a value write of a stream of this device. */
    HOLDS(device_bytes_are((char *)dev + SAME_AT, PIECE, 0xC3));
    HOLDS(device_bytes_are((char *)dev + OTHER_AT, PIECE, devices > 1 ? 0x7E : 0x5A));
    uint64_t word = 0;
    EXPECT(aclrtMemcpyAsync(&word, sizeof word, (char *)dev + WORD_AT, sizeof word,
                            ACL_MEMCPY_DEVICE_TO_HOST, stream),
           ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(word == WORD_VALUE);
    EXPECT(aclrtIpcMemClose(same), ACL_SUCCESS);
    EXPECT(aclrtIpcMemClose(other), ACL_SUCCESS);
    EXPECT(aclrtFree(dev), ACL_SUCCESS);
}

/* ---- 11-08 custom allocators ---- */

static void *alloc_block(aclrtAllocator allocator, size_t size)
{
    (void)allocator;
    (void)size;
    return NULL;
}

static void free_block(aclrtAllocator allocator, aclrtAllocatorBlock block)
{
    (void)allocator;
    (void)block;
}

static void *block_address(aclrtAllocatorBlock block)
{
    return block;
}

/* Never registered: what aclrtAllocatorGetByStream must overwrite with NULL. */
static void *advise_marker(aclrtAllocator allocator, size_t size, aclrtAllocatorAddr addr)
{
    (void)allocator;
    (void)size;
    (void)addr;
    return NULL;
}

static void allocators(aclrtStream stream)
{
    int object = 0;
    aclrtAllocatorDesc desc = NULL;
    aclrtAllocator got_object = NULL;
    aclrtAllocatorAllocFunc alloc = NULL;
    aclrtAllocatorFreeFunc release = NULL;
    aclrtAllocatorAllocAdviseFunc advise = advise_marker;
    aclrtAllocatorGetAddrFromBlockFunc address = NULL;
    /* The setters take no NULL value. */
    aclrtAllocatorDesc partial = aclrtAllocatorCreateDesc();
    HOLDS(partial != NULL);
    FAILS(aclrtAllocatorSetObjToDesc(partial, NULL));
    FAILS(aclrtAllocatorSetAllocFuncToDesc(partial, NULL));
    FAILS(aclrtAllocatorSetFreeFuncToDesc(partial, NULL));
    FAILS(aclrtAllocatorSetAllocAdviseFuncToDesc(partial, NULL));
    FAILS(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(partial, NULL));
    /* A descriptor without its free and address callbacks cannot be registered. */
    EXPECT(aclrtAllocatorSetObjToDesc(partial, &object), ACL_SUCCESS);
    EXPECT(aclrtAllocatorSetAllocFuncToDesc(partial, alloc_block), ACL_SUCCESS);
    FAILS(aclrtAllocatorRegister(stream, partial));
    FAILS(aclrtAllocatorGetByStream(stream, &desc, &got_object, &alloc, &release, &advise,
                                    &address));
    /* Complete but for the optional advise callback, it can; that one comes back NULL. */
    EXPECT(aclrtAllocatorSetFreeFuncToDesc(partial, free_block), ACL_SUCCESS);
    EXPECT(aclrtAllocatorSetGetAddrFromBlockFuncToDesc(partial, block_address), ACL_SUCCESS);
    FAILS(aclrtAllocatorRegister(stream, NULL));
    FAILS(aclrtAllocatorRegister(destroyed_stream(), partial));
    EXPECT(aclrtAllocatorRegister(stream, partial), ACL_SUCCESS);
    FAILS(aclrtAllocatorGetByStream(NULL, &desc, &got_object, &alloc, &release, &advise,
                                    &address));
    FAILS(aclrtAllocatorGetByStream(stream, NULL, &got_object, &alloc, &release, &advise,
                                    &address));
    FAILS(aclrtAllocatorGetByStream(stream, &desc, NULL, &alloc, &release, &advise, &address));
    FAILS(aclrtAllocatorGetByStream(stream, &desc, &got_object, NULL, &release, &advise,
                                    &address));
    FAILS(aclrtAllocatorGetByStream(stream, &desc, &got_object, &alloc, NULL, &advise,
                                    &address));
    FAILS(aclrtAllocatorGetByStream(stream, &desc, &got_object, &alloc, &release, NULL,
                                    &address));
    FAILS(aclrtAllocatorGetByStream(stream, &desc, &got_object, &alloc, &release, &advise,
                                    NULL));
    EXPECT(aclrtAllocatorGetByStream(stream, &desc, &got_object, &alloc, &release, &advise,
                                     &address),
           ACL_SUCCESS);
    HOLDS(desc == partial && got_object == &object && alloc == alloc_block);
    HOLDS(release == free_block && advise == NULL && address == block_address);
    /* A destroyed descriptor cannot be registered again. */
    EXPECT(aclrtAllocatorDestroyDesc(partial), ACL_SUCCESS);
    FAILS(aclrtAllocatorRegister(stream, partial));
    FAILS(aclrtAllocatorDestroyDesc(partial));
    /* Unregistered, the stream has no allocator. */
    EXPECT(aclrtAllocatorUnregister(stream), ACL_SUCCESS);
    FAILS(aclrtAllocatorGetByStream(stream, &desc, &got_object, &alloc, &release, &advise,
                                    &address));
}

/* ---- 11-09 stream memory operations ---- */

static void stream_memory(aclrtStream stream, uint32_t devices)
{
    uint64_t *words = NULL;
    void *pinned = NULL;
    EXPECT(aclrtMalloc((void **)&words, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMallocHost(&pinned, 64), ACL_SUCCESS);
    FAILS(aclrtValueWrite(NULL, 1, 0, stream));
    FAILS(aclrtValueWait(NULL, 1, ACL_STREAM_WAIT_VALUE_EQ, stream));
    /* Device memory only; an aligned 64-bit word for the wait too. */
    FAILS(aclrtValueWrite(pinned, 1, 0, stream));
    FAILS(aclrtValueWait(pinned, 1, ACL_STREAM_WAIT_VALUE_EQ, stream));
    FAILS(aclrtValueWait((char *)words + 4, 1, ACL_STREAM_WAIT_VALUE_EQ, stream));
    FAILS(aclrtValueWrite(words, 1, 0, destroyed_stream()));
    FAILS(aclrtValueWait(words, 1, ACL_STREAM_WAIT_VALUE_EQ, destroyed_stream()));

    /* The write keeps its place in stream order: after the memset before it, overwritten by
     * the memset after it. */
    uint64_t *seen = pinned;
    EXPECT(aclrtMemsetAsync(words, 64, 0xFF, 64, stream), ACL_SUCCESS);
    EXPECT(aclrtValueWrite(words, 0x1122334455667788ull, 0, stream), ACL_SUCCESS);
    EXPECT(aclrtMemcpyAsync(seen, 16, words, 16, ACL_MEMCPY_DEVICE_TO_HOST, stream),
           ACL_SUCCESS);
    EXPECT(aclrtValueWrite(words + 1, 5, 0, stream), ACL_SUCCESS);
    EXPECT(aclrtMemsetAsync(words + 1, 8, 0, 8, stream), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    HOLDS(seen[0] == 0x1122334455667788ull && seen[1] == UINT64_MAX);
    EXPECT(aclrtMemcpy(seen, 16, words, 16, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    HOLDS(seen[0] == 0x1122334455667788ull && seen[1] == 0);

    /* Memory of another device than the stream's. */
    if (devices > 1) {
        aclrtStream other = stream_of(1);
        EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
        FAILS(aclrtValueWrite(words, 1, 0, other));
        FAILS(aclrtValueWait(words, 1, ACL_STREAM_WAIT_VALUE_EQ, other));
        EXPECT(aclrtDestroyStream(other), ACL_SUCCESS);
        EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    }
    EXPECT(aclrtFreeHost(pinned), ACL_SUCCESS);
    EXPECT(aclrtFree(words), ACL_SUCCESS);
}

/* ---- 11-10 stream-ordered pools ---- */

static aclrtMemPoolProps pool_props(size_t max_size)
{
    aclrtMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    props.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    props.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    props.maxSize = max_size;
    return props;
}

/* Sets the pool's three reuse switches. */
static void reuse_rules(aclrtMemPool pool, uint32_t events, uint32_t opportunistic,
                        uint32_t internal)
{
    EXPECT(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES, &events),
           ACL_SUCCESS);
    EXPECT(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_REUSE_ALLOW_OPPORTUNISTIC, &opportunistic),
           ACL_SUCCESS);
    EXPECT(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
                               &internal),
           ACL_SUCCESS);
}

static void pool_arguments(aclrtStream stream, uint32_t devices)
{
    aclrtMemPool pool = NULL;
    aclrtMemPoolProps props = pool_props(2 * MIB);
    FAILS(aclrtMemPoolCreate(NULL, &props));
    FAILS(aclrtMemPoolCreate(&pool, NULL));
    props.allocType = (aclrtMemAllocationType)7;
    FAILS(aclrtMemPoolCreate(&pool, &props));
    props = pool_props(2 * MIB);
    props.handleType = ACL_MEM_HANDLE_TYPE_POSIX;
    FAILS(aclrtMemPoolCreate(&pool, &props));
    props = pool_props(2 * MIB);
    props.location.id = 64;
    FAILS(aclrtMemPoolCreate(&pool, &props));
    HOLDS(pool == NULL);
    props = pool_props(2 * MIB);
    EXPECT(aclrtMemPoolCreate(&pool, &props), ACL_SUCCESS);

    uint64_t value = 0;
    FAILS(aclrtMemPoolSetAttr(NULL, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, &value));
    FAILS(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, NULL));
    FAILS(aclrtMemPoolSetAttr(pool, (aclrtMemPoolAttr)0, &value));
    FAILS(aclrtMemPoolSetAttr(pool, (aclrtMemPoolAttr)9, &value));
    FAILS(aclrtMemPoolGetAttr(NULL, ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT, &value));
    FAILS(aclrtMemPoolGetAttr(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT, NULL));
    FAILS(aclrtMemPoolGetAttr(pool, (aclrtMemPoolAttr)9, &value));
    /* The switches are on until set otherwise (the simulator's default). */
    uint32_t on = 0;
    EXPECT(aclrtMemPoolGetAttr(pool, ACL_RT_MEM_POOL_REUSE_FOLLOW_EVENT_DEPENDENCIES, &on),
           ACL_SUCCESS);
    HOLDS(on == 1);

    void *a = NULL, *b = NULL;
    FAILS(aclrtMemPoolMallocAsync(NULL, 256, pool, stream));
    FAILS(aclrtMemPoolMallocAsync(&a, 256, NULL, stream));
    FAILS(aclrtMemPoolMallocAsync(&a, 256, pool, destroyed_stream()));
    /* maxSize bounds the pool: one block larger, or one more than fits beside another (a
     * block of a MiB takes a little more, as aclrtMalloc's do). */
    FAILS(aclrtMemPoolMallocAsync(&a, 3 * MIB, pool, stream));
    HOLDS(a == NULL);
    EXPECT(aclrtMemPoolMallocAsync(&a, MIB, pool, stream), ACL_SUCCESS);
    FAILS(aclrtMemPoolMallocAsync(&b, MIB, pool, stream));
    /* NULL: the default stream. */
    EXPECT(aclrtMemPoolFreeAsync(a, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&b, MIB, pool, NULL), ACL_SUCCESS);
    FAILS(aclrtMemPoolFreeAsync(NULL, stream));
    void *plain = NULL;
    EXPECT(aclrtMalloc(&plain, 256, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    FAILS(aclrtMemPoolFreeAsync(plain, stream));
    EXPECT(aclrtFree(plain), ACL_SUCCESS);
    /* Pool memory of device 0 on device 1's stream. */
    if (devices > 1) {
        aclrtStream other = stream_of(1);
        EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
        FAILS(aclrtMemPoolMallocAsync(&a, 256, pool, other));
        FAILS(aclrtMemPoolFreeAsync(b, other));
        EXPECT(aclrtDestroyStream(other), ACL_SUCCESS);
        EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    }
    EXPECT(aclrtMemPoolFreeAsync(b, NULL), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(NULL), ACL_SUCCESS);
    FAILS(aclrtMemPoolTrimTo(NULL, 0));
    EXPECT(aclrtMemPoolTrimTo(pool, 0), ACL_SUCCESS);
    FAILS(aclrtMemPoolDestroy(NULL));
    EXPECT(aclrtMemPoolDestroy(pool), ACL_SUCCESS);
    /* A destroyed pool is a stale handle everywhere. */
    FAILS(aclrtMemPoolDestroy(pool));
    FAILS(aclrtMemPoolTrimTo(pool, 0));
    FAILS(aclrtMemPoolGetAttr(pool, ACL_RT_MEM_POOL_ATTR_USED_MEM_CURRENT, &value));
    FAILS(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, &value));
    FAILS(aclrtMemPoolMallocAsync(&a, 256, pool, stream));
}

/* The reuse rules across two streams, as the stream order shows them. */
static void pool_reuse(aclrtStream first, aclrtStream second, aclrtStream third)
{
    aclrtMemPool pool = NULL;
    aclrtMemPoolProps props = pool_props(64 * MIB);
    EXPECT(aclrtMemPoolCreate(&pool, &props), ACL_SUCCESS);
    uint64_t keep = 64 * MIB;
    EXPECT(aclrtMemPoolSetAttr(pool, ACL_RT_MEM_POOL_ATTR_RELEASE_THRESHOLD, &keep), ACL_SUCCESS);
    void *freed = NULL, *fresh = NULL, *reused = NULL;

    /* Event dependencies only: another stream reuses the block once it waits for an event
     * recorded after the free, not before. */
    reuse_rules(pool, 1, 0, 0);
    aclrtEvent event = NULL;
    EXPECT(aclrtCreateEvent(&event), ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&freed, MIB, pool, first), ACL_SUCCESS);
    EXPECT(aclrtMemPoolFreeAsync(freed, first), ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&fresh, MIB, pool, second), ACL_SUCCESS);
    HOLDS(fresh != freed);
    EXPECT(aclrtRecordEvent(event, first), ACL_SUCCESS);
    EXPECT(aclrtStreamWaitEvent(second, event), ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&reused, MIB, pool, second), ACL_SUCCESS);
    HOLDS(reused == freed);
    EXPECT(aclrtMemPoolFreeAsync(fresh, second), ACL_SUCCESS);
    EXPECT(aclrtMemPoolFreeAsync(reused, second), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(second), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(first), ACL_SUCCESS);

    /* Opportunistic only: a free the device has executed serves any stream. */
    reuse_rules(pool, 0, 1, 0);
    EXPECT(aclrtMemPoolMallocAsync(&freed, 2 * MIB, pool, first), ACL_SUCCESS);
    EXPECT(aclrtMemPoolFreeAsync(freed, first), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(first), ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&reused, 2 * MIB, pool, second), ACL_SUCCESS);
    HOLDS(reused == freed);
    EXPECT(aclrtMemPoolFreeAsync(reused, second), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(second), ACL_SUCCESS);

    /* Internal dependencies only: the block is reused at once, and the reusing stream waits
     * for the free. The first stream is held by a value wait, so its free has not run. */
    reuse_rules(pool, 0, 0, 1);
    uint64_t *words = NULL;
    EXPECT(aclrtMalloc((void **)&words, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMemset(words, 64, 0, 64), ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&freed, 4 * MIB, pool, first), ACL_SUCCESS);
    EXPECT(aclrtValueWait(words, 1, ACL_STREAM_WAIT_VALUE_EQ, first), ACL_SUCCESS);
    EXPECT(aclrtMemPoolFreeAsync(freed, first), ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&reused, 4 * MIB, pool, second), ACL_SUCCESS);
    HOLDS(reused == freed);
    EXPECT(aclrtValueWrite(words + 1, 1, 0, second), ACL_SUCCESS);
    aclrtStreamStatus status = ACL_STREAM_STATUS_COMPLETE;
    EXPECT(aclrtStreamQuery(second, &status), ACL_SUCCESS);
    HOLDS(status == ACL_STREAM_STATUS_NOT_READY);
    EXPECT(aclrtValueWrite(words, 1, 0, third), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(second), ACL_SUCCESS);
    uint64_t mark = 0;
    EXPECT(aclrtMemcpy(&mark, sizeof mark, words + 1, sizeof mark, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_SUCCESS);
    HOLDS(mark == 1);
    EXPECT(aclrtMemPoolFreeAsync(reused, second), ACL_SUCCESS);

    /* None: another stream gets a block of its own, even after the free ran. */
    reuse_rules(pool, 0, 0, 0);
    EXPECT(aclrtSynchronizeStream(second), ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&fresh, 4 * MIB, pool, first), ACL_SUCCESS);
    HOLDS(fresh != freed);
    EXPECT(aclrtMemPoolFreeAsync(fresh, first), ACL_SUCCESS);

    /* Reuse takes the free block closest in size above the request. */
    void *large = NULL, *small = NULL, *picked = NULL;
    EXPECT(aclrtMemPoolMallocAsync(&large, 2 * MIB, pool, first), ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&small, MIB, pool, first), ACL_SUCCESS);
    EXPECT(aclrtMemPoolFreeAsync(large, first), ACL_SUCCESS);
    EXPECT(aclrtMemPoolFreeAsync(small, first), ACL_SUCCESS);
    EXPECT(aclrtMemPoolMallocAsync(&picked, MIB / 2, pool, first), ACL_SUCCESS);
    HOLDS(picked == small);
    EXPECT(aclrtMemPoolFreeAsync(picked, first), ACL_SUCCESS);

    EXPECT(aclrtSynchronizeStream(first), ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(third), ACL_SUCCESS);
    EXPECT(aclrtDestroyEvent(event), ACL_SUCCESS);
    EXPECT(aclrtFree(words), ACL_SUCCESS);
    EXPECT(aclrtMemPoolDestroy(pool), ACL_SUCCESS);
}

/* ---- 14 a function belongs to the device it was resolved on ---- */

static void kernel_devices(uint32_t devices)
{
    if (devices < 2) {
        return;
    }
    enum { N = 256 };
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle on_zero = NULL, on_one = NULL;
    EXPECT(aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &bin), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetFunction(bin, "vector_add_f32", &on_zero), ACL_SUCCESS);
    aclrtStream other = stream_of(1);
    EXPECT(aclrtSetDevice(1), ACL_SUCCESS);
    void *x = NULL;
    EXPECT(aclrtMalloc(&x, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMemset(x, N * sizeof(float), 0, N * sizeof(float)), ACL_SUCCESS);
    npusimVectorAddArgs args = {(const float *)x, (const float *)x, (float *)x, N};
    FAILS(aclrtLaunchKernelWithHostArgs(on_zero, 1, other, NULL, &args, sizeof args, NULL, 0));
    /* Resolved again with device 1 current, it runs there. */
    EXPECT(aclrtBinaryGetFunction(bin, "vector_add_f32", &on_one), ACL_SUCCESS);
    EXPECT(aclrtLaunchKernelWithHostArgs(on_one, 1, other, NULL, &args, sizeof args, NULL, 0),
           ACL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(other), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(other), ACL_SUCCESS);
    EXPECT(aclrtFree(x), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);
}

/* ---- 14 argument handles: which parameter each call may name ---- */

static void kernel_arguments(aclrtStream stream)
{
    enum { N = 64 };
    aclrtBinHandle bin = NULL;
    aclrtFuncHandle add = NULL, scale = NULL;
    EXPECT(aclrtBinaryLoadFromFile(npusimKernelLibraryPath(), NULL, &bin), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetFunction(bin, "vector_add_f32", &add), ACL_SUCCESS);
    EXPECT(aclrtBinaryGetFunction(bin, "scale_f32", &scale), ACL_SUCCESS);
    float *x = NULL;
    EXPECT(aclrtMalloc((void **)&x, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    EXPECT(aclrtMemset(x, N * sizeof(float), 0, N * sizeof(float)), ACL_SUCCESS);
    const float *in = x;
    uint64_t n = N;
    uint32_t narrow = N;

    /* Values appended with aclrtKernelArgsAppend; a placeholder from another handle. */
    aclrtArgsHandle values = NULL, holder = NULL;
    aclrtParamHandle pa = NULL, pb = NULL, pc = NULL, pn = NULL, place = NULL;
    EXPECT(aclrtKernelArgsInit(add, &values), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(values, &in, sizeof in, &pa), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(values, &in, sizeof in, &pb), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(values, &x, sizeof x, &pc), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppend(values, &n, sizeof n, &pn), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsInit(add, &holder), ACL_SUCCESS);
    EXPECT(aclrtKernelArgsAppendPlaceHolder(holder, &place), ACL_SUCCESS);
    /* Only a value appended with aclrtKernelArgsAppend is updated, with its own size, through
     * its own handle; only a placeholder has a buffer, of at least a byte. */
    FAILS(aclrtKernelArgsParaUpdate(values, pn, &narrow, sizeof narrow));
    FAILS(aclrtKernelArgsParaUpdate(holder, place, &n, sizeof n));
    FAILS(aclrtKernelArgsParaUpdate(holder, pn, &n, sizeof n));
    void *buffer = SENTINEL;
    FAILS(aclrtKernelArgsGetPlaceHolderBuffer(values, pa, 16, &buffer));
    FAILS(aclrtKernelArgsGetPlaceHolderBuffer(values, place, 16, &buffer));
    FAILS(aclrtKernelArgsGetPlaceHolderBuffer(holder, place, 0, &buffer));
    HOLDS(buffer == SENTINEL);
    /* Not finalized: no launch. Finalized: a launch of its own function only. */
    FAILS(aclrtLaunchKernelWithConfig(add, 1, stream, NULL, values, NULL));
    EXPECT(aclrtKernelArgsFinalize(values), ACL_SUCCESS);
    FAILS(aclrtLaunchKernelWithConfig(scale, 1, stream, NULL, values, NULL));
    EXPECT(aclrtLaunchKernelWithConfig(add, 1, stream, NULL, values, NULL), ACL_SUCCESS);
    /* An update undoes the finalization. */
    EXPECT(aclrtKernelArgsParaUpdate(values, pn, &n, sizeof n), ACL_SUCCESS);
    FAILS(aclrtLaunchKernelWithConfig(add, 1, stream, NULL, values, NULL));
    EXPECT(aclrtSynchronizeStream(stream), ACL_SUCCESS);
    EXPECT(aclrtFree(x), ACL_SUCCESS);
    EXPECT(aclrtBinaryUnLoad(bin), ACL_SUCCESS);
}

/* ---- 18 and 21: a second dump session, snapshots of this process only ---- */

static void dump_sessions(void)
{
    EXPECT(aclmdlInitDump(), ACL_SUCCESS);
    /* One session at a time; a directory is no configuration file. */
    FAILS(aclmdlInitDump());
    FAILS(aclmdlSetDump("/"));
    EXPECT(aclmdlFinalizeDump(), ACL_SUCCESS);
}

static void snapshot_pids(void)
{
    int pid = (int)getpid();
    EXPECT(aclrtSnapShotProcessLock(pid, NULL), ACL_SUCCESS);
    /* Each step takes this process's id only, and a refused step changes no state. */
    FAILS(aclrtSnapShotProcessBackup(pid + 1, NULL));
    FAILS(aclrtSnapShotProcessBackup(0, NULL));
    EXPECT(aclrtSnapShotProcessBackup(pid, NULL), ACL_SUCCESS);
    FAILS(aclrtSnapShotProcessRestore(pid + 1, NULL));
    FAILS(aclrtSnapShotProcessRestore(-1, NULL));
    EXPECT(aclrtSnapShotProcessRestore(pid, NULL), ACL_SUCCESS);
    FAILS(aclrtSnapShotProcessUnlock(pid + 1, NULL));
    EXPECT(aclrtSnapShotProcessUnlock(pid, NULL), ACL_SUCCESS);
}

int main(int argc, char **argv)
{
    if (argc == IMPORT_ARGS && strcmp(argv[1], "import") == 0) {
        return importer(argv);
    }
    uint32_t devices = 0;
    aclrtStream stream = NULL, second = NULL, third = NULL;
    EXPECT(aclInit(NULL), ACL_SUCCESS);
    EXPECT(aclrtGetDeviceCount(&devices), ACL_SUCCESS);
    EXPECT(aclrtSetDevice(0), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&stream), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&second), ACL_SUCCESS);
    EXPECT(aclrtCreateStream(&third), ACL_SUCCESS);

    cache_operations(stream, devices);
    ipc_memory(argv[0], stream, devices);
    allocators(stream);
    stream_memory(stream, devices);
    pool_arguments(stream, devices);
    pool_reuse(stream, second, third);
    kernel_devices(devices);
    kernel_arguments(stream);
    dump_sessions();
    snapshot_pids();

    EXPECT(aclrtDestroyStream(third), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(second), ACL_SUCCESS);
    EXPECT(aclrtDestroyStream(stream), ACL_SUCCESS);
    if (devices > 1) {
        EXPECT(aclrtResetDevice(1), ACL_SUCCESS);
    }
    EXPECT(aclrtResetDevice(0), ACL_SUCCESS);
    EXPECT(aclFinalize(), ACL_SUCCESS);
    checks_done("documented edges");
    return 0;
}
