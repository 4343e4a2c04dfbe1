/* libFuzzer target over plan bytes: `make fuzz` builds build-fuzz/bin/dcp-plan-fuzz (clang,
 * ASan + UBSan, the library instrumented for coverage), then e.g.
 *   build-fuzz/bin/dcp-plan-fuzz -max_total_time=600 CORPUS_DIR
 * An empty corpus directory given first is filled with the seed plans. Inputs are taken
 * raw and, with their checksum and payload length re-sealed, again (so that mutations
 * reach the validator, not only the checksum); any broken promise of
 * dcp_plan_deserialize() (tests/fuzz/plan_input.h) aborts with its text. */
#include "tests/fuzz/plan_input.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { RUN_MAX_TOKENS = 256 };

static int dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return 0;
    int empty = 1;
    for (struct dirent *e; empty && (e = readdir(d));)
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    return empty;
}

static void write_seeds(const char *dir)
{
    uint8_t **bytes;
    size_t *sizes;
    const int n = dcpt_plan_seeds(&bytes, &sizes);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/seed-%02d.plan", dir, i);
        FILE *f = fopen(path, "wb");
        if (f) {
            fwrite(bytes[i], 1, sizes[i], f);
            fclose(f);
        }
    }
    dcpt_plan_seeds_free(bytes, sizes, n);
    fprintf(stderr, "dcp-plan-fuzz: wrote %d seed plans to %s\n", n, dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    for (int i = 1; i < *argc; i++) {
        if ((*argv)[i][0] == '-') continue;
        if (dir_is_empty((*argv)[i])) write_seeds((*argv)[i]);
        break;
    }
    return 0;
}

static void check(const uint8_t *b, size_t n)
{
    dcpt_plan_verdict_t v;
    const char *why = dcpt_plan_input_check(b, n, RUN_MAX_TOKENS, &v);
    if (why) {
        fprintf(stderr, "dcp-plan-fuzz: %s\n", why);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    if (size < DCPT_PLAN_HEADER) return 0;
    uint8_t *sealed = malloc(size);
    if (!sealed) return 0;
    memcpy(sealed, data, size);
    dcpt_plan_reseal(sealed, size);
    check(sealed, size);
    free(sealed);
    return 0;
}
