/* dcp's opt-in log (include/base/log.h). */
#include "include/base/log.h"

#include "include/base/env.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int dcp_log_on(dcp_log_level_t level, dcp_log_subsys_t subsys)
{
    /* a value that does not read logs nothing: context creation has refused it by name */
    return dcp_env_int_value(DCP_ENV_DEBUG) >= (int64_t)level &&
           (dcp_env_int_value(DCP_ENV_DEBUG_SUBSYS) & (int64_t)subsys) != 0;
}

static const char *subsys_name(dcp_log_subsys_t s)
{
    switch (s) {
    case DCP_LOG_INIT:
        return "INIT";
    case DCP_LOG_ENV:
        return "ENV";
    case DCP_LOG_PLAN:
        return "PLAN";
    case DCP_LOG_ATTN:
        return "ATTN";
    default:
        return "CUDNN";
    }
}

/* $DCP_DEBUG_FILE with %h and %p replaced (NCCL_DEBUG_FILE's), into path. */
static void file_name(const char *pattern, char *path, size_t cap)
{
    size_t used = 0;
    for (const char *p = pattern; *p && used + 1 < cap; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            char host[256] = "";
            if (p[1] == 'h') gethostname(host, sizeof host - 1);
            const int n = p[1] == 'h' ? snprintf(path + used, cap - used, "%s", host)
                                      : snprintf(path + used, cap - used, "%ld", (long)getpid());
            used += n > 0 ? (size_t)n : 0;
            p++;
            continue;
        }
        path[used++] = *p;
    }
    path[used < cap ? used : cap - 1] = '\0';
}

void dcp_log(dcp_log_level_t level, dcp_log_subsys_t subsys, int32_t rank, const char *fmt, ...)
{
    if (!dcp_log_on(level, subsys)) return;
    char line[1024];
    char who[16] = "-";
    if (rank >= 0) snprintf(who, sizeof who, "%d", rank);
    int n = snprintf(line, sizeof line, "dcp:%ld:%s %s %s ", (long)getpid(), who,
                     level == DCP_LOG_WARN ? "WARN" : "INFO", subsys_name(subsys));
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = n > 0 ? (size_t)n : 0;
    if (len > sizeof line - 2) len = sizeof line - 2; /* cut: the newline still ends it */
    line[len++] = '\n';
    const char *pattern = dcp_env_str_value(DCP_ENV_DEBUG_FILE);
    int fd = STDERR_FILENO;
    if (pattern) {
        char path[1024];
        file_name(pattern, path, sizeof path);
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) fd = STDERR_FILENO; /* the line is not lost */
    }
    ssize_t w = write(fd, line, len);
    (void)w;
    if (fd != STDERR_FILENO) close(fd);
}
