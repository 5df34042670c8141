/*
 * The "Devices and information" flow as a CANN program writes it: enumerate the devices and
 * identify each (PCI bus ID round trip, UUID), query links, peer status and utilization, cap a
 * device's cores and reset the cap, choose the Task Schedule, ask which atomic operations reach
 * host and peer memory, and ask the environment what it supports. Compiled against
 * npu-sim's header and linked to its libascendcl.so by tests/c_programs.rs.
 */
#include <stdio.h>
#include <string.h>

#include "acl/acl.h"
#include "check.h"

int main(void)
{
    uint32_t count = 0;
    CHECK(aclInit(NULL));
    CHECK(aclrtGetDeviceCount(&count));
    for (int32_t id = 0; id < (int32_t)count; ++id) {
        char bus[ACL_PKG_VERSION_PARTS_MAX_SIZE] = {0};
        int32_t found = -1;
        aclrtUuid uuid;
        CHECK(aclrtDeviceGetPCIBusId(id, bus, (int32_t)sizeof(bus)));
        CHECK(aclrtDeviceGetByPCIBusId(bus, &found));
        CHECK(aclrtDeviceGetUuid(id, &uuid));
        printf("device %d at %s (found %d), uuid starts %.6s\n", id, bus, found, uuid.bytes);
    }

    uint64_t topo = 0;
    CHECK(aclrtGetDevicesTopo(0, 1, &topo));
    printf("0-1 linked by HCCS: %d\n", topo == ACL_RT_DEVS_TOPOLOGY_HCCS);

    int32_t status = -1;
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtDeviceEnablePeerAccess(1, 0));
    CHECK(aclrtDevicePeerAccessStatus(0, 1, &status));
    printf("peer 0->1 after enabling: %d\n", status);

    aclrtUtilizationInfo usage;
    memset(&usage, 0, sizeof(usage));
    CHECK(aclrtGetDeviceUtilizationRate(0, &usage));
    printf("utilization cube %d vector %d aicpu %d memory %d\n", usage.cubeUtilization,
           usage.vectorUtilization, usage.aicpuUtilization, usage.memoryUtilization);

    uint32_t cores = 0;
    CHECK(aclrtSetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, 10));
    CHECK(aclrtGetResInCurrentThread(ACL_RT_DEV_RES_CUBE_CORE, &cores));
    printf("cube cores for this thread: %u\n", cores);
    CHECK(aclrtResetDeviceResLimit(0));
    CHECK(aclrtGetDeviceResLimit(0, ACL_RT_DEV_RES_CUBE_CORE, &cores));
    printf("after reset: %u\n", cores);

    aclrtAtomicOperation ops[2] = {ACL_RT_ATOMIC_OPERATION_INTEGER_ADD, ACL_RT_ATOMIC_OPERATION_DMA_ADD};
    uint32_t host_caps[2] = {0, 0};
    uint32_t peer_caps[2] = {0, 0};
    CHECK(aclrtSetTsDevice(ACL_TS_ID_AICORE));
    CHECK(aclrtDeviceGetHostAtomicCapabilities(host_caps, ops, 2, 0));
    CHECK(aclrtDeviceGetP2PAtomicCapabilities(peer_caps, ops, 2, 0, 1));
    printf("atomics on the host: simt add 0x%x, dma add 0x%x; on device 1: 0x%x, 0x%x\n",
           host_caps[0], host_caps[1], peer_caps[0], peer_caps[1]);

    int32_t feature = -1;
    CHECK(aclrtGetDeviceCapability(0, ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV, &feature));
    int32_t compatible = -1;
    CHECK(aclrtCheckArchCompatibility(aclrtGetSocName(), &compatible));
    const aclCannAttr *attrs = NULL;
    size_t num = 0;
    int32_t bf16 = -1;
    CHECK(aclGetCannAttributeList(&attrs, &num));
    CHECK(aclGetCannAttribute(ACL_CANN_ATTR_BF16, &bf16));
    printf("task update %d, own soc compatible %d, %zu cann attributes, bf16 %d\n", feature,
           compatible, num, bf16);

    aclFloat16 half = aclFloatToFloat16(0.5f);
    printf("0.5 as half 0x%04x, back %.1f, float is %zu bytes\n", (unsigned)half,
           aclFloat16ToFloat(half), aclDataTypeSize(ACL_FLOAT));

    CHECK(aclrtDeviceDisablePeerAccess(1));
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    printf("device info ok\n");
    return 0;
}
