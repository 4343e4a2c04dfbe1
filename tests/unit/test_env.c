/* The table of settings and its parser (include/base/env.h): the table is whole, each type
 * reads its good values and refuses its bad ones by name, defaults hold where a variable is
 * unset or empty, context creation refuses a bad library setting; and the opt-in log
 * (include/base/log.h) of a small in-process job names its engine, plan and segments, and is
 * silent unless asked. */
#include "include/base/env.h"
#include "include/base/error.h"
#include "include/dcp.h"
#include "plugin/cli/support/harness.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Every variable this suite sets, unset before and after each test. */
static const char *const touched[] = {
    "DCP_ATTN_MIN_ROWS", "DCP_TIMEOUT_S",       "DCP_DETERMINISTIC", "DCP_ATTN_ENGINE",
    "DCP_DEBUG",         "DCP_DEBUG_SUBSYS",    "DCP_DEBUG_FILE",    "DCP_NODE_FILE",
    "DCP_CUDNN_LIB",     "DCP_TRANSPORT_INTRA", "DCP_WALK",          "DCP_CUDNN_PLANS",
    "DCP_FAULT",         "DCP_ATTN_WARP_ROWS",  "DCP_UCX_ERR_MODE",  NULL};

static void clear(void)
{
    for (int i = 0; touched[i]; i++) unsetenv(touched[i]);
}

/* The variable of `id` set to `value`, read as a number: the status, and the last error
 * naming the variable, the value and `rule` when it is refused. */
static dcp_status_t int_of(dcp_env_id_t id, const char *value, int64_t *out)
{
    setenv(dcp_env_row(id)->name, value, 1);
    return dcp_env_int(id, out);
}

static void expect_refused(dcp_env_id_t id, const char *value, const char *rule)
{
    setenv(dcp_env_row(id)->name, value, 1);
    const dcp_status_t st = dcp_env_validate(id);
    CU_ASSERT_EQUAL(st, DCP_ERR_INVALID_ARG);
    char want[128];
    snprintf(want, sizeof want, "$%s = \"%s\"", dcp_env_row(id)->name, value);
    if (st != DCP_ERR_INVALID_ARG || !strstr(dcp_last_error(), want) ||
        !strstr(dcp_last_error(), rule))
        fprintf(stderr, "env: %s=%s: %s\n", dcp_env_row(id)->name, value, dcp_last_error());
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), want));
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), rule));
}

/* Every id has its row: a DCP_ name of its own, a type and scope, an effect, words where the
 * type needs them, a form for strings, and a default that reads. */
static void test_table_is_whole(void)
{
    clear();
    int library = 0;
    for (int i = 0; i < DCP_ENV_COUNT; i++) {
        const dcp_env_row_t *r = dcp_env_row((dcp_env_id_t)i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r->name);
        CU_ASSERT_EQUAL(strncmp(r->name, "DCP_", 4), 0);
        for (int j = 0; j < i; j++) CU_ASSERT_STRING_NOT_EQUAL(r->name, dcp_env_row(j)->name);
        CU_ASSERT(r->type < DCP_ENV_TYPES && r->scope < DCP_ENV_SCOPES);
        CU_ASSERT(r->effect && strlen(r->effect) > 10);
        if (r->type == DCP_ENV_ENUM || r->type == DCP_ENV_LIST)
            CU_ASSERT(r->words && r->words[0].word);
        if (r->type == DCP_ENV_STRING) CU_ASSERT_PTR_NOT_NULL(r->form);
        if (r->type == DCP_ENV_INT) CU_ASSERT(r->min <= r->max);
        if (r->def) { /* the default, written as the variable, reads (the user's value kept) */
            char *had = getenv(r->name) ? strdup(getenv(r->name)) : NULL;
            setenv(r->name, r->def, 1);
            CU_ASSERT_EQUAL(dcp_env_validate((dcp_env_id_t)i), DCP_OK);
            if (had)
                setenv(r->name, had, 1);
            else
                unsetenv(r->name);
            free(had);
        }
        library += r->scope == DCP_ENV_LIBRARY;
    }
    CU_ASSERT(library >= 18);
    CU_ASSERT_PTR_NULL(dcp_env_row(DCP_ENV_COUNT));
    CU_ASSERT_STRING_EQUAL(dcp_env_row(DCP_ENV_TIMEOUT_S)->name, "DCP_TIMEOUT_S");
    CU_ASSERT_STRING_EQUAL(dcp_env_row(DCP_ENV_LIB)->name, "DCP_LIB");
    CU_ASSERT_EQUAL(dcp_env_row(DCP_ENV_LIB)->scope, DCP_ENV_PYTHON);
    CU_ASSERT_EQUAL(dcp_env_row(DCP_ENV_WALK)->scope, DCP_ENV_TEST);
    CU_ASSERT_EQUAL(dcp_env_row(DCP_ENV_FAULT)->scope, DCP_ENV_TOOL);
}

/* Integers: decimal or 0x hex within the row's range; the default where unset or empty. */
static void test_integers(void)
{
    clear();
    int64_t v = -1;
    CU_ASSERT_EQUAL(dcp_env_int(DCP_ENV_ATTN_MIN_ROWS, &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 64);
    CU_ASSERT_EQUAL(int_of(DCP_ENV_ATTN_MIN_ROWS, "", &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 64);
    CU_ASSERT_EQUAL(int_of(DCP_ENV_ATTN_MIN_ROWS, "128", &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 128);
    CU_ASSERT_EQUAL(int_of(DCP_ENV_ATTN_MIN_ROWS, "0x20", &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 32);
    CU_ASSERT_EQUAL(int_of(DCP_ENV_ATTN_MIN_ROWS, "1", &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 1);
    const char *bad[] = {"0",   "-1", "abc",        "12x", " 5",
                         "+5",  "5 ", "1073741825", "0x",  "99999999999999999999",
                         "1e3", NULL};
    for (int i = 0; bad[i]; i++) {
        v = -7;
        CU_ASSERT_EQUAL(int_of(DCP_ENV_ATTN_MIN_ROWS, bad[i], &v), DCP_ERR_INVALID_ARG);
        CU_ASSERT_EQUAL(v, -7); /* untouched */
        expect_refused(DCP_ENV_ATTN_MIN_ROWS, bad[i], "an integer in [1, 1073741824]");
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "(unset: 64)"));
    }
    /* the lax read gives the default and records nothing */
    setenv("DCP_ATTN_MIN_ROWS", "many", 1);
    dcp_set_error(DCP_ERR_INTERNAL, "before");
    CU_ASSERT_EQUAL(dcp_env_int_value(DCP_ENV_ATTN_MIN_ROWS), 64);
    CU_ASSERT_STRING_EQUAL(dcp_last_error(), "before");
    setenv("DCP_WALK_SEED", "0x2d", 1);
    CU_ASSERT_EQUAL(dcp_env_int_value(DCP_ENV_WALK_SEED), 45);
    unsetenv("DCP_WALK_SEED");
    clear();
}

/* Seconds: a finite number > 0; "5s", which the MPI bootstrap once read as 5, is refused. */
static void test_seconds(void)
{
    clear();
    double s = -1;
    CU_ASSERT_EQUAL(dcp_env_seconds(DCP_ENV_TIMEOUT_S, &s), DCP_OK);
    CU_ASSERT_EQUAL(s, 60.0);
    setenv("DCP_TIMEOUT_S", "7.5", 1);
    CU_ASSERT_EQUAL(dcp_env_seconds(DCP_ENV_TIMEOUT_S, &s), DCP_OK);
    CU_ASSERT_EQUAL(s, 7.5);
    setenv("DCP_TIMEOUT_S", "1e-3", 1);
    CU_ASSERT_EQUAL(dcp_env_seconds(DCP_ENV_TIMEOUT_S, &s), DCP_OK);
    CU_ASSERT_EQUAL(s, 1e-3);
    const char *bad[] = {"5s", "0", "-1", "nan", "inf", "abc", " ", NULL};
    for (int i = 0; bad[i]; i++) {
        s = -7;
        setenv("DCP_TIMEOUT_S", bad[i], 1);
        CU_ASSERT_EQUAL(dcp_env_seconds(DCP_ENV_TIMEOUT_S, &s), DCP_ERR_INVALID_ARG);
        CU_ASSERT_EQUAL(s, -7.0);
        expect_refused(DCP_ENV_TIMEOUT_S, bad[i], "a number of seconds > 0 (unset: 60)");
    }
    setenv("DCP_TIMEOUT_S", "5s", 1);
    CU_ASSERT_EQUAL(dcp_env_seconds_value(DCP_ENV_TIMEOUT_S), 60.0);
    /* a number read as seconds, seconds read as a number: the caller's mistake, not the user's */
    CU_ASSERT_EQUAL(dcp_env_seconds(DCP_ENV_ATTN_MIN_ROWS, &s), DCP_ERR_INTERNAL);
    int64_t v;
    unsetenv("DCP_TIMEOUT_S");
    CU_ASSERT_EQUAL(dcp_env_int(DCP_ENV_TIMEOUT_S, &v), DCP_ERR_INTERNAL);
    clear();
}

/* Booleans: 0/1 and their words in any case; anything else is refused (DCP_DETERMINISTIC=yes
 * once meant off without a word). */
static void test_booleans(void)
{
    clear();
    int64_t v = -1;
    CU_ASSERT_EQUAL(dcp_env_int(DCP_ENV_DETERMINISTIC, &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 0);
    const char *on[] = {"1", "yes", "ON", "True", NULL}, *off[] = {"0", "no", "off", "FALSE", NULL};
    for (int i = 0; on[i]; i++) {
        CU_ASSERT_EQUAL(int_of(DCP_ENV_DETERMINISTIC, on[i], &v), DCP_OK);
        CU_ASSERT_EQUAL(v, 1);
        CU_ASSERT_EQUAL(int_of(DCP_ENV_DETERMINISTIC, off[i], &v), DCP_OK);
        CU_ASSERT_EQUAL(v, 0);
    }
    const char *bad[] = {"2", "y", "enabled", "-1", NULL};
    for (int i = 0; bad[i]; i++) expect_refused(DCP_ENV_DETERMINISTIC, bad[i], "0 or 1");
    clear();
}

/* Enums: one of the row's words in any case, given back as the table spells it; DCP_DEBUG's
 * older 0 and 1 read as NONE and INFO. */
static void test_enums(void)
{
    clear();
    const char *s = "x";
    CU_ASSERT_EQUAL(dcp_env_str(DCP_ENV_ATTN_ENGINE, &s), DCP_OK);
    CU_ASSERT_STRING_EQUAL(s, "auto");
    setenv("DCP_ATTN_ENGINE", "CuDNN", 1);
    CU_ASSERT_EQUAL(dcp_env_str(DCP_ENV_ATTN_ENGINE, &s), DCP_OK);
    CU_ASSERT_STRING_EQUAL(s, "cudnn");
    int64_t v = -1;
    CU_ASSERT_EQUAL(dcp_env_int(DCP_ENV_ATTN_ENGINE, &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 2);
    expect_refused(DCP_ENV_ATTN_ENGINE, "fast", "auto, own, cudnn or twin (unset: auto)");
    expect_refused(DCP_ENV_ATTN_ENGINE, "cudnn ", "auto, own, cudnn or twin");
    CU_ASSERT_EQUAL(int_of(DCP_ENV_DEBUG, "1", &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 2);
    CU_ASSERT_EQUAL(int_of(DCP_ENV_DEBUG, "info", &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 2);
    CU_ASSERT_EQUAL(dcp_env_str(DCP_ENV_DEBUG, &s), DCP_OK);
    CU_ASSERT_STRING_EQUAL(s, "INFO");
    CU_ASSERT_EQUAL(int_of(DCP_ENV_DEBUG, "0", &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL(int_of(DCP_ENV_DEBUG, "WARN", &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 1);
    expect_refused(DCP_ENV_DEBUG, "2", "NONE, WARN or INFO"); /* each value named once */
    expect_refused(DCP_ENV_DEBUG, "TRACE", "NONE, WARN or INFO");
    expect_refused(DCP_ENV_ATTN_WARP_ROWS, "64", "32 or 16");
    /* no default: unset reads as NULL, a word as itself */
    CU_ASSERT_EQUAL(dcp_env_str(DCP_ENV_TRANSPORT_INTRA, &s), DCP_OK);
    CU_ASSERT_PTR_NULL(s);
    setenv("DCP_TRANSPORT_INTRA", "UCX", 1);
    CU_ASSERT_EQUAL(dcp_env_str(DCP_ENV_TRANSPORT_INTRA, &s), DCP_OK);
    CU_ASSERT_STRING_EQUAL(s, "ucx");
    expect_refused(DCP_ENV_TRANSPORT_INTRA, "tcp", "inproc, ucx or nccl");
    CU_ASSERT_PTR_NULL(strstr(dcp_last_error(), "unset:")); /* no default to name */
    CU_ASSERT_PTR_NULL(dcp_env_str_value(DCP_ENV_TRANSPORT_INTRA));
    expect_refused(DCP_ENV_UCX_ERR_MODE, "sometimes", "auto, peer or none");
    clear();
}

/* Lists: comma-separated words, the union of their bits; an empty item or an unknown word is
 * refused. */
static void test_lists(void)
{
    clear();
    int64_t v = -1;
    CU_ASSERT_EQUAL(dcp_env_int(DCP_ENV_DEBUG_SUBSYS, &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 31);
    CU_ASSERT_EQUAL(int_of(DCP_ENV_DEBUG_SUBSYS, "INIT,plan", &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 1 | 4);
    CU_ASSERT_EQUAL(int_of(DCP_ENV_DEBUG_SUBSYS, "CUDNN", &v), DCP_OK);
    CU_ASSERT_EQUAL(v, 16);
    const char *bad[] = {"INIT,,PLAN", "INIT,", ",INIT", "FOO", "INIT PLAN", NULL};
    for (int i = 0; bad[i]; i++)
        expect_refused(DCP_ENV_DEBUG_SUBSYS, bad[i], "a comma-separated list of INIT, ENV");
    clear();
}

/* Paths: the variable's text, the default where unset; set but empty is refused (a script's
 * empty variable must not mean "none" without a word); strings are their reader's. */
static void test_paths_and_strings(void)
{
    clear();
    const char *s = "x";
    CU_ASSERT_EQUAL(dcp_env_str(DCP_ENV_NODE_FILE, &s), DCP_OK);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_EQUAL(dcp_env_str(DCP_ENV_CUDNN_LIB, &s), DCP_OK);
    CU_ASSERT_STRING_EQUAL(s, "libcudnn.so.9");
    setenv("DCP_CUDNN_LIB", "/opt/cudnn/libcudnn.so.9", 1);
    CU_ASSERT_EQUAL(dcp_env_str(DCP_ENV_CUDNN_LIB, &s), DCP_OK);
    CU_ASSERT_STRING_EQUAL(s, "/opt/cudnn/libcudnn.so.9");
    setenv("DCP_NODE_FILE", "", 1);
    s = "x";
    CU_ASSERT_EQUAL(dcp_env_str(DCP_ENV_NODE_FILE, &s), DCP_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(s, "x");
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "$DCP_NODE_FILE is set but empty"));
    setenv("DCP_CUDNN_LIB", "", 1);
    CU_ASSERT_EQUAL(dcp_env_validate(DCP_ENV_CUDNN_LIB), DCP_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(dcp_env_str_value(DCP_ENV_CUDNN_LIB), "libcudnn.so.9");
    CU_ASSERT_PTR_NULL(dcp_env_raw(DCP_ENV_CUDNN_LIB));
    setenv("DCP_FAULT", "1:check:flip", 1);
    CU_ASSERT_EQUAL(dcp_env_str(DCP_ENV_FAULT, &s), DCP_OK);
    CU_ASSERT_STRING_EQUAL(s, "1:check:flip");
    CU_ASSERT_STRING_EQUAL(dcp_env_raw(DCP_ENV_FAULT), "1:check:flip");
    int64_t v;
    CU_ASSERT_EQUAL(dcp_env_int(DCP_ENV_FAULT, &v), DCP_ERR_INTERNAL); /* text read as number */
    clear();
}

/* dcp_env_check takes one scope: the first bad setting of that scope, by name; context
 * creation checks the library's, so a value read loosely before (DCP_CUDNN_PLANS=abc was 64,
 * DCP_ATTN_MIN_ROWS=0 was 64) now fails it by name, even on a context that would not use
 * it. */
static void test_check_by_scope_and_context(void)
{
    clear();
    CU_ASSERT_EQUAL(dcp_env_check(DCP_ENV_LIBRARY), DCP_OK);
    setenv("DCP_WALK", "every", 1);
    CU_ASSERT_EQUAL(dcp_env_check(DCP_ENV_LIBRARY), DCP_OK);
    CU_ASSERT_EQUAL(dcp_env_check(DCP_ENV_TEST), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "$DCP_WALK = \"every\": sample or full"));
    unsetenv("DCP_WALK");
    dcp_group_t *g = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_group_create(1, &g), DCP_OK);
    const dcp_context_config_t cfg = {.group = g};
    const char *const vars[3][2] = {
        {"DCP_CUDNN_PLANS", "abc"}, {"DCP_ATTN_MIN_ROWS", "0"}, {"DCP_UCX_ERR_MODE", "always"}};
    for (int i = 0; i < 3; i++) {
        setenv(vars[i][0], vars[i][1], 1);
        dcp_context_t *ctx = NULL;
        CU_ASSERT_EQUAL(dcp_context_create(&cfg, &ctx), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NULL(ctx);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), vars[i][0]));
        unsetenv(vars[i][0]);
    }
    dcp_context_t *ctx = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_context_create(&cfg, &ctx), DCP_OK);
    dcp_context_destroy(ctx);
    dcp_group_destroy(g);
    clear();
}

/* ---- the log -------------------------------------------------------------------------------- */

/* A causal batch on 2 in-process ranks with the CPU twin of cuDNN, forward once, with the log
 * going to `dir`/log.%p; the log's text (malloc'ed, "" when no file was written). */
static char *run_logged(const char *dir)
{
    char pattern[512], path[512];
    snprintf(pattern, sizeof pattern, "%s/log.%%p", dir);
    snprintf(path, sizeof path, "%s/log.%ld", dir, (long)getpid());
    unlink(path);
    setenv("DCP_DEBUG_FILE", pattern, 1);
    const int32_t len[2] = {256, 130};
    dcp_mask_t m[2] = {{.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}};
    const dcp_attn_shape_t shape = {4, 2, 16, DCP_DTYPE_FP32, 0.0f};
    dcpt_harness_t *h = NULL;
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 2, m, &shape, 5, &h), DCP_OK);
    h->attn_engine = "twin";
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = DCP_STRATEGY_ZIGZAG;
    o.block_size = 64;
    const dcp_batch_t b = dcpt_harness_batch(h);
    dcp_plan_t *p = t_plan_shape(b.lengths, b.num_seqs, b.masks, "1x2", &h->shape, &o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    dcpt_harness_result_t r;
    CU_ASSERT_EQUAL(dcpt_harness_run(h, p, 0, 1, 30.0, 1e-5, "cpu", &r), DCP_OK);
    dcp_plan_destroy(p);
    dcpt_harness_destroy(h);
    unsetenv("DCP_DEBUG_FILE");
    FILE *f = fopen(path, "r");
    char *text = calloc(1 << 16, 1);
    if (f) {
        const size_t n = fread(text, 1, (1 << 16) - 1, f);
        text[n] = '\0';
        fclose(f);
        unlink(path);
    }
    return text;
}

/* Whether `text` has a line that starts with `head` and holds every one of `words`. */
static int has_line(const char *text, const char *head, const char *const *words)
{
    for (const char *l = text; *l;) {
        const char *end = strchr(l, '\n');
        const size_t n = end ? (size_t)(end - l) : strlen(l);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), l);
        int all = strncmp(line, head, strlen(head)) == 0;
        for (int i = 0; all && words[i]; i++) all = strstr(line, words[i]) != NULL;
        if (all) return 1;
        l += n + (end ? 1 : 0);
    }
    return 0;
}

static void test_log_names_engine_plan_and_segments(void)
{
    clear();
    char dir[] = "/tmp/dcp-env-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char head0[64], head1[64];
    snprintf(head0, sizeof head0, "dcp:%ld:0 INFO ", (long)getpid());
    snprintf(head1, sizeof head1, "dcp:%ld:1 INFO ", (long)getpid());

    /* off by default, and at WARN when nothing fell back: nothing written */
    char *text = run_logged(dir);
    CU_ASSERT_STRING_EQUAL(text, "");
    free(text);
    setenv("DCP_DEBUG", "WARN", 1);
    text = run_logged(dir);
    CU_ASSERT_STRING_EQUAL(text, "");
    free(text);

    setenv("DCP_DEBUG", "INFO", 1);
    text = run_logged(dir);
    const char *env[] = {"ENV DCP_DEBUG set by environment to INFO", NULL};
    const char *init[] = {"INIT intra-node links: engine inproc", "threads of one process", NULL};
    const char *report[] = {"INIT engine inproc", "call stamps", NULL};
    const char *plan[] = {"PLAN plan ",   " bound: strategy zigzag", "2 ranks on 1 node,",
                          "token blocks", "bytes of work buffers",   NULL};
    const char *fwd[] = {"ATTN plan ", " forward: ", "causal ", " pairs on twin", NULL};
    const char *bwd[] = {"ATTN plan ", " backward: ", NULL};
    CU_ASSERT(has_line(text, head0, env));
    CU_ASSERT(has_line(text, head0, init));
    CU_ASSERT(has_line(text, head1, init));
    CU_ASSERT(has_line(text, head0, report));
    CU_ASSERT(has_line(text, head0, plan));
    CU_ASSERT(has_line(text, head1, plan));
    CU_ASSERT(has_line(text, head0, fwd));
    CU_ASSERT(has_line(text, head0, bwd));
    if (!has_line(text, head0, plan) || !has_line(text, head0, fwd))
        fprintf(stderr, "the log:\n%s", text);
    free(text);

    /* the older form, DCP_DEBUG=1, is INFO; a subject list keeps only its subjects */
    setenv("DCP_DEBUG", "1", 1);
    setenv("DCP_DEBUG_SUBSYS", "PLAN", 1);
    text = run_logged(dir);
    CU_ASSERT(has_line(text, head0, plan));
    CU_ASSERT(!has_line(text, head0, init) && !has_line(text, head0, fwd));
    int lines = 0;
    for (const char *c = text; *c; c++) lines += *c == '\n';
    CU_ASSERT_EQUAL(lines, 2); /* one plan bound on each of 2 ranks */
    free(text);
    rmdir(dir);
    clear();
}

int dcp_suite_env(void)
{
    static const dcp_test_t tests[] = {
        {"table_is_whole", test_table_is_whole},
        {"integers", test_integers},
        {"seconds", test_seconds},
        {"booleans", test_booleans},
        {"enums", test_enums},
        {"lists", test_lists},
        {"paths_and_strings", test_paths_and_strings},
        {"check_by_scope_and_context", test_check_by_scope_and_context},
        {"log_names_engine_plan_and_segments", test_log_names_engine_plan_and_segments},
        {NULL, NULL},
    };
    return dcp_add_suite("env", tests);
}
