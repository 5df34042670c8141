/*
 * A process snapshot as a checkpointing tool drives it: a callback registered for a stage,
 * the process locked (its queued work drained first), its device memory backed up, the
 * memory changed by the lock's holder, the backup restored, the process unlocked, and the
 * state machine refusing calls made in the wrong state.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "acl/acl.h"
#include "check.h"

enum { BYTES = 4096 };

static int backups_seen;

static uint32_t on_backup(int32_t deviceId, void *args)
{
    (void)args;
    if (deviceId == 0) {
        backups_seen++;
    }
    return 0;
}

static int all_equal(const uint8_t *bytes, int n, uint8_t value)
{
    for (int i = 0; i < n; i++) {
        if (bytes[i] != value) {
            return 0;
        }
    }
    return 1;
}

int main(void)
{
    static uint8_t host[BYTES];
    void *dev = NULL;
    aclrtStream stream = NULL;
    int pid = (int)getpid();

    CHECK(aclInit(NULL));
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtMalloc(&dev, BYTES, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtSnapShotCallbackRegister(ACL_RT_SNAPSHOT_BACKUP_PRE, on_backup, NULL));
    printf("second registration: %d\n",
           aclrtSnapShotCallbackRegister(ACL_RT_SNAPSHOT_BACKUP_PRE, on_backup, NULL));
    printf("unlock while running: %d\n", aclrtSnapShotProcessUnlock(pid, NULL));
    printf("backup while running: %d\n", aclrtSnapShotProcessBackup(pid, NULL));
    printf("lock of another process: %d\n", aclrtSnapShotProcessLock(pid + 1, NULL));
    (void)aclGetRecentErrMsg();

    /* Queued, not waited for: the lock drains it. */
    CHECK(aclrtMemsetAsync(dev, BYTES, 0x11, BYTES, stream));
    CHECK(aclrtSnapShotProcessLock(pid, NULL));
    printf("lock again: %d\n", aclrtSnapShotProcessLock(pid, NULL));
    printf("restore before a backup: %d\n", aclrtSnapShotProcessRestore(pid, NULL));
    (void)aclGetRecentErrMsg();
    CHECK(aclrtSnapShotProcessBackup(pid, NULL));
    printf("backup callbacks for device 0: %d\n", backups_seen);

    /* The holder's own calls pass the lock. */
    CHECK(aclrtMemset(dev, BYTES, 0x22, BYTES));
    CHECK(aclrtMemcpy(host, BYTES, dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("changed after the backup: %d\n", all_equal(host, BYTES, 0x22));
    CHECK(aclrtSnapShotProcessRestore(pid, NULL));
    CHECK(aclrtMemcpy(host, BYTES, dev, BYTES, ACL_MEMCPY_DEVICE_TO_HOST));
    printf("restored to the backup: %d\n", all_equal(host, BYTES, 0x11));
    CHECK(aclrtSnapShotProcessUnlock(pid, NULL));

    CHECK(aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_BACKUP_PRE, on_backup));
    printf("unregister again: %d\n",
           aclrtSnapShotCallbackUnregister(ACL_RT_SNAPSHOT_BACKUP_PRE, on_backup));
    (void)aclGetRecentErrMsg();
    CHECK(aclrtFree(dev));
    CHECK(aclrtDestroyStream(stream));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("snapshot flow ok\n");
    return 0;
}
