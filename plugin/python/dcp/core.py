"""libdcp through ctypes: the mirror of include/dcp.h, standard library only.

Every struct below mirrors its C twin field for field; `make test` runs
tests/perf/compare_sdpa.py --dry-run, which plans and runs forward and backward passes
through them against a double reference, so a drift from dcp.h shows there.

The library is found, in order, at $DCP_LIB, as the libdcp.so installed with this package
(`pip install ./plugin/python` copies the build's into dcp/lib/), at build/lib/libdcp.so of
the repository this package lives in (plugin/python/dcp -> ../../..), and as the system's
libdcp.so (make install).

Objects that own a C handle (Cluster, Plan, Planner, Group) free it when collected or on
close(); contexts of process ranks are collective and must be closed explicitly (see
dcp.torch.Context).
"""
import ctypes as C
import ctypes.util
import os
import threading
import weakref

# ---- the mirror of dcp.h -----------------------------------------------------------------

STATUS_NAMES = ("DCP_OK", "DCP_ERR_INVALID_ARG", "DCP_ERR_NO_MEMORY", "DCP_ERR_PLAN_CORRUPT",
                "DCP_ERR_CAPACITY", "DCP_ERR_UNSUPPORTED", "DCP_ERR_TIMEOUT", "DCP_ERR_PEER",
                "DCP_ERR_SYSTEM", "DCP_ERR_INTERNAL")
OK, ERR_INVALID_ARG, ERR_NO_MEMORY, ERR_PLAN_CORRUPT, ERR_CAPACITY, ERR_UNSUPPORTED, \
    ERR_TIMEOUT, ERR_PEER, ERR_SYSTEM, ERR_INTERNAL = range(10)

MASK_FULL, MASK_CAUSAL, MASK_WINDOW, MASK_LAMBDA, MASK_BLOCKWISE, MASK_SHARED_QUESTION, \
    MASK_CUSTOM = range(7)
DTYPE_FP32, DTYPE_BF16, DTYPE_FP16 = 0, 1, 2
DTYPES = {"fp32": DTYPE_FP32, "bf16": DTYPE_BF16, "fp16": DTYPE_FP16}
STRATEGY_RING, STRATEGY_ZIGZAG, STRATEGY_LPT, STRATEGY_METIS = range(4)
STRATEGY_AUTO = 100
EXPANSIONS = {"clique": 0, "star": 1}
COMM_SCHEDULES = {"divisions": 0, "rounds": 1}


class Mask(C.Structure):
    _fields_ = [("kind", C.c_int), ("window", C.c_int32), ("sink", C.c_int32),
                ("block", C.c_int32), ("k", C.c_int32), ("answers", C.c_int32),
                ("question_frac", C.c_double), ("ranges", C.POINTER(C.c_int32)),
                ("num_rows", C.c_int32)]


class LayerKind(C.Structure):
    _fields_ = [("masks", C.POINTER(Mask)), ("layers", C.c_int32)]


class Batch(C.Structure):
    _fields_ = [("num_seqs", C.c_int32), ("lengths", C.POINTER(C.c_int32)),
                ("masks", C.POINTER(Mask)), ("num_kinds", C.c_int32),
                ("kinds", C.POINTER(LayerKind))]


MAX_KINDS = 4


class Shape(C.Structure):
    _fields_ = [("num_heads", C.c_int32), ("num_kv_heads", C.c_int32),
                ("head_dim", C.c_int32), ("dtype", C.c_int), ("scale", C.c_float),
                ("softcap", C.c_float), ("head_dim_v", C.c_int32)]


class PlanOptions(C.Structure):
    _fields_ = [("block_size", C.c_int32), ("head_blocks", C.c_int32),
                ("divisions", C.c_int32), ("strategy", C.c_int),
                ("eps_inter", C.c_double), ("eps_intra", C.c_double),
                ("mem_cap_bytes", C.c_int64), ("seed", C.c_uint64),
                ("expansion", C.c_int), ("net_cap", C.c_int32), ("refine", C.c_int32),
                ("comm_schedule", C.c_int), ("coalesce", C.c_int32),
                ("metis_tries", C.c_int32), ("strategy_arg", C.c_int32),
                ("hierarchy", C.c_int32)]


class PlanStats(C.Structure):
    _fields_ = [("num_ranks", C.c_int32), ("num_nodes", C.c_int32), ("strategy", C.c_int),
                ("num_divisions", C.c_int32), ("num_token_blocks", C.c_int32),
                ("num_comp_blocks", C.c_int64), ("total_tokens", C.c_int64),
                ("total_flops", C.c_int64), ("comm_bytes", C.c_int64),
                ("inter_node_bytes", C.c_int64), ("max_rank_bytes", C.c_int64),
                ("compute_imbalance", C.c_double), ("memory_imbalance", C.c_double),
                ("max_buffer_bytes", C.c_int64), ("num_transfers", C.c_int32),
                ("num_phases", C.c_int32), ("predicted_ms", C.c_double),
                ("fallback", C.c_int32), ("plan_ms", C.c_double),
                ("bwd_flops", C.c_int64), ("bwd_comm_bytes", C.c_int64),
                ("bwd_inter_node_bytes", C.c_int64), ("bwd_max_rank_bytes", C.c_int64),
                ("bwd_compute_imbalance", C.c_double), ("bwd_num_transfers", C.c_int32),
                ("bwd_num_phases", C.c_int32), ("bwd_predicted_ms", C.c_double),
                ("num_kinds", C.c_int32), ("kind", C.c_int32), ("layers", C.c_int32),
                ("model_step_ms", C.c_double)]


class RankStats(C.Structure):
    _fields_ = [("local_tokens", C.c_int64), ("flops", C.c_int64),
                ("memory_bytes", C.c_int64), ("sent_bytes", C.c_int64),
                ("recv_bytes", C.c_int64), ("buffer_bytes", C.c_int64),
                ("num_instructions", C.c_int32), ("predicted_ms", C.c_double),
                ("bwd_flops", C.c_int64), ("bwd_sent_bytes", C.c_int64),
                ("bwd_recv_bytes", C.c_int64), ("bwd_num_instructions", C.c_int32),
                ("bwd_predicted_ms", C.c_double)]


class TokenSpan(C.Structure):
    _fields_ = [("seq", C.c_int32), ("start", C.c_int32), ("len", C.c_int32)]


class PlannerConfig(C.Structure):
    _fields_ = [("num_threads", C.c_int32), ("cache_entries", C.c_int32),
                ("cache_bytes", C.c_int64)]


class PlannerStats(C.Structure):
    _fields_ = [("submitted", C.c_int64), ("planned", C.c_int64), ("cache_hits", C.c_int64),
                ("failed", C.c_int64), ("pending", C.c_int64), ("plan_ms", C.c_double),
                ("wait_ms", C.c_double), ("cached_plans", C.c_int64),
                ("cached_bytes", C.c_int64), ("uncached", C.c_int64),
                ("evictions", C.c_int64)]


# dcp_status_t (*)(void *state, const void *send, void *recv, size_t bytes)
ALLGATHER_FN = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_void_p, C.c_size_t)


class Bootstrap(C.Structure):
    # allgather_timed (dcp_allgather_timed_fn) stays NULL: the plain callback ends by the
    # process group's own timeout
    _fields_ = [("rank", C.c_int32), ("size", C.c_int32), ("allgather", ALLGATHER_FN),
                ("state", C.c_void_p), ("allgather_timed", C.c_void_p), ("timeout_s", C.c_double)]


class ContextConfig(C.Structure):
    _fields_ = [("rank", C.c_int32), ("group", C.c_void_p),
                ("bootstrap", C.POINTER(Bootstrap)), ("timeout_s", C.c_double),
                ("transport_intra", C.c_char_p), ("transport_inter", C.c_char_p),
                ("device", C.c_char_p), ("compute_stream", C.c_void_p),
                ("transfer_stream", C.c_void_p), ("nccl_comm", C.c_void_p),
                ("attn_engine", C.c_char_p), ("deterministic", C.c_int32),
                ("node_file", C.c_char_p)]


class AttnEngineInfo(C.Structure):
    _fields_ = [("requested", C.c_char_p), ("engine", C.c_char_p), ("note", C.c_char_p),
                ("cudnn_version", C.c_int64), ("dense_classes", C.c_int32 * 2),
                ("plans_built", C.c_int64), ("plan_hits", C.c_int64),
                ("plan_build_ms", C.c_double), ("pairs", C.c_int64 * 5),
                ("pairs_bwd", C.c_int64 * 5), ("plan_evictions", C.c_int64),
                ("graphs_failed", C.c_int64), ("bwd_launches", C.c_int64),
                ("bwd_waves", C.c_int64)]


class Tensors(C.Structure):
    _fields_ = [("q", C.c_void_p), ("k", C.c_void_p), ("v", C.c_void_p),
                ("o", C.c_void_p), ("lse", C.c_void_p), ("softmax_scale", C.c_float),
                ("sinks", C.c_void_p), ("max_logit", C.c_void_p)]


class GradTensors(C.Structure):
    _fields_ = [("fwd", Tensors), ("dout", C.c_void_p), ("dq", C.c_void_p),
                ("dk", C.c_void_p), ("dv", C.c_void_p), ("dsinks", C.c_void_p)]


_P = C.c_void_p
_PROTOTYPES = {  # name: (restype, argtypes); every function this package calls
    "dcp_status_string": (C.c_char_p, [C.c_int]),
    "dcp_last_error": (C.c_char_p, []),
    "dcp_mask_parse": (C.c_int, [C.c_char_p, C.POINTER(Mask)]),
    "dcp_mask_format": (C.c_int, [C.POINTER(Mask), C.c_char_p, C.c_size_t]),
    "dcp_mask_allowed": (C.c_int, [C.POINTER(Mask), C.c_int32, C.c_int32,
                                   C.POINTER(C.c_int32)]),
    "dcp_mask_count_pairs": (C.c_int, [C.POINTER(Mask), C.c_int32, C.c_int32, C.c_int32,
                                       C.c_int32, C.c_int32, C.POINTER(C.c_int64)]),
    "dcp_strategy_name": (C.c_char_p, [C.c_int]),
    "dcp_strategy_parse": (C.c_int, [C.c_char_p, C.POINTER(C.c_int)]),
    "dcp_plan_options_default": (None, [C.POINTER(PlanOptions)]),
    "dcp_cluster_from_spec": (C.c_int, [C.c_char_p, C.POINTER(_P)]),
    "dcp_cluster_destroy": (None, [_P]),
    "dcp_cluster_num_ranks": (C.c_int32, [_P]),
    "dcp_cluster_num_nodes": (C.c_int32, [_P]),
    "dcp_plan_create": (C.c_int, [C.POINTER(Batch), C.POINTER(Shape), C.POINTER(PlanOptions),
                                  _P, C.POINTER(_P)]),
    "dcp_plan_destroy": (None, [_P]),
    "dcp_plan_kind": (C.c_int, [_P, C.c_int32, C.POINTER(_P)]),
    "dcp_plan_get_stats": (C.c_int, [_P, C.POINTER(PlanStats)]),
    "dcp_plan_get_shape": (C.c_int, [_P, C.POINTER(Shape)]),
    "dcp_plan_get_rank_stats": (C.c_int, [_P, C.c_int32, C.POINTER(RankStats)]),
    "dcp_plan_local_layout": (C.c_int, [_P, C.c_int32, C.POINTER(TokenSpan), C.c_int32,
                                        C.POINTER(C.c_int32), C.POINTER(C.c_int64)]),
    "dcp_plan_serialize": (C.c_int, [_P, _P, C.c_size_t, C.POINTER(C.c_size_t)]),
    "dcp_plan_checksum": (C.c_int, [_P, C.POINTER(C.c_uint32)]),
    "dcp_plan_deserialize": (C.c_int, [C.c_char_p, C.c_size_t, C.POINTER(_P)]),
    "dcp_planner_create": (C.c_int, [C.POINTER(PlannerConfig), _P, C.POINTER(_P)]),
    "dcp_planner_destroy": (None, [_P]),
    "dcp_planner_submit": (C.c_int, [_P, C.POINTER(Batch), C.POINTER(Shape),
                                     C.POINTER(PlanOptions), C.POINTER(C.c_uint64)]),
    "dcp_planner_wait": (C.c_int, [_P, C.c_uint64, C.POINTER(_P)]),
    "dcp_planner_try": (C.c_int, [_P, C.c_uint64, C.POINTER(_P)]),
    "dcp_planner_stats": (C.c_int, [_P, C.POINTER(PlannerStats)]),
    "dcp_group_create": (C.c_int, [C.c_int32, C.POINTER(_P)]),
    "dcp_group_destroy": (None, [_P]),
    "dcp_context_create": (C.c_int, [C.POINTER(ContextConfig), C.POINTER(_P)]),
    "dcp_context_destroy": (None, [_P]),
    "dcp_context_cluster": (C.c_int, [_P, C.POINTER(_P)]),
    "dcp_context_transport": (C.c_char_p, [_P, C.c_int]),
    "dcp_context_barrier": (C.c_int, [_P]),
    "dcp_context_synchronize": (C.c_int, [_P, C.c_double]),
    "dcp_context_transport_report": (C.c_char_p, [_P]),
    "dcp_context_abort": (C.c_int, [_P, C.c_char_p]),
    "dcp_context_check_shape": (C.c_int, [_P, C.POINTER(Shape)]),
    "dcp_context_attn_engine": (C.c_int, [_P, C.POINTER(AttnEngineInfo)]),
    "dcp_forward": (C.c_int, [_P, _P, C.POINTER(Tensors), _P]),
    "dcp_backward": (C.c_int, [_P, _P, C.POINTER(GradTensors), _P]),
    "dcp_forward_inproc": (C.c_int, [_P, C.POINTER(Tensors), C.c_double, C.c_char_p]),
    "dcp_backward_inproc": (C.c_int, [_P, C.POINTER(GradTensors), C.c_double, C.c_char_p]),
}


_INT_TYPES = (C.c_int, C.c_int32, C.c_int64, C.c_uint32, C.c_uint64, C.c_size_t)


def _checked_call(fn, name, ints):
    """fn with its integer arguments range-checked: a ValueError naming the function and
    the argument, never a wrapped value reaching libdcp."""
    limits = [(i, int_range(t)) for i, t in ints]

    def call(*args):
        for i, (lo, hi) in limits:
            v = args[i] if i < len(args) else None
            if isinstance(v, int) and not lo <= v <= hi:
                raise ValueError("dcp: %s: argument %d = %d does not fit the C type (%d to %d)"
                                 % (name, i + 1, v, lo, hi))
        return fn(*args)
    call.__name__ = name
    return call


class DcpError(RuntimeError):
    """A libdcp call failed: `status` (int), `status_name` ("DCP_ERR_INVALID_ARG"),
    `message` (dcp_last_error() of the failing call) and `what` (the call, as this package
    names it)."""

    def __init__(self, status, message, what=""):
        self.status = status
        self.status_name = (STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES)
                            else "status %d" % status)
        self.message = message
        self.what = what
        super().__init__("%s%s: %s" % (what + ": " if what else "", self.status_name, message))


# ---- finding and loading the library -------------------------------------------------------

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


_BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libdcp.so")


def find_library():
    """The path (or bare name for the default loader) of libdcp.so this package loads."""
    env = os.environ.get("DCP_LIB")
    if env:
        return env
    for path in (_BUNDLED, os.path.join(_REPO, "build", "lib", "libdcp.so")):
        if os.path.exists(path):
            return path
    return ctypes.util.find_library("dcp") or "libdcp.so"


class Library:
    """libdcp loaded, its prototypes declared. `lib` is the ctypes.CDLL (the GIL is released
    during every call, so ranks on threads run in parallel)."""

    def __init__(self, path):
        self.path = path
        try:
            self.lib = C.CDLL(path)
        except OSError as e:
            raise OSError("dcp: cannot load libdcp (%s): %s; build it with `make lib` (then "
                          "`pip install ./plugin/python`), or set $DCP_LIB" % (path, e)) from e
        for name, (res, args) in _PROTOTYPES.items():
            fn = getattr(self.lib, name, None)
            if fn is None:  # an older library: the call fails when used, not at load
                continue
            fn.restype, fn.argtypes = res, args
            ints = [(i, t) for i, t in enumerate(args) if t in _INT_TYPES]
            if ints:  # ctypes wraps out-of-range ints silently: check them first
                setattr(self.lib, name, _checked_call(fn, name, ints))

    def has(self, name):
        return hasattr(self.lib, name)

    def error(self, status, what):
        """The DcpError of a failed call (read at once: the text is thread-local and lives
        until the next dcp call on this thread)."""
        return DcpError(status, self.lib.dcp_last_error().decode(errors="replace"), what)

    def check(self, status, what):
        if status != OK:
            raise self.error(status, what)

    # -- masks --

    def mask(self, spec):
        """A Mask from a spec string ("causal", "window:256", ...), a CustomMask, or a Mask."""
        if isinstance(spec, Mask):
            return spec
        if isinstance(spec, CustomMask):
            return spec.mask
        m = Mask()
        self.check(self.lib.dcp_mask_parse(check_text(spec, "mask"), C.byref(m)),
                   "mask %r" % spec)
        return m

    def mask_name(self, m):
        buf = C.create_string_buffer(128)
        self.check(self.lib.dcp_mask_format(C.byref(m), buf, len(buf)), "mask format")
        return buf.value.decode()

    def allowed(self, m, length, query):
        """The allowed keys of a query as the list of key positions."""
        r = (C.c_int32 * 4)()
        self.check(self.lib.dcp_mask_allowed(C.byref(m), check_int(length, "length"),
                                             check_int(query, "query"), r), "mask allowed")
        return list(range(r[0], r[1])) + list(range(r[2], r[3]))

    def pairs(self, m, length, q0=0, q1=None, k0=0, k1=None):
        """Allowed (query, key) pairs of the tile [q0, q1) x [k0, k1) (whole sequence by
        default)."""
        n = C.c_int64()
        length = check_int(length, "length")
        q1, k1 = (length if x is None else x for x in (q1, k1))
        self.check(self.lib.dcp_mask_count_pairs(
            C.byref(m), length, check_int(q0, "q0"), check_int(q1, "q1"), check_int(k0, "k0"),
            check_int(k1, "k1"), C.byref(n)), "mask count pairs")
        return n.value

    # -- clusters, plans --

    def cluster(self, spec):
        return Cluster.from_spec(self, spec)

    def strategy(self, name):
        if hasattr(name, "__index__"):
            return check_int(name, "strategy", C.c_int)
        s = C.c_int()
        self.check(self.lib.dcp_strategy_parse(check_text(name, "strategy"), C.byref(s)),
                   "strategy")
        return s.value

    def strategy_name(self, value):
        return self.lib.dcp_strategy_name(value).decode()

    def plan_options(self, **kw):
        """PlanOptions: the library's defaults, then the given fields. strategy, expansion
        and comm_schedule may be names ("metis", "star", "rounds")."""
        opts = PlanOptions()
        self.lib.dcp_plan_options_default(C.byref(opts))
        types = dict(PlanOptions._fields_)
        names = set(types)
        for key, value in kw.items():
            if value is None:
                continue
            if key not in names:
                raise TypeError("dcp: unknown plan option %r (one of %s)" %
                                (key, ", ".join(sorted(names))))
            if key == "strategy":
                value = check_int(self.strategy(value), key, C.c_int)
            elif key == "expansion" and isinstance(value, str):
                value = _choice(EXPANSIONS, value, key)
            elif key == "comm_schedule" and isinstance(value, str):
                value = _choice(COMM_SCHEDULES, value, key)
            elif types[key] is C.c_double:
                if isinstance(value, (bool, str, bytes)) or not hasattr(value, "__float__"):
                    raise TypeError("dcp: %s = %r is not a number" % (key, value))
                value = float(value)
            else:
                value = check_int(value, key, types[key])
            setattr(opts, key, value)
        return opts

    def plan(self, batch, shape, opts, cluster):
        """dcp_plan_create over a BatchArgs, a Shape, PlanOptions (or None) and a Cluster."""
        h = C.c_void_p()
        self.check(self.lib.dcp_plan_create(C.byref(batch.batch), C.byref(shape),
                                            C.byref(opts) if opts is not None else None,
                                            cluster.handle, C.byref(h)), "plan")
        return Plan(self, h)

    def plan_from_bytes(self, data):
        data = bytes(data)
        h = C.c_void_p()
        self.check(self.lib.dcp_plan_deserialize(data, len(data), C.byref(h)), "plan from bytes")
        return Plan(self, h)

    # -- in-process ranks (compare_sdpa.py's one-rank GPU context) --

    def context(self, device, rank=0, group_size=1, attn_engine=None):
        """A Group of `group_size` in-process ranks and the context of `rank` on `device`
        ("cpu", "cuda", "cuda:N"); the caller destroys both (context first)."""
        group = Group(self, group_size)
        cfg = ContextConfig(rank, group.handle, None, 0.0, None, None, device.encode(),
                            attn_engine=attn_engine.encode() if attn_engine else None)
        ctx = C.c_void_p()
        self.check(self.lib.dcp_context_create(C.byref(cfg), C.byref(ctx)), "context")
        return group, ctx

    def attn_engine(self, ctx):
        """dcp_context_attn_engine of a context handle, as a dict."""
        i = AttnEngineInfo()
        self.check(self.lib.dcp_context_attn_engine(ctx, C.byref(i)), "attention engine")
        return {"requested": i.requested.decode(), "engine": i.engine.decode(),
                "note": i.note.decode(errors="replace"), "cudnn_version": i.cudnn_version,
                "dense_classes": list(i.dense_classes), "plans_built": i.plans_built,
                "plan_hits": i.plan_hits, "plan_build_ms": i.plan_build_ms,
                "pairs": list(i.pairs), "pairs_bwd": list(i.pairs_bwd),
                "plan_evictions": i.plan_evictions, "graphs_failed": i.graphs_failed,
                "bwd_launches": i.bwd_launches, "bwd_waves": i.bwd_waves}


def _choice(table, value, what):
    if value not in table:
        raise ValueError("dcp: %s %r is not one of %s" % (what, value, ", ".join(table)))
    return table[value]


_loaded = {}
_load_lock = threading.Lock()


def load(path=None):
    """The Library at `path` (default: find_library()), loaded once per path."""
    path = path or find_library()
    with _load_lock:
        if path not in _loaded:
            _loaded[path] = Library(path)
        return _loaded[path]


# ---- owning wrappers ------------------------------------------------------------------------


class _Handle:
    """A C object freed by `_destroy_name` on close() or collection."""
    _destroy_name = None

    def __init__(self, library, handle):
        self.dcp = library
        self.handle = handle
        self._destroy = getattr(library.lib, self._destroy_name)

    def close(self):
        h, self.handle = self.handle, None
        if h:
            self._destroy(h)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def _live(self):
        if not self.handle:
            raise ValueError("dcp: %s is closed" % type(self).__name__)
        return self.handle


class Cluster(_Handle):
    """A cluster model. `owner` keeps a borrowed cluster's owner (a context) alive."""
    _destroy_name = "dcp_cluster_destroy"

    def __init__(self, library, handle, owned=True, owner=None):
        super().__init__(library, handle)
        self._owned, self._owner = owned, owner

    @classmethod
    def from_spec(cls, library, spec):
        h = C.c_void_p()
        library.check(library.lib.dcp_cluster_from_spec(check_text(spec, "cluster"),
                                                        C.byref(h)),
                      "cluster %r" % spec)
        return cls(library, h)

    def close(self):
        """Frees the cluster (a borrowed one is only let go); the planners made on it are
        closed first, since they read it."""
        for ref in getattr(self, "_dependents", ()):
            dep = ref()
            if dep is not None:
                dep.close()
        self._dependents = []
        if self._owned:
            super().close()
        else:
            self.handle = None

    def _depend(self, obj):
        """Closes `obj` (a Planner) before this cluster goes."""
        if not hasattr(self, "_dependents"):
            self._dependents = []
        self._dependents.append(weakref.ref(obj))

    @property
    def num_ranks(self):
        return self.dcp.lib.dcp_cluster_num_ranks(self._live())

    @property
    def num_nodes(self):
        return self.dcp.lib.dcp_cluster_num_nodes(self._live())


class Group(_Handle):
    _destroy_name = "dcp_group_destroy"

    def __init__(self, library, size):
        h = C.c_void_p()
        library.check(library.lib.dcp_group_create(size, C.byref(h)), "group")
        super().__init__(library, h)


def int_range(ctype):
    """The (lowest, highest) value of a ctypes integer type."""
    bits = 8 * C.sizeof(ctype)
    if ctype(-1).value < 0:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def check_int(value, what, ctype=C.c_int32):
    """value as an int, or TypeError naming `what`: ints (and numpy or torch integer
    scalars) only; a float, even 3.0, is refused rather than truncated. ValueError when it
    does not fit `ctype`, the C type it goes to (ctypes would wrap 2**32 + 5 to 5)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("dcp: %s = %r is not an integer" % (what, value))
    value = int(value.__index__())
    lo, hi = int_range(ctype)
    if not lo <= value <= hi:
        raise ValueError("dcp: %s = %d does not fit the C field (%d to %d)" %
                         (what, value, lo, hi))
    return value


def int_list(values, what, ctype=C.c_int32):
    """A list of ints from any sequence, each checked by check_int as what[i]."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError("dcp: %s = %r is not a sequence of integers" % (what, values))
    return [check_int(x, "%s[%d]" % (what, i), ctype) for i, x in enumerate(values)]


def check_scale(value, what):
    """A softmax scale as the float32 the C side reads: a real number, finite and > 0 in
    float32 too (1e-50 would round to 0.0, which means "the default"), or an error naming
    `what`."""
    if isinstance(value, (bool, str, bytes)) or not hasattr(value, "__float__"):
        raise TypeError("dcp: %s = %r is not a number" % (what, value))
    s = float(value)
    f32 = C.c_float(s).value
    if not (s > 0 and f32 > 0 and f32 != float("inf")):
        raise ValueError("dcp: %s = %r, must be finite and > 0 as a float32 (%g to %g)" %
                         (what, value, 1.4e-45, 3.4e38))
    return s


def check_softcap(value, what="softcap"):
    """A logit softcap as the float32 the C side reads: a real number, finite and >= 0 in
    float32 too (0: off), or an error naming `what`."""
    if isinstance(value, (bool, str, bytes)) or not hasattr(value, "__float__"):
        raise TypeError("dcp: %s = %r is not a number" % (what, value))
    s = float(value)
    f32 = C.c_float(s).value
    if not (s >= 0 and f32 != float("inf")):
        raise ValueError("dcp: %s = %r, must be finite and >= 0 as a float32 (0: off)" %
                         (what, value))
    return s


def check_text(value, what):
    """A str for a C string: bytes of UTF-8 without NUL (which would cut it short)."""
    if not isinstance(value, str):
        raise TypeError("dcp: %s = %r is not a string" % (what, value))
    if "\0" in value:
        raise ValueError("dcp: %s = %r holds a NUL character" % (what, value))
    return value.encode()


def _is_float_tensor(x):
    dtype = getattr(x, "dtype", None)
    return dtype is not None and getattr(dtype, "is_floating_point", False)


class CustomMask:
    """A caller-given mask: ranges is a sequence of (s0, e0, s1, e1) per query (allowed keys
    [s0, e0) u [s1, e1)), one row per query of its sequence, flattened or not; an integer
    tensor or array works too. Floats are refused, not truncated; the row count is checked
    against the sequence's length when the mask is planned."""

    def __init__(self, ranges, what="mask"):
        if _is_float_tensor(ranges):
            raise TypeError("dcp: %s: custom ranges are %s, give integers" %
                            (what, ranges.dtype))
        flat = ranges.tolist() if hasattr(ranges, "tolist") else list(ranges)
        if flat and isinstance(flat[0], (list, tuple)):
            if any(len(row) != 4 for row in flat):
                bad = next(i for i, row in enumerate(flat) if len(row) != 4)
                raise ValueError("dcp: %s: row %d of the custom ranges has %d numbers, not 4"
                                 % (what, bad, len(flat[bad])))
            flat = [x for row in flat for x in row]
        flat = int_list(flat, what + " ranges")
        if len(flat) % 4:
            raise ValueError("dcp: %s: %d numbers, not 4 per query" % (what, len(flat)))
        self.length = len(flat) // 4
        self.ranges = (C.c_int32 * max(len(flat), 1))(*flat)
        self.mask = Mask(kind=MASK_CUSTOM, ranges=C.cast(self.ranges, C.POINTER(C.c_int32)),
                         num_rows=self.length)


class BatchArgs:
    """A dcp_batch_t and the arrays it points to (kept alive with it). `masks`: one mask for
    every sequence, or one per sequence; or, with `layers` (a list of layer counts), one such
    item per layer kind (dcp_layer_kind_t)."""

    def __init__(self, library, lengths, masks, layers=None):
        lengths = int_list(lengths, "lengths")
        n = len(lengths)
        self.lengths = lengths
        self._lengths = (C.c_int32 * max(n, 1))(*lengths)
        self._keep = []
        if layers is None:
            self.masks = self._per_seq(library, masks, n)
            self._masks = (Mask * max(n, 1))(*self.masks)
            self.batch = Batch(n, self._lengths, self._masks)
            return
        if not 1 <= len(layers) <= MAX_KINDS or len(masks) != len(layers):
            raise ValueError("dcp: %d layer kinds with %d layer counts, 1 to %d kinds" %
                             (len(masks), len(layers), MAX_KINDS))
        self._kind_masks = [(Mask * max(n, 1))(*self._per_seq(library, m, n)) for m in masks]
        self._kinds = (LayerKind * len(layers))(
            *[LayerKind(C.cast(m, C.POINTER(Mask)), int(c)) for m, c in zip(self._kind_masks,
                                                                          layers)])
        self.batch = Batch(n, self._lengths, None, len(layers), self._kinds)

    def _per_seq(self, library, masks, n):
        if isinstance(masks, (str, Mask, CustomMask)):
            masks = [masks] * n
        masks = list(masks)
        if len(masks) != n:
            raise ValueError("dcp: %d masks for %d sequences (give one, or one per sequence)"
                             % (len(masks), n))
        for i, (m, length) in enumerate(zip(masks, self.lengths)):
            if isinstance(m, CustomMask) and m.length != length:
                raise ValueError("dcp: mask[%d]: custom ranges have %d rows, sequence %d has "
                                 "%d tokens (one row per query)" % (i, m.length, i, length))
        self._keep += [m for m in masks if isinstance(m, CustomMask)]
        return [library.mask(m) for m in masks]


class Plan(_Handle):
    """A plan."""
    _destroy_name = "dcp_plan_destroy"

    def __init__(self, library, handle):
        super().__init__(library, handle)
        self._layouts = {}
        self._shape = None

    @property
    def shape(self):
        """The plan's Shape (dcp_plan_get_shape: scale resolved), read once."""
        if self._shape is None:
            s = Shape()
            self.dcp.check(self.dcp.lib.dcp_plan_get_shape(self._live(), C.byref(s)),
                           "plan shape")
            self._shape = s
        return self._shape

    def kind_handle(self, kind):
        """The handle of layer kind `kind` (dcp_plan_kind: a view owned by this plan; kind 0
        is the plan itself)."""
        h = C.c_void_p()
        self.dcp.check(self.dcp.lib.dcp_plan_kind(self._live(), kind, C.byref(h)),
                       "plan kind %d" % kind)
        return h

    def stats(self, kind=0):
        s = PlanStats()
        h = self.kind_handle(kind) if kind else self._live()
        self.dcp.check(self.dcp.lib.dcp_plan_get_stats(h, C.byref(s)), "plan stats")
        return s

    @property
    def num_ranks(self):
        return self.stats().num_ranks

    def rank_stats(self, rank):
        s = RankStats()
        self.dcp.check(self.dcp.lib.dcp_plan_get_rank_stats(self._live(), rank, C.byref(s)),
                       "rank stats")
        return s

    def layout(self, rank):
        """Rank `rank`'s local rows as (seq, start, len) spans, in local order."""
        if rank not in self._layouts:
            n = C.c_int32()
            L = self.dcp.lib
            self.dcp.check(L.dcp_plan_local_layout(self._live(), rank, None, 0, C.byref(n),
                                                   None), "local layout")
            spans = (TokenSpan * max(n.value, 1))()
            self.dcp.check(L.dcp_plan_local_layout(self._live(), rank, spans, n.value,
                                                   C.byref(n), None), "local layout")
            self._layouts[rank] = [(s.seq, s.start, s.len) for s in spans[:n.value]]
        return self._layouts[rank]

    def local_tokens(self, rank):
        return sum(n for _, _, n in self.layout(rank))

    def lengths(self):
        """The sequence lengths, from the layouts of all ranks (every token has one owner)."""
        total = {}
        for r in range(self.num_ranks):
            for s, _, n in self.layout(r):
                total[s] = total.get(s, 0) + n
        return [total[s] for s in range(len(total))]

    def checksum(self):
        """dcp_plan_checksum: the CRC-32C of the plan's bytes, its identity on every rank."""
        c = C.c_uint32()
        self.dcp.check(self.dcp.lib.dcp_plan_checksum(self._live(), C.byref(c)), "checksum")
        return c.value

    def to_bytes(self):
        size = C.c_size_t()
        L = self.dcp.lib
        self.dcp.check(L.dcp_plan_serialize(self._live(), None, 0, C.byref(size)), "serialize")
        buf = C.create_string_buffer(size.value)
        self.dcp.check(L.dcp_plan_serialize(self.handle, buf, size.value, C.byref(size)),
                       "serialize")
        return buf.raw[:size.value]


def stats_dict(library, s):
    """A PlanStats as a dict; strategy by name."""
    d = {name: getattr(s, name) for name, _ in s._fields_}
    if "strategy" in d:
        d["strategy"] = library.strategy_name(d["strategy"])
    return d


class Planner(_Handle):
    """The planner service: worker threads planning coming batches, plans cached by batch.
    `cluster` (a Cluster) is kept alive as long as the planner."""
    _destroy_name = "dcp_planner_destroy"

    def __init__(self, library, cluster, num_threads=1, cache_entries=16, cache_bytes=0):
        if not library.has("dcp_planner_create"):
            raise DcpError(ERR_UNSUPPORTED, "this libdcp (%s) has no planner service"
                           % library.path, "planner")
        cfg = PlannerConfig(check_int(num_threads, "num_threads"),
                            check_int(cache_entries, "cache_entries"),
                            check_int(cache_bytes, "cache_bytes", C.c_int64))
        h = C.c_void_p()
        library.check(library.lib.dcp_planner_create(C.byref(cfg), cluster._live(), C.byref(h)),
                      "planner")
        super().__init__(library, h)
        self.cluster = cluster
        cluster._depend(self)

    def submit(self, batch, shape, opts):
        """Queues a batch (BatchArgs, Shape, PlanOptions or None); returns the ticket."""
        t = C.c_uint64()
        self.dcp.check(self.dcp.lib.dcp_planner_submit(
            self._live(), C.byref(batch.batch), C.byref(shape),
            C.byref(opts) if opts is not None else None, C.byref(t)), "planner submit")
        return t.value

    def wait(self, ticket):
        """The Plan of a ticket, waiting for it (the ticket is spent)."""
        h = C.c_void_p()
        ticket = check_int(ticket, "ticket", C.c_uint64)
        st = self.dcp.lib.dcp_planner_wait(self._live(), ticket, C.byref(h))
        self.dcp.check(st, "planner wait (ticket %d)" % ticket)
        return Plan(self.dcp, h)

    def try_wait(self, ticket):
        """The Plan of a ticket, or None while it is being made."""
        h = C.c_void_p()
        ticket = check_int(ticket, "ticket", C.c_uint64)
        st = self.dcp.lib.dcp_planner_try(self._live(), ticket, C.byref(h))
        if st != OK:
            raise self.dcp.error(st, "planner try (ticket %d)" % ticket)
        if not h.value:
            return None
        return Plan(self.dcp, h)

    def stats(self):
        s = PlannerStats()
        self.dcp.check(self.dcp.lib.dcp_planner_stats(self._live(), C.byref(s)), "planner stats")
        return s
