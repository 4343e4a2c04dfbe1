/* Output files written whole or not at all (out_file.h). */
#include "include/base/out_file.h"

#include "include/base/error.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

dcp_status_t dcp_out_file_open(dcp_out_file_t *o, const char *path, const char *what)
{
    o->f = NULL;
    o->path[0] = o->tmp[0] = '\0';
    if (!path || !*path) return dcp_set_error(DCP_ERR_INVALID_ARG, "%s: no file name", what);
    if (strlen(path) >= sizeof o->path)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s '%.64s...': the path is too long", what,
                             path);
    memcpy(o->path, path, strlen(path) + 1);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid());
    if (!(o->f = fopen(o->tmp, "w")))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s '%s': %s", what, path, strerror(errno));
    return DCP_OK;
}

dcp_status_t dcp_out_file_close(dcp_out_file_t *o, dcp_status_t st, const char *what)
{
    if (!o->f) return st;
    const int wrote = !ferror(o->f);
    const int closed = fclose(o->f) == 0;
    const int err = errno;
    o->f = NULL;
    if (st == DCP_OK && (!wrote || !closed))
        st = dcp_set_error(DCP_ERR_SYSTEM, "%s '%s': %s", what, o->path,
                           closed ? "write error" : strerror(err));
    if (st == DCP_OK && rename(o->tmp, o->path) != 0)
        st = dcp_set_error(DCP_ERR_SYSTEM, "%s '%s': %s", what, o->path, strerror(errno));
    if (st != DCP_OK) unlink(o->tmp);
    return st;
}
