#include "partition/program/slots.h"

#include "include/base/error.h"

#include <stdlib.h>
#include <string.h>

static int64_t round_up(int64_t n)
{
    return (n + DCP_SLOT_ALIGN - 1) / DCP_SLOT_ALIGN * DCP_SLOT_ALIGN;
}

dcp_status_t dcp_slots_alloc(dcp_slots_t *a, int64_t elems, int64_t *off_out)
{
    const int64_t len = round_up(elems);
    for (int64_t i = 0; i < a->num_holes; i++) {
        dcp_hole_t *h = &a->holes[i];
        if (h->len < len) continue;
        *off_out = h->off;
        h->off += len;
        h->len -= len;
        if (h->len == 0) {
            memmove(h, h + 1, (size_t)(a->num_holes - i - 1) * sizeof *h);
            a->num_holes--;
        }
        return DCP_OK;
    }
    /* No hole fits: grow the buffer, absorbing a hole that ends at the top. */
    if (a->num_holes > 0) {
        dcp_hole_t *last = &a->holes[a->num_holes - 1];
        if (last->off + last->len == a->top) {
            *off_out = last->off;
            a->top = last->off + len;
            a->num_holes--;
            return DCP_OK;
        }
    }
    *off_out = a->top;
    a->top += len;
    return DCP_OK;
}

dcp_status_t dcp_slots_free(dcp_slots_t *a, int64_t off, int64_t elems)
{
    const int64_t len = round_up(elems);
    int64_t i = 0;
    while (i < a->num_holes && a->holes[i].off < off) i++;
    const int join_prev = i > 0 && a->holes[i - 1].off + a->holes[i - 1].len == off;
    const int join_next = i < a->num_holes && off + len == a->holes[i].off;
    if (join_prev && join_next) {
        a->holes[i - 1].len += len + a->holes[i].len;
        memmove(&a->holes[i], &a->holes[i + 1], (size_t)(a->num_holes - i - 1) * sizeof *a->holes);
        a->num_holes--;
    } else if (join_prev) {
        a->holes[i - 1].len += len;
    } else if (join_next) {
        a->holes[i].off = off;
        a->holes[i].len += len;
    } else {
        DCP_CHECK(dcp_reserve(&a->holes, &a->cap, a->num_holes + 1, sizeof *a->holes, "slots"));
        memmove(&a->holes[i + 1], &a->holes[i], (size_t)(a->num_holes - i) * sizeof *a->holes);
        a->holes[i] = (dcp_hole_t){off, len};
        a->num_holes++;
    }
    return DCP_OK;
}

void dcp_slots_release(dcp_slots_t *a)
{
    free(a->holes);
    *a = (dcp_slots_t){0};
}
