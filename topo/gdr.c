/* GPUDirect RDMA's prerequisites from /proc, /sys and /dev (topo/gdr.h). */
#include "topo/gdr.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int exists(const char *root, const char *path)
{
    char full[4096];
    struct stat st;
    snprintf(full, sizeof full, "%s%s", root, path);
    return stat(full, &st) == 0;
}

/* The first line of root/path into buf ("" when unreadable). */
static void read_line(const char *root, const char *path, char *buf, size_t n)
{
    char full[4096];
    snprintf(full, sizeof full, "%s%s", root, path);
    buf[0] = '\0';
    FILE *f = fopen(full, "r");
    if (!f) return;
    if (!fgets(buf, (int)n, f)) buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
}

/* Linux >= major.minor by its release string ("6.1.0-18-amd64"). */
static int kernel_at_least(const char *release, int major, int minor)
{
    int a = 0, b = 0;
    if (sscanf(release, "%d.%d", &a, &b) != 2) return 0;
    return a > major || (a == major && b >= minor);
}

void dcp_gdr_probe(const char *root, dcp_gdr_t *out)
{
    if (!root) root = "";
    memset(out, 0, sizeof *out);
    char version[256];
    read_line(root, "/proc/driver/nvidia/version", version, sizeof version);
    out->nvidia = version[0] != '\0';
    out->open_module = strstr(version, "Open Kernel Module") != NULL;
    out->peermem =
        exists(root, "/sys/module/nvidia_peermem") || exists(root, "/sys/module/nv_peer_mem");
    out->gdrcopy = exists(root, "/dev/gdrdrv") || exists(root, "/sys/module/gdrdrv");
    read_line(root, "/proc/sys/kernel/osrelease", out->kernel, sizeof out->kernel);
    out->dmabuf = out->open_module && kernel_at_least(out->kernel, 5, 12);
}
