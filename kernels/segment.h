/*
 * The segmenter: a launch's tile list (tile groups and their KV tiles) cut into pieces that a
 * dense attention engine can run, and the program that runs them.
 *
 * A piece is rows [r0, r1) of one group against keys [k0, k1) of one of its tiles, both
 * local, in one of three classes:
 *   FULL    every row sees every key;
 *   CAUSAL  row r sees keys [k0, b0 + r - r0) with b0 > k0: the diagonal, bottom-right aligned
 *           once the keys end where the last row's keys end (cuDNN's bottom-right causal mask,
 *           which then never leaves a row without a key: s_kv >= s_q);
 *   MASKED  anything else (window edges, two ranges, custom ranges): the mask decides.
 * The pieces of a tile cover exactly its allowed pairs: FULL and CAUSAL pieces hold allowed
 * pairs only, MASKED pieces hold every remaining allowed pair (and may span disallowed ones,
 * which the kernel masks). The classes follow from the per-row allowed key ranges of
 * include/base/mask_rule.h alone, so the cut is a pure function of the tile list.
 *
 * The program of a launch (dcp_seg_prog_t) is what an engine runs instead of the plain tile
 * list, with dcp's own kernels for everything but the dense calls:
 *   forward:  gather the dense pieces' Q, K and V rows into packed buffers (copy); run the
 *             MASKED pieces with dcp's attention kernel (sub-groups of trimmed tiles), and
 *             reset groups that start from nothing; one dense call per class over packed
 *             entries, O in the plan dtype and the softmax statistics (natural log of the
 *             scaled scores) in fp32; merge each entry's (O, LSE) into its group's output;
 *   backward: gather Q, dO, K, V and the final LSE; write, per entry row, an O' with
 *             rowsum(dO * O') = delta (the dense engine takes O, dcp ships delta); run the
 *             MASKED pieces with dcp's backward kernel (into the groups' dQ and the tiles'
 *             dK, dV); one dense backward call per class; add its dQ, dK, dV into the
 *             groups' and tiles' fp32 gradient rows (deterministic mode: the own kernel and
 *             the adds in waves of disjoint writers, dcp_seg_waves).
 * An entry is a group's row range with all its FULL pieces of exactly those rows and at most
 * one CAUSAL piece, keys concatenated with the causal piece last: a row then sees every full
 * key and its diagonal, which is still bottom-right aligned over the concatenation.
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
    DCP_SEG_MASKED = 2,
    DCP_SEG_CLASSES = 3
} dcp_seg_class_t;

/* "full", "causal", "masked". */
const char *dcp_seg_class_name(int cls);

typedef struct {
    int32_t group; /* index into the launch's groups */
    int32_t tile;  /* index into the tile array */
    int32_t r0, r1, k0, k1;
    int32_t cls;
    int64_t pairs; /* allowed (query, key) pairs of the piece */
} dcp_seg_piece_t;

/* Bit c of a class set: class c may go to the dense engine. */
#define DCP_SEG_BIT(c) (1 << (c))

/* The pieces of a launch, group by group, tile by tile, rows ascending (malloc'ed; n_out
 * pieces). Dense runs of fewer than min_rows rows, and runs of a class not in `dense` (a
 * DCP_SEG_BIT set), are MASKED instead (a dense engine's tile is 64-128 rows: a few rows
 * cost it a whole tile), and neighbouring MASKED rows of a tile join. min_rows >= 1. */
dcp_status_t dcp_seg_cut(const dcp_seq_info_t *seqs, const dcp_tile_group_t *groups,
                         int64_t num_groups, const dcp_tile_t *tiles, int32_t min_rows,
                         int32_t dense, dcp_seg_piece_t **pieces_out, int64_t *n_out);

/* One dense call: the entries of one class packed as cuDNN's ragged SDPA takes them. The
 * tensors are element offsets into the engine buffers: q, k, v, o, dout, dq, dk, dv in
 * DCP_BUF_SEG (plan dtype, [rows, heads, D] each entry after the last), stats in
 * DCP_BUF_SEG32 ([rows, Hq]). The per-entry lengths and ragged offsets are `ints`: an int32
 * array at element offset `ints` of the program's int array (prog.ints), laid out for a
 * batch of `cap` (>= batch) entries, the ones past `batch` empty:
 *   seq_q[cap] seq_kv[cap] off_q[cap+1] off_kv[cap+1] off_stats[cap+1]
 * (offsets in elements: rows x Hq x D, rows x Hkv x D, rows x Hq). */
typedef struct {
    int32_t cls;              /* DCP_SEG_FULL or DCP_SEG_CAUSAL */
    int32_t batch, cap;       /* entries; the batch the int arrays are laid out for */
    int32_t max_q, max_kv;    /* longest entry's rows */
    int64_t rows_q, rows_kv;  /* all entries' rows */
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
    int32_t own_rows, gather_rows, merge_rows, delta_rows; /* the most rows of an item (grids) */
    /* deterministic backward: the own groups and the adds in waves, each one launch of its
     * kernel, their ends (counts from own_first, acc_first) in prog.wave_ends; 0: one launch */
    int64_t own_wave_first, own_waves;
    int64_t acc_wave_first, acc_waves;
    dcp_dense_call_t call[2];           /* FULL, CAUSAL (batch 0: none) */
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
    int64_t *wave_ends; /* host only: the launches' waves (dcp_seg_waves) */
    int64_t n_own_groups, n_own_tiles, n_copies, n_merges, n_merge_srcs, n_deltas, n_ints,
        n_wave_ends;
    int64_t cap_own_groups, cap_own_tiles, cap_copies, cap_merges, cap_merge_srcs, cap_deltas,
        cap_ints, cap_wave_ends;    /* allocated elements of each array */
    int64_t seg_elems, seg32_elems; /* the largest launch's staging */
    int64_t pairs[DCP_SEG_CLASSES]; /* allowed pairs per class, every launch */
} dcp_seg_prog_t;

/* What a program is built for: the plan's heads per head group, head dim, min_rows, and the
 * batch capacity rule (cap = the smallest power of two >= batch, at least 8: a cuDNN plan is
 * built per capacity, so that batches of similar size share it). */
typedef struct {
    int32_t q_heads, kv_heads, head_dim;
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
 * (kernels/cudnn.h). run executes call `cls` of launch `launch` of prog (forward or backward
 * as the launch was built); ints: the program's int arrays where the engine reads them
 * (device memory for cuDNN; prog->ints is the host copy). */
typedef struct {
    const char *name;
    void *state;
    dcp_status_t (*run)(void *state, const dcp_kernel_env_t *env, const dcp_seg_prog_t *prog,
                        int64_t launch, int cls, const int32_t *ints);
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
 * per entry, per query head (KV head h / (Hq / Hkv)), rows x < seq_q see keys y < seq_kv
 * (CAUSAL: y <= x + seq_kv - seq_q); forward O rounded to the plan dtype and the statistics
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
