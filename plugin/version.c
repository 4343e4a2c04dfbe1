/* dcp_version(): the library's version, from the header it was built with. */
#include "include/dcp.h"

#define DCP_STR_(x) #x
#define DCP_STR(x)  DCP_STR_(x)

const char *dcp_version(void)
{
    return DCP_STR(DCP_VERSION_MAJOR) "." DCP_STR(DCP_VERSION_MINOR) "." DCP_STR(DCP_VERSION_PATCH);
}
