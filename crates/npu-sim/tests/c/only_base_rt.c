/*
 * Includes nothing but acl/acl_base_rt.h, which must stand alone as CANN's does: its types,
 * codes, enums and macros are usable (the tensor layout and placement enums too, which CANN
 * declares there), and aclrtGetSocName (declared there on CANN) links. Built as C and as C++ by
 * tests/c_programs.rs.
 */
#include "acl/acl_base_rt.h"

#include <stdio.h>

int main(void)
{
    aclError ok = ACL_SUCCESS;
    aclrtStream stream = NULL;
    aclrtEvent event = NULL;
    aclrtContext context = NULL;
    aclFloat16 half = 0;
    aclFormat format = ACL_FORMAT_ND;
    aclMemType placement = ACL_MEMTYPE_HOST;
    const char *soc = aclrtGetSocName();
    printf("soc %s, success %d, bad param %d, handles %d, half %u\n", soc != NULL ? soc : "NULL", ok,
           ACL_ERROR_INVALID_PARAM, stream == NULL && event == NULL && context == NULL,
           (unsigned)half);
    printf("format ND %d, NZ %d, memtype host %d\n", (int)format, (int)ACL_FORMAT_FRACTAL_NZ,
           (int)placement);
    return 0;
}
