/* dcp's settings: the table and its parser (include/base/env.h). */
#include "include/base/env.h"

#include "include/base/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the table ----------------------------------------------------------------------------- */

static const dcp_env_word_t attn_engines[] = {
    {"auto", 0}, {"own", 1}, {"cudnn", 2}, {"twin", 3}, {NULL, 0}};
static const dcp_env_word_t warp_rows[] = {{"32", 32}, {"16", 16}, {NULL, 0}};
static const dcp_env_word_t cudnn_graphs[] = {{"fused", 0}, {"composite", 1}, {NULL, 0}};
static const dcp_env_word_t engines[] = {{"inproc", 0}, {"ucx", 1}, {"nccl", 2}, {NULL, 0}};
static const dcp_env_word_t progress[] = {{"auto", 0}, {"none", 1}, {NULL, 0}};
static const dcp_env_word_t err_modes[] = {{"auto", 0}, {"peer", 1}, {"none", 2}, {NULL, 0}};
/* NCCL_DEBUG's words; 0 and 1, the variable's older form ("set: print"), read as NONE and INFO */
static const dcp_env_word_t levels[] = {{"NONE", 0}, {"WARN", 1}, {"INFO", 2},
                                        {"0", 0},    {"1", 2},    {NULL, 0}};
static const dcp_env_word_t subsystems[] = {{"INIT", 1},   {"ENV", 2},  {"PLAN", 4}, {"ATTN", 8},
                                            {"CUDNN", 16}, {"ALL", 31}, {NULL, 0}};
static const dcp_env_word_t walks[] = {{"sample", 0}, {"full", 1}, {NULL, 0}};

/* The row of DCP_<id>: the name is made from the id, so that the two cannot disagree. */
#define ROW(id, ...) [DCP_ENV_##id] = {"DCP_" #id, __VA_ARGS__}

static const dcp_env_row_t rows[] = {
    ROW(ATTN_ENGINE, DCP_ENV_ENUM, DCP_ENV_LIBRARY, "auto", .words = attn_engines,
        .effect = "the attention engine of contexts whose config.attn_engine is unset: auto "
                  "(cuDNN where it loads, else dcp's kernels), own, cudnn, twin (CPU)"),
    ROW(ATTN_MIN_ROWS, DCP_ENV_INT, DCP_ENV_LIBRARY, "64", 1, 1 << 30,
        .effect = "the shortest run of rows the dense engine (cuDNN, the twin) takes; shorter "
                  "runs are masked segments on dcp's kernel"),
    ROW(ATTN_WARP_ROWS, DCP_ENV_ENUM, DCP_ENV_LIBRARY, "32", .words = warp_rows,
        .effect = "the CUDA forward kernel's shape: 4 warps of 32 rows, or 16 (8 warps of 16 "
                  "rows, 64-key chunks)"),
    ROW(DETERMINISTIC, DCP_ENV_BOOL, DCP_ENV_LIBRARY, "0",
        .effect = "1: the deterministic backward on every context (as "
                  "config.deterministic)"),
    ROW(CUDNN_LIB, DCP_ENV_PATH, DCP_ENV_LIBRARY, "libcudnn.so.9",
        .effect = "the cuDNN library the attention engine loads (dlopen)"),
    ROW(CUDNN_UNGATED, DCP_ENV_BOOL, DCP_ENV_LIBRARY, "0",
        .effect = "1: every attention class is tried on cuDNN, whatever its version's gates "
                  "(9.10.0 and 9.10.1 stay refused)"),
    ROW(CUDNN_GRAPH, DCP_ENV_ENUM, DCP_ENV_LIBRARY, "fused", .words = cudnn_graphs,
        .effect = "composite: full segments run cuDNN's composite graph instead of its fused "
                  "forward (where it has one: 9.15 on), to measure one against the other"),
    ROW(CUDNN_PLANS, DCP_ENV_INT, DCP_ENV_LIBRARY, "64", 1, 1 << 20,
        .effect = "the cuDNN execution plans a context caches (the least recently used one a "
                  "bound plan does not use is dropped)"),
    ROW(TIMEOUT_S, DCP_ENV_SECONDS, DCP_ENV_LIBRARY, "60",
        .effect = "the timeout of transfers and collectives where config.timeout_s is 0 (on a "
                  "GPU also how long queued work may stay unfinished); clamped to 1e9 s"),
    ROW(TRANSPORT_INTRA, DCP_ENV_ENUM, DCP_ENV_LIBRARY, NULL, .words = engines,
        .effect = "the engine between ranks of one node, for process ranks whose "
                  "config.transport_intra is unset; unset: chosen from the peer table"),
    ROW(TRANSPORT_INTER, DCP_ENV_ENUM, DCP_ENV_LIBRARY, NULL, .words = engines,
        .effect = "the engine between nodes, for process ranks whose config.transport_inter is "
                  "unset; unset: chosen from the peer table"),
    ROW(PROGRESS, DCP_ENV_ENUM, DCP_ENV_LIBRARY, "auto", .words = progress,
        .effect = "none: the executor does not drive UCX's progress while it computes (to "
                  "measure what driving gains)"),
    ROW(UCX_ERR_MODE, DCP_ENV_ENUM, DCP_ENV_LIBRARY, "auto", .words = err_modes,
        .effect = "UCX peer error handling: auto (between nodes), peer (everywhere: same-node "
                  "traffic leaves shared memory), none"),
    ROW(NCCL_LIB, DCP_ENV_PATH, DCP_ENV_LIBRARY, "libnccl.so.2",
        .effect = "the NCCL library the NCCL engine loads (dlopen)"),
    ROW(NODE_FILE, DCP_ENV_PATH, DCP_ENV_LIBRARY, NULL,
        .effect = "a node file (dcp-calibrate's measured figures) for process ranks whose "
                  "config.node_file is unset; unset: hwloc's figures"),
    ROW(DEBUG, DCP_ENV_ENUM, DCP_ENV_LIBRARY, "NONE", .words = levels,
        .effect = "the log: WARN says where dcp fell back, INFO also which engines, plans, "
                  "segments and cuDNN plans each context uses"),
    ROW(DEBUG_SUBSYS, DCP_ENV_LIST, DCP_ENV_LIBRARY, "ALL", .words = subsystems,
        .effect = "the log's subjects: INIT (engines), ENV (settings set), PLAN (plans bound), "
                  "ATTN (segments), CUDNN (cuDNN plans)"),
    ROW(DEBUG_FILE, DCP_ENV_PATH, DCP_ENV_LIBRARY, NULL,
        .effect = "the log's file, appended to (%h: host name, %p: process id); unset: "
                  "stderr"),
    ROW(FAULT, DCP_ENV_STRING, DCP_ENV_TOOL, NULL, .form = "RANK:PHASE:ACTION",
        .effect = "tests' fault injection: rank RANK of an MPI tool does ACTION (kill, stop, "
                  "exit) at PHASE; RANK:check:flip: dcp-transport-bench flips a received bit"),
    ROW(FAULT_STAMP, DCP_ENV_PATH, DCP_ENV_TOOL, NULL,
        .effect = "with DCP_FAULT: the file the faulty rank writes the fault's wall-clock time "
                  "to"),
    ROW(WALK, DCP_ENV_ENUM, DCP_ENV_TEST, "sample", .words = walks,
        .effect = "the failure walks: a seeded sample of the allocations and transport calls, "
                  "or every one (full)"),
    ROW(WALK_SEED, DCP_ENV_INT, DCP_ENV_TEST, "45", 0, INT64_MAX,
        .effect = "the seed of the failure walks' samples"),
    ROW(WALK_SITES, DCP_ENV_PATH, DCP_ENV_TEST, NULL,
        .effect = "a file the allocation walks append the sites they reached to (file:line)"),
    ROW(WALK_VERBOSE, DCP_ENV_BOOL, DCP_ENV_TEST, "0",
        .effect = "1: the failure walks print every step, not only those that went wrong"),
    ROW(FAULT_MARGIN, DCP_ENV_INT, DCP_ENV_TEST, NULL, 0, 3600,
        .effect = "seconds the kill tests allow beyond the timeout (tests/mpi/kill.sh: 6, "
                  "tests/cluster/run.sh: 8)"),
    ROW(KEEP, DCP_ENV_STRING, DCP_ENV_TEST, NULL, .form = "any text",
        .effect = "set: tests/cluster keeps its work folder"),
    ROW(LENGTHS_FILE, DCP_ENV_PATH, DCP_ENV_TEST, "../shared/data/lengths_wlbllm.txt",
        .effect = "the sequence lengths the benches of tests/perf sample (beside the "
                  "checkout)"),
    ROW(BENCH_CLUSTERS, DCP_ENV_STRING, DCP_ENV_TEST, "4x8 8x8 16x8", .form = "cluster specs",
        .effect = "the clusters tests/perf/overlap_bench.sh plans for"),
    ROW(BENCH_PRESETS, DCP_ENV_STRING, DCP_ENV_TEST, "h100-ib a100-efa", .form = "node presets",
        .effect = "the node presets tests/perf/overlap_bench.sh prices"),
    ROW(BENCH_MASKS, DCP_ENV_STRING, DCP_ENV_TEST, "causal,lambda,blockwise,shared-question",
        .form = "masks", .effect = "the masks tests/perf/overlap_bench.sh plans"),
    ROW(SRUN_FAIL_UP, DCP_ENV_PATH, DCP_ENV_TEST, NULL,
        .effect = "internal: tests/cluster/srun.sh's folder for its own failing start-up"),
    ROW(CLUSTER_PREFIX, DCP_ENV_STRING, DCP_ENV_TEST, NULL, .form = "a name",
        .effect = "internal: the emulated cluster's namespace prefix, for tests/cluster/enter.sh"),
    ROW(CLUSTER_PPH, DCP_ENV_INT, DCP_ENV_TEST, NULL, 1, 1024,
        .effect = "internal: the emulated cluster's processes per host, for "
                  "tests/cluster/enter.sh"),
    ROW(LIB, DCP_ENV_PATH, DCP_ENV_PYTHON, NULL,
        .effect = "the libdcp.so the Python package loads; unset: the one installed with it, "
                  "else build/lib"),
};

_Static_assert(sizeof rows / sizeof rows[0] == DCP_ENV_COUNT, "a row per setting");

/* ---- names --------------------------------------------------------------------------------- */

const dcp_env_row_t *dcp_env_row(dcp_env_id_t id)
{
    return (unsigned)id < DCP_ENV_COUNT ? &rows[id] : NULL;
}

const char *dcp_env_type_name(dcp_env_type_t type)
{
    static const char *const names[DCP_ENV_TYPES] = {"integer", "seconds", "boolean", "enum",
                                                     "list",    "path",    "string"};
    return (unsigned)type < DCP_ENV_TYPES ? names[type] : "?";
}

const char *dcp_env_scope_name(dcp_env_scope_t scope)
{
    static const char *const names[DCP_ENV_SCOPES] = {"library", "tool", "test", "python"};
    return (unsigned)scope < DCP_ENV_SCOPES ? names[scope] : "?";
}

/* The words of an enum or list, each value once (its first spelling): "a, b or c". */
static void words_text(const dcp_env_word_t *w, const char *last_sep, char *buf, size_t cap)
{
    size_t used = 0;
    int n = 0, total = 0;
    for (int i = 0; w[i].word; i++) {
        int first = 1;
        for (int j = 0; j < i; j++) first &= w[j].value != w[i].value;
        total += first;
    }
    buf[0] = '\0';
    for (int i = 0; w[i].word && used < cap; i++) {
        int first = 1;
        for (int j = 0; j < i; j++) first &= w[j].value != w[i].value;
        if (!first) continue;
        const char *sep = n == 0 ? "" : n == total - 1 ? last_sep : ", ";
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", sep, w[i].word);
        n++;
    }
}

const char *dcp_env_rule(const dcp_env_row_t *row, char *buf, size_t cap)
{
    char words[160];
    switch (row->type) {
    case DCP_ENV_INT:
        if (row->max == INT64_MAX)
            snprintf(buf, cap, "an integer >= %lld", (long long)row->min);
        else
            snprintf(buf, cap, "an integer in [%lld, %lld]", (long long)row->min,
                     (long long)row->max);
        break;
    case DCP_ENV_SECONDS:
        snprintf(buf, cap, "a number of seconds > 0");
        break;
    case DCP_ENV_BOOL:
        snprintf(buf, cap, "0 or 1 (no/yes, off/on, false/true)");
        break;
    case DCP_ENV_ENUM:
        words_text(row->words, " or ", words, sizeof words);
        snprintf(buf, cap, "%s", words);
        break;
    case DCP_ENV_LIST:
        words_text(row->words, ", ", words, sizeof words);
        snprintf(buf, cap, "a comma-separated list of %s", words);
        break;
    case DCP_ENV_PATH:
        snprintf(buf, cap, "a file name");
        break;
    default:
        snprintf(buf, cap, "%s", row->form ? row->form : "text");
        break;
    }
    return buf;
}

/* ---- the parser ---------------------------------------------------------------------------- */

const char *dcp_env_raw(dcp_env_id_t id)
{
    const dcp_env_row_t *row = dcp_env_row(id);
    const char *v = row ? getenv(row->name) : NULL;
    return v && *v ? v : NULL;
}

/* The error of a value that does not read: names the variable, the value and the rule. */
static dcp_status_t bad(const dcp_env_row_t *row, const char *text)
{
    char rule[200];
    dcp_env_rule(row, rule, sizeof rule);
    if (!row->def)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "$%s = \"%.60s\": %s", row->name, text, rule);
    return dcp_set_error(DCP_ERR_INVALID_ARG, "$%s = \"%.60s\": %s (unset: %s)", row->name, text,
                         rule, row->def);
}

static int word_value(const dcp_env_word_t *w, const char *text, size_t len, int64_t *out)
{
    for (int i = 0; w[i].word; i++)
        if (strlen(w[i].word) == len && strncasecmp(w[i].word, text, len) == 0) {
            *out = w[i].value;
            return 1;
        }
    return 0;
}

static int read_int(const char *text, int64_t min, int64_t max, int64_t *out)
{
    const int hex = text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
    const char *digits = hex ? text + 2 : text;
    if (!*digits || !(digits[0] == '-' || (digits[0] >= '0' && digits[0] <= '9') ||
                      (hex && strchr("abcdefABCDEF", digits[0]))))
        return 0; /* strtoll would take leading blanks and a '+' */
    char *end;
    errno = 0;
    const long long v = strtoll(text, &end, hex ? 16 : 10);
    if (*end != '\0' || errno == ERANGE || v < min || v > max) return 0;
    *out = v;
    return 1;
}

static int read_seconds(const char *text, int64_t max, double *out)
{
    char *end;
    const double v = strtod(text, &end);
    if (*end != '\0' || end == text || !isfinite(v) || !(v > 0)) return 0;
    if (max > 0 && v > (double)max) return 0;
    *out = v;
    return 1;
}

static int read_bool(const char *text, int64_t *out)
{
    static const dcp_env_word_t words[] = {{"0", 0},     {"1", 1},    {"no", 0},
                                           {"yes", 1},   {"off", 0},  {"on", 1},
                                           {"false", 0}, {"true", 1}, {NULL, 0}};
    return word_value(words, text, strlen(text), out);
}

static int read_list(const dcp_env_word_t *w, const char *text, int64_t *out)
{
    int64_t bits = 0;
    for (const char *p = text;;) {
        const size_t len = strcspn(p, ",");
        int64_t v;
        if (len == 0 || !word_value(w, p, len, &v)) return 0;
        bits |= v;
        if (p[len] == '\0') break;
        p += len + 1;
    }
    *out = bits;
    return 1;
}

/* `text` read as the row's type: numbers and words into *num, seconds into *secs. */
static int read_value(const dcp_env_row_t *row, const char *text, int64_t *num, double *secs)
{
    switch (row->type) {
    case DCP_ENV_INT:
        return read_int(text, row->min, row->max, num);
    case DCP_ENV_SECONDS:
        return read_seconds(text, row->max, secs);
    case DCP_ENV_BOOL:
        return read_bool(text, num);
    case DCP_ENV_ENUM:
        return word_value(row->words, text, strlen(text), num);
    case DCP_ENV_LIST:
        return read_list(row->words, text, num);
    default:
        return 1; /* a path (not empty: the raw value) or a string checked by its reader */
    }
}

typedef enum { READ_OK, READ_EMPTY_PATH, READ_BAD } read_result_t;

/* The value in force of `row`, read without recording anything: *text_out the variable's
 * text or the default (NULL when neither), *num and *secs per its type (0 when neither). A
 * variable that does not read leaves the default's values. */
static read_result_t parse(const dcp_env_row_t *row, const char **text_out, int64_t *num,
                           double *secs)
{
    *num = 0;
    *secs = 0;
    *text_out = row->def;
    if (row->def) (void)read_value(row, row->def, num, secs); /* the unit tests read them all */
    const char *set = getenv(row->name);
    if (!set || !*set) return set && row->type == DCP_ENV_PATH ? READ_EMPTY_PATH : READ_OK;
    int64_t n = 0;
    double s = 0;
    if (!read_value(row, set, &n, &s)) return READ_BAD;
    *text_out = set;
    *num = n;
    *secs = s;
    return READ_OK;
}

/* parse(), its failures recorded as errors that name the variable. */
static dcp_status_t lookup(dcp_env_id_t id, const dcp_env_row_t **row_out, const char **text_out,
                           int64_t *num, double *secs)
{
    const dcp_env_row_t *row = dcp_env_row(id);
    if (!row) return dcp_set_error(DCP_ERR_INTERNAL, "settings: no setting %d", (int)id);
    *row_out = row;
    switch (parse(row, text_out, num, secs)) {
    case READ_EMPTY_PATH:
        return dcp_set_error(DCP_ERR_INVALID_ARG, "$%s is set but empty: a file name, or unset",
                             row->name);
    case READ_BAD:
        return bad(row, getenv(row->name));
    default:
        return DCP_OK;
    }
}

dcp_status_t dcp_env_validate(dcp_env_id_t id)
{
    const dcp_env_row_t *row = NULL;
    const char *text = NULL;
    int64_t num;
    double secs;
    return lookup(id, &row, &text, &num, &secs);
}

dcp_status_t dcp_env_check(dcp_env_scope_t scope)
{
    for (int i = 0; i < DCP_ENV_COUNT; i++)
        if (rows[i].scope == scope) DCP_CHECK(dcp_env_validate((dcp_env_id_t)i));
    return DCP_OK;
}

static int is_number(const dcp_env_row_t *row)
{
    return row->type == DCP_ENV_INT || row->type == DCP_ENV_BOOL || row->type == DCP_ENV_ENUM ||
           row->type == DCP_ENV_LIST;
}

static int is_text(const dcp_env_row_t *row)
{
    return row->type == DCP_ENV_PATH || row->type == DCP_ENV_STRING || row->type == DCP_ENV_ENUM;
}

static dcp_status_t wrong_type(const dcp_env_row_t *row, const char *as)
{
    return dcp_set_error(DCP_ERR_INTERNAL, "settings: %s is a %s setting, read as %s", row->name,
                         dcp_env_type_name(row->type), as);
}

/* The name of an enum's value: its first spelling in the table. */
static const char *word_name(const dcp_env_row_t *row, int64_t value)
{
    for (int i = 0; row->words[i].word; i++)
        if (row->words[i].value == value) return row->words[i].word;
    return NULL;
}

dcp_status_t dcp_env_int(dcp_env_id_t id, int64_t *value_out)
{
    const dcp_env_row_t *row = NULL;
    const char *text = NULL;
    int64_t num;
    double secs;
    DCP_CHECK(lookup(id, &row, &text, &num, &secs));
    if (!is_number(row)) return wrong_type(row, "a number");
    *value_out = num;
    return DCP_OK;
}

dcp_status_t dcp_env_seconds(dcp_env_id_t id, double *value_out)
{
    const dcp_env_row_t *row = NULL;
    const char *text = NULL;
    int64_t num;
    double secs;
    DCP_CHECK(lookup(id, &row, &text, &num, &secs));
    if (row->type != DCP_ENV_SECONDS) return wrong_type(row, "seconds");
    *value_out = secs;
    return DCP_OK;
}

dcp_status_t dcp_env_str(dcp_env_id_t id, const char **value_out)
{
    const dcp_env_row_t *row = NULL;
    const char *text = NULL;
    int64_t num;
    double secs;
    DCP_CHECK(lookup(id, &row, &text, &num, &secs));
    if (!is_text(row)) return wrong_type(row, "text");
    *value_out = row->type == DCP_ENV_ENUM && text ? word_name(row, num) : text;
    return DCP_OK;
}

int64_t dcp_env_int_value(dcp_env_id_t id)
{
    const dcp_env_row_t *row = dcp_env_row(id);
    const char *text = NULL;
    int64_t num = 0;
    double secs;
    if (row && is_number(row)) (void)parse(row, &text, &num, &secs);
    return num;
}

double dcp_env_seconds_value(dcp_env_id_t id)
{
    const dcp_env_row_t *row = dcp_env_row(id);
    const char *text = NULL;
    int64_t num;
    double secs = 0;
    if (row && row->type == DCP_ENV_SECONDS) (void)parse(row, &text, &num, &secs);
    return secs;
}

const char *dcp_env_str_value(dcp_env_id_t id)
{
    const dcp_env_row_t *row = dcp_env_row(id);
    const char *text = NULL;
    int64_t num;
    double secs;
    if (!row || !is_text(row)) return NULL;
    (void)parse(row, &text, &num, &secs);
    return row->type == DCP_ENV_ENUM && text ? word_name(row, num) : text;
}
