#include "plugin/cli/helpers/args.h"

#include "include/dcp.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void (*fail_hook)(void);
static int quiet;

void dcpt_args_set_quiet(int q)
{
    quiet = q;
}

void dcpt_args_set_fail_hook(void (*hook)(void))
{
    fail_hook = hook;
}

/* Every exit on a bad flag: status 2, after the tool's hook. */
static _Noreturn void bad_flags_exit(void)
{
    if (fail_hook) fail_hook();
    exit(2);
}

void dcpt_args_fail(const char *tool, const char *flag, const char *fmt, ...)
{
    /* one write, so that the ranks of a job never interleave their lines */
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "%s: --%s: ", tool, flag);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof msg) vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    if (!quiet) {
        fprintf(stderr, "%.*s\n", (int)sizeof msg - 2, msg);
        fflush(stderr);
    }
    bad_flags_exit();
}

/* " (default X)" from the flag's variable, or "" where the help says its own default or
 * there is none (a flag, an unset string). */
static void default_text(const dcpt_arg_t *a, char *out, size_t size)
{
    out[0] = '\0';
    if (strstr(a->help, "default")) return;
    switch (a->kind) {
    case DCPT_ARG_INT:
        snprintf(out, size, " (default %lld)", (long long)*(const int64_t *)a->dst);
        break;
    case DCPT_ARG_DOUBLE:
        snprintf(out, size, " (default %g)", *(const double *)a->dst);
        break;
    case DCPT_ARG_STR:
        if (*(const char *const *)a->dst)
            snprintf(out, size, " (default %s)", *(const char *const *)a->dst);
        break;
    case DCPT_ARG_FLAG:
        break;
    }
}

static void usage(const dcpt_arg_t *args, int nargs, const char *tool, const char *summary)
{
    printf("usage: %s [flags]\n%s\n\n", tool, summary);
    for (int i = 0; i < nargs; i++) {
        const char *v = args[i].kind == DCPT_ARG_FLAG  ? ""
                        : args[i].kind == DCPT_ARG_STR ? " S"
                                                       : " N";
        char left[48], def[160];
        snprintf(left, sizeof left, "--%s%s", args[i].name, v);
        default_text(&args[i], def, sizeof def);
        printf("  %-24s %s%s\n", left, args[i].help, def);
    }
    printf("  %-24s %s\n  %-24s %s\n", "--help", "this text", "--version",
           "dcp's version (the library's and the header's the tool was built with)");
}

void dcpt_args_writable(const char *tool, const char *flag, const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        dcpt_args_fail(tool, flag, "'%s': folder '%s' does not exist", path, dir);
    if (access(dir, W_OK) != 0) dcpt_args_fail(tool, flag, "'%s': cannot write in '%s'", path, dir);
    if (stat(path, &sb) == 0 && (!S_ISREG(sb.st_mode) || access(path, W_OK) != 0))
        dcpt_args_fail(tool, flag, "'%s' is not a writable file", path);
}

static void set_value(const char *tool, dcpt_arg_t *a, const char *val)
{
    char *end;
    errno = 0;
    switch (a->kind) {
    case DCPT_ARG_INT: {
        const long long x = strtoll(val, &end, 10);
        if (*val == '\0' || *end != '\0' || errno != 0)
            dcpt_args_fail(tool, a->name, "'%s' is not an integer", val);
        if (x < a->min || x > a->max)
            dcpt_args_fail(tool, a->name, "%lld is outside [%lld, %lld]", x, (long long)a->min,
                           (long long)a->max);
        *(int64_t *)a->dst = x;
        break;
    }
    case DCPT_ARG_DOUBLE: {
        const double x = strtod(val, &end);
        if (*val == '\0' || *end != '\0' || errno != 0 || !isfinite(x))
            dcpt_args_fail(tool, a->name, "'%s' is not a number", val);
        if (a->min < a->max && (x < (double)a->min || x > (double)a->max))
            dcpt_args_fail(tool, a->name, "%g is outside [%lld, %lld]", x, (long long)a->min,
                           (long long)a->max);
        *(double *)a->dst = x;
        break;
    }
    case DCPT_ARG_STR:
        if (*val == '\0') dcpt_args_fail(tool, a->name, "needs a value");
        *(const char **)a->dst = val;
        break;
    case DCPT_ARG_FLAG:
        break;
    }
}

void dcpt_args_parse(int argc, char **argv, dcpt_arg_t *args, int nargs, const char *tool,
                     const char *summary)
{
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            usage(args, nargs, tool, summary);
            exit(0);
        }
        if (!strcmp(s, "--version")) {
            printf("%s (dcp) %s, built with dcp.h %d.%d.%d\n", tool, dcp_version(),
                   DCP_VERSION_MAJOR, DCP_VERSION_MINOR, DCP_VERSION_PATCH);
            exit(0);
        }
        if (strncmp(s, "--", 2) != 0) {
            fprintf(stderr, "%s: unexpected argument '%s' (flags start with --)\n", tool, s);
            bad_flags_exit();
        }
        const char *name = s + 2, *eq = strchr(name, '=');
        const size_t len = eq ? (size_t)(eq - name) : strlen(name);
        dcpt_arg_t *a = NULL;
        for (int k = 0; k < nargs; k++)
            if (strlen(args[k].name) == len && !strncmp(args[k].name, name, len)) a = &args[k];
        if (!a) {
            fprintf(stderr, "%s: unknown flag --%.*s (see --help)\n", tool, (int)len, name);
            bad_flags_exit();
        }
        a->seen = 1;
        if (a->kind == DCPT_ARG_FLAG) {
            if (eq) dcpt_args_fail(tool, a->name, "takes no value");
            *(int *)a->dst = 1;
            continue;
        }
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val) dcpt_args_fail(tool, a->name, "needs a value");
        /* "--svg --json" is a forgotten value, not a file named --json */
        if (!eq && !strncmp(val, "--", 2))
            dcpt_args_fail(tool, a->name,
                           "needs a value, got the flag %s (--%s=%s takes it as the value)", val,
                           a->name, val);
        set_value(tool, a, val);
    }
}

int dcpt_args_split(const char *tool, const char *flag, const char *list, char ***items_out,
                    char **storage_out)
{
    const size_t len = strlen(list);
    char *copy = malloc(len + 1);
    char **items = malloc((len / 2 + 2) * sizeof *items);
    if (!copy || !items) {
        fprintf(stderr, "%s: out of memory\n", tool);
        exit(1);
    }
    memcpy(copy, list, len + 1);
    int n = 0;
    for (char *p = copy;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (*p == '\0') dcpt_args_fail(tool, flag, "empty item in '%s'", list);
        items[n++] = p;
        if (!comma) break;
        p = comma + 1;
    }
    *items_out = items;
    *storage_out = copy;
    return n;
}

int dcpt_args_seen(const dcpt_arg_t *args, int nargs, const char *name)
{
    for (int i = 0; i < nargs; i++)
        if (!strcmp(args[i].name, name)) return args[i].seen;
    return 0;
}
