/*
 * dcp's settings: every DCP_* environment variable, declared once in one table (env.c) with its
 * type, default, range, scope and effect, and read through one parser, as NCCL declares its
 * parameters (NCCL_PARAM) and UCX its configuration tables. Nothing else in dcp reads a DCP_*
 * variable (tests/settings/check.py holds the tree to it); `dcp-topo --env` prints the table
 * with the values in force, and plugin/SETTINGS.md is generated from it.
 *
 * Reading rules, one for every setting:
 *  - unset, or set to the empty string: the default (a path set to "" is an error: a script's
 *    empty variable would otherwise mean "none" without a word);
 *  - a value that does not read (not a number, out of range, an unknown word) is an error
 *    that names the variable, its value and the rule: DCP_ERR_INVALID_ARG from the call that
 *    reads it. Context creation reads every library setting first (dcp_env_check), so a bad
 *    one fails the context by name before any collective;
 *  - nothing is cached: every read sees the environment as it is (tests set variables).
 * Rows of the tool, test and Python scopes are read by the tools, the test programs and
 * scripts, and the Python package; they are here so that the table is complete.
 */
#ifndef DCP_BASE_ENV_H
#define DCP_BASE_ENV_H

#include "include/dcp.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DCP_ENV_INT,     /* a decimal integer (or 0x hex) in [min, max] */
    DCP_ENV_SECONDS, /* a finite number of seconds > 0, at most max when max > 0 */
    DCP_ENV_BOOL,    /* 0, 1, no, yes, off, on, false, true (any case) */
    DCP_ENV_ENUM,    /* one of the row's words (any case) */
    DCP_ENV_LIST,    /* comma-separated words of the row's (any case): the union of their bits */
    DCP_ENV_PATH,    /* a file name; never empty */
    DCP_ENV_STRING,  /* text in a form of its own (the row's `form`), checked by its reader */
    DCP_ENV_TYPES
} dcp_env_type_t;

typedef enum {
    DCP_ENV_LIBRARY, /* libdcp reads it */
    DCP_ENV_TOOL,    /* the dcp-* tools read it */
    DCP_ENV_TEST,    /* the test programs and scripts, the benches (tests/) read it */
    DCP_ENV_PYTHON,  /* the Python package (plugin/python) reads it */
    DCP_ENV_SCOPES
} dcp_env_scope_t;

typedef struct {
    const char *word;
    int64_t value;
} dcp_env_word_t;

typedef struct {
    const char *name; /* "DCP_..." */
    dcp_env_type_t type;
    dcp_env_scope_t scope;
    const char *def;  /* the default, as the variable would be written; NULL: none (the effect
                         says what unset means) */
    int64_t min, max; /* INT: inclusive bounds; SECONDS: max (0: none) */
    const dcp_env_word_t *words; /* ENUM, LIST: ends with {NULL, 0}; the first spelling of a
                                    value is its name */
    const char *form;            /* STRING: its form, for people */
    const char *effect;          /* one line */
} dcp_env_row_t;

/* Every setting. The table's order is this one: library settings first, by subject. */
typedef enum {
    DCP_ENV_ATTN_ENGINE,
    DCP_ENV_ATTN_MIN_ROWS,
    DCP_ENV_ATTN_WARP_ROWS,
    DCP_ENV_DETERMINISTIC,
    DCP_ENV_CUDNN_LIB,
    DCP_ENV_CUDNN_UNGATED,
    DCP_ENV_CUDNN_GRAPH,
    DCP_ENV_CUDNN_PLANS,
    DCP_ENV_TIMEOUT_S,
    DCP_ENV_TRANSPORT_INTRA,
    DCP_ENV_TRANSPORT_INTER,
    DCP_ENV_PROGRESS,
    DCP_ENV_UCX_ERR_MODE,
    DCP_ENV_NCCL_LIB,
    DCP_ENV_NODE_FILE,
    DCP_ENV_DEBUG,
    DCP_ENV_DEBUG_SUBSYS,
    DCP_ENV_DEBUG_FILE,
    DCP_ENV_FAULT,
    DCP_ENV_FAULT_STAMP,
    DCP_ENV_WALK,
    DCP_ENV_WALK_SEED,
    DCP_ENV_WALK_SITES,
    DCP_ENV_WALK_VERBOSE,
    DCP_ENV_FAULT_MARGIN,
    DCP_ENV_KEEP,
    DCP_ENV_LENGTHS_FILE,
    DCP_ENV_BENCH_CLUSTERS,
    DCP_ENV_BENCH_PRESETS,
    DCP_ENV_BENCH_MASKS,
    DCP_ENV_SRUN_FAIL_UP,
    DCP_ENV_CLUSTER_PREFIX,
    DCP_ENV_CLUSTER_PPH,
    DCP_ENV_LIB,
    DCP_ENV_COUNT
} dcp_env_id_t;

/* The row of a setting; NULL for an id out of range. */
const dcp_env_row_t *dcp_env_row(dcp_env_id_t id);

/* "integer", "seconds", "boolean", "enum", "list", "path", "string". */
const char *dcp_env_type_name(dcp_env_type_t type);
/* "library", "tool", "test", "python". */
const char *dcp_env_scope_name(dcp_env_scope_t scope);

/* The rule a value must follow, for people: "integer in [1, 1048576]", "auto, own, cudnn or
 * twin", ... Returns buf. */
const char *dcp_env_rule(const dcp_env_row_t *row, char *buf, size_t cap);

/* The variable's text when it is set and not empty (the environment's string), else NULL. */
const char *dcp_env_raw(dcp_env_id_t id);

/* Whether the value in force reads (the default where unset); an error names the variable. */
dcp_status_t dcp_env_validate(dcp_env_id_t id);

/* The first setting of `scope` whose value does not read, as that setting's error. */
dcp_status_t dcp_env_check(dcp_env_scope_t scope);

/* The value in force. INT: the number; BOOL: 0 or 1; ENUM: its word's value; LIST: the union
 * of its words' values. *value_out is written only on success; a setting without a default
 * that is unset gives 0. */
dcp_status_t dcp_env_int(dcp_env_id_t id, int64_t *value_out);

/* The value in force of a SECONDS setting (0 when it has no default and is unset). Exported
 * from libdcp.so though not in dcp.h: libdcp_mpi, linked beside it, reads DCP_TIMEOUT_S. */
DCP_API dcp_status_t dcp_env_seconds(dcp_env_id_t id, double *value_out);

/* The value in force as text: PATH and STRING the variable's (or the default), ENUM the name
 * of its word (its first spelling in the table); NULL when unset without a default. */
dcp_status_t dcp_env_str(dcp_env_id_t id, const char **value_out);

/* The value in force where a failure cannot be returned (a policy function, a kernel
 * launch's shape): the default when the variable does not read. Context creation has refused
 * such a value already (dcp_env_check); code that can return a status uses the calls above. */
int64_t dcp_env_int_value(dcp_env_id_t id);
double dcp_env_seconds_value(dcp_env_id_t id);
const char *dcp_env_str_value(dcp_env_id_t id);

#ifdef __cplusplus
}
#endif

#endif
