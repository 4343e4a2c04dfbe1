"""dcp for PyTorch: plans, differentiable attention over dcp's forward and backward, and a
context whose bootstrap is an allgather over a torch.distributed process group.

    import dcp.torch as dt
    with dt.Context() as ctx:                                  # one rank per process
        plan = dt.plan(lengths, "causal", ctx, like=(q, k))    # shapes and dtype from q, k
        idx = plan.local_indices(ctx.rank)                     # this rank's tokens, in order
        pos = plan.local_positions(ctx.rank)                   # their positions (RoPE)
        o = dt.attention(ctx, plan, q[idx], k[idx], v[idx])    # [tokens, heads, head_dim]
        full = plan.undispatch(o, ctx)                         # back to the global order

A model whose layers use different masks plans once for all of them (one placement, a
program pair per layer kind) and names the kind at each call:

        plan = dt.plan(lengths, {"global": "causal", "local": "window:1024"}, ctx,
                       like=(q, k), layers={"global": 1, "local": 5})
        o = dt.attention(ctx, plan, q[idx], k[idx], v[idx], kind="local")

Works with PyTorch 1.13 (CPU) and 2.x (CUDA); nothing is compiled against PyTorch: tensors
travel to libdcp as pointers (ctypes). On a GPU, dcp_forward and dcp_backward run on
PyTorch's current stream and return once their work is queued.

A rank whose tensors fail a check here tells its peers before raising (dcp_context_abort):
the other ranks' calls stop at once naming it and the reason, instead of waiting out the
timeout. After any failure the context is spent: close it on every rank and make a new one
(see Context).
"""
import ctypes as C
import warnings
import zlib
import weakref
from collections.abc import Mapping

import torch

from . import core
from .core import CustomMask, DcpError

__all__ = ["Context", "CustomMask", "DcpError", "Plan", "Planner", "attention",
           "attention_inproc", "library_path", "plan", "plan_from_bytes"]

_TO_DCP = {torch.float32: core.DTYPE_FP32, torch.bfloat16: core.DTYPE_BF16,
           torch.float16: core.DTYPE_FP16}
_TO_TORCH = {v: k for k, v in _TO_DCP.items()}


def _lib():
    return core.load()


def library_path():
    """The libdcp.so this package loads ($DCP_LIB, the one it was installed with, or the
    repository's build)."""
    return _lib().path


def _dtype_code(dtype):
    if isinstance(dtype, str):
        if dtype not in core.DTYPES:
            raise ValueError("dcp: dtype %r is not one of %s" % (dtype, ", ".join(core.DTYPES)))
        return core.DTYPES[dtype]
    if dtype not in _TO_DCP:
        raise TypeError("dcp: dtype %s: dcp stores float32, bfloat16 or float16" % dtype)
    return _TO_DCP[dtype]


def _mask_item(m, what):
    """A mask spec as core takes it: strings and CustomMask as they are, a [L, 4] tensor or
    nested list of (s0, e0, s1, e1) rows as a custom mask."""
    if isinstance(m, (str, CustomMask, core.Mask)):
        return m
    if not (torch.is_tensor(m) or isinstance(m, (list, tuple)) or hasattr(m, "tolist")):
        raise TypeError("dcp: %s = %r is not a mask: a spec such as \"causal\", a CustomMask "
                        "or its [length, 4] key ranges" % (what, m))
    return CustomMask(m, what=what)


def _masks(mask, num_seqs):
    one = isinstance(mask, (str, CustomMask, core.Mask)) or torch.is_tensor(mask)
    if one:
        return [_mask_item(mask, "mask")] * num_seqs
    if not isinstance(mask, (list, tuple)):
        raise TypeError("dcp: mask = %r: give a spec such as \"causal\" (every sequence), a "
                        "CustomMask, a list with one per sequence, or a mapping of layer kind "
                        "name to those" % (mask,))
    return [_mask_item(m, "mask[%d]" % i) for i, m in enumerate(mask)]


_LEGACY = ("num_heads", "num_kv_heads", "head_dim", "dtype")


def _shape_args(legacy, q_heads, kv_heads, head_dim, dtype, like, where, head_dim_v=None):
    """(q_heads, kv_heads, head_dim, head_dim_v, dtype) from the keywords, from example tensors
    `like` ((q, k, v), (q, k) or q alone: [tokens, heads, head_dim]; v's head_dim is the value
    head dim) or from the deprecated positional form. head_dim_v 0: head_dim."""
    if legacy:
        if len(legacy) > len(_LEGACY):
            raise TypeError("dcp: %s takes at most %d shape arguments after the cluster, got %d"
                            % (where, len(_LEGACY), len(legacy)))
        warnings.warn("dcp: %s(..., num_heads, num_kv_heads, head_dim, dtype) is deprecated "
                      "(query and KV head counts are easy to swap): pass q_heads=, kv_heads=, "
                      "head_dim=, dtype= or like=(q, k)" % where, DeprecationWarning,
                      stacklevel=4)
        given = dict(zip(("q_heads", "kv_heads", "head_dim", "dtype"), legacy))
        for name, value in (("q_heads", q_heads), ("kv_heads", kv_heads),
                            ("head_dim", head_dim), ("dtype", dtype)):
            if name in given and value is not None:
                raise TypeError("dcp: %s given both by position and as %s=" % (name, name))
        q_heads = given.get("q_heads", q_heads)
        kv_heads = given.get("kv_heads", kv_heads)
        head_dim = given.get("head_dim", head_dim)
        dtype = given.get("dtype", dtype)
    if like is not None:
        group = list(like) if isinstance(like, (tuple, list)) else [like]
        if not 1 <= len(group) <= 3:
            raise ValueError("dcp: like= takes q, (q, k) or (q, k, v), not %d tensors" %
                             len(group))
        q, k, v = (group + [None, None])[:3]
        for name, t in (("like[0] (q)", q), ("like[1] (k)", k), ("like[2] (v)", v)):
            if (t is not None or name.startswith("like[0]")) and (
                    not torch.is_tensor(t) or t.dim() != 3):
                raise ValueError("dcp: %s must be a [tokens, heads, head_dim] tensor" % name)
        if k is not None and (k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]):
            raise ValueError("dcp: like=(q, k): q is %s and k %s; they need the same tokens "
                             "and head_dim" % (list(q.shape), list(k.shape)))
        if v is not None and (v.shape[0] != k.shape[0] or v.shape[1] != k.shape[1]):
            raise ValueError("dcp: like=(q, k, v): k is %s and v %s; they need the same tokens "
                             "and heads (v's head_dim is the value head dim)" %
                             (list(k.shape), list(v.shape)))
        q_heads = q.shape[1] if q_heads is None else q_heads
        head_dim = q.shape[2] if head_dim is None else head_dim
        dtype = q.dtype if dtype is None else dtype
        if k is not None:
            kv_heads = k.shape[1] if kv_heads is None else kv_heads
        if v is not None:
            head_dim_v = v.shape[2] if head_dim_v is None else head_dim_v
    kv_heads = q_heads if kv_heads is None else kv_heads
    head_dim_v = 0 if head_dim_v is None else head_dim_v
    for name, value in (("q_heads", q_heads), ("head_dim", head_dim), ("dtype", dtype)):
        if value is None:
            raise TypeError("dcp: %s needs %s= (or like=(q, k, v), example tensors)" %
                            (where, name))
    for name, value in (("q_heads", q_heads), ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("head_dim_v", head_dim_v)):
        core.check_int(value, name)
    return q_heads, kv_heads, head_dim, head_dim_v, dtype


def _kinds(mask, layers, num_seqs):
    """A mapping of layer kind name to mask as (names, per-kind mask lists, layer counts):
    layers maps a name to its count of model layers (default 1 each)."""
    if layers is not None and not isinstance(layers, Mapping):
        raise TypeError("dcp: layers = %r: a mapping of layer kind name to its count of model "
                        "layers" % (layers,))
    layers = dict(layers or {})
    names = list(mask)
    unknown = set(layers) - set(names)
    if unknown:
        raise ValueError("dcp: layers names kinds %s that the mask mapping does not" %
                         sorted(unknown))
    return (names, [_masks(mask[n], num_seqs) for n in names],
            [core.check_int(layers.get(n, 1), "layers[%r]" % n) for n in names])


def _request(where, lengths, mask, legacy, q_heads, kv_heads, head_dim, dtype, like,
             softmax_scale, options):
    """The C arguments of a planning request: BatchArgs, Shape, PlanOptions, and the layer
    kinds' names (None for one mask per sequence)."""
    lib = _lib()
    options = dict(options)
    layers = options.pop("layers", None)
    scale = options.pop("scale", None)  # the old name of softmax_scale
    softcap = core.check_softcap(options.pop("softcap", None) or 0.0)
    head_dim_v = options.pop("head_dim_v", None)
    if softmax_scale is None:
        softmax_scale = scale
    q_heads, kv_heads, head_dim, head_dim_v, dtype = _shape_args(
        legacy, q_heads, kv_heads, head_dim, dtype, like, where, head_dim_v)
    lengths = core.int_list(lengths.tolist() if torch.is_tensor(lengths) else lengths,
                            "lengths")
    names = None
    if isinstance(mask, Mapping):
        names, masks, counts = _kinds(mask, layers, len(lengths))
        batch = core.BatchArgs(lib, lengths, masks, counts)
    elif layers is not None:
        raise ValueError("dcp: layers= needs a mapping of layer kind name to mask")
    else:
        batch = core.BatchArgs(lib, lengths, _masks(mask, len(lengths)))
    shape = core.Shape(q_heads, kv_heads, head_dim, _dtype_code(dtype), _scale(softmax_scale),
                       softcap, head_dim_v)
    opts = lib.plan_options(**options)
    return batch, shape, opts, names


def _cluster(cluster):
    """(core.Cluster, whether this call made it and must close it)."""
    if isinstance(cluster, str):
        return _lib().cluster(cluster), True
    if isinstance(cluster, Context):
        return cluster.cluster, False
    if isinstance(cluster, core.Cluster):
        return cluster, False
    raise TypeError("dcp: cluster must be a spec such as \"2x4\", a dcp.torch.Context or a "
                    "cluster, not %s" % type(cluster).__name__)


class Plan:
    """A dcp plan: where every token block lives, one program per rank for the forward and
    the backward pass. Immutable; one plan serves a whole training step (every layer). A plan
    of layer kinds holds a program pair per kind on one placement: `kinds` lists their names
    (None for a plan of one mask per sequence; a plan from bytes names them by index)."""

    def __init__(self, plan, lengths=None, kinds=None):
        self._plan = plan
        self._lengths = lengths
        self._offsets = None
        self.num_ranks = plan.num_ranks
        self.num_kinds = max(1, plan.stats().num_kinds)
        self.kinds = list(kinds) if kinds else None
        self._kind_handles = {}

    @property
    def handle(self):
        return self._plan._live()

    def kind_index(self, kind):
        """The index of layer kind `kind`: a name, an index, or None (kind 0)."""
        if kind is None:
            return 0
        if isinstance(kind, str):
            if not self.kinds or kind not in self.kinds:
                raise ValueError("dcp: layer kind %r: the plan's kinds are %s" %
                                 (kind, self.kinds or list(range(self.num_kinds))))
            return self.kinds.index(kind)
        if not 0 <= int(kind) < self.num_kinds:
            raise ValueError("dcp: layer kind %d of a plan of %d" % (kind, self.num_kinds))
        return int(kind)

    def kind_handle(self, kind=None):
        """The C handle that runs layer kind `kind` (the plan's own for kind 0)."""
        i = self.kind_index(kind)
        if i == 0:
            return self.handle
        if i not in self._kind_handles:
            self._kind_handles[i] = self._plan.kind_handle(i)
        return self._kind_handles[i]

    @property
    def lengths(self):
        """The sequence lengths of the batch."""
        if self._lengths is None:
            self._lengths = self._plan.lengths()
        return list(self._lengths)

    @property
    def dtype(self):
        """The torch dtype of Q, K, V and O."""
        return _TO_TORCH[self._plan.shape.dtype]

    @property
    def shape(self):
        """(q_heads, kv_heads, head_dim)."""
        s = self._plan.shape
        return (s.num_heads, s.num_kv_heads, s.head_dim)

    @property
    def head_dim_v(self):
        """The value head dim (of V and O): head_dim, or MLA's own."""
        return self._plan.shape.head_dim_v

    @property
    def softcap(self):
        """The logit softcap the plan was made for (0.0: none)."""
        return self._plan.shape.softcap

    @property
    def checksum(self):
        """The plan's identity (dcp_plan_checksum): equal on every rank that planned the same
        batch; the number a "plans differ" error names."""
        return self._plan.checksum()

    def layout(self, rank):
        """The rank's local rows as (sequence, start, length) spans, in local order."""
        self._rank_ok(rank)
        return self._plan.layout(rank)

    def local_tokens(self, rank):
        self._rank_ok(rank)
        return self._plan.local_tokens(rank)

    def _spans(self, rank, fn, device):
        parts = [fn(s, start, n) for s, start, n in self.layout(rank)]
        out = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
        return out if device is None else out.to(device)

    def local_indices(self, rank, device=None):
        """A LongTensor of the global token indices (positions in the concatenation of the
        sequences) that `rank` owns, in its local row order: x[plan.local_indices(r)] are
        rank r's rows of a [total_tokens, ...] tensor x."""
        if self._offsets is None:
            self._offsets = [0]
            for n in self.lengths:
                self._offsets.append(self._offsets[-1] + n)
        off = self._offsets
        return self._spans(rank, lambda s, start, n: torch.arange(off[s] + start,
                                                                  off[s] + start + n), device)

    def local_positions(self, rank, device=None):
        """A LongTensor of each local row's position within its own sequence (0-based), in
        local row order: the positions rotary embeddings (RoPE) take."""
        return self._spans(rank, lambda s, start, n: torch.arange(start, start + n), device)

    def local_sequences(self, rank, device=None):
        """A LongTensor of each local row's sequence index, in local row order."""
        return self._spans(rank, lambda s, start, n: torch.full((n,), s, dtype=torch.long),
                           device)

    def dispatch(self, x, rank):
        """Rank `rank`'s rows of a global [total_tokens, ...] tensor, in its local order."""
        total = sum(self.lengths)
        if not torch.is_tensor(x) or x.dim() < 1 or x.shape[0] != total:
            raise ValueError("dcp: dispatch: x must be a [total_tokens, ...] tensor of %d rows, "
                             "not %s" % (total, list(x.shape) if torch.is_tensor(x) else
                                         type(x).__name__))
        return x[self.local_indices(rank, device=x.device)]

    def gather(self, locals_):
        """The global [total_tokens, ...] tensor from every rank's local rows (a list, rank
        r's rows in plan.local_indices(r) order): the inverse of dispatch over all ranks of
        this process. Differentiable."""
        if len(locals_) != self.num_ranks:
            raise ValueError("dcp: gather: %d tensors for a %d-rank plan" %
                             (len(locals_), self.num_ranks))
        for r, x in enumerate(locals_):
            if not torch.is_tensor(x) or x.dim() < 1 or x.shape[0] != self.local_tokens(r):
                raise ValueError("dcp: gather: rank %d's tensor has %s rows, the plan gives it %d"
                                 % (r, x.shape[0] if torch.is_tensor(x) and x.dim() else "no",
                                    self.local_tokens(r)))
        idx = torch.cat([self.local_indices(r, device=locals_[0].device)
                         for r in range(self.num_ranks)])
        flat = torch.cat(list(locals_))
        if flat.shape[0] != idx.shape[0]:
            raise ValueError("dcp: gather: %d rows for %d tokens" % (flat.shape[0], idx.shape[0]))
        return flat.new_zeros(flat.shape).index_copy(0, idx, flat)

    def undispatch(self, local, ctx):
        """The global [total_tokens, ...] tensor on every rank from each rank's local rows
        (a collective over the context's process group: every rank calls it). Its gradient
        is the gradient of this rank's rows of the global result, so that a loss computed
        alike on every rank trains every rank's rows once."""
        return _Undispatch.apply(local, self, ctx)

    def stats(self, kind=None):
        """The statistics (dcp_plan_stats_t) of layer kind `kind` (default the first) as a
        dict; model_step_ms is the whole model's."""
        return core.stats_dict(self._plan.dcp, self._plan.stats(self.kind_index(kind)))

    def rank_stats(self, rank):
        self._rank_ok(rank)
        return core.stats_dict(self._plan.dcp, self._plan.rank_stats(rank))

    def to_bytes(self):
        """The plan's serialized bytes (dcp_plan_serialize): versioned and checksummed."""
        return self._plan.to_bytes()

    def close(self):
        """Frees the plan now (it is freed when collected otherwise)."""
        self._plan.close()

    def _rank_ok(self, rank):
        rank = core.check_int(rank, "rank")
        if not 0 <= rank < self.num_ranks:
            raise ValueError("dcp: rank %d of a %d-rank plan" % (rank, self.num_ranks))


def plan(lengths, mask, cluster, *legacy, q_heads=None, kv_heads=None, head_dim=None,
         dtype=None, like=None, softmax_scale=None, **options):
    """Plans a batch: sequences of `lengths` tokens (ints), `mask` one spec for all of them
    ("causal", "window:W", "lambda:S:W", "blockwise:b:k", "shared-question:p:a", "full", a
    [L, 4] integer tensor of custom ranges) or a list with one per sequence; `cluster` a
    Context (its ranks' cluster; the plan's shape is checked against its device) or a spec
    such as "2x4".

    The attention shape is keyword-only: q_heads, kv_heads (default q_heads), head_dim,
    head_dim_v (the value head dim, default head_dim: MLA's differs) and dtype
    (torch.float32/bfloat16/float16), or like=(q, k, v) to read them from example tensors
    ([tokens, heads, head_dim]; v's last dim is the value head dim). softmax_scale is the
    plan's default scale (1/sqrt(head_dim) when None; attention() may give another per call).
    softcap=c (Gemma 2) makes every scaled score c tanh(s / c) before the mask, in every
    kernel; the plan is made for it (0 or None: off).

    A model whose layers use different masks: `mask` a mapping of layer kind name to such a
    mask ({"global": "causal", "local": "window:1024"}, at most 4 kinds) and layers={name:
    count}, how many model layers use each (default 1): one placement for every kind, the
    planner minimising the model's step; the kind is named at attention(). The other
    keywords are
    dcp_plan_options_t fields: block_size, strategy ("ring", "zigzag", "lpt", "metis",
    "auto", or a peer policy: "packed", "dyncp", "ulysses", "usp", "magi"), head_blocks,
    divisions, eps_inter, eps_intra, mem_cap_bytes, seed, expansion, net_cap, refine,
    comm_schedule, coalesce, metis_tries, strategy_arg (a peer policy's parameter),
    hierarchy (0: METIS's global plan without the hierarchical or evened candidates).
    (softcap and head_dim_v travel with them too.)

    The old form plan(lengths, mask, cluster, num_heads, num_kv_heads, head_dim, dtype)
    still works this release, with a DeprecationWarning."""
    batch, shape, opts, names = _request("plan", lengths, mask, legacy, q_heads, kv_heads,
                                         head_dim, dtype, like, softmax_scale, options)
    if isinstance(cluster, Context):
        cluster.check_shape(shape)
    cl, made = _cluster(cluster)
    try:
        p = _lib().plan(batch, shape, opts, cl)
    finally:
        if made:
            cl.close()
    return Plan(p, batch.lengths, names)


def plan_from_bytes(data):
    """A Plan from Plan.to_bytes() bytes (any rank's: plans are byte-identical)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError("dcp: plan_from_bytes takes the bytes of Plan.to_bytes(), not %s" %
                        type(data).__name__)
    return Plan(_lib().plan_from_bytes(data))


class Planner:
    """The planner service: `num_threads` workers plan submitted batches while the current
    one trains; an identical batch is served from a cache of at most `cache_entries` plans
    and `cache_bytes` bytes (0: 256 MiB).

        planner = dt.Planner(ctx)                       # or a spec such as "2x4"
        t = planner.submit(lengths, "causal", like=(q, k), block_size=1024)
        ...                                             # train the current batch
        plan = planner.wait(t)

    Close it (or let it be collected) before its Context."""

    def __init__(self, cluster, num_threads=1, cache_entries=16, cache_bytes=0):
        cl, made = _cluster(cluster)
        self._owned = cl if made else None
        self._context = cluster if isinstance(cluster, Context) else None
        self._planner = core.Planner(_lib(), cl, num_threads, cache_entries, cache_bytes)
        self._lengths = {}
        if self._context is not None:
            self._context._dependents.append(weakref.ref(self))

    def submit(self, lengths, mask, *legacy, q_heads=None, kv_heads=None, head_dim=None,
               dtype=None, like=None, softmax_scale=None, **options):
        """Queues a batch (arguments as plan() takes them, less the cluster); returns its
        ticket, to be collected once with wait() or try_wait()."""
        batch, shape, opts, names = _request("Planner.submit", lengths, mask, legacy, q_heads,
                                             kv_heads, head_dim, dtype, like, softmax_scale,
                                             options)
        if self._context is not None:
            self._context.check_shape(shape)
        ticket = self._planner.submit(batch, shape, opts)
        self._lengths[ticket] = (batch.lengths, names)
        return ticket

    def wait(self, ticket):
        """The Plan of a ticket, waiting for it."""
        lengths, names = self._lengths.pop(ticket, (None, None))  # spent either way
        return Plan(self._planner.wait(ticket), lengths, names)

    def try_wait(self, ticket):
        """The Plan of a ticket, or None while it is being made."""
        p = self._planner.try_wait(ticket)
        return None if p is None else Plan(p, *self._lengths.pop(ticket, (None, None)))

    def stats(self):
        """The service's counters (dcp_planner_stats_t) as a dict: submitted, planned,
        cache_hits, failed, pending, plan_ms (workers' planning time, summed), wait_ms (time
        callers were blocked in wait, summed), cached_plans, cached_bytes, uncached, evictions
        (cached plans dropped to make room)."""
        return core.stats_dict(self._planner.dcp, self._planner.stats())

    def close(self):
        """Waits for the plans being made and frees the planner."""
        self._planner.close()
        if self._owned is not None:
            self._owned.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- tensors to libdcp ------------------------------------------------------------------------


def _ptr(t):
    return t.data_ptr() if t.numel() else None


def _ready(t, dtype, rows, heads, head_dim, what):
    """t as libdcp reads it: contiguous, 16-byte aligned, [rows, heads, head_dim] of dtype."""
    if not torch.is_tensor(t):
        raise TypeError("dcp: %s is not a tensor" % what)
    if t.dim() != 3 or (rows is not None and t.shape[0] != rows) or \
            (heads is not None and (t.shape[1], t.shape[2]) != (heads, head_dim)):
        want = "[%s, %s, %s]" % (rows, heads, head_dim)
        raise ValueError("dcp: %s has shape %s, the plan wants %s" % (what, list(t.shape), want))
    if dtype is not None and t.dtype != dtype:
        raise TypeError("dcp: %s is %s, the plan is %s" % (what, t.dtype, dtype))
    if t.dtype not in _TO_DCP:
        raise TypeError("dcp: %s is %s: dcp stores float32, bfloat16 or float16" % (what, t.dtype))
    t = t.detach().contiguous()
    if t.data_ptr() % 16:
        t = t.clone()
    return t


def _rank_inputs(plan, rank, q, k, v):
    """q, k, v of one rank, checked against the plan (shape, value head dim, dtype, rows:
    libdcp reads as many rows as the plan gives the rank)."""
    rows = plan.local_tokens(rank)
    hq, hkv, d = plan.shape
    tag = "rank %d's " % rank
    q = _ready(q, plan.dtype, rows, hq, d, tag + "q")
    k = _ready(k, q.dtype, rows, hkv, d, tag + "k")
    v = _ready(v, q.dtype, rows, hkv, plan.head_dim_v, tag + "v")
    if not (q.device == k.device == v.device):
        raise ValueError("dcp: %sq, k, v on %s, %s, %s" % (tag, q.device, k.device, v.device))
    return q, k, v


def _sinks_ready(sinks, plan, device, what="sinks"):
    """Learnable sinks as libdcp reads them: [Hq] float32, contiguous, on `device`; None
    stays None."""
    if sinks is None:
        return None
    hq = plan.shape[0]
    if not torch.is_tensor(sinks) or sinks.dim() != 1 or sinks.shape[0] != hq:
        raise ValueError("dcp: %s must be a [%d] tensor (one logit per query head), not %s" %
                         (what, hq, list(sinks.shape) if torch.is_tensor(sinks) else
                          type(sinks).__name__))
    if not sinks.dtype.is_floating_point:
        raise TypeError("dcp: %s is %s, a floating-point tensor is needed" % (what, sinks.dtype))
    return sinks.detach().to(device=device, dtype=torch.float32).contiguous()


def _scale(softmax_scale):
    """The call's dcp_tensors_t.softmax_scale (0: the plan's)."""
    if softmax_scale is None:
        return 0.0
    return core.check_scale(softmax_scale, "softmax_scale")


def _outputs(q, v, want_max):
    """O ([rows, Hq, D_v]), LSE and, where asked, the max logit ([Hq]; else empty)."""
    o = q.new_empty(q.shape[0], q.shape[1], v.shape[2])
    lse = torch.empty(q.shape[0], q.shape[1], dtype=torch.float32, device=q.device)
    ml = torch.empty(q.shape[1] if want_max else 0, dtype=torch.float32, device=q.device)
    return o, lse, ml


def _tensors(q, k, v, o, lse, scale, sinks=None, ml=None):
    return core.Tensors(_ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(lse), scale,
                        _ptr(sinks) if sinks is not None else None,
                        _ptr(ml) if ml is not None and ml.numel() else None)


def _grad_in(g, like):
    """dO as libdcp reads it (zeros where autograd gives none)."""
    if g is None:
        return torch.zeros_like(like)
    return _ready(g.to(like.dtype), like.dtype, like.shape[0], like.shape[1], like.shape[2],
                  "dO")


def _grads(q, k, v, o, lse, dout, scale, sinks=None):
    """Gradient buffers of one rank (and of its sinks, with sinks) and the dcp_grad_tensors_t
    over them."""
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ds = torch.empty_like(sinks) if sinks is not None else None
    g = core.GradTensors(_tensors(q, k, v, o, lse, scale, sinks), _ptr(dout), _ptr(dq),
                         _ptr(dk), _ptr(dv), _ptr(ds) if ds is not None else None)
    return (dq, dk, dv, ds), g


# ---- all ranks in this process ------------------------------------------------------------------


def _inproc_device(qs):
    """The device argument of dcp_forward_inproc for per-rank tensors on `qs`' devices."""
    devs = [q.device for q in qs]
    if all(d.type == "cpu" for d in devs):
        return None
    if not all(d.type == "cuda" for d in devs):
        raise ValueError("dcp: ranks on %s: all on the CPU or all on CUDA devices" %
                         sorted({str(d) for d in devs}))
    if len({d.index for d in devs}) == 1:
        return ("cuda:%d" % devs[0].index).encode()
    count = torch.cuda.device_count()
    if all(d.index == r % count for r, d in enumerate(devs)):
        return b"cuda"
    raise ValueError("dcp: ranks on %s: all on one GPU, or rank r on GPU r %% %d" %
                     ([str(d) for d in devs], count))


def _sync(qs):
    for i in sorted({q.device.index for q in qs if q.is_cuda}):
        torch.cuda.synchronize(i)


class _InprocAttention(torch.autograd.Function):
    """All ranks of a plan as threads (dcp_forward_inproc / dcp_backward_inproc); inputs
    plan, layer kind, n, scale, whether to return the max logit, the sinks (or None), then
    n q's, n k's, n v's; outputs n O's, n LSEs and n max logits (empty when not asked)."""

    @staticmethod
    def forward(ctx, plan, kind, n, scale, want_max, sinks, *qkv):
        lib = _lib()
        ins = [_rank_inputs(plan, r, qkv[r], qkv[n + r], qkv[2 * n + r]) for r in range(n)]
        outs = [_outputs(q, v, want_max) for q, _, v in ins]
        sk = [_sinks_ready(sinks, plan, q.device) for q, _, _ in ins]  # each rank's device
        io = (core.Tensors * n)(*[_tensors(*i, o[0], o[1], scale, s, o[2])
                                  for i, o, s in zip(ins, outs, sk)])
        device = _inproc_device([q for q, _, _ in ins])
        _sync([q for q, _, _ in ins])  # the contexts' streams do not follow PyTorch's
        lib.check(lib.lib.dcp_forward_inproc(plan.kind_handle(kind), io, 0.0, device),
                  "forward_inproc")
        _sync([q for q, _, _ in ins])
        ctx.plan, ctx.kind, ctx.n, ctx.device, ctx.scale = plan, kind, n, device, scale
        ctx.sinks, ctx.has_sinks = sk, sinks is not None
        ctx.sinks_like = (sinks.dtype, sinks.device) if sinks is not None else None
        ctx.save_for_backward(*[t for i in ins for t in i],
                              *[t for o in outs for t in o[:2]])
        ctx.mark_non_differentiable(*[t for o in outs for t in o[1:]])
        return tuple(o for o, _, _ in outs) + tuple(lse for _, lse, _ in outs) + \
            tuple(ml for _, _, ml in outs)

    @staticmethod
    def backward(ctx, *grads):
        lib, n = _lib(), ctx.n
        douts = grads[:n]
        saved = ctx.saved_tensors
        ins = [saved[3 * r:3 * r + 3] for r in range(n)]
        outs = [saved[3 * n + 2 * r:3 * n + 2 * r + 2] for r in range(n)]
        want_ds = ctx.has_sinks and ctx.needs_input_grad[5]
        result, gio = [], (core.GradTensors * n)()
        for r in range(n):
            dout = _grad_in(douts[r], outs[r][0])
            g, gio[r] = _grads(*ins[r], *outs[r], dout, ctx.scale,
                               ctx.sinks[r] if ctx.has_sinks else None)
            if not want_ds:
                gio[r].dsinks = None
            result.append((g, dout))
        _sync([q for q, _, _ in ins])
        lib.check(lib.lib.dcp_backward_inproc(ctx.plan.kind_handle(ctx.kind), gio, 0.0,
                                              ctx.device), "backward_inproc")
        _sync([q for q, _, _ in ins])
        grads_of = [g for g, _ in result]
        dsinks = None
        if want_ds:  # the sinks are shared by the ranks: their gradients sum
            dtype, dev = ctx.sinks_like
            dsinks = sum(g[3].to(dev, torch.float64) for g in grads_of).to(dtype)
        return (None, None, None, None, None, dsinks, *[g[0] for g in grads_of],
                *[g[1] for g in grads_of], *[g[2] for g in grads_of])


def attention_inproc(plan, qs, ks, vs, *, softmax_scale=None, return_lse=False, kind=None,
                     sinks=None, return_max_logit=False):
    """Attention of every rank of `plan`, ranks as threads of this process: qs, ks, vs hold
    one [local_tokens, heads, head_dim] tensor per rank (rows in plan.local_indices(r)
    order; v's last dim the plan's value head dim; all on the CPU, fp32/bf16/fp16, or on CUDA
    devices, bf16/fp16); returns one O per rank ([local_tokens, Hq, head_dim_v]), then, with
    return_lse, the list of their [local_tokens, Hq] fp32 LSEs (natural log, -inf for a
    query with no allowed key), and with return_max_logit the list of each rank's [Hq] fp32
    max logit (the same on every rank: per query head, the largest logit of an allowed pair
    of the whole batch, after scale and softcap, sinks excluded). sinks: a [Hq] tensor of
    learnable sink logits (GPT-OSS), one more softmax term per row with no value. Differentiable
    with respect to every q, k and v, and the sinks, through dcp's backward; softmax_scale
    overrides the plan's for this call. `kind`: the layer kind of a plan of several (its name
    or index; default the first)."""
    if not isinstance(plan, Plan):
        raise TypeError("dcp: attention_inproc takes a dcp.torch.Plan first, not %s" %
                        type(plan).__name__)
    n = plan.num_ranks
    if not (len(qs) == len(ks) == len(vs) == n):
        raise ValueError("dcp: %d/%d/%d q/k/v tensors for a %d-rank plan" %
                         (len(qs), len(ks), len(vs), n))
    plan.kind_index(kind)  # a bad kind fails before any work
    _sinks_ready(sinks, plan, None)  # a bad sinks tensor fails before any work too
    out = _InprocAttention.apply(plan, kind, n, _scale(softmax_scale), bool(return_max_logit),
                                 sinks, *qs, *ks, *vs)
    res = [list(out[:n])]
    if return_lse:
        res.append(list(out[n:2 * n]))
    if return_max_logit:
        res.append(list(out[2 * n:]))
    return tuple(res) if len(res) > 1 else res[0]


# ---- one rank per process ----------------------------------------------------------------------


class Context:
    """One rank's dcp runtime in a job of one rank per process, bootstrapped over a
    torch.distributed process group (default: the world; gloo, NCCL or any backend with
    all_gather). device: "cpu", "cuda", "cuda:N" or a torch.device; default the CPU on
    gloo, the current CUDA device otherwise. Creating and closing are collective: every rank
    of the group does both, in the same order as its other collectives. Close it explicitly
    (or use `with`): a context left to the collector is not destroyed, since a destroy
    outside the collective order could hang the job.

    deterministic: gradients bitwise equal run to run for the same plan and inputs
    (dcp_context_config_t.deterministic; slower on a GPU); default: on where
    torch.use_deterministic_algorithms(True) is in force.

    nccl_comm: the NCCL communicator dcp's transfers use where they run on NCCL, instead of
    one dcp would make (dcp_context_config_t.nccl_comm): "group", the communicator of `group`
    itself, where PyTorch exposes it (ProcessGroupNCCL's _comm_ptr(); made here by a
    one-element all_reduce on the group when PyTorch has not made it yet), or an ncclComm_t's
    address (int) over exactly the group's ranks, in its order, each on its rank's GPU
    (checked when the context is made: a misfit raises DcpError naming the rank and the
    field). Rules:
      - deadlock: dcp queues its transfers on the communicator in its own order, and NCCL
        needs every rank to queue a communicator's operations in one order, so lend one that
        nothing else uses while dcp runs: with "group", pass a group made for dcp alone,
        `dist.new_group(ranks, backend="nccl")`, on which the job runs no other collective;
      - lifetime: the communicator (and its group) must outlive the Context; dcp never
        destroys or aborts it, not even after a timeout: the Context reports and the job
        decides (dist.destroy_process_group(group) after close()).

    After any failure (a DcpError from attention() on any rank: a peer failed or stopped,
    plans differ, a rank's tensors were refused) the context is spent and every later call
    raises at once. To go on, every rank closes it and creates a new one: closing a failed
    context is not collective, creating one is, as the first time."""

    def __init__(self, group=None, device=None, timeout_s=0.0, transport_intra=None,
                 transport_inter=None, attn_engine=None, deterministic=None, nccl_comm=None):
        import torch.distributed as dist
        if not dist.is_initialized():
            raise RuntimeError("dcp: torch.distributed is not initialized "
                               "(dist.init_process_group first)")
        self._dist, self._group = dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        backend = str(dist.get_backend(group)).lower()
        if device is None:
            device = "cpu" if backend == "gloo" else "cuda:%d" % torch.cuda.current_device()
        self.device = torch.device(device)
        # the collective's tensors live where the backend wants them
        self._comm_device = torch.device("cpu") if backend == "gloo" else (
            torch.device("cuda", torch.cuda.current_device()) if backend == "nccl"
            else self.device)
        self._into_tensor = backend == "nccl" and hasattr(dist, "all_gather_into_tensor")
        comm = _nccl_comm(dist, group, backend, self.device, nccl_comm)
        self._callback_error = None
        self._dependents = []
        self._fn = core.ALLGATHER_FN(self._allgather)  # kept: libdcp calls it until close()
        self._bootstrap = core.Bootstrap(self.rank, self.size, self._fn, None)
        lib = _lib()
        cfg = core.ContextConfig(
            0, None, C.pointer(self._bootstrap), timeout_s,
            transport_intra.encode() if transport_intra else None,
            transport_inter.encode() if transport_inter else None, str(self.device).encode(),
            attn_engine=attn_engine.encode() if attn_engine else None, nccl_comm=comm,
            deterministic=int(torch.are_deterministic_algorithms_enabled()
                              if deterministic is None else bool(deterministic)))
        h = C.c_void_p()
        st = lib.lib.dcp_context_create(C.byref(cfg), C.byref(h))
        self._raise(st, "context")
        self.handle = h
        self._cluster = None

    def _allgather(self, state, send, recv, nbytes):
        """dcp_allgather_fn over the process group (called by libdcp on this thread)."""
        try:
            if nbytes:
                mine = torch.frombuffer(bytearray(C.string_at(send, nbytes)), dtype=torch.uint8)
                mine = mine.to(self._comm_device)
                if self._into_tensor:
                    out = torch.empty(self.size * nbytes, dtype=torch.uint8,
                                      device=self._comm_device)
                    self._dist.all_gather_into_tensor(out, mine, group=self._group)
                else:
                    parts = [torch.empty_like(mine) for _ in range(self.size)]
                    self._dist.all_gather(parts, mine, group=self._group)
                    out = torch.cat(parts)
                out = out.cpu().contiguous()
                C.memmove(recv, out.data_ptr(), self.size * nbytes)
            return core.OK
        except BaseException as e:  # never let an exception cross the C frames
            self._callback_error = e
            return core.ERR_SYSTEM

    def _raise(self, status, what):
        if status == core.OK:
            return
        err = _lib().error(status, what)
        cause, self._callback_error = self._callback_error, None
        if cause is not None:
            raise err from cause
        raise err

    def _live(self):
        if not self.handle:
            raise ValueError("dcp: the context is closed")
        return self.handle

    @property
    def cluster(self):
        """The cluster the ranks form (nodes by host name), for plan() and Planner."""
        if self._cluster is None:
            lib, h = _lib(), C.c_void_p()
            self._raise(lib.lib.dcp_context_cluster(self._live(), C.byref(h)), "context cluster")
            self._cluster = core.Cluster(lib, h, owned=False, owner=self)
        return self._cluster

    def check_shape(self, shape):
        """Raises DcpError (DCP_ERR_UNSUPPORTED, naming the field) when this context's device
        cannot run plans of `shape` (a core.Shape): on a GPU, head dims other than 64, 96,
        128, 192, 256 and MLA's 192/128, for one."""
        self._raise(_lib().lib.dcp_context_check_shape(self._live(), C.byref(shape)),
                    "plan shape on %s" % self.device)

    def abort(self, reason):
        """Marks this rank failed and tells every peer at once, with `reason`: their calls
        stop naming this rank and the reason instead of waiting for it. attention() does it
        itself when its checks refuse this rank's tensors."""
        _lib().lib.dcp_context_abort(self._live(), str(reason).encode(errors="replace"))

    @property
    def attn_engine(self):
        """The attention engine (dcp_context_attn_engine): {"requested", "engine" ("own",
        "cudnn", "twin"), "note" (why), "cudnn_version", "plans_built", ...}."""
        return _lib().attn_engine(self._live())

    def transport(self, inter_node=False):
        """The engine between ranks in a node ("ucx", "nccl", ...) or between nodes."""
        return _lib().lib.dcp_context_transport(self._live(), int(inter_node)).decode()

    def barrier(self):
        self._raise(_lib().lib.dcp_context_barrier(self._live()), "barrier")

    def synchronize(self, timeout_s=0.0):
        """Waits until the work of this rank's calls so far has finished on its GPU, for at
        most timeout_s seconds (0: the context's timeout), and raises DcpError for what the
        calls left to find (dcp_context_synchronize): a peer that failed, plans that differ,
        work unfinished in time (DCP_ERR_TIMEOUT naming the peers; past the context's
        timeout the context is spent). At once on the CPU. Not collective."""
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
            raise TypeError("dcp: timeout_s = %r is not a number of seconds" % (timeout_s,))
        self._raise(_lib().lib.dcp_context_synchronize(self._live(), float(timeout_s)),
                    "synchronize")

    @property
    def transport_report(self):
        """How this context moves and orders its transfers (dcp_context_transport_report):
        engines and links, stream order or host waits, where the call stamps travel."""
        return _lib().lib.dcp_context_transport_report(self._live()).decode()

    def close(self):
        """Destroys the context (collective unless it failed). Planners made on it are closed
        first."""
        for ref in self._dependents:
            dep = ref()
            if dep is not None:
                dep.close()
        self._dependents = []
        h, self.handle = self.handle, None
        if self._cluster is not None:
            self._cluster.close()
        if h:
            _lib().lib.dcp_context_destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stream(self, t):
        """The cudaStream_t dcp_forward/backward take for tensor t (None on the CPU)."""
        if self.device.type != "cuda":
            return None
        return torch.cuda.current_stream(t.device).cuda_stream or None


def _nccl_comm(dist, group, backend, device, nccl_comm):
    """The ncclComm_t address Context lends dcp (None: dcp makes its own); see Context."""
    if nccl_comm is None:
        return None
    if isinstance(nccl_comm, str) and nccl_comm == "group":
        if backend != "nccl":
            raise ValueError('dcp: nccl_comm = "group": the group\'s backend is %s, not nccl: '
                             "it has no NCCL communicator" % backend)
        if device.type != "cuda":
            raise ValueError('dcp: nccl_comm = "group" on device %s: NCCL serves CUDA '
                             "contexts" % device)
        pg = group if group is not None else dist.distributed_c10d._get_default_group()
        try:
            nccl = pg._get_backend(device)
        except (AttributeError, RuntimeError):
            nccl = pg  # PyTorch before 2.0: the group is the backend
        if not hasattr(nccl, "_comm_ptr"):
            raise ValueError('dcp: nccl_comm = "group": PyTorch %s does not expose its NCCL '
                             "communicator (ProcessGroupNCCL._comm_ptr); pass an ncclComm_t "
                             "address, or None for dcp's own" % torch.__version__)
        ptr = nccl._comm_ptr()
        if not ptr:  # made at the group's first collective
            dist.all_reduce(torch.zeros(1, device=device), group=group)
            torch.cuda.synchronize(device)
            ptr = nccl._comm_ptr()
        if not ptr:
            raise ValueError('dcp: nccl_comm = "group": the group has no NCCL communicator '
                             "for %s after a collective" % device)
        return int(ptr)
    if isinstance(nccl_comm, bool) or not isinstance(nccl_comm, int):
        raise TypeError('dcp: nccl_comm = %r: "group", an ncclComm_t address (int) or None'
                        % (nccl_comm,))
    if nccl_comm <= 0 or nccl_comm >= 2 ** 64:
        raise ValueError("dcp: nccl_comm = %d is not an address" % nccl_comm)
    return nccl_comm


def _not_a_plan(plan):
    raise TypeError("dcp: attention takes a dcp.torch.Plan second, not %s" % type(plan).__name__)


def _checked(dctx, fn, *args):
    """fn(*args); a ValueError or TypeError it raises (this rank's inputs are wrong) is told
    to the peers first, so that they stop now instead of waiting for this rank."""
    try:
        return fn(*args)
    except (ValueError, TypeError) as e:
        if dctx.handle:
            dctx.abort("rank %d refused its own inputs: %s" % (dctx.rank, e))
        raise


class _RankAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dctx, plan, kind, scale, want_max, q, k, v, sinks):
        lib = _lib()

        def check():
            qkv = _rank_inputs(plan, dctx.rank, q, k, v)
            if qkv[0].device.type != dctx.device.type:
                raise ValueError("dcp: tensors on %s, the context computes on %s" %
                                 (qkv[0].device, dctx.device))
            return qkv + (_sinks_ready(sinks, plan, qkv[0].device),)
        q2, k2, v2, sk = _checked(dctx, check)
        o, lse, ml = _outputs(q2, v2, want_max)
        io = _tensors(q2, k2, v2, o, lse, scale, sk, ml)
        dctx._raise(lib.lib.dcp_forward(dctx._live(), plan.kind_handle(kind), C.byref(io),
                                        dctx.stream(q2)), "forward")
        ctx.dctx, ctx.plan, ctx.kind, ctx.scale = dctx, plan, kind, scale
        ctx.sinks, ctx.sinks_like = sk, (sinks.dtype, sinks.device) if sinks is not None else None
        ctx.save_for_backward(q2, k2, v2, o, lse)
        ctx.mark_non_differentiable(lse, ml)
        return o, lse, ml

    @staticmethod
    def backward(ctx, dout, _dlse, _dml):
        lib, dctx = _lib(), ctx.dctx
        q, k, v, o, lse = ctx.saved_tensors
        dout = _checked(dctx, _grad_in, dout, o)
        want_ds = ctx.sinks is not None and ctx.needs_input_grad[8]
        (dq, dk, dv, ds), g = _grads(q, k, v, o, lse, dout, ctx.scale, ctx.sinks)
        if not want_ds:
            g.dsinks = None
        dctx._raise(lib.lib.dcp_backward(dctx._live(), ctx.plan.kind_handle(ctx.kind),
                                         C.byref(g), dctx.stream(q)), "backward")
        dsinks = ds.to(device=ctx.sinks_like[1], dtype=ctx.sinks_like[0]) if want_ds else None
        return None, None, None, None, None, dq, dk, dv, dsinks


def attention(ctx, plan, q, k, v, *, softmax_scale=None, return_lse=False, kind=None,
              sinks=None, return_max_logit=False):
    """This rank's attention under `plan`: q [local_tokens, Hq, D], k [local_tokens, Hkv, D],
    v [local_tokens, Hkv, D_v] (D_v the plan's head_dim_v) with rows in
    plan.local_indices(ctx.rank) order; returns O [local_tokens, Hq, D_v], then, with
    return_lse, its [local_tokens, Hq] fp32 LSE (natural log of the scaled scores'
    normaliser, -inf for a query with no allowed key; not differentiable), and with
    return_max_logit the [Hq] fp32 max logit (per query head, the largest logit of an allowed
    pair of the whole batch after scale and softcap, sinks excluded; the same on every rank:
    MuonClip's QK-clip; not differentiable). sinks: a [Hq] tensor of learnable sink logits
    (GPT-OSS): each row's softmax gets one more term exp(s_h) that carries no value; its
    gradient is this rank's rows' part (the data-parallel gradient reduction sums the ranks',
    as for any replicated parameter). softmax_scale overrides the plan's scale for this call
    and its backward. `kind`: the layer kind of a plan of several (its name or index; default
    the first). Every rank of the context calls it with the same plan, kind, sinks and
    return_max_logit. Differentiable with respect to q, k, v and sinks (the backward is
    collective too: every rank runs it). On a GPU it runs on PyTorch's current stream."""
    if not isinstance(ctx, Context):
        raise TypeError("dcp: attention takes a dcp.torch.Context first, not %s" %
                        type(ctx).__name__)
    if not isinstance(plan, Plan):
        _checked(ctx, _not_a_plan, plan)
    scale = _checked(ctx, _scale, softmax_scale)
    _checked(ctx, plan.kind_index, kind)  # a bad kind: the peers hear of it at once
    o, lse, ml = _RankAttention.apply(ctx, plan, kind, scale, bool(return_max_logit), q, k, v,
                                      sinks)
    res = (o,) + ((lse,) if return_lse else ()) + ((ml,) if return_max_logit else ())
    return res if len(res) > 1 else o


_MAX_TAIL = 7  # trailing dimensions undispatch exchanges (a [tokens, ...] tensor of 8 dims)


class _Undispatch(torch.autograd.Function):
    """Every rank's local rows all-gathered into the global order (rows padded to the
    longest rank's for the collective)."""

    @staticmethod
    def _agree(local, plan, dctx):
        """Every rank's rows, dtype and trailing shape, exchanged before the rows are: a
        rank whose tensor the plan does not fit, or that differs from rank 0's, is named by
        every rank's ValueError, at once (the row all-gather would otherwise fail inside
        the backend, or wait for the process group's timeout)."""
        tail = tuple(local.shape[1:])
        mine = [local.shape[0], zlib.crc32(str(local.dtype).encode()), len(tail)]
        mine += list(tail[:_MAX_TAIL]) + [0] * (_MAX_TAIL - min(len(tail), _MAX_TAIL))
        t = torch.tensor(mine, dtype=torch.int64, device=dctx._comm_device)
        parts = [torch.empty_like(t) for _ in range(plan.num_ranks)]
        dctx._dist.all_gather(parts, t, group=dctx._group)
        rows = [p.tolist() for p in parts]
        bad = []
        for r, d in enumerate(rows):
            if d[0] != plan.local_tokens(r):
                bad.append("rank %d has %d rows, the plan gives it %d" %
                           (r, d[0], plan.local_tokens(r)))
            elif d[2] > _MAX_TAIL:
                bad.append("rank %d's tensor has %d dimensions, at most %d" %
                           (r, d[2] + 1, _MAX_TAIL + 1))
            elif d[1:] != rows[0][1:]:
                bad.append("rank %d's dtype or trailing shape differs from rank 0's (%s %s "
                           "here on rank %d)" % (r, local.dtype, list(tail), dctx.rank))
        if bad:
            raise ValueError("dcp: undispatch: " + "; ".join(bad))

    @staticmethod
    def forward(ctx, local, plan, dctx):
        dist, group = dctx._dist, dctx._group
        rank = dctx.rank
        _Undispatch._agree(local, plan, dctx)
        most = max(plan.local_tokens(r) for r in range(plan.num_ranks))
        dev = dctx._comm_device
        pad = local.detach().new_zeros((most,) + tuple(local.shape[1:]), device=dev)
        pad[:local.shape[0]] = local.detach().to(dev)
        parts = [torch.empty_like(pad) for _ in range(plan.num_ranks)]
        dist.all_gather(parts, pad, group=group)
        locals_ = [p[:plan.local_tokens(r)].to(local.device) for r, p in enumerate(parts)]
        ctx.plan, ctx.rank = plan, rank
        return plan.gather(locals_)

    @staticmethod
    def backward(ctx, grad):
        return ctx.plan.dispatch(grad, ctx.rank), None, None
