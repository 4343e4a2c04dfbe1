/*
 * The segmenter: a launch's tile list (tile groups and their KV tiles) cut into segments that
 * a dense attention engine can run, and the program that runs them.
 *
 * The key line of a group is its tiles in key order, back to back: key u of the line is key
 * u - u0(t) of the tile t whose run [u0(t), u0(t) + kv_len) holds it. A row's allowed keys
 * (include/base/mask_rule.h: at most two ranges) map onto the line as at most two ranges,
 * since a range that runs through keys the launch does not hold simply skips them; those are
 * the row's layers (layer 0 the lower range). A segment is rows [r0, r1) of one group
 * against line keys [k0, k1), in a class that says which of them each row sees, as cuDNN's
 * SDPA masks them with per-entry lengths s_q = r1 - r0, s_kv = k1 - k0 and row x, key y
 * (entry-local, x < s_q, y < s_kv), d = x + s_kv - s_q:
 *   FULL    every key;                               (no mask)
 *   CAUSAL  y <= d;                                  (the diagonal, bottom-right aligned)
 *   BAND    d - W < y <= d;                          (a sliding window: left bound W, causal)
 *   LEFT    d - W < y;                               (a left bound alone: a window's far edge)
 *   MASKED  the allowed pairs inside the rectangle, as the mask says (dcp's own kernel).
 * W (`window`) is the number of keys the segment's last row sees. Each row of a dense
 * segment sees at least one key. On the line a dense class is one layer of a run of rows
 * whose key range moves with slopes (0 or 1) that never change but once, and only in the
 * range's start from 0 to 1: FULL and LEFT keep the end, CAUSAL and BAND move it by one key
 * a row, LEFT and BAND start to move the start once the window is full. So the diagonal,
 * the sliding window with its clipped start, its far edge, lambda's sink, blockwise's and
 * shared-question's prefixes are dense whatever tiles of a group a launch holds; only
 * custom ranges, runs shorter than min_rows and classes the engine lacks are MASKED.
 *
 * The segments of a group cover its tiles' allowed pairs exactly once: dense segments hold
 * allowed pairs only, each MASKED segment every allowed pair inside its rectangle, and a row's
 * segments never share a key. The cut is a pure function of the tile list.
 *
 * The program of a launch (dcp_seg_prog_t) is what an engine runs instead of the plain tile
 * list, with dcp's own kernels for everything but the dense calls:
 *   forward:  gather the dense segments' Q, K and V rows into packed buffers (copy); run the
 *             MASKED segments with dcp's attention kernel (sub-groups of trimmed tiles), and
 *             reset groups that start from nothing; one dense call per class and window over
 *             packed entries, O in the plan dtype and the softmax statistics (natural log of
 *             the scaled scores) in fp32; merge each entry's (O, LSE) into its group's output;
 *   backward: gather Q, dO, K, V and the final LSE; write, per entry row, an O' with
 *             rowsum(dO * O') = delta (the dense engine takes O, dcp ships delta); run the
 *             MASKED segments with dcp's backward kernel (into the groups' dQ and the tiles'
 *             dK, dV); one dense backward call per class and window; add its dQ, dK, dV into
 *             the groups' and tiles' fp32 gradient rows (deterministic mode: the own kernel
 *             and the adds in waves of disjoint writers, dcp_seg_waves). Every entry has
 *             keys of its own in the packed buffers, so entries that share K/V rows write
 *             private dK/dV partials, added in program order.
 * An entry is one dense segment; its keys are gathered from the tiles its line range crosses.
 *
 * Packing is exactly cuDNN's ragged (THD) layout: entries back to back per tensor,
 * [rows, heads, head_dim] per entry, element offsets b + 1 per tensor (Q, O, dO, dQ: Hq x D
 * per row; K, V, dK, dV: Hkv x D; statistics: Hq), per-entry lengths; dcp_dense_cpu runs
 * the same calls on the CPU with the semantics cuDNN documents, so the CPU proves the cut,
 * the packing and the merges (tests/unit/test_segment.c).
 */
#ifndef DCP_KERNELS_SEGMENT_H
#define DCP_KERNELS_SEGMENT_H

#include "kernels/kernel.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DCP_SEG_FULL = 0,
    DCP_SEG_CAUSAL = 1,
    DCP_SEG_BAND = 2,
    DCP_SEG_LEFT = 3,
    DCP_SEG_MASKED = 4,
    DCP_SEG_CLASSES = 5,
    DCP_SEG_DENSE = 4 /* the dense classes: [0, DCP_SEG_DENSE) */
} dcp_seg_class_t;

_Static_assert(DCP_SEG_FULL == DCP_ATTN_CLASS_FULL && DCP_SEG_CAUSAL == DCP_ATTN_CLASS_CAUSAL &&
                   DCP_SEG_BAND == DCP_ATTN_CLASS_BAND && DCP_SEG_LEFT == DCP_ATTN_CLASS_LEFT &&
                   DCP_SEG_MASKED == DCP_ATTN_CLASS_MASKED && DCP_SEG_CLASSES == DCP_ATTN_CLASSES,
               "the public class numbers (dcp.h) are the segmenter's");

/* "full", "causal", "band", "left", "masked". */
const char *dcp_seg_class_name(int cls);

/* Whether row x of an entry of s_q rows and s_kv keys in class cls (window w) sees key y:
 * the class semantics above, what the CPU twin and cuDNN's graphs compute. */
static inline int dcp_seg_sees(int cls, int32_t w, int32_t x, int32_t y, int32_t s_q, int32_t s_kv)
{
    const int64_t d = (int64_t)x + s_kv - s_q;
    switch (cls) {
    case DCP_SEG_CAUSAL: return y <= d;
    case DCP_SEG_BAND: return y <= d && y > d - w;
    case DCP_SEG_LEFT: return y > d - w;
    default: return 1;
    }
}

typedef struct {
    int32_t group;  /* index into the launch's groups */
    int32_t r0, r1; /* rows of the group */
    int32_t k0, k1; /* keys of the group's key line */
    int32_t cls;
    int32_t window; /* BAND, LEFT: the keys the last row sees; else 0 */
    int64_t pairs;  /* allowed (query, key) pairs of the segment */
} dcp_seg_t;

/* Bit c of a class set: class c may go to the dense engine. */
#define DCP_SEG_BIT(c) (1 << (c))
#define DCP_SEG_ALL_DENSE                                                                          \
    (DCP_SEG_BIT(DCP_SEG_FULL) | DCP_SEG_BIT(DCP_SEG_CAUSAL) | DCP_SEG_BIT(DCP_SEG_BAND) |         \
     DCP_SEG_BIT(DCP_SEG_LEFT))

/* The key line of a group: its tiles (indices into the tile array) in key order and the line
 * key each starts at. */
typedef struct {
    int32_t *tile; /* [n] */
    int32_t *u0;   /* [n + 1]: u0[n] is the line's length */
    int32_t n;
    int64_t cap_tile, cap_u0;
} dcp_seg_line_t;

/* The key line of group g over `tiles` (arrays grown as needed; free with
 * dcp_seg_line_free). DCP_ERR_INTERNAL when two of its tiles share a key. */
dcp_status_t dcp_seg_line(const dcp_tile_group_t *g, const dcp_tile_t *tiles, dcp_seg_line_t *line);
void dcp_seg_line_free(dcp_seg_line_t *line);

/* The segments of a launch, group by group (malloc'ed; n_out of them): within a group the
 * dense ones first (layer by layer, rows ascending), then the MASKED ones (rows ascending;
 * those of one row range consecutive). Dense runs of fewer than min_rows rows, and runs of a
 * class not in `dense` (a DCP_SEG_BIT set), are MASKED instead (a dense engine's tile is
 * 64-128 rows: a few rows cost it a whole tile). min_rows >= 1. */
dcp_status_t dcp_seg_cut(const dcp_seq_info_t *seqs, const dcp_tile_group_t *groups,
                         int64_t num_groups, const dcp_tile_t *tiles, int32_t min_rows,
                         int32_t dense, dcp_seg_t **segs_out, int64_t *n_out);

/* Adds each segment's allowed pairs to pairs[its class]: the tally of a cut, which a program
 * keeps in dcp_seg_prog_t.pairs. */
void dcp_seg_add_pairs(const dcp_seg_t *segs, int64_t n, int64_t pairs[DCP_SEG_CLASSES]);

/* The tally of a launch's cut (dcp_seg_cut with these arguments) added to pairs, without
 * building its program: what dcp_seg_prog_add would add to prog.pairs (dcp_plan_attn_pairs
 * sums it over a plan). */
dcp_status_t dcp_seg_tally(const dcp_seq_info_t *seqs, const dcp_tile_group_t *groups,
                           int64_t num_groups, const dcp_tile_t *tiles, int32_t min_rows,
                           int32_t dense, int64_t pairs[DCP_SEG_CLASSES]);

/* One dense call: the entries of one class (and window) packed as cuDNN's ragged SDPA takes
 * them. The tensors are element offsets into the engine buffers: q, k, v, o, dout, dq, dk, dv
 * in DCP_BUF_SEG (plan dtype, [rows, heads, head dim] each entry after the last; V, O, dO and
 * dV rows of the value head dim), stats in DCP_BUF_SEG32 ([rows, Hq]). The per-entry lengths
 * and ragged offsets are `ints`: int32 arrays at element offset `ints` of the program's int
 * array (prog.ints), laid out for a batch of `cap` (>= batch) entries, the ones past `batch`
 * empty (dcp_seg_int_array):
 *   seq_q[cap] seq_kv[cap] off_q[cap+1] off_o[cap+1] off_k[cap+1] off_v[cap+1] off_st[cap+1]
 * (offsets in elements of each tensor: rows x Hq x D for Q and dQ, rows x Hq x D_v for O and
 * dO, rows x Hkv x D for K and dK, rows x Hkv x D_v for V and dV, rows x Hq for the
 * statistics). */
enum {
    DCP_SEG_SEQ_Q = 0,
    DCP_SEG_SEQ_KV,
    DCP_SEG_OFF_Q,
    DCP_SEG_OFF_O,
    DCP_SEG_OFF_K,
    DCP_SEG_OFF_V,
    DCP_SEG_OFF_ST,
    DCP_SEG_INT_ARRAYS
};

/* The element offset of int array `a` in a call's ints laid out for a batch of cap. */
static inline int64_t dcp_seg_int_array(int64_t cap, int a)
{
    return a <= DCP_SEG_SEQ_KV ? a * cap : 2 * cap + (int64_t)(a - DCP_SEG_OFF_Q) * (cap + 1);
}

typedef struct {
    int32_t cls;              /* a dense class */
    int32_t window;           /* BAND, LEFT: the left bound W of every entry; else 0 */
    int32_t batch, cap;       /* entries; the batch the int arrays are laid out for */
    int32_t max_q, max_kv;    /* longest entry's rows */
    int32_t launch;           /* the launch it belongs to */
    int64_t rows_q, rows_kv;  /* all entries' rows */
    int64_t pairs;            /* allowed pairs of its entries */
    int64_t q, k, v, o;       /* SEG element offsets of the packed tensors */
    int64_t dout, dq, dk, dv; /* backward (0 in a forward program) */
    int64_t stats;            /* SEG32 element offset */
    int64_t ints;             /* element offset of the call's int32 arrays in prog.ints */
} dcp_dense_call_t;

/* The program of one ATTN instruction (one pass). Ranges index the arrays of dcp_seg_prog_t. */
typedef struct {
    int32_t backward;                 /* a backward launch */
    int64_t own_first, own_count;     /* own kernel: groups (own_groups), their tiles consecutive */
    int64_t gather_first, gather_count; /* copies into the packed buffers */
    int64_t delta_first, delta_count;   /* backward: O' rows */
    int64_t merge_first, merge_count;   /* forward: merges (srcs in merge_srcs) */
    int64_t acc_first, acc_count;       /* backward: typed-source adds (copies) */
    int64_t call_first, call_count;     /* dense calls (prog.calls), by class then window */
    int32_t own_rows, gather_rows, merge_rows, delta_rows; /* the most rows of an item (grids) */
    /* deterministic backward: the own groups and the adds in waves, each one launch of its
     * kernel, their ends (counts from own_first, acc_first) in prog.wave_ends; 0: one launch */
    int64_t own_wave_first, own_waves;
    int64_t acc_wave_first, acc_waves;
    int64_t seg_elems, seg32_elems;     /* staging this launch uses */
} dcp_seg_launch_t;

/* The programs of every ATTN instruction of a rank's pass. Pure data: built on the host
 * (dcp_seg_prog_build), copied to the device for GPU kernels (one allocation, as the plan's
 * descriptors are). */
typedef struct {
    dcp_seg_launch_t *launches; /* [num_launches] */
    int64_t num_launches;
    dcp_tile_group_t *own_groups;
    dcp_tile_t *own_tiles;
    dcp_copy_item_t *copies; /* gathers and backward adds */
    dcp_merge_item_t *merges;
    dcp_merge_src_t *merge_srcs;
    dcp_delta_out_item_t *deltas;
    int32_t *ints;
    int64_t *wave_ends;       /* host only: the launches' waves (dcp_seg_waves) */
    dcp_dense_call_t *calls;  /* host only: every launch's dense calls */
    int64_t n_own_groups, n_own_tiles, n_copies, n_merges, n_merge_srcs, n_deltas, n_ints,
        n_wave_ends, n_calls;
    int64_t cap_own_groups, cap_own_tiles, cap_copies, cap_merges, cap_merge_srcs, cap_deltas,
        cap_ints, cap_wave_ends, cap_calls; /* allocated elements of each array */
    int64_t seg_elems, seg32_elems; /* the largest launch's staging */
    int64_t pairs[DCP_SEG_CLASSES]; /* allowed pairs per class, every launch */
} dcp_seg_prog_t;

/* What a program is built for: the plan's heads per head group, head dim, min_rows, and the
 * batch capacity rule (cap = the smallest power of two >= batch, at least 8: a cuDNN plan is
 * built per capacity, so that batches of similar size share it). */
typedef struct {
    int32_t q_heads, kv_heads, head_dim;
    int32_t head_dim_v;    /* of V, O, dO and dV rows; 0: head_dim */
    int32_t min_rows;
    int32_t dense;         /* the classes the dense engine takes (DCP_SEG_BIT set) */
    int32_t backward;      /* a backward program */
    int32_t deterministic; /* backward: adds in waves (dcp_seg_waves) */
} dcp_seg_shape_t;

/* The batch capacity of `batch` entries (see dcp_seg_shape_t). */
int32_t dcp_seg_cap(int32_t batch);

/* Appends the program of one launch (groups [0, num_groups) over `tiles`) to prog, whose
 * launches array must have room (the caller sizes it); its launch index is returned in
 * *launch_out. Grows every other array as needed. */
dcp_status_t dcp_seg_prog_add(dcp_seg_prog_t *prog, const dcp_seg_shape_t *shape,
                              const dcp_seq_info_t *seqs, const dcp_tile_group_t *groups,
                              int64_t num_groups, const dcp_tile_t *tiles, int64_t *launch_out);

void dcp_seg_prog_free(dcp_seg_prog_t *prog);

/* The deterministic backward of launch l of prog (being added: its own tiles start at
 * own_tile0): its own groups and its adds into the gradients put in waves, one kernel launch
 * each, in which no two writers overlap, so that every gradient element takes at most one
 * add per launch and the launches' stream order fixes the sums' order (with dcp's
 * deterministic kernels: kernels/kernel.h). In a wave of own groups, the groups' dQ rows are
 * disjoint, and two tiles whose dK or dV rows overlap have the very same destination
 * (dcp_tile_same_grads: one CTA adds them in tile order); a group whose own tiles overlap
 * that way is split into one group per tile. In a wave of adds, the destination rows are
 * disjoint. Waves are filled first-fit in program order, each wave's groups keep consecutive
 * runs of tiles, and the cut is a pure function of the launch. Called by dcp_seg_prog_add
 * when shape->deterministic. */
dcp_status_t dcp_seg_waves(dcp_seg_prog_t *prog, dcp_seg_launch_t *l, const dcp_seg_shape_t *shape,
                           int64_t own_tile0);

/* The end of wave w of a launch's own groups (acc 0) or adds (acc 1), as a count from its
 * first: the whole range when the launch has no waves (w 0). */
int64_t dcp_seg_wave_end(const dcp_seg_prog_t *prog, const dcp_seg_launch_t *l, int acc, int64_t w);

/* What runs the dense calls of a program: dcp_dense_cpu (the CPU twin) or cuDNN
 * (kernels/cudnn.h). run executes call `call` of prog (prog->calls[call], forward or backward
 * as its launch was built); ints: the program's int arrays where the engine reads them
 * (device memory for cuDNN; prog->ints is the host copy). */
typedef struct {
    const char *name;
    void *state;
    dcp_status_t (*run)(void *state, const dcp_kernel_env_t *env, const dcp_seg_prog_t *prog,
                        int64_t call, const int32_t *ints);
} dcp_dense_engine_t;

/* The CPU twin as a dense engine. */
extern const dcp_dense_engine_t dcp_dense_cpu;

/* A program's arrays where the kernels read them: the program's own (host kernels) or a
 * device copy at the same element positions. */
typedef struct {
    const dcp_tile_group_t *own_groups;
    const dcp_tile_t *own_tiles;
    const dcp_copy_item_t *copies;
    const dcp_merge_item_t *merges;
    const dcp_merge_src_t *merge_srcs;
    const dcp_delta_out_item_t *deltas;
    const int32_t *ints;
} dcp_seg_arrays_t;

/* The host arrays of a program as a dcp_seg_arrays_t. */
dcp_seg_arrays_t dcp_seg_host_arrays(const dcp_seg_prog_t *prog);

/* Runs launch `launch` of `prog` (forward or backward, as it was built) with the kernels `k`
 * and the dense engine; env holds the rank's buffers with DCP_BUF_SEG and DCP_BUF_SEG32 set
 * (at least the launch's seg_elems and seg32_elems), its max_rows is set here per step. */
dcp_status_t dcp_seg_run(const dcp_kernels_t *k, const dcp_dense_engine_t *dense,
                         const dcp_kernel_env_t *env, const dcp_seg_prog_t *prog,
                         const dcp_seg_arrays_t *arrays, int64_t launch);

/* The dense calls of a launch on the CPU, with cuDNN's semantics (kernels/dense_cpu.c):
 * per entry, per query head (KV head h / (Hq / Hkv)), rows x < seq_q see the keys
 * y < seq_kv of the call's class and window (dcp_seg_sees); forward O rounded to the plan dtype and the statistics
 * max + log(sum exp) of the scaled scores; backward from Q, K, V, O, dO and the statistics,
 * dQ, dK, dV rounded to the plan dtype (dK, dV summed over the query heads of a KV head).
 * ints: the call's int arrays (host). */
dcp_status_t dcp_dense_cpu_fwd(const dcp_kernel_env_t *env, const dcp_dense_call_t *call,
                               const int32_t *ints);
dcp_status_t dcp_dense_cpu_bwd(const dcp_kernel_env_t *env, const dcp_dense_call_t *call,
                               const int32_t *ints);

#ifdef __cplusplus
}
#endif

#endif
