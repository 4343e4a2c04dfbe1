/* Command-line flags for the tools: "--name value" or "--name=value" (a value that starts
 * with "--" only in the second form, so that a flag missing its value is caught). A bad flag or
 * value prints a message naming the flag and exits with status 2; --version prints dcp's version;
 * --help prints the table, each flag's default read from its variable before parsing (a
 * help text that states its own default, for defaults that depend on other flags, is
 * printed as it is). */
#ifndef DCPT_CLI_ARGS_H
#define DCPT_CLI_ARGS_H

#include <stdint.h>

typedef enum { DCPT_ARG_FLAG, DCPT_ARG_INT, DCPT_ARG_DOUBLE, DCPT_ARG_STR } dcpt_arg_kind_t;

typedef struct {
    const char *name; /* without the leading "--" */
    dcpt_arg_kind_t kind;
    void *dst;        /* int (FLAG), int64_t (INT), double, const char * (STR) */
    int64_t min, max; /* INT: inclusive bounds; DOUBLE: min only when min < max */
    const char *help;
    int seen; /* set by the parser */
} dcpt_arg_t;

void dcpt_args_parse(int argc, char **argv, dcpt_arg_t *args, int nargs, const char *tool,
                     const char *summary);

/* Whether flag `name` was given. */
int dcpt_args_seen(const dcpt_arg_t *args, int nargs, const char *name);

/* Splits a comma-separated list; items point into a malloc'ed copy (free *storage_out
 * and *items_out). Exits 2 naming the flag on an empty item. */
int dcpt_args_split(const char *tool, const char *flag, const char *list, char ***items_out,
                    char **storage_out);

/* A function every bad-flag exit calls first (after printing its message, before exit(2));
 * tools run under an MPI launcher set dcpt_mpi_fail_early, so that a rank given a bad flag
 * still joins the job's start-up and the others name it instead of waiting for it. */
void dcpt_args_set_fail_hook(void (*hook)(void));

/* Exits 2 naming --<flag> unless `path` can be written: its folder exists and is writable,
 * and the file, if it exists, is a writable regular file. For outputs, checked before any
 * work starts. */
void dcpt_args_writable(const char *tool, const char *flag, const char *path);

/* Quiet (q = 1): bad-flag exits print nothing; for the ranks other than 0 of a job, which
 * all find the same configuration error, so that it is printed once. */
void dcpt_args_set_quiet(int q);

/* Exits 2 with "<tool>: --<flag>: <message>". */
void dcpt_args_fail(const char *tool, const char *flag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

#endif
