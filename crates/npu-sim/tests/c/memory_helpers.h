/* Shared by the C programs that check memory: the page size the runtime reports for an
 * address, and the properties of a physical allocation for the virtual memory functions. */
#ifndef NPUSIM_TEST_MEMORY_HELPERS_H
#define NPUSIM_TEST_MEMORY_HELPERS_H

#include <stdint.h>
#include <string.h>

#include "acl/acl.h"

/* The page size aclrtPointerGetAttributes reports for `ptr` (0, its error message read, if it
 * refuses). */
static inline uint32_t page_size_of(void *ptr)
{
    aclrtPtrAttributes attributes;
    memset(&attributes, 0, sizeof attributes);
    if (aclrtPointerGetAttributes(ptr, &attributes) != ACL_SUCCESS) {
        (void)aclGetRecentErrMsg();
        return 0;
    }
    return attributes.pageSize;
}

/* A pinned physical allocation's properties, without a shareable handle type, of memory
 * `attr` at location `id` of `type`. */
static inline aclrtPhysicalMemProp physical_prop(aclrtMemAttr attr, aclrtMemLocationType type,
                                                 uint32_t id)
{
    aclrtPhysicalMemProp prop;
    memset(&prop, 0, sizeof prop);
    prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
    prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    prop.memAttr = attr;
    prop.location.type = type;
    prop.location.id = id;
    return prop;
}

#endif
