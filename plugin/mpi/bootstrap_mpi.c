/* The MPI bootstrap (libdcp_mpi): an allgather over MPI_COMM_WORLD. Kept out of libdcp so
 * that embedding dcp does not pull in MPI.
 *
 * The allgather is timed (dcp.h, dcp_bootstrap_t): a blocking MPI_Allgather waits forever
 * for a rank that died or was stopped (with or without Open MPI's recovery mode), so every
 * rank posts a receive from and a send to each other rank and polls them against the
 * deadline. A receive still open at the deadline names the rank that did not take part; an
 * MPI error on a request names its peer. The requests of a failed round are cancelled or
 * released, and the bootstrap stays failed: a later round fails at once with the same
 * cause, so that a job whose peer is gone spends one timeout, not one per collective. Each
 * round has its own tag (the top 4096 below MPI_TAG_UB, in turn), so no message of an
 * abandoned round can complete a later one. */
#include "include/base/env.h"
#include "include/base/error.h"
#include "include/base/timeout.h"
#include "include/dcp.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The process's MPI bootstrap state (MPI_COMM_WORLD is one per process too). */
typedef struct {
    unsigned round;       /* collective rounds so far: the tag of the next */
    dcp_status_t failed;  /* DCP_OK, or the failure that ended the bootstrap */
    int32_t failed_rank;  /* the rank it named, -1 if none */
    char failed_why[160]; /* its message */
} mpi_state_t;

static mpi_state_t mpi_state = {0, DCP_OK, -1, ""};

enum { TAG_SPAN = 4096 };

/* Monotonic seconds (libdcp's clock is not exported to libdcp_mpi's users). */
static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int round_tag(unsigned round)
{
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    const int top = flag && ub && *ub >= TAG_SPAN ? *ub : 32767;
    return top - (int)(round % TAG_SPAN);
}

/* Ends the requests of an abandoned round: receives are cancelled, sends released (a send
 * to a dead peer may never complete; MPI finishes or drops it on its own). */
static void abandon(MPI_Request *req, int n, int first_send)
{
    for (int i = 0; i < n; i++) {
        if (req[i] == MPI_REQUEST_NULL) continue;
        if (i < first_send) MPI_Cancel(&req[i]);
        MPI_Request_free(&req[i]);
    }
}

static dcp_status_t fail(mpi_state_t *s, dcp_status_t st, int32_t rank, int32_t *failed_out,
                         const char *fmt_rank_why)
{
    s->failed = st;
    s->failed_rank = rank;
    snprintf(s->failed_why, sizeof s->failed_why, "%s", fmt_rank_why);
    *failed_out = rank;
    return dcp_set_error(st, "mpi bootstrap: %s", s->failed_why);
}

static dcp_status_t mpi_allgather_timed(void *state, const void *send, void *recv, size_t bytes,
                                        double timeout_s, int32_t *failed_rank_out)
{
    mpi_state_t *s = state;
    *failed_rank_out = -1;
    if (s->failed != DCP_OK) {
        *failed_rank_out = s->failed_rank;
        return dcp_set_error(s->failed, "mpi bootstrap: failed earlier: %s", s->failed_why);
    }
    if (bytes > INT_MAX)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "mpi bootstrap: %zu bytes per rank", bytes);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int tag = round_tag(s->round++), n = 2 * (size - 1);
    memcpy((char *)recv + (size_t)rank * bytes, send, bytes);
    if (size == 1) return DCP_OK;
    MPI_Request *req = NULL;
    int *peer = NULL;
    dcp_status_t st = dcp_calloc(&req, n, sizeof *req, "mpi bootstrap: requests");
    if (st == DCP_OK) st = dcp_calloc(&peer, n, sizeof *peer, "mpi bootstrap: peers");
    if (st != DCP_OK) {
        free(req);
        return st;
    }
    /* receives first (0 .. size-2), then sends, each in rank order from this rank on */
    int k = 0, rc = MPI_SUCCESS;
    for (int j = 1; j < size && rc == MPI_SUCCESS; j++, k++) {
        peer[k] = (rank + size - j) % size;
        rc = MPI_Irecv((char *)recv + (size_t)peer[k] * bytes, (int)bytes, MPI_BYTE, peer[k], tag,
                       MPI_COMM_WORLD, &req[k]);
    }
    for (int j = 1; j < size && rc == MPI_SUCCESS; j++, k++) {
        peer[k] = (rank + j) % size;
        rc = MPI_Isend(send, (int)bytes, MPI_BYTE, peer[k], tag, MPI_COMM_WORLD, &req[k]);
    }
    for (int i = k; i < n; i++) req[i] = MPI_REQUEST_NULL;
    char why[160];
    if (rc != MPI_SUCCESS) {
        snprintf(why, sizeof why, "posting a message to or from rank %d returned %d", peer[k - 1],
                 rc);
        st = fail(s, DCP_ERR_PEER, peer[k - 1], failed_rank_out, why);
    }
    const double deadline = now_s() + dcp_timeout_clamp(timeout_s);
    for (long spin = 0; st == DCP_OK; spin++) {
        int open = 0;
        for (int i = 0; i < n && st == DCP_OK; i++) {
            if (req[i] == MPI_REQUEST_NULL) continue;
            int done = 0;
            MPI_Status ms;
            rc = MPI_Test(&req[i], &done, &ms);
            if (rc != MPI_SUCCESS) {
                snprintf(why, sizeof why, "the message %s rank %d failed (MPI error %d)",
                         i < size - 1 ? "from" : "to", peer[i], rc);
                st = fail(s, DCP_ERR_PEER, peer[i], failed_rank_out, why);
            }
            open += !done;
        }
        if (st != DCP_OK || open == 0) break;
        if (now_s() > deadline) {
            int i = 0; /* the first rank whose bytes never came, else one that never took ours */
            while (i < n - 1 && req[i] == MPI_REQUEST_NULL) i++;
            snprintf(why, sizeof why, "rank %d did not take part within %g s", peer[i], timeout_s);
            st = fail(s, DCP_ERR_TIMEOUT, peer[i], failed_rank_out, why);
            break;
        }
        if (spin > 64) { /* ranks may share cores: let the others run */
            const struct timespec pause = {0, 200000};
            nanosleep(&pause, NULL);
        }
    }
    if (st != DCP_OK) abandon(req, n, size - 1);
    free(req);
    free(peer);
    return st;
}

/* The plain form: the same, with $DCP_TIMEOUT_S or 60 s (a value that is not a number of
 * seconds > 0 fails naming the variable, as context creation does). */
static dcp_status_t mpi_allgather(void *state, const void *send, void *recv, size_t bytes)
{
    double t = 60.0;
    DCP_CHECK(dcp_env_seconds(DCP_ENV_TIMEOUT_S, &t));
    int32_t failed;
    return mpi_allgather_timed(state, send, recv, bytes, t, &failed);
}

dcp_status_t dcp_bootstrap_mpi(dcp_bootstrap_t *bootstrap_out)
{
    if (!bootstrap_out) return dcp_set_error(DCP_ERR_INVALID_ARG, "bootstrap_out is NULL");
    int init = 0, rank = 0, size = 0;
    MPI_Initialized(&init);
    if (!init) return dcp_set_error(DCP_ERR_INVALID_ARG, "mpi bootstrap: MPI is not initialised");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    *bootstrap_out =
        (dcp_bootstrap_t){rank, size, mpi_allgather, &mpi_state, mpi_allgather_timed, 0.0};
    return DCP_OK;
}
