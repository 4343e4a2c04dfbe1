"""dcp for PyTorch: plans, differentiable attention over dcp's forward and backward, and a
context whose bootstrap is an allgather over a torch.distributed process group.

    import dcp.torch as dt
    plan = dt.plan([3000, 500, 12000], "causal", "1x4", 8, 2, 64, torch.bfloat16)
    idx = plan.local_indices(rank)            # this rank's tokens, in its local row order
    o = dt.attention(ctx, plan, q[idx], k[idx], v[idx])   # [tokens, heads, head_dim]

A model whose layers use different masks plans once for all of them (one placement, a
program pair per layer kind) and names the kind at each attention call:

    plan = dt.plan(lengths, {"global": "causal", "local": "window:1024"}, ctx, 8, 2, 64,
                   torch.bfloat16, layers={"global": 1, "local": 5})
    o = dt.attention(ctx, plan, q, k, v, kind="local")

Works with PyTorch 1.13 (CPU) and 2.x (CUDA); nothing is compiled against PyTorch: tensors
travel to libdcp as pointers (ctypes). On a GPU, dcp_forward and dcp_backward run on
PyTorch's current stream and return once their work is queued.
"""
import ctypes as C
import weakref
from collections.abc import Mapping

import torch

from . import core
from .core import CustomMask, DcpError

__all__ = ["Context", "CustomMask", "DcpError", "Plan", "Planner", "attention",
           "attention_inproc", "plan", "plan_from_bytes"]

_TO_DCP = {torch.float32: core.DTYPE_FP32, torch.bfloat16: core.DTYPE_BF16,
           torch.float16: core.DTYPE_FP16}
_TO_TORCH = {v: k for k, v in _TO_DCP.items()}


def _lib():
    return core.load()


def _dtype_code(dtype):
    if isinstance(dtype, str):
        if dtype not in core.DTYPES:
            raise ValueError("dcp: dtype %r is not one of %s" % (dtype, ", ".join(core.DTYPES)))
        return core.DTYPES[dtype]
    if dtype not in _TO_DCP:
        raise TypeError("dcp: dtype %s: dcp stores float32, bfloat16 or float16" % dtype)
    return _TO_DCP[dtype]


def _mask_item(m):
    """A mask spec as core takes it: strings and CustomMask as they are, a [L, 4] tensor or
    nested list of (s0, e0, s1, e1) rows as a custom mask."""
    if isinstance(m, (str, CustomMask, core.Mask)):
        return m
    return CustomMask(m)


def _masks(mask, num_seqs):
    one = isinstance(mask, (str, CustomMask, core.Mask)) or torch.is_tensor(mask)
    if one:
        return [_mask_item(mask)] * num_seqs
    return [_mask_item(m) for m in mask]


def _kinds(mask, layers, num_seqs):
    """A mapping of layer kind name to mask as (names, per-kind mask lists, layer counts):
    layers maps a name to its count of model layers (default 1 each)."""
    layers = dict(layers or {})
    names = list(mask)
    unknown = set(layers) - set(names)
    if unknown:
        raise ValueError("dcp: layers names kinds %s that the mask mapping does not" %
                         sorted(unknown))
    return (names, [_masks(mask[n], num_seqs) for n in names],
            [int(layers.get(n, 1)) for n in names])


def _request(lengths, mask, num_heads, num_kv_heads, head_dim, dtype, block_size, strategy,
             options):
    """The C arguments of a planning request: BatchArgs, Shape, PlanOptions, and the layer
    kinds' names (None for one mask per sequence)."""
    lib = _lib()
    options = dict(options)
    scale = options.pop("scale", None)
    layers = options.pop("layers", None)
    lengths = lengths.tolist() if torch.is_tensor(lengths) else list(lengths)
    names = None
    if isinstance(mask, Mapping):
        names, masks, counts = _kinds(mask, layers, len(lengths))
        batch = core.BatchArgs(lib, lengths, masks, counts)
    elif layers is not None:
        raise ValueError("dcp: layers= needs a mapping of layer kind name to mask")
    else:
        batch = core.BatchArgs(lib, lengths, _masks(mask, len(lengths)))
    shape = core.Shape(num_heads, num_kv_heads, head_dim, _dtype_code(dtype),
                       0.0 if scale is None else scale)
    opts = lib.plan_options(block_size=block_size, strategy=strategy, **options)
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
    the backward pass. Immutable; one plan serves a whole training step. A plan of layer
    kinds holds a program pair per kind on one placement: `kinds` lists their names (None
    for a plan of one mask per sequence; a plan from bytes names them by index)."""

    def __init__(self, plan, lengths=None, kinds=None):
        self._plan = plan
        self._lengths = lengths
        self._offsets = None
        self.num_ranks = plan.num_ranks
        self.num_kinds = plan.stats().num_kinds
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
        """The torch dtype of Q, K, V and O (None when unknown)."""
        s = self._plan.shape
        return None if s is None else _TO_TORCH[s.dtype]

    @property
    def shape(self):
        """(num_heads, num_kv_heads, head_dim), or None when unknown."""
        s = self._plan.shape
        return None if s is None else (s.num_heads, s.num_kv_heads, s.head_dim)

    def layout(self, rank):
        """The rank's local rows as (sequence, start, length) spans, in local order."""
        self._rank_ok(rank)
        return self._plan.layout(rank)

    def local_tokens(self, rank):
        self._rank_ok(rank)
        return self._plan.local_tokens(rank)

    def local_indices(self, rank, device=None):
        """A LongTensor of the global token indices (positions in the concatenation of the
        sequences) that `rank` owns, in its local row order: x[plan.local_indices(r)] are
        rank r's rows of a [total_tokens, ...] tensor x."""
        if self._offsets is None:
            self._offsets = [0]
            for n in self.lengths:
                self._offsets.append(self._offsets[-1] + n)
        parts = [torch.arange(self._offsets[s] + start, self._offsets[s] + start + n)
                 for s, start, n in self.layout(rank)]
        idx = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
        return idx if device is None else idx.to(device)

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
        if not 0 <= rank < self.num_ranks:
            raise ValueError("dcp: rank %d of a %d-rank plan" % (rank, self.num_ranks))


def plan(lengths, mask, cluster, num_heads, num_kv_heads, head_dim, dtype, block_size=None,
         strategy=None, **options):
    """Plans a batch: sequences of `lengths` tokens, `mask` one spec for all of them
    ("causal", "window:W", "lambda:S:W", "blockwise:b:k", "shared-question:p:a", "full", a
    [L, 4] custom-range tensor) or a list with one per sequence; or, for a model whose layers
    use different masks, a mapping of layer kind name to such a mask ({"global": "causal",
    "local": "window:1024"}, at most 4 kinds) with layers={name: count} giving how many model
    layers use each (default 1): one placement for every kind, the kind named at attention().
    `cluster` a spec such as "2x4" or a Context (its ranks' cluster); dtype
    torch.float32/bfloat16/float16. block_size, strategy ("ring", "zigzag", "lpt", "metis",
    "auto") and the other options (head_blocks, divisions, eps_inter, eps_intra,
    mem_cap_bytes, seed, expansion, net_cap, refine, comm_schedule, coalesce, metis_tries, and
    scale for the softmax) default to the library's."""
    batch, shape, opts, names = _request(lengths, mask, num_heads, num_kv_heads, head_dim,
                                         dtype, block_size, strategy, options)
    cl, made = _cluster(cluster)
    try:
        p = _lib().plan(batch, shape, opts, cl)
    finally:
        if made:
            cl.close()
    return Plan(p, batch.lengths, names)


def plan_from_bytes(data):
    """A Plan from Plan.to_bytes() bytes (any rank's: plans are byte-identical)."""
    return Plan(_lib().plan_from_bytes(data))


class Planner:
    """The planner service: `num_threads` workers plan submitted batches while the current
    one trains; an identical batch is served from a cache of `cache_entries` plans.

        planner = dt.Planner(ctx)                       # or a spec such as "2x4"
        t = planner.submit(lengths, "causal", 8, 2, 64, torch.bfloat16, block_size=1024)
        ...                                             # train the current batch
        plan = planner.wait(t)

    Close it (or let it be collected) before its Context."""

    def __init__(self, cluster, num_threads=1, cache_entries=16):
        cl, made = _cluster(cluster)
        self._owned = cl if made else None
        self._planner = core.Planner(_lib(), cl, num_threads, cache_entries)
        self._lengths = {}
        if isinstance(cluster, Context):
            cluster._dependents.append(weakref.ref(self))

    def submit(self, lengths, mask, num_heads, num_kv_heads, head_dim, dtype, block_size=None,
               strategy=None, **options):
        """Queues a batch (arguments as plan() takes them, less the cluster); returns its
        ticket, to be collected once with wait() or try_wait()."""
        batch, shape, opts, names = _request(lengths, mask, num_heads, num_kv_heads, head_dim,
                                             dtype, block_size, strategy, options)
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
        cache_hits, failed, pending, plan_ms (workers' planning time, summed) and wait_ms
        (time callers were blocked in wait, summed)."""
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
    """q, k, v of one rank, checked against the plan (shape and dtype where the plan knows
    them, rows always: libdcp reads as many rows as the plan gives the rank)."""
    rows = plan.local_tokens(rank)
    shape, dtype = plan.shape, plan.dtype
    hq, hkv, d = shape if shape else (None, None, None)
    tag = "rank %d " % rank
    q = _ready(q, dtype, rows, hq, d, tag + "q")
    hq, d = q.shape[1], q.shape[2]
    k = _ready(k, q.dtype, rows, hkv, d, tag + "k")
    v = _ready(v, q.dtype, rows, k.shape[1], d, tag + "v")
    if hq % k.shape[1]:
        raise ValueError("dcp: %s%d query heads, %d KV heads" % (tag, hq, k.shape[1]))
    if not (q.device == k.device == v.device):
        raise ValueError("dcp: %sq, k, v on %s, %s, %s" % (tag, q.device, k.device, v.device))
    return q, k, v


def _outputs(q):
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[1], dtype=torch.float32, device=q.device)
    return o, lse


def _tensors(q, k, v, o, lse):
    return core.Tensors(_ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(lse))


def _grad_in(g, like):
    """dO as libdcp reads it (zeros where autograd gives none)."""
    if g is None:
        return torch.zeros_like(like)
    return _ready(g.to(like.dtype), like.dtype, like.shape[0], like.shape[1], like.shape[2],
                  "dO")


def _grads(q, k, v, o, lse, dout):
    """Gradient buffers of one rank and the dcp_grad_tensors_t over them."""
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    g = core.GradTensors(_tensors(q, k, v, o, lse), _ptr(dout), _ptr(dq), _ptr(dk), _ptr(dv))
    return (dq, dk, dv), g


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
    plan, layer kind, n, then n q's, n k's, n v's; outputs n O's."""

    @staticmethod
    def forward(ctx, plan, kind, n, *qkv):
        lib = _lib()
        ins = [_rank_inputs(plan, r, qkv[r], qkv[n + r], qkv[2 * n + r]) for r in range(n)]
        outs = [_outputs(q) for q, _, _ in ins]
        io = (core.Tensors * n)(*[_tensors(*i, *o) for i, o in zip(ins, outs)])
        device = _inproc_device([q for q, _, _ in ins])
        _sync([q for q, _, _ in ins])  # the contexts' streams do not follow PyTorch's
        lib.check(lib.lib.dcp_forward_inproc(plan.kind_handle(kind), io, 0.0, device),
                  "forward_inproc")
        _sync([q for q, _, _ in ins])
        ctx.plan, ctx.kind, ctx.n, ctx.device = plan, kind, n, device
        ctx.save_for_backward(*[t for i in ins for t in i], *[t for o in outs for t in o])
        return tuple(o for o, _ in outs)

    @staticmethod
    def backward(ctx, *douts):
        lib, n = _lib(), ctx.n
        saved = ctx.saved_tensors
        ins = [saved[3 * r:3 * r + 3] for r in range(n)]
        outs = [saved[3 * n + 2 * r:3 * n + 2 * r + 2] for r in range(n)]
        grads, gio = [], (core.GradTensors * n)()
        keep = []
        for r in range(n):
            dout = _grad_in(douts[r], outs[r][0])
            g, gio[r] = _grads(*ins[r], *outs[r], dout)
            grads.append(g)
            keep.append(dout)
        _sync([q for q, _, _ in ins])
        lib.check(lib.lib.dcp_backward_inproc(ctx.plan.kind_handle(ctx.kind), gio, 0.0,
                                              ctx.device), "backward_inproc")
        _sync([q for q, _, _ in ins])
        return (None, None, None, *[g[0] for g in grads], *[g[1] for g in grads],
                *[g[2] for g in grads])


def attention_inproc(plan, qs, ks, vs, kind=None):
    """Attention of every rank of `plan`, ranks as threads of this process: qs, ks, vs hold
    one [local_tokens, heads, head_dim] tensor per rank (rows in plan.local_indices(r)
    order; all on the CPU, fp32/bf16/fp16, or on CUDA devices, bf16/fp16); returns one O per
    rank. `kind`: the layer kind of a plan of several (its name or index; default the
    first). Differentiable with respect to every q, k and v through dcp's backward."""
    n = plan.num_ranks
    if not (len(qs) == len(ks) == len(vs) == n):
        raise ValueError("dcp: %d/%d/%d q/k/v tensors for a %d-rank plan" %
                         (len(qs), len(ks), len(vs), n))
    plan.kind_index(kind)  # a bad kind fails before any work
    return list(_InprocAttention.apply(plan, kind, n, *qs, *ks, *vs))


# ---- one rank per process ----------------------------------------------------------------------


class Context:
    """One rank's dcp runtime in a job of one rank per process, bootstrapped over a
    torch.distributed process group (default: the world; gloo, NCCL or any backend with
    all_gather). device: "cpu", "cuda", "cuda:N" or a torch.device; default the CPU on
    gloo, the current CUDA device otherwise. Creating and closing are collective: every rank
    of the group does both, in the same order as its other collectives. Close it explicitly
    (or use `with`): a context left to the collector is not destroyed, since a destroy
    outside the collective order could hang the job."""

    def __init__(self, group=None, device=None, timeout_s=0.0, transport_intra=None,
                 transport_inter=None):
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
        self._callback_error = None
        self._dependents = []
        self._fn = core.ALLGATHER_FN(self._allgather)  # kept: libdcp calls it until close()
        self._bootstrap = core.Bootstrap(self.rank, self.size, self._fn, None)
        lib = _lib()
        cfg = core.ContextConfig(
            0, None, C.pointer(self._bootstrap), timeout_s,
            transport_intra.encode() if transport_intra else None,
            transport_inter.encode() if transport_inter else None, str(self.device).encode())
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

    def transport(self, inter_node=False):
        """The engine between ranks in a node ("ucx", "nccl", ...) or between nodes."""
        return _lib().lib.dcp_context_transport(self._live(), int(inter_node)).decode()

    def barrier(self):
        self._raise(_lib().lib.dcp_context_barrier(self._live()), "barrier")

    def close(self):
        """Destroys the context (collective). Planners made on it are closed first."""
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


class _RankAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dctx, plan, kind, q, k, v):
        lib = _lib()
        q, k, v = _rank_inputs(plan, dctx.rank, q, k, v)
        if q.device.type != dctx.device.type:
            raise ValueError("dcp: tensors on %s, the context computes on %s" %
                             (q.device, dctx.device))
        o, lse = _outputs(q)
        io = _tensors(q, k, v, o, lse)
        dctx._raise(lib.lib.dcp_forward(dctx._live(), plan.kind_handle(kind), C.byref(io),
                                        dctx.stream(q)), "forward")
        ctx.dctx, ctx.plan, ctx.kind = dctx, plan, kind
        ctx.save_for_backward(q, k, v, o, lse)
        return o

    @staticmethod
    def backward(ctx, dout):
        lib, dctx = _lib(), ctx.dctx
        q, k, v, o, lse = ctx.saved_tensors
        dout = _grad_in(dout, o)
        (dq, dk, dv), g = _grads(q, k, v, o, lse, dout)
        dctx._raise(lib.lib.dcp_backward(dctx._live(), ctx.plan.kind_handle(ctx.kind),
                                         C.byref(g), dctx.stream(q)), "backward")
        return None, None, None, dq, dk, dv


def attention(ctx, plan, q, k, v, kind=None):
    """This rank's attention under `plan`: q [local_tokens, Hq, D], k, v [local_tokens, Hkv,
    D] with rows in plan.local_indices(ctx.rank) order; returns O like q. `kind`: the layer
    kind of a plan of several (its name or index; default the first). Every rank of the
    context calls it with the same plan and kind. Differentiable with respect to q, k and v
    (the backward is collective too: every rank runs it). On a GPU it runs on PyTorch's
    current stream."""
    plan.kind_index(kind)  # a bad kind fails before the collective
    return _RankAttention.apply(ctx, plan, kind, q, k, v)
