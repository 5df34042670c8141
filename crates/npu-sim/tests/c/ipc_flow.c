/* IPC memory, notify and event sharing the way a CANN serving program does it, across two
 * real processes: the exporter allocates device memory, fills it on a stream and records an
 * IPC event after the fill, exports a key for the memory, one for a notify and the event's
 * handle, starts the importer (itself, by posix_spawn, with pipes for stdin and stdout),
 * whitelists the importer's pid and lets it import; the importer opens the event, makes its
 * stream wait for it, checks the bytes, overwrites them on the stream and records the notify
 * after; a stream of the exporter waits for the notify and then copies the bytes back. Every
 * read of a pipe is bounded. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child_process.h"

#define BYTES 10000
#define KEY_LEN 65

/* An IPC event handle as hex, to pass it on a command line, and back. */
static void handle_to_hex(const aclrtIpcEventHandle *handle, char *hex) {
    for (size_t i = 0; i < ACL_IPC_EVENT_HANDLE_SIZE; i++) {
        snprintf(&hex[2 * i], 3, "%02x", (unsigned char)handle->reserved[i]);
    }
}

static int handle_from_hex(const char *hex, aclrtIpcEventHandle *handle) {
    if (strlen(hex) != 2 * ACL_IPC_EVENT_HANDLE_SIZE) {
        return -1;
    }
    for (size_t i = 0; i < ACL_IPC_EVENT_HANDLE_SIZE; i++) {
        unsigned byte = 0;
        if (sscanf(&hex[2 * i], "%2x", &byte) != 1) {
            return -1;
        }
        handle->reserved[i] = (char)byte;
    }
    return 0;
}

/* The importer: stdin and stdout are pipes to the exporter. */
static int importer(const char *key, const char *notify_key, const char *event_hex) {
    char line[32];
    int32_t pid = 0;
    void *dev = NULL;
    aclrtNotify notify = NULL;
    aclrtStream stream = NULL;
    aclrtEvent filled = NULL;
    aclrtIpcEventHandle handle;
    static unsigned char host[BYTES];
    if (handle_from_hex(event_hex, &handle) != 0) {
        return 2;
    }
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtDeviceGetBareTgid(&pid));
    snprintf(line, sizeof line, "%d", pid);
    if (write_line(1, line) != 0 || read_line(0, line, sizeof line) != 0 || strcmp(line, "go") != 0) {
        return 2;
    }
    CHECK(aclrtIpcMemImportByKey(&dev, key, ACL_RT_IPC_MEM_IMPORT_FLAG_DEFAULT));
    CHECK(aclrtNotifyImportByKey(&notify, notify_key, ACL_RT_NOTIFY_IMPORT_FLAG_ENABLE_PEER_ACCESS));
    CHECK(aclrtIpcOpenEventHandle(handle, &filled));
    CHECK(aclrtCreateStream(&stream));
    /* The copy runs once the exporter's record after its fill is reached. */
    CHECK(aclrtStreamWaitEvent(stream, filled));
    CHECK(aclrtMemcpyAsync(host, BYTES, dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtDestroyEvent(filled));
    int wrong = 0;
    for (int i = 0; i < BYTES; i++) {
        wrong += host[i] != 0x5A;
    }
    CHECK(aclrtMemsetAsync(dev, BYTES, 0xC3, BYTES, stream));
    CHECK(aclrtRecordNotify(notify, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtDestroyNotify(notify));
    CHECK(aclrtIpcMemClose(key));
    snprintf(line, sizeof line, "%d", wrong);
    if (write_line(1, line) != 0) {
        return 2;
    }
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "import") == 0) {
        return importer(argv[2], argv[3], argv[4]);
    }
    void *dev = NULL;
    void *host = NULL;
    char key[KEY_LEN];
    char notify_key[KEY_LEN];
    aclrtNotify notify = NULL;
    aclrtStream stream = NULL;
    aclrtEvent filled = NULL;
    aclrtIpcEventHandle handle;
    char event_hex[2 * ACL_IPC_EVENT_HANDLE_SIZE + 1];
    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtMalloc(&dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtIpcMemGetExportKey(dev, BYTES, key, KEY_LEN, ACL_RT_IPC_MEM_EXPORT_FLAG_DEFAULT));
    CHECK(aclrtCreateNotify(&notify, ACL_NOTIFY_DEFAULT));
    CHECK(aclrtNotifyGetExportKey(notify, notify_key, KEY_LEN, ACL_RT_NOTIFY_EXPORT_FLAG_DISABLE_PID_VALIDATION));
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtMallocHost(&host, BYTES));
    /* The documented order: create the IPC event, get its handle, record it. */
    CHECK(aclrtCreateEventExWithFlag(&filled, ACL_EVENT_IPC));
    CHECK(aclrtIpcGetEventHandle(filled, &handle));
    CHECK(aclrtMemsetAsync(dev, BYTES, 0x5A, BYTES, stream));
    CHECK(aclrtRecordEvent(filled, stream));
    handle_to_hex(&handle, event_hex);

    char *child_argv[] = {argv[0], "import", key, notify_key, event_hex, NULL};
    struct child child;
    if (spawn_self(child_argv, &child) != 0) {
        return 2;
    }

    char line[32];
    if (read_line(child.from_child, line, sizeof line) != 0) {
        return 3;
    }
    int32_t pid = atoi(line);
    printf("importer pid reported: %d\n", pid == child.pid);
    CHECK(aclrtIpcMemSetImportPid(key, &pid, 1));
    if (write_line(child.to_child, "go") != 0) {
        return 3;
    }
    /* The copy runs once the importer's record releases the wait, so it sees its bytes. */
    CHECK(aclrtWaitAndResetNotify(notify, stream, 60));
    CHECK(aclrtMemcpyAsync(host, BYTES, dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST, stream));
    CHECK(aclrtSynchronizeStream(stream));
    int changed = 0;
    for (int i = 0; i < BYTES; i++) {
        changed += ((unsigned char *)host)[i] == 0xC3;
    }
    printf("bytes the importer wrote, after its notify: %d\n", changed);
    if (read_line(child.from_child, line, sizeof line) != 0) {
        return 3;
    }
    printf("importer saw %s wrong bytes\n", line);
    int status = 0;
    if (waitpid(child.pid, &status, 0) != child.pid || !WIFEXITED(status)) {
        return 3;
    }
    printf("importer exit status: %d\n", WEXITSTATUS(status));

    CHECK(aclrtDestroyEvent(filled));
    CHECK(aclrtDestroyNotify(notify));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtFreeHost(host));
    CHECK(aclrtIpcMemClose(key));
    CHECK(aclrtFree(dev));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("ipc flow ok\n");
    return 0;
}
