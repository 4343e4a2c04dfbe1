/*
 * The plan's binary format.
 *
 *   header (32 bytes): "DCPPLAN\0" | u32 version | u32 header bytes | u64 payload bytes |
 *                      u32 CRC-32C of the payload | u32 flags (0)
 *   payload: sections META, SEQS, BLOCKS, PROGRAMS (forward and backward), ITEMS, each
 *            opened by a u32 tag;
 *            every array is prefixed by its u64 element count.
 *   A plan of K >= 2 layer kinds is version 7: a KINDS section follows SEQS (K, every kind's
 *   layer count, then for kinds 1 .. K-1 their pass ranges and a SEQS section of their
 *   masks), and PROGRAMS holds the K program pairs. A plan of one kind is version 6, with no
 *   KINDS section. Versions 6 and 7 added the shape's softcap and value head dim to META;
 *   older bytes (4 and 5) are refused by name: their plans would read as another shape.
 *
 * All integers are little-endian. One walker (codec_t) both writes and reads, so the field
 * order cannot differ between the two. Reading trusts nothing: the checksum, every count
 * against the bytes left before anything is allocated for it, and then
 * dcp_plan_finish(validate = 1) checks every index. Derived data (rows, buffer sizes,
 * statistics) is not stored.
 *
 * The bytes are canonical, one byte string per plan: a mask's fields that its kind does not
 * read are written as zero and must read as zero, a non-CUSTOM mask's range offset is -1,
 * CUSTOM ranges follow each other in sequence order and fill their array, a zero imbalance
 * or question fraction is +0.0, and (plan_check.c) every stored item is used once, in order.
 */
#include "include/base/error.h"
#include "partition/plan/plan.h"
#include "partition/plan/wire.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_MAGIC        "DCPPLAN"
/* 2: backward programs; 3: options.metis_tries; 4: bwd_speed; 6: softcap, head_dim_v */
#define PLAN_VERSION       6u
#define PLAN_VERSION_KINDS 7u /* version 6 and the KINDS section: several layer kinds */
#define PLAN_VERSION_OLD   5u /* versions up to this one predate the shape's variants */
#define PLAN_HEADER_BYTES  32u

enum { SEC_META = 0x4154454d, SEC_SEQS, SEC_BLOCKS, SEC_PROGRAMS, SEC_ITEMS, SEC_KINDS };

typedef struct {
    dcp_writer_t *w; /* writing when non-NULL (the plan is then only read) */
    dcp_reader_t *r;
    int kinds; /* the bytes have a KINDS section (version 7) */
} codec_t;

static void f_u32(codec_t *c, uint32_t *v)
{
    if (c->w)
        dcp_put_u32(c->w, *v);
    else
        *v = dcp_get_u32(c->r);
}

static void f_i32(codec_t *c, int32_t *v)
{
    if (c->w)
        dcp_put_i32(c->w, *v);
    else
        *v = dcp_get_i32(c->r);
}

static void f_i64(codec_t *c, int64_t *v)
{
    if (c->w)
        dcp_put_i64(c->w, *v);
    else
        *v = dcp_get_i64(c->r);
}

static void f_u64(codec_t *c, uint64_t *v)
{
    if (c->w)
        dcp_put_u64(c->w, *v);
    else
        *v = dcp_get_u64(c->r);
}

static void f_f64(codec_t *c, double *v)
{
    if (c->w)
        dcp_put_f64(c->w, *v);
    else
        *v = dcp_get_f64(c->r);
}

/* A double that is +0.0 whenever it is zero: written so, and a -0.0 read sets *neg_zero. */
static void f_f64z(codec_t *c, double *v, int *neg_zero)
{
    if (c->w) {
        double x = *v == 0.0 ? 0.0 : *v;
        f_f64(c, &x);
        return;
    }
    f_f64(c, v);
    *neg_zero |= *v == 0.0 && signbit(*v);
}

static void f_f32(codec_t *c, float *v)
{
    if (c->w)
        dcp_put_f32(c->w, *v);
    else
        *v = dcp_get_f32(c->r);
}

static void f_enum(codec_t *c, void *v) /* enums travel as i32 */
{
    int32_t x;
    if (c->w) memcpy(&x, v, sizeof x);
    f_i32(c, &x);
    if (!c->w) memcpy(v, &x, sizeof x);
}

static dcp_status_t f_tag(codec_t *c, uint32_t tag)
{
    uint32_t t = tag;
    f_u32(c, &t);
    if (!c->w && (c->r->bad || t != tag))
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: section 0x%08x missing at byte %zu",
                             tag, c->r->pos);
    return DCP_OK;
}

static void f_view(codec_t *c, dcp_view_t *v)
{
    f_i64(c, &v->off);
    f_i32(c, &v->stride);
    f_i32(c, &v->buf);
}

/* An array: count, then elements through `elem`. Reading allocates; `wire_bytes` is the
 * encoded size of one element (bounds the count by the bytes left). */
typedef void (*elem_fn)(codec_t *, void *);

static dcp_status_t f_array(codec_t *c, void *arr, int64_t *count, size_t size, size_t wire_bytes,
                            elem_fn elem, const char *what)
{
    if (c->w) {
        dcp_put_u64(c->w, (uint64_t)*count);
    } else {
        *count = dcp_get_count(c->r, wire_bytes);
        if (*count < 0)
            return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: %s count exceeds the data",
                                 what);
        DCP_CHECK(dcp_calloc(arr, *count, size, what));
    }
    char *base = *(char **)arr;
    for (int64_t i = 0; i < *count; i++) elem(c, base + (size_t)i * size);
    if (!c->w && c->r->bad)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: %s truncated", what);
    return DCP_OK;
}

static void e_i32(codec_t *c, void *v)
{
    f_i32(c, v);
}

static void e_i64(codec_t *c, void *v)
{
    f_i64(c, v);
}

static void e_instr(codec_t *c, void *v)
{
    dcp_instr_t *in = v;
    f_i32(c, &in->op);
    f_i32(c, &in->arg);
    f_i64(c, &in->first);
    f_i64(c, &in->count);
}

static void e_group(codec_t *c, void *v)
{
    dcp_tile_group_t *g = v;
    dcp_view_t *views[] = {&g->q, &g->o, &g->lse, &g->dout, &g->delta, &g->dq};
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++) f_view(c, views[i]);
    int32_t *ints[] = {&g->q_block, &g->head_group, &g->seq,       &g->q_pos,
                       &g->q_len,   &g->first_tile, &g->num_tiles, &g->accumulate};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) f_i32(c, ints[i]);
}

static void e_tile(codec_t *c, void *v)
{
    dcp_tile_t *t = v;
    f_view(c, &t->k);
    f_view(c, &t->v);
    f_view(c, &t->dk);
    f_view(c, &t->dv);
    f_i32(c, &t->kv_block);
    f_i32(c, &t->kv_pos);
    f_i32(c, &t->kv_len);
    f_i32(c, &t->full);
}

static void e_merge(codec_t *c, void *v)
{
    dcp_merge_item_t *m = v;
    f_view(c, &m->o);
    f_view(c, &m->lse);
    f_i32(c, &m->rows);
    f_i32(c, &m->first_src);
    f_i32(c, &m->num_src);
}

static void e_merge_src(codec_t *c, void *v)
{
    dcp_merge_src_t *m = v;
    f_view(c, &m->o);
    f_view(c, &m->lse);
}

static void e_copy(codec_t *c, void *v)
{
    dcp_copy_item_t *m = v;
    f_view(c, &m->src);
    f_view(c, &m->dst);
    f_i32(c, &m->rows);
    f_i32(c, &m->row_elems);
}

static void e_comm(codec_t *c, void *v)
{
    dcp_comm_op_t *op = v;
    f_i32(c, &op->peer);
    f_i32(c, &op->send);
    f_i32(c, &op->transfer);
    f_i32(c, &op->buf);
    f_i64(c, &op->off);
    f_i64(c, &op->elems);
}

#define VIEW_BYTES 16

static dcp_status_t f_meta(codec_t *c, dcp_plan_t *p)
{
    DCP_CHECK(f_tag(c, SEC_META));
    f_i32(c, &p->num_ranks);
    f_i32(c, &p->num_nodes);
    f_i32(c, &p->devs_per_node);
    f_i32(c, &p->shape.num_heads);
    f_i32(c, &p->shape.num_kv_heads);
    f_i32(c, &p->shape.head_dim);
    f_enum(c, &p->shape.dtype);
    f_f32(c, &p->shape.scale);
    f_f32(c, &p->shape.softcap);
    f_i32(c, &p->shape.head_dim_v);
    dcp_plan_options_t *o = &p->opts;
    f_i32(c, &o->block_size);
    f_i32(c, &o->head_blocks);
    f_i32(c, &o->divisions);
    f_enum(c, &o->strategy);
    int neg_zero = 0;
    f_f64z(c, &o->eps_inter, &neg_zero);
    f_f64z(c, &o->eps_intra, &neg_zero);
    if (neg_zero)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT,
                             "plan bytes: an imbalance is -0.0 (not canonical)");
    f_i64(c, &o->mem_cap_bytes);
    f_u64(c, &o->seed);
    f_enum(c, &o->expansion);
    f_i32(c, &o->net_cap);
    f_i32(c, &o->refine);
    f_enum(c, &o->comm_schedule);
    f_i32(c, &o->coalesce);
    f_i32(c, &o->metis_tries);
    f_i32(c, &p->num_xfers);
    f_i32(c, &p->num_phases);
    for (int k = 0; k <= DCP_PASS_COUNT; k++) {
        f_i32(c, &p->pass_xfer[k]);
        f_i32(c, &p->pass_phase[k]);
    }
    f_i32(c, &p->fallback);
    dcp_perf_model_t *m = &p->perf;
    f_f64(c, &m->intra_gbps);
    f_f64(c, &m->inter_gbps);
    f_f64(c, &m->lat_us);
    f_f64(c, &m->peak_tflops);
    f_f64(c, &m->hbm_gbps);
    f_f64(c, &m->bwd_speed);
    f_i32(c, &m->eff_n);
    if (!c->w && (c->r->bad || m->eff_n < 1 || m->eff_n > DCP_MAX_KERNEL_POINTS))
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: kernel table is corrupt");
    for (int32_t i = 0; i < m->eff_n; i++) {
        f_f64(c, &m->eff_tokens[i]);
        f_f64(c, &m->eff_value[i]);
    }
    return DCP_OK;
}

/* The fields of a mask that its kind reads; the others zero (and a zero fraction +0.0). */
static dcp_mask_t mask_canonical(const dcp_mask_t *m)
{
    dcp_mask_t k = {.kind = m->kind};
    switch (m->kind) {
    case DCP_MASK_LAMBDA:
        k.sink = m->sink;
        /* fall through */
    case DCP_MASK_WINDOW:
        k.window = m->window;
        break;
    case DCP_MASK_BLOCKWISE:
        k.block = m->block;
        k.k = m->k;
        break;
    case DCP_MASK_SHARED_QUESTION:
        k.answers = m->answers;
        k.question_frac = m->question_frac == 0.0 ? 0.0 : m->question_frac;
        break;
    default:
        break;
    }
    return k;
}

static int mask_fields_equal(const dcp_mask_t *a, const dcp_mask_t *b)
{
    return a->kind == b->kind && a->window == b->window && a->sink == b->sink &&
           a->block == b->block && a->k == b->k && a->answers == b->answers &&
           memcmp(&a->question_frac, &b->question_frac, sizeof a->question_frac) == 0;
}

/* Sequences: masks travel as their parameters plus, for CUSTOM, an offset into the ranges
 * array (-1 otherwise), which is bounds-checked before it becomes a pointer. */
static dcp_status_t f_seqs(codec_t *c, dcp_plan_t *p)
{
    DCP_CHECK(f_tag(c, SEC_SEQS));
    DCP_CHECK(
        f_array(c, &p->custom_ranges, &p->custom_ints, sizeof(int32_t), 4, e_i32, "custom ranges"));
    int64_t n = p->num_seqs;
    if (c->w) {
        dcp_put_u64(c->w, (uint64_t)n);
    } else {
        n = dcp_get_count(c->r, 44);
        if (n < 0 || n > INT32_MAX)
            return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: sequence count is corrupt");
        p->num_seqs = (int32_t)n;
        DCP_CHECK(dcp_calloc(&p->seqs, n, sizeof *p->seqs, "plan sequences"));
    }
    int64_t custom_next = 0; /* CUSTOM ranges follow each other in sequence order */
    for (int64_t s = 0; s < n; s++) {
        dcp_seq_info_t *q = &p->seqs[s];
        dcp_mask_t m = c->w ? mask_canonical(&q->mask) : (dcp_mask_t){0};
        f_i32(c, &q->len);
        f_enum(c, &m.kind);
        f_i32(c, &m.window);
        f_i32(c, &m.sink);
        f_i32(c, &m.block);
        f_i32(c, &m.k);
        f_i32(c, &m.answers);
        f_f64(c, &m.question_frac);
        int64_t off = q->mask.ranges ? q->mask.ranges - p->custom_ranges : -1;
        f_i64(c, &off);
        if (c->w) continue;
        q->mask = m;
        const dcp_mask_t canon = mask_canonical(&m);
        if (!c->r->bad && !mask_fields_equal(&m, &canon))
            return dcp_set_error(DCP_ERR_PLAN_CORRUPT,
                                 "plan bytes: sequence %lld: a mask field its kind does not read "
                                 "is not zero (not canonical)",
                                 (long long)s);
        if (q->mask.kind != DCP_MASK_CUSTOM) {
            if (!c->r->bad && off != -1)
                return dcp_set_error(DCP_ERR_PLAN_CORRUPT,
                                     "plan bytes: sequence %lld: range offset %lld of a mask "
                                     "without ranges, must be -1",
                                     (long long)s, (long long)off);
            continue;
        }
        if (c->r->bad || q->len < 1 || off != custom_next ||
            4 * (int64_t)q->len > p->custom_ints - off)
            return dcp_set_error(DCP_ERR_PLAN_CORRUPT,
                                 "plan bytes: sequence %lld custom ranges out of bounds or out "
                                 "of order",
                                 (long long)s);
        q->mask.ranges = p->custom_ranges + off;
        q->mask.num_rows = q->len;
        custom_next += 4 * (int64_t)q->len;
    }
    if (!c->w && c->r->bad)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: sequences truncated");
    if (!c->w && custom_next != p->custom_ints)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT,
                             "plan bytes: %lld custom range values belong to no sequence",
                             (long long)(p->custom_ints - custom_next));
    return DCP_OK;
}

/* Layer kinds: their count and layer counts, then each further kind's pass ranges and
 * masks (as a SEQS section of its own; its lengths must be the plan's, plan_check.c). */
static dcp_status_t f_kinds(codec_t *c, dcp_plan_t *p)
{
    DCP_CHECK(f_tag(c, SEC_KINDS));
    int32_t nk = p->num_kinds;
    f_i32(c, &nk);
    if (!c->w) {
        if (c->r->bad || nk < 2 || nk > DCP_MAX_KINDS)
            return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: layer kind count is corrupt");
        DCP_CHECK(dcp_plan_kinds_alloc(p, nk));
    }
    for (int32_t k = 0; k < nk; k++) f_i32(c, &p->views[k]->layers);
    for (int32_t k = 1; k < nk; k++) {
        dcp_plan_t *v = p->views[k];
        for (int i = 0; i <= DCP_PASS_COUNT; i++) {
            f_i32(c, &v->pass_xfer[i]);
            f_i32(c, &v->pass_phase[i]);
        }
        DCP_CHECK(f_seqs(c, v));
    }
    return DCP_OK;
}

static dcp_status_t f_blocks(codec_t *c, dcp_plan_t *p)
{
    DCP_CHECK(f_tag(c, SEC_BLOCKS));
    int32_t **cols[4] = {&p->blk_seq, &p->blk_start, &p->blk_len, &p->blk_owner};
    int64_t n = p->num_blocks;
    for (int i = 0; i < 4; i++) {
        int64_t m = n;
        DCP_CHECK(f_array(c, cols[i], &m, sizeof(int32_t), 4, e_i32, "token blocks"));
        if (!c->w && ((i > 0 && m != n) || m > INT32_MAX))
            return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: token block columns differ");
        n = m;
    }
    p->num_blocks = (int32_t)n;
    return DCP_OK;
}

static dcp_status_t f_programs(codec_t *c, dcp_plan_t *p)
{
    DCP_CHECK(f_tag(c, SEC_PROGRAMS));
    int64_t nprog = (int64_t)p->num_kinds * DCP_PASS_COUNT * p->num_ranks + 1,
            nwork = (int64_t)p->num_ranks * DCP_BUF_COUNT;
    const int64_t want_prog = nprog, want_work = nwork;
    DCP_CHECK(f_array(c, &p->prog_off, &nprog, sizeof(int64_t), 8, e_i64, "program offsets"));
    DCP_CHECK(f_array(c, &p->work_elems, &nwork, sizeof(int64_t), 8, e_i64, "buffer sizes"));
    int64_t nphase = p->num_phases;
    DCP_CHECK(f_array(c, &p->phase_step, &nphase, sizeof(int32_t), 4, e_i32, "phase steps"));
    if (nphase != p->num_phases)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: %lld phase steps for %d phases",
                             (long long)nphase, p->num_phases);
    if (nprog != want_prog || nwork != want_work)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT,
                             "plan bytes: program tables do not match %d ranks", p->num_ranks);
    return f_array(c, &p->instrs, &p->num_instrs, sizeof *p->instrs, 24, e_instr, "instructions");
}

static dcp_status_t f_items(codec_t *c, dcp_plan_t *p)
{
    DCP_CHECK(f_tag(c, SEC_ITEMS));
    DCP_CHECK(f_array(c, &p->groups, &p->num_groups, sizeof *p->groups, 6 * VIEW_BYTES + 32,
                      e_group, "tile groups"));
    DCP_CHECK(f_array(c, &p->tiles, &p->num_tiles, sizeof *p->tiles, 4 * VIEW_BYTES + 16, e_tile,
                      "tiles"));
    DCP_CHECK(f_array(c, &p->merges, &p->num_merges, sizeof *p->merges, 2 * VIEW_BYTES + 12,
                      e_merge, "merges"));
    DCP_CHECK(f_array(c, &p->merge_srcs, &p->num_merge_srcs, sizeof *p->merge_srcs, 2 * VIEW_BYTES,
                      e_merge_src, "merge sources"));
    DCP_CHECK(f_array(c, &p->copies, &p->num_copies, sizeof *p->copies, 2 * VIEW_BYTES + 8, e_copy,
                      "copies"));
    return f_array(c, &p->comm, &p->num_comm, sizeof *p->comm, 32, e_comm, "comm ops");
}

static dcp_status_t f_plan(codec_t *c, dcp_plan_t *p)
{
    DCP_CHECK(f_meta(c, p));
    if (!c->w && (c->r->bad || p->num_ranks < 1 || p->num_ranks > 65536))
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: rank count is corrupt");
    DCP_CHECK(f_seqs(c, p));
    if (c->kinds) DCP_CHECK(f_kinds(c, p));
    DCP_CHECK(f_blocks(c, p));
    DCP_CHECK(f_programs(c, p));
    return f_items(c, p);
}

dcp_status_t dcp_plan_serialize(const dcp_plan_t *plan, void *buf, size_t capacity,
                                size_t *size_out)
{
    if (!plan || !size_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", plan ? "size_out" : "plan");
    /* The codec only reads the plan when writing; a view writes its plan. */
    dcp_plan_t *p = (dcp_plan_t *)dcp_plan_root(plan);
    dcp_writer_t count = {NULL, 0, NULL};
    codec_t c = {&count, NULL, p->num_kinds > 1};
    DCP_CHECK(f_plan(&c, p));
    const size_t total = PLAN_HEADER_BYTES + count.len;
    if (!buf) {
        *size_out = total;
        return DCP_OK;
    }
    if (capacity < total)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "capacity = %zu, the plan needs %zu bytes",
                             capacity, total);
    dcp_writer_t body = {(uint8_t *)buf + PLAN_HEADER_BYTES, 0, NULL};
    c.w = &body;
    DCP_CHECK(f_plan(&c, p));
    dcp_writer_t head = {buf, 0, NULL};
    dcp_put_bytes(&head, PLAN_MAGIC, 8);
    dcp_put_u32(&head, c.kinds ? PLAN_VERSION_KINDS : PLAN_VERSION);
    dcp_put_u32(&head, PLAN_HEADER_BYTES);
    dcp_put_u64(&head, body.len);
    dcp_put_u32(&head, dcp_crc32c(body.buf, body.len));
    dcp_put_u32(&head, 0);
    *size_out = total;
    return DCP_OK;
}

dcp_status_t dcp_plan_checksum(const dcp_plan_t *plan, uint32_t *checksum_out)
{
    if (!plan || !checksum_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", plan ? "checksum_out" : "plan");
    if (plan->root) { /* a layer kind's view: its plan's identity, with its kind */
        uint32_t mix[2] = {0, (uint32_t)plan->kind};
        DCP_CHECK(dcp_plan_checksum(plan->root, &mix[0]));
        *checksum_out = dcp_crc32c(mix, sizeof mix);
        return DCP_OK;
    }
    dcp_plan_t *p = (dcp_plan_t *)plan; /* only the memo is written, atomically */
    uint64_t memo = atomic_load(&p->checksum_memo);
    if (!memo) {
        uint32_t crc = 0;
        dcp_writer_t sum = {NULL, 0, &crc}; /* the payload's CRC without its bytes */
        codec_t c = {&sum, NULL, p->num_kinds > 1};
        DCP_CHECK(f_plan(&c, p));
        memo = (uint64_t)1 << 32 | crc;
        atomic_store(&p->checksum_memo, memo);
    }
    *checksum_out = (uint32_t)memo;
    return DCP_OK;
}

static dcp_status_t check_header(const uint8_t *b, size_t size, uint32_t *version_out)
{
    if (size < PLAN_HEADER_BYTES)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: %zu bytes, shorter than a header",
                             size);
    if (memcmp(b, PLAN_MAGIC, 8) != 0)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: bad magic");
    dcp_reader_t r = {b, size, 8, 0};
    const uint32_t version = dcp_get_u32(&r), hbytes = dcp_get_u32(&r);
    const uint64_t payload = dcp_get_u64(&r);
    const uint32_t crc = dcp_get_u32(&r), flags = dcp_get_u32(&r);
    if (version >= 2 && version <= PLAN_VERSION_OLD)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT,
                             "plan bytes: version %u is an older dcp's format (before the "
                             "shape's softcap and value head dim), this build reads %u and %u: "
                             "plan the batch again",
                             version, PLAN_VERSION, PLAN_VERSION_KINDS);
    if (version != PLAN_VERSION && version != PLAN_VERSION_KINDS)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT,
                             "plan bytes: version %u, this build reads %u and %u", version,
                             PLAN_VERSION, PLAN_VERSION_KINDS);
    if (hbytes != PLAN_HEADER_BYTES || flags != 0)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: header is corrupt");
    if (payload != size - PLAN_HEADER_BYTES)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: payload says %llu bytes, %zu given",
                             (unsigned long long)payload, size - PLAN_HEADER_BYTES);
    if (dcp_crc32c(b + PLAN_HEADER_BYTES, size - PLAN_HEADER_BYTES) != crc)
        return dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: checksum mismatch");
    *version_out = version;
    return DCP_OK;
}

dcp_status_t dcp_plan_deserialize(const void *buf, size_t size, dcp_plan_t **plan_out)
{
    if (!buf || !plan_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", buf ? "plan_out" : "buf");
    uint32_t version = 0;
    DCP_CHECK(check_header(buf, size, &version));
    dcp_plan_t *p;
    DCP_CHECK(dcp_plan_alloc(&p));
    dcp_reader_t r = {(const uint8_t *)buf + PLAN_HEADER_BYTES, size - PLAN_HEADER_BYTES, 0, 0};
    codec_t c = {NULL, &r, version == PLAN_VERSION_KINDS};
    dcp_status_t st = f_plan(&c, p);
    if (st == DCP_OK && r.pos != r.len)
        st = dcp_set_error(DCP_ERR_PLAN_CORRUPT, "plan bytes: %zu trailing bytes", r.len - r.pos);
    if (st == DCP_OK) st = dcp_plan_finish(p, 1);
    if (st == DCP_OK) { /* checked against the payload by check_header() */
        dcp_reader_t h = {buf, size, 24, 0};
        atomic_store(&p->checksum_memo, (uint64_t)1 << 32 | dcp_get_u32(&h));
    }
    if (st != DCP_OK) {
        dcp_plan_destroy(p);
        /* allocation failures stay themselves; everything else is corruption */
        return st == DCP_ERR_NO_MEMORY ? st : DCP_ERR_PLAN_CORRUPT;
    }
    *plan_out = p;
    return DCP_OK;
}
