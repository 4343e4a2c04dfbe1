#include "topo/cluster.h"
#include "topo/kernel_table.h"
#include "tests/unit/suites.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_spec_shapes_and_figures(void)
{
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("4x8", &c), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cluster_num_ranks(c), 32);
    CU_ASSERT_EQUAL(dcp_cluster_num_nodes(c), 4);
    CU_ASSERT_EQUAL(dcp_cluster_node_of(c, 15), 1);
    dcp_cluster_destroy(c);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4:intra=300:inter=6.25:lat=5", &c), DCP_OK);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps, 6.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.intra_gbps, 300, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.lat_us, 5, 1e-12);
    dcp_cluster_destroy(c);
    dcp_cluster_destroy(NULL);
}

/* DCP's testbed (p4de: 4 NICs, 80 GB parts) and the one-NIC node under its own name. */
static void test_presets(void)
{
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("4xp4de", &c), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cluster_num_ranks(c), 32);
    CU_ASSERT_EQUAL(c->nics_per_node, 4);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps * 8, 50.0, 1e-12); /* 4 x 100 Gb/s per node */
    CU_ASSERT_DOUBLE_EQUAL(c->perf.intra_gbps, 300, 1e-12);      /* 600 GB/s both ways */
    CU_ASSERT_DOUBLE_EQUAL(c->perf.hbm_gbps, 2039, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.peak_tflops, 312, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.bwd_speed, 180.0 / 220.0, 1e-12); /* FA2 on A100 at 8K */
    dcp_cluster_destroy(c);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2xa100-1nic:bwd=3", &c), DCP_OK);
    CU_ASSERT_EQUAL(c->nics_per_node, 1);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps * 8, 12.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.bwd_speed, 3, 1e-12);
    dcp_cluster_destroy(c);
    c = NULL;
    CU_ASSERT_EQUAL(dcp_cluster_from_spec("2xa100-40g", &c), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(c);
    /* counts out of range name the rule, not the grammar */
    const char *counts[] = {"0x4",     "4x0",       "99999x99999",
                            "65537x1", "8193xp4de", "99999999999999999999x2"};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        CU_ASSERT_EQUAL(dcp_cluster_from_spec(counts[i], &c), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NULL(c);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "at most 65536 ranks"));
    }
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("8192xp4de", &c), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cluster_num_ranks(c), 65536);
    dcp_cluster_destroy(c);
    c = NULL;
    CU_ASSERT_EQUAL(dcp_cluster_from_spec("x4", &c), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "expected NxG"));
}

/* A node file in a temporary path; returns the path (static buffer). */
static const char *node_file(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/dcp-node-XXXXXX");
    const int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

/* Nx@FILE with a node file (dcp-calibrate's): every figure, NICs and the kernel curve. */
static void test_node_file(void)
{
    const char *path = node_file("# measured\n"
                                 "devices 4\nnics 1   # one link per host\n"
                                 "intra 3.5\ninter 0.03\nlat 180\ntflops 0.004\nhbm 6\n"
                                 "bwd 2.8\nkernel 64 0.25\nkernel 256 0.75\nkernel 1024 1\n");
    char spec[96];
    snprintf(spec, sizeof spec, "2x@%s:lat=200", path);
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(spec, &c), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cluster_num_ranks(c), 8);
    CU_ASSERT_EQUAL(c->nics_per_node, 1);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.intra_gbps, 3.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps, 0.03, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.lat_us, 200, 1e-12); /* the spec's figure wins */
    CU_ASSERT_DOUBLE_EQUAL(c->perf.peak_tflops, 0.004, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.hbm_gbps, 6, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.bwd_speed, 2.8, 1e-12);
    CU_ASSERT_EQUAL(c->perf.eff_n, 3);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.eff_tokens[1], 256, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.eff_value[1], 0.75, 1e-12);
    dcp_cluster_destroy(c);
    unlink(path);
    /* figures it does not give keep the defaults; NICs default to one per device */
    path = node_file("devices 2\n");
    snprintf(spec, sizeof spec, "3x@%s", path);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(spec, &c), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cluster_num_ranks(c), 6);
    CU_ASSERT_EQUAL(c->nics_per_node, 2);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps, 25, 1e-12);
    dcp_cluster_destroy(c);
    unlink(path);
    /* more NICs than devices: each device drives its share */
    path = node_file("devices 2\nnics 8\ninter 50\n");
    snprintf(spec, sizeof spec, "2x@%s", path);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(spec, &c), DCP_OK);
    CU_ASSERT_EQUAL(c->nics_per_node, 2);
    CU_ASSERT_EQUAL(c->nics_per_dev, 4);
    CU_ASSERT_EQUAL(dcp_cluster_node_nics(c), 8);
    dcp_cluster_destroy(c);
    unlink(path);
}

/* A node with more NICs than devices: an AWS p5 (32 x 100 Gb/s EFA for 8 H100, four per GPU)
 * beside the DGX H100 (one 400 Gb/s HCA per GPU); both give a device 50 GB/s, the p5 through
 * four NICs. nics=N in a spec: shared (N <= G) or each device's own (a multiple of G). */
static void test_more_nics_than_devices(void)
{
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2xp5", &c), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cluster_num_ranks(c), 16);
    CU_ASSERT_EQUAL(c->nics_per_node, 8);
    CU_ASSERT_EQUAL(c->nics_per_dev, 4);
    CU_ASSERT_EQUAL(dcp_cluster_node_nics(c), 32);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps, 4 * 12.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.lat_us, 15, 1e-12); /* EFA's */
    CU_ASSERT_DOUBLE_EQUAL(c->perf.hbm_gbps, 3350, 1e-12);
    dcp_cluster_destroy(c);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2xh100-ib", &c), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cluster_node_nics(c), 8);
    CU_ASSERT_EQUAL(c->nics_per_dev, 1);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.lat_us, 3, 1e-12);
    dcp_cluster_destroy(c);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4:nics=16:inter=50", &c), DCP_OK);
    CU_ASSERT_EQUAL(c->nics_per_node, 4);
    CU_ASSERT_EQUAL(c->nics_per_dev, 4);
    dcp_cluster_destroy(c);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4:nics=2", &c), DCP_OK);
    CU_ASSERT_EQUAL(c->nics_per_node, 2);
    CU_ASSERT_EQUAL(c->nics_per_dev, 1);
    dcp_cluster_destroy(c);
    c = NULL;
    CU_ASSERT_EQUAL(dcp_cluster_from_spec("2x4:nics=6", &c), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "nics=6"));
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "a multiple of 4"));
    CU_ASSERT_EQUAL(dcp_cluster_from_spec("2x4:nics=2.5", &c), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(c);
}

/* Bad node files: the message names the file and the line. */
static void test_bad_node_files_rejected(void)
{
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"devices 4\nspeed 3\n", "line 2: unknown key 'speed'"},
        {"devices 4\ninter -1\n", "line 2: needs one positive number"},
        {"devices 4\ninter 1 2\n", "line 2: too many values"},
        {"devices 4.5\n", "line 1: needs a whole number"},
        {"devices 4\nkernel 128 0.5\nkernel 64 0.4\n", "line 3: kernel tile edges must increase"},
        {"devices 4\nkernel 128\n", "line 2: kernel needs a tile edge"},
        {"devices 4\nkernel 128 1.5\n", "line 2: a kernel efficiency is at most 1"},
        {"inter 3\n", "no 'devices' line"},
        {"devices 2\nnics 3\n", "nics 3 for devices 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *path = node_file(bad[i].text);
        char spec[96];
        snprintf(spec, sizeof spec, "2x@%s", path);
        dcp_cluster_t *c = NULL;
        CU_ASSERT_EQUAL(dcp_cluster_from_spec(spec, &c), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NULL(c);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), path));
        if (!strstr(dcp_last_error(), bad[i].says))
            fprintf(stderr, "\nnode file %zu: '%s' does not say '%s'\n", i, dcp_last_error(),
                    bad[i].says);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), bad[i].says));
        unlink(path);
    }
}

/* The kernel table's one grammar: what dcp_kernel_table_write writes (a table file, and a node
 * file's kernel lines) dcp_kernel_table_read and the node file read back point for point;
 * dcp_cluster_load_kernel_table sets the curve, and bad files are refused naming the line. */
static void test_kernel_table(void)
{
    dcp_kernel_table_t t = {0}, back;
    const double edges[3] = {16, 1024, 1048576}, effs[3] = {0.125, 0.5, 1};
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(dcp_kernel_table_add(&t, edges[i], effs[i], "t"), DCP_OK);
    CU_ASSERT_EQUAL(dcp_kernel_table_add(&t, 512, 0.5, "t"), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "t: kernel tile edges must increase"));
    CU_ASSERT_EQUAL(t.n, 3);
    const char *path = node_file("");
    FILE *f = fopen(path, "w");
    fprintf(f, "# a comment line\n\n");
    dcp_kernel_table_write(f, &t, NULL);
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(dcp_kernel_table_read(path, &back), DCP_OK);
    CU_ASSERT_EQUAL(back.n, 3);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(back.tile_tokens[i], edges[i]);
        CU_ASSERT_EQUAL(back.efficiency[i], effs[i]);
    }
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x2", &c), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cluster_load_kernel_table(c, path), DCP_OK);
    CU_ASSERT_EQUAL(c->perf.eff_n, 3);
    CU_ASSERT_EQUAL(c->perf.eff_tokens[2], 1048576);
    CU_ASSERT_EQUAL(c->perf.eff_value[0], 0.125);
    unlink(path);
    /* a node file's kernel lines, as dcp-calibrate writes them */
    path = node_file("");
    f = fopen(path, "w");
    fprintf(f, "devices 2\n");
    dcp_kernel_table_write(f, &t, "kernel");
    fclose(f);
    char spec[96];
    snprintf(spec, sizeof spec, "1x@%s", path);
    dcp_cluster_t *n = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(spec, &n), DCP_OK);
    CU_ASSERT_EQUAL(n->perf.eff_n, 3);
    CU_ASSERT_EQUAL(memcmp(n->perf.eff_tokens, edges, sizeof edges), 0);
    CU_ASSERT_EQUAL(memcmp(n->perf.eff_value, effs, sizeof effs), 0);
    dcp_cluster_destroy(n);
    unlink(path);
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"128 0.5\n64 0.4\n", "line 2: kernel tile edges must increase"},
        {"128\n", "line 1: kernel needs a tile edge and an efficiency"},
        {"128 x\n", "line 1: kernel needs a tile edge and an efficiency"},
        {"128 1.5\n", "line 1: a kernel efficiency is at most 1"},
        {"128 0.5 7\n", "line 1: expected 'EDGE EFF'"},
        {"# nothing\n", "no 'EDGE EFF' lines"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        path = node_file(bad[i].text);
        CU_ASSERT_EQUAL(dcp_cluster_load_kernel_table(c, path), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), path));
        if (!strstr(dcp_last_error(), bad[i].says))
            fprintf(stderr, "\nkernel table %zu: '%s' does not say '%s'\n", i, dcp_last_error(),
                    bad[i].says);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), bad[i].says));
        unlink(path);
    }
    CU_ASSERT_EQUAL(c->perf.eff_n, 3); /* left as it was */
    CU_ASSERT_EQUAL(dcp_cluster_load_kernel_table(c, "/nonexistent/table"), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "cannot open"));
    dcp_cluster_destroy(c);
}

static void test_bad_specs_rejected(void)
{
    const char *bad[] = {"",
                         "8",
                         "x4",
                         "2x",
                         "0x4",
                         "2x0",
                         "2y4",
                         "2x4x1",
                         "-1x4",
                         "2x4:",
                         "2x4:intra",
                         "2x4:intra=-1",
                         "2x4:intra=abc",
                         "2x4:speed=3",
                         "2x4:bwd=0",
                         "70000x1",
                         "2x4:inter=inf"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dcp_cluster_t *c = (dcp_cluster_t *)&c; /* sentinel: must stay untouched */
        CU_ASSERT_EQUAL(dcp_cluster_from_spec(bad[i], &c), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_EQUAL(c, (dcp_cluster_t *)&c);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "cluster"));
    }
    CU_ASSERT_EQUAL(dcp_cluster_from_spec(NULL, NULL), DCP_ERR_INVALID_ARG);
}

int dcp_suite_cluster(void)
{
    static const dcp_test_t tests[] = {
        {"spec_shapes_and_figures", test_spec_shapes_and_figures},
        {"bad_specs_rejected", test_bad_specs_rejected},
        {"presets", test_presets},
        {"more_nics_than_devices", test_more_nics_than_devices},
        {"node_file", test_node_file},
        {"bad_node_files_rejected", test_bad_node_files_rejected},
        {"kernel_table", test_kernel_table},
        {NULL, NULL},
    };
    return dcp_add_suite("cluster", tests);
}
