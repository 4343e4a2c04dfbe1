# dcp - dynamic context-parallel attention.
#
#   make            library (build/lib/libdcp.{a,so}) and tools (build/bin/)
#   make run        the libraries and tools, then the main job: dcp-attn-test on the built-in
#                   batch, every strategy, checked
#   make test       every suite (unit, end-to-end) and the layers' check (make test-layers);
#                   make test-asan: the same under ASan+UBSan
#   make test-walks the full failure walks (every allocation and transport call in turn) under
#                   ASan+UBSan; make soak: 10,000 training steps watched for leaks; make
#                   test-tsan: the planner service's load test under ThreadSanitizer
#                   (tests/README.md)
#   make deps       installs the Debian packages the build and the tests need (sudo when not
#                   root); make run and make test first check what they need (deps-check) and
#                   install nothing when every dependency is found
#
# Site modules (an HPC centre's `module load ucx nccl ...`): name a dependency's prefix and the
# build takes its headers from PREFIX/include and its libraries from PREFIX/lib64 or
# PREFIX/lib, and the binaries find them there at run time (RUNPATH), as nccl-tests takes them:
#   make UCX_HOME=$UCX_HOME METIS_HOME=... HWLOC_HOME=... NCCL_HOME=... MPI_HOME=...
# MPI_HOME: its include/ and libmpi (MPI_LIBNAME=mpich for MPICH's name); or MPICC=wrapper
# (Open MPI's or MPICH's mpicc: its --showme or -show); on a Cray, CC=cc MPICC=cc MPI_CFLAGS=
# MPI_LIBS= (the Cray compiler wrapper brings MPI itself).
#   make gpu-bundle DIR=path   one folder to run tests/perf/gpu_check.sh on a GPU machine
#                              (default DIR: build/gpu-bundle; kernels/README.md)
#   make install PREFIX=/usr/local ; make uninstall PREFIX=/usr/local ; make clean
#
# CUDA kernels are compiled whenever nvcc is found (NVCC=... to choose, NVCC= to disable).

PREFIX ?= /usr/local
BUILD ?= build
CC ?= cc
OPT ?= -O3 -g
SAN ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a

# The version comes from dcp.h. While the major is 0 every minor may change the ABI, so the
# shared library's SONAME carries MAJOR.MINOR: libdcp.so.0.2 -> libdcp.so.0.2.0.
dcp_version_part = $(shell sed -n 's/^\#define DCP_VERSION_$(1) \([0-9]*\)$$/\1/p' include/dcp.h)
VERSION := $(call dcp_version_part,MAJOR).$(call dcp_version_part,MINOR).$(call dcp_version_part,PATCH)
SONAME := libdcp.so.$(basename $(VERSION))
SOFILE := libdcp.so.$(VERSION)

# site modules: each prefix's headers, and its libraries' folder as a search path and RUNPATH
UCX_HOME ?=
METIS_HOME ?=
HWLOC_HOME ?=
NCCL_HOME ?=
MPI_HOME ?=
MPI_LIBNAME ?= mpi
MPICC ?= mpicc
comma := ,
home_libdir = $(if $(wildcard $(1)/lib64),$(1)/lib64,$(1)/lib)
rpath_of = $(patsubst -L%,-Wl$(comma)-rpath$(comma)%,$(filter -L%,$(1)))
SITE_HOMES := $(strip $(UCX_HOME) $(METIS_HOME) $(HWLOC_HOME))
# (-isystem: a site's headers are not held to dcp's warnings, as the system's are not)
SITE_CFLAGS := $(foreach h,$(SITE_HOMES),-isystem $(h)/include)
SITE_LIBS := $(foreach h,$(SITE_HOMES),-L$(call home_libdir,$(h)))
# NCCL is loaded at run time (dlopen): its folder only as a RUNPATH, where dlopen looks too
SITE_RPATH := $(call rpath_of,$(SITE_LIBS)) $(if $(NCCL_HOME),-Wl$(comma)-rpath$(comma)$(call home_libdir,$(NCCL_HOME)))

# Public structs grow at their end, a new field's zero meaning "as before" (dcp.h): a positional
# initializer that stops early is the intended way to leave it off, not a mistake to warn of.
WARN = -Wall -Wextra -Wno-missing-field-initializers -Wshadow -Wstrict-prototypes -Werror
CFLAGS_ALL = -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE $(WARN) $(OPT) $(SAN) -fPIC \
	-fvisibility=hidden -I. $(SITE_CFLAGS) -MMD -MP
LDLIBS_ALL = $(SITE_LIBS) $(SITE_RPATH) -lucp -luct -lucs -lhwloc -lmetis -lpthread -lm
# MPI: MPI_HOME's headers and library, else the wrapper's flags (Open MPI: --showme, MPICH:
# -show); its library folders as RUNPATH
ifneq ($(MPI_HOME),)
MPI_CFLAGS ?= -isystem $(MPI_HOME)/include
MPI_LIBS ?= -L$(call home_libdir,$(MPI_HOME)) -l$(MPI_LIBNAME)
else
mpi_show := $(shell $(MPICC) --showme 2>/dev/null || $(MPICC) -show 2>/dev/null)
MPI_CFLAGS ?= $(patsubst -I%,-isystem %,$(filter -I% -D% -pthread,$(mpi_show)))
MPI_LIBS ?= $(filter -L% -l% -pthread,$(mpi_show))
endif
MPI_LINK = $(MPI_LIBS) $(call rpath_of,$(MPI_LIBS))

# The tools' code, by folder:
#   plugin/cli/dcp_*.c   tool mains, one per binary
#   plugin/cli/support/  libdcpt (build/lib/libdcpt.a, prefix dcpt_; never installed, never in
#                        libdcp), the tools' and the tests' support: the double-precision reference
#                        oracle, the end-to-end check harness, plan-free kernel workloads, sampled
#                        lengths, the bench harness with its reports, the simulator's tables and
#                        pictures, and the doors through which tool code reaches libdcp's insides
#   plugin/cli/helpers/  the tools' own helpers (flags, shared batch options, pinning, peer
#                        tables): linked only into the tools
#   plugin/cli/launch/   the tools' MPI launch: the only tool code built with MPI's headers
# tests/surface/check.py holds them to the public surface.
SUPPORT_SRCS = $(wildcard plugin/cli/support/*.c)
LIB_SRCS = $(wildcard include/base/*.c topo/*.c partition/*.c partition/*/*.c kernels/*.c \
	transport/*.c plugin/*.c)
MPI_SRCS = $(wildcard plugin/mpi/*.c)
CLI_SRCS = $(wildcard plugin/cli/helpers/*.c)
MPI_CLI_SRCS = $(wildcard plugin/cli/launch/*.c)
TOOLS = dcp-attn-test dcp-calibrate dcp-kernel-bench dcp-plan dcp-topo dcp-transport-bench
TEST_SRCS = $(wildcard tests/unit/*.c tests/e2e/test_*.c) tests/fuzz/plan_input.c

ifneq ($(NVCC),)
CU_SRCS = $(wildcard kernels/cuda/*.cu)
LIB_SRCS := $(filter-out kernels/device_none.c transport/nccl_none.c kernels/cudnn_none.c,$(LIB_SRCS))
# the NCCL engine and the cuDNN engine see the CUDA runtime's, NCCL's and cuDNN's headers;
# libnccl and libcudnn are loaded at run time
CUDNN_SRCS = kernels/cudnn_sdpa.c kernels/cudnn_api.c kernels/cudnn_graph.c
$(BUILD)/obj/transport/nccl.o $(BUILD)/obj-hooks/transport/nccl.o \
		$(CUDNN_SRCS:%.c=$(BUILD)/obj/%.o): CFLAGS_ALL += \
	$(if $(NCCL_HOME),-isystem $(NCCL_HOME)/include) -isystem $(CUDA_HOME)/include
# ptxas fails a kernel that spills or uses local memory (kernels/README.md). The fatbins
# are compressed (the kernels' head dims and tile shapes make them 12 MB per binary
# otherwise, 1.3 MB compressed; the CUDA runtime expands them at load)
NVFLAGS = -O3 -std=c++17 -I. $(CUDA_ARCHS) -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Werror \
	--Werror all-warnings -Xptxas --warn-on-local-memory-usage,--warn-on-spills \
	-Xfatbin -compress-all -MMD -MP
LDLIBS_ALL += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
else
LIB_SRCS := $(filter-out transport/nccl.c kernels/cudnn_sdpa.c kernels/cudnn_api.c kernels/cudnn_graph.c,$(LIB_SRCS))
endif

LIB_OBJS = $(LIB_SRCS:%.c=$(BUILD)/obj/%.o) $(CU_SRCS:%.cu=$(BUILD)/obj/%.o)
MPI_OBJS = $(MPI_SRCS:%.c=$(BUILD)/obj/%.o)
MPI_CLI_OBJS = $(MPI_CLI_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_OBJS = $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
SUPPORT_OBJS = $(SUPPORT_SRCS:%.c=$(BUILD)/obj/%.o)
SUPPORT_LIB = $(BUILD)/lib/libdcpt.a
TEST_OBJS = $(TEST_SRCS:%.c=$(BUILD)/obj/%.o)
TOOL_BINS = $(TOOLS:%=$(BUILD)/bin/%)
TEST_BIN = $(BUILD)/bin/dcp-tests
SOAK_BIN = $(BUILD)/bin/dcp-soak
EXAMPLE_BIN = $(BUILD)/bin/dcp-example
EXAMPLE_MPI_BIN = $(BUILD)/bin/dcp-example-mpi

.PHONY: all lib tools tests run test test-asan test-run test-fuzz test-bundle fuzz deps install \
	uninstall clean gpu-bundle test-walks soak test-tsan test-layers
all: lib tools

lib: $(BUILD)/lib/libdcp.a $(BUILD)/lib/libdcp.so $(BUILD)/lib/libdcp_mpi.a
tools: $(TOOL_BINS)
tests: $(TEST_BIN) $(EXAMPLE_BIN) $(EXAMPLE_MPI_BIN) $(SOAK_BIN) $(BUILD)/lib/hooks/libdcp.so

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# the MPI bootstrap and the tools' MPI set-up are the only code that sees MPI
$(BUILD)/obj/plugin/mpi/%.o: plugin/mpi/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(MPI_CFLAGS) -c $< -o $@

$(BUILD)/obj/plugin/cli/launch/%.o: plugin/cli/launch/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(MPI_CFLAGS) -c $< -o $@

$(BUILD)/lib/libdcp_mpi.a: $(MPI_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

# (the Makefile too: a source that leaves the library must leave an old build's archive)
$(BUILD)/lib/libdcp.a: $(LIB_OBJS) Makefile
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $(filter %.o,$^)

$(SUPPORT_LIB): $(SUPPORT_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/lib/$(SOFILE): $(LIB_OBJS) Makefile
	@mkdir -p $(@D)
	$(CC) -shared $(SAN) -Wl,-soname,$(SONAME) -o $@ $(filter %.o,$^) $(LDLIBS_ALL)

# the names a program links with (libdcp.so) and loads by (the SONAME)
$(BUILD)/lib/libdcp.so: $(BUILD)/lib/$(SOFILE)
	ln -sf $(SOFILE) $(@D)/$(SONAME)
	ln -sf $(SOFILE) $@

$(BUILD)/bin/dcp-%: $(BUILD)/obj/plugin/cli/dcp_%.o $(CLI_OBJS) $(SUPPORT_LIB) $(BUILD)/lib/libdcp.a
	@mkdir -p $(@D)
	$(CC) $(SAN) -o $@ $^ $(LDLIBS_ALL)

$(BUILD)/bin/dcp-kernel-bench: $(BUILD)/obj/plugin/cli/dcp_kernel_bench.o $(CLI_OBJS) \
		$(SUPPORT_LIB) $(BUILD)/lib/libdcp.a
	@mkdir -p $(@D)
	$(CC) $(SAN) -o $@ $^ $(LDLIBS_ALL)

# tools that run as one rank per process under mpirun also link the MPI bootstrap
MPI_TOOL_BINS = $(BUILD)/bin/dcp-attn-test $(BUILD)/bin/dcp-calibrate $(BUILD)/bin/dcp-transport-bench
$(BUILD)/bin/dcp-attn-test: $(BUILD)/obj/plugin/cli/dcp_attn_test.o
$(BUILD)/bin/dcp-calibrate: $(BUILD)/obj/plugin/cli/dcp_calibrate.o
$(BUILD)/bin/dcp-transport-bench: $(BUILD)/obj/plugin/cli/dcp_transport_bench.o
$(MPI_TOOL_BINS): $(CLI_OBJS) $(MPI_CLI_OBJS) $(SUPPORT_LIB) $(BUILD)/lib/libdcp_mpi.a \
		$(BUILD)/lib/libdcp.a
	@mkdir -p $(@D)
	$(CC) $(SAN) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LDLIBS_ALL) $(MPI_LINK)

# The test binary builds the files that hold hook points (include/base/test_hook.h: ordering
# delays and counts, the allocation failure hook in the allocator, the device tables and the
# NCCL engine's streams and events, transport faults) again with the hooks on; the library itself never has them. Programs
# with the allocation hook link with --wrap=free, so that the hook sees the library's frees
# (tests/unit/fault_hook.h).
ALLOC_HOOK_SRCS = include/base/alloc.c kernels/device_cpu.c
HOOK_SRCS = plugin/executor.c plugin/stamp.c plugin/context.c transport/inproc.c \
	transport/ucx.c $(ALLOC_HOOK_SRCS)
ifneq ($(NVCC),)
ALLOC_HOOK_CU_SRCS = kernels/cuda/device.cu
ALLOC_HOOK_SRCS += transport/nccl.c
endif
ALLOC_HOOK_OBJS = $(ALLOC_HOOK_SRCS:%.c=$(BUILD)/obj-hooks/%.o) \
	$(ALLOC_HOOK_CU_SRCS:%.cu=$(BUILD)/obj-hooks/%.o) $(BUILD)/obj/tests/unit/fault_hook.o
HOOK_OBJS = $(HOOK_SRCS:%.c=$(BUILD)/obj-hooks/%.o) $(ALLOC_HOOK_CU_SRCS:%.cu=$(BUILD)/obj-hooks/%.o)
HOOK_LDFLAGS = -Wl,--wrap=free
$(BUILD)/obj-hooks/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -DDCP_TEST_HOOKS -c $< -o $@
$(BUILD)/obj-hooks/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -DDCP_TEST_HOOKS -c $< -o $@

# the tests link the library and the support library, never the tools' own helpers
$(TEST_BIN): $(TEST_OBJS) $(HOOK_OBJS) $(SUPPORT_LIB) $(BUILD)/lib/libdcp.a
	@mkdir -p $(@D)
	$(CC) $(SAN) $(HOOK_LDFLAGS) -o $@ $^ -lcunit $(LDLIBS_ALL)

# The soak (tests/soak/soak.c): processes under mpirun, the allocation hook counting dcp's live
# blocks
$(BUILD)/obj/tests/soak/%.o: tests/soak/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(MPI_CFLAGS) -c $< -o $@

$(SOAK_BIN): $(BUILD)/obj/tests/soak/soak.o $(ALLOC_HOOK_OBJS) $(SUPPORT_LIB) \
		$(BUILD)/lib/libdcp_mpi.a $(BUILD)/lib/libdcp.a
	@mkdir -p $(@D)
	$(CC) $(SAN) $(HOOK_LDFLAGS) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LDLIBS_ALL) $(MPI_LINK)

# The README's example, compiled as a user would: public header only, shared library.
$(EXAMPLE_BIN): tests/e2e/example.c $(BUILD)/lib/libdcp.so
	@mkdir -p $(@D)
	$(CC) -std=c11 $(WARN) $(SAN) -Iinclude -o $@ $< -L$(BUILD)/lib -ldcp -lm -Wl,-rpath,$(abspath $(BUILD)/lib)

# and its MPI form: dcp.h, libdcp_mpi and libdcp.so, with the user's MPI
$(EXAMPLE_MPI_BIN): tests/e2e/example_mpi.c $(BUILD)/lib/libdcp.so $(BUILD)/lib/libdcp_mpi.a
	@mkdir -p $(@D)
	$(CC) -std=c11 $(WARN) $(SAN) $(MPI_CFLAGS) -Iinclude -o $@ $< -L$(BUILD)/lib -ldcp_mpi -ldcp \
		-Wl,-rpath,$(abspath $(BUILD)/lib) $(MPI_LINK)

# The main job: a built-in long-tailed batch on 8 in-process ranks (2x4), causal and lambda
# masks, every strategy, forward and backward, checked against the double-precision reference.
run:
	@$(DEPS_CHECK) run
	$(MAKE) -j$(JOBS) lib tools
	$(BUILD)/bin/dcp-attn-test --mask causal,lambda --strategy all --seed 3 --check --backward

test:
	@$(DEPS_CHECK) test
	$(MAKE) -j$(JOBS) tests tools
	$(MAKE) test-run
	$(MAKE) test-fuzz
	$(MAKE) test-bundle

# The GPU report's folder (tests/perf/gpu_bundle.sh): the build, the Python package and the
# shared libraries a GPU machine without a package registry lacks, under 64 MiB.
GPU_BUNDLE = $(or $(DIR),$(BUILD)/gpu-bundle)
gpu-bundle:
	$(MAKE) -j$(JOBS) tests tools lib
	REQUIRE_CUDA=$(NVCC) tests/perf/gpu_bundle.sh $(BUILD) $(GPU_BUNDLE)

# The bundle proven self-contained here: made in a scratch folder, its report run with no GPU
# (--dry-run: the CPU steps only) from the folder alone, with nothing on LD_LIBRARY_PATH but
# the bundle and a bare environment. Not under ASan (the bundle strips a sanitized build's
# runtime dependency on the compiler's libasan).
test-bundle:
	@if ldd $(BUILD)/lib/libdcp.so | grep -q libasan; then echo "test-bundle skipped (ASan build)"; \
	else d=$$(mktemp -d) && tests/perf/gpu_bundle.sh $(BUILD) $$d/bundle >/dev/null && \
		env -i PATH=/usr/bin:/bin HOME=$$d $$d/bundle/gpu_check.sh --dry-run $$d/out >$$d/log 2>&1; \
		rc=$$?; sed -n '/^step /,/^$$/p' $$d/out/gpu_check.txt | grep -v ' skip '; \
		if [ $$rc = 0 ]; then rm -rf $$d; else cat $$d/log; echo "test-bundle failed: $$d"; exit 1; fi; fi

# a short libFuzzer run over the seed plans where clang exists (its log kept on failure)
test-fuzz:
	@if ! command -v clang >/dev/null; then echo "dcp-plan-fuzz skipped (no clang)"; exit 0; fi; \
	$(MAKE) -s fuzz >/dev/null || exit 1; corpus=$$(mktemp -d); log=$$corpus.log; \
	if build-fuzz/bin/dcp-plan-fuzz -runs=4000 $$corpus >$$log 2>&1; then \
		echo "dcp-plan-fuzz: $$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' $$log) runs, no broken promise"; \
		rm -rf $$corpus $$log; \
	else tail -40 $$log; echo "dcp-plan-fuzz failed: corpus $$corpus, log $$log"; exit 1; fi

# The layers (tests/layers/check.py): every library and tool object's calls and every source's
# includes run down README.md's map of the code and partition/'s sub-folders, and no files
# reach each other; its self-test first (a small tree with each fault injected). Plain and
# ASan builds alike (the objects `tests tools` made).
TOOL_MAIN_OBJS = $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard plugin/cli/dcp_*.c))
LAYER_OBJS = $(LIB_OBJS) $(MPI_OBJS) $(CLI_OBJS) $(MPI_CLI_OBJS) $(SUPPORT_OBJS) $(TOOL_MAIN_OBJS)
test-layers: $(LAYER_OBJS)
	@CC="$(CC)" python3 tests/layers/check.py --self-test
	@python3 tests/layers/check.py $(BUILD) $(LAYER_OBJS)

test-run: test-layers
	@# the tools and the Python layer on the public surface (tests/surface/check.py), its
	@# rules first proven to fail when broken
	@if command -v python3 >/dev/null; then python3 tests/surface/check.py --self-test; \
	else echo "tests/surface skipped (no python3)"; fi
	$(TEST_BIN)
	$(EXAMPLE_BIN)
	$(BUILD)/bin/dcp-kernel-bench --device cpu --total 600 --tile 128 --warmup 0 --iters 1 >/dev/null
	tests/tools/run.sh $(BUILD)/bin
	@# the table of settings (include/base/env.h): every DCP_* variable the tree reads is a row
	@# of it, C reads it nowhere else, plugin/SETTINGS.md is dcp-topo --env --markdown's table
	@if command -v python3 >/dev/null; then python3 tests/settings/check.py $(BUILD)/bin; \
	else echo "tests/settings skipped (no python3)"; fi
	tests/mpi/run.sh $(BUILD)/bin
	tests/mpi/kill.sh $(BUILD)/bin
	tests/cluster/run.sh $(BUILD)/bin
	@# a build on site modules in a scratch prefix, MPICH among them (not under ASan: the
	@# sanitizer's flags would have to reach that build), then Slurm on the emulated cluster,
	@# whose srun --mpi=pmi2 job runs that MPICH build
	@if ! ldd $(BUILD)/lib/libdcp.so | grep -q libasan; then tests/pkg/prefix.sh $(BUILD); \
	else echo "tests/pkg/prefix.sh skipped (ASan build)"; fi
	tests/cluster/srun.sh $(BUILD)/bin
	@# compare_sdpa.py's ctypes mirror of dcp.h, checked without PyTorch (not under ASan:
	@# python would need the sanitizer runtime preloaded)
	@if command -v python3 >/dev/null && ! ldd $(BUILD)/lib/libdcp.so | grep -q libasan; then \
		python3 tests/perf/compare_sdpa.py --dry-run --lib $(BUILD)/lib/libdcp.so --totals 4096; \
	else echo "compare_sdpa.py --dry-run skipped"; fi
	@# packaging: install, pkg-config (shared, --static, dcp_mpi), uninstall; not under ASan
	@# (a program linked against the sanitized libdcp.a would need the sanitizer flags too)
	@if ! ldd $(BUILD)/lib/libdcp.so | grep -q libasan; then tests/pkg/check.sh $(BUILD); \
	else echo "tests/pkg skipped (ASan build)"; fi
	@# custom range tables through dcp.core; under ASan too, its runtime preloaded into python
	@if ! command -v python3 >/dev/null; then echo "tests/python skipped (no python3)"; \
	elif ldd $(BUILD)/lib/libdcp.so | grep -q libasan; then \
		LD_PRELOAD="$$($(CC) -print-file-name=libasan.so):$$($(CC) -print-file-name=libubsan.so)" \
		ASAN_OPTIONS="$$ASAN_OPTIONS:detect_leaks=0" python3 tests/python/masks.py $(BUILD)/lib/libdcp.so; \
	else python3 tests/python/masks.py $(BUILD)/lib/libdcp.so; fi
	@# the PyTorch suites (dcp.torch; they say so and pass where PyTorch is missing) and the
	@# README's commands as printed (tests/readme/check.py), not under ASan
	@if ! ldd $(BUILD)/lib/libdcp.so | grep -q libasan; then tests/torch/run.sh $(BUILD)/lib/libdcp.so && \
		python3 tests/readme/check.py; \
	else echo "tests/torch and tests/readme skipped (ASan build)"; fi
	@# the Python layer's allocation walk (sampled) over the hooked libdcp.so; under ASan
	@# dcp.core's calls only, the sanitizer's runtime preloaded into python
	@if ! command -v python3 >/dev/null; then echo "tests/python/alloc_walk.py skipped (no python3)"; \
	elif ldd $(BUILD)/lib/libdcp.so | grep -q libasan; then \
		LD_PRELOAD="$$($(CC) -print-file-name=libasan.so):$$($(CC) -print-file-name=libubsan.so)" \
		ASAN_OPTIONS="$$ASAN_OPTIONS:detect_leaks=0" \
		python3 tests/python/alloc_walk.py $(BUILD)/lib/hooks/libdcp.so --core-only; \
	else py=python3; /usr/bin/python3 -c 'import torch' 2>/dev/null && py=/usr/bin/python3; \
		$$py tests/python/alloc_walk.py $(BUILD)/lib/hooks/libdcp.so; fi
	@# the soak's short form: 500 steps on 4 processes, live bytes and descriptors flat (not
	@# under ASan: its allocator's quarantine and UCX's plugins would be what moves)
	@if ! ldd $(BUILD)/lib/libdcp.so | grep -q libasan; then tests/soak/run.sh $(BUILD)/bin 500; \
	else echo "tests/soak skipped (ASan build)"; fi

# intercept_tls_get_addr=0: up to GCC 13 the runtime's __tls_get_addr hook takes a dynamic
# TLS block (hwloc's plugins and their libraries have them) that starts 16 bytes into a page
# for glibc 2.19's layout and records the two words before it as the block's bounds;
# LeakSanitizer's tracer then reads those at exit and dies ("LeakSanitizer has encountered a
# fatal error", no leak reported), by chance of where malloc put the block. Without the hook,
# dynamic TLS is not scanned for roots; dcp keeps no heap pointer there.
test-asan:
	@$(DEPS_CHECK) test
	$(MAKE) -j$(JOBS) BUILD=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" tests tools
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0:intercept_tls_get_addr=0 \
		UBSAN_OPTIONS=print_stacktrace=1 \
		LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
		$(MAKE) BUILD=build-asan test-run

# The full failure walks (tests/README.md "Failure walks"), under ASan+UBSan with leak checking:
# every allocation of each single-process call and every transport call of ranks as threads in
# turn, larger seeded samples of the multi-process runs, and the Python layer's calls; the
# allocation sites the walks reached, as file:line, land in build-asan/walk-sites.txt.
WALK_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0:intercept_tls_get_addr=0 \
	UBSAN_OPTIONS=print_stacktrace=1 LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0
test-walks:
	@$(DEPS_CHECK) test
	$(MAKE) -j$(JOBS) BUILD=build-asan OPT="-O1 -g -fno-omit-frame-pointer" \
		SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" tests build-asan/lib/hooks/libdcp.so
	rm -f build-asan/walk-sites.txt
	$(WALK_ENV) DCP_WALK=full DCP_WALK_SITES=$(abspath build-asan/walk-sites.txt) \
		build-asan/bin/dcp-tests -s alloc_walk
	$(WALK_ENV) DCP_WALK=full build-asan/bin/dcp-tests -s xfer_walk
	@echo "allocation sites reached by the single-process walks: $$(grep -v '^#' \
		build-asan/walk-sites.txt | sed 's/ (discriminator [0-9]*)//' | sort -u | wc -l) source lines"
	@# the python that imports PyTorch, as test-run picks it, so that dcp.torch is walked too
	py=python3; /usr/bin/python3 -c 'import torch' 2>/dev/null && py=/usr/bin/python3; \
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so):$$($(CC) -print-file-name=libubsan.so)" \
		$(WALK_ENV) ASAN_OPTIONS="$$ASAN_OPTIONS:detect_leaks=0" DCP_WALK=full \
		$$py tests/python/alloc_walk.py build-asan/lib/hooks/libdcp.so

# The soak (tests/soak/soak.c): 10,000 training steps on 4 processes (about 6 minutes here)
soak:
	@$(DEPS_CHECK) test
	$(MAKE) -j$(JOBS) tests
	tests/soak/run.sh $(BUILD)/bin 10000

# ThreadSanitizer: a third build of the library (no CUDA) and the planner service's load test
# alone (tests/tsan/planner_load_main.c). UCX's memory hooks (libucm, loaded with libdcp) are
# off: its madvise hook takes a lock inside glibc's thread exit, where ThreadSanitizer's
# interceptor crashes.
test-tsan:
	@$(DEPS_CHECK) test
	$(MAKE) -j$(JOBS) BUILD=build-tsan NVCC= OPT="-O1 -g" SAN="-fsanitize=thread" \
		build-tsan/bin/dcp-planner-load
	UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n \
		TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/bin/dcp-planner-load

$(BUILD)/bin/dcp-planner-load: $(BUILD)/obj/tests/tsan/planner_load_main.o \
		$(BUILD)/obj/tests/unit/test_planner_load.o $(BUILD)/obj/tests/unit/support.o \
		$(BUILD)/lib/libdcp.a
	@mkdir -p $(@D)
	$(CC) $(SAN) -o $@ $^ -lcunit $(LDLIBS_ALL)

# libdcp.so with the allocation hook (tests/unit/fault_hook.h), for the Python layer's walk
# (tests/python/alloc_walk.py); never installed
$(BUILD)/lib/hooks/libdcp.so: $(filter-out $(ALLOC_HOOK_SRCS:%.c=$(BUILD)/obj/%.o) \
		$(ALLOC_HOOK_CU_SRCS:%.cu=$(BUILD)/obj/%.o),$(LIB_OBJS)) $(ALLOC_HOOK_OBJS)
	@mkdir -p $(@D)
	$(CC) -shared $(SAN) $(HOOK_LDFLAGS) -o $@ $^ $(LDLIBS_ALL)

# libFuzzer over plan bytes (clang only): the library instrumented for coverage, with ASan
# and UBSan. make fuzz, then build-fuzz/bin/dcp-plan-fuzz -max_total_time=600 CORPUS_DIR (an
# empty CORPUS_DIR is seeded). make test builds it where clang exists and gives it a short run.
FUZZ_SAN = -fsanitize=fuzzer-no-link,address,undefined
fuzz:
	$(MAKE) -j$(JOBS) BUILD=build-fuzz CC=clang NVCC= OPT="-O1 -g" SAN="$(FUZZ_SAN)" \
		build-fuzz/bin/dcp-plan-fuzz

$(BUILD)/bin/dcp-plan-fuzz: $(BUILD)/obj/tests/fuzz/plan_fuzz.o $(BUILD)/obj/tests/fuzz/plan_input.o \
		$(BUILD)/lib/libdcp.a
	@mkdir -p $(@D)
	$(CC) $(subst fuzzer-no-link,fuzzer,$(SAN)) -o $@ $^ $(LDLIBS_ALL)

# libudev-dev: hwloc's `pkg-config --static` names -ludev; iproute2 (ip, tc) and util-linux
# (unshare): the emulated cluster of tests/cluster; slurmd, slurmctld, slurm-client and munge:
# its Slurm (tests/cluster/srun.sh); mpich and libmpich-dev: MPICH beside Open MPI (the
# alternatives keep Open MPI's mpicc the default); patchelf: the site-module prefix of
# tests/pkg/prefix.sh
DEB_PKGS = libhwloc-dev hwloc libudev-dev libmetis-dev libucx-dev ucx-utils libcunit1-dev libopenmpi-dev \
	openmpi-bin pkg-config procps python3-torch python3-venv iproute2 util-linux slurmd slurmctld \
	slurm-client munge mpich libmpich-dev patchelf
# what make run / make test need, probed with the flags above (plugin/pkgconfig/deps.sh)
DEPS_CHECK = CC="$(CC)" DEP_FLAGS="$(SITE_CFLAGS) $(SITE_LIBS)" MPI_CFLAGS="$(MPI_CFLAGS)" \
	MPI_LIBS="$(MPI_LIBS)" DEB_PKGS="$(DEB_PKGS)" sh plugin/pkgconfig/deps.sh

deps:
	@missing=$$(for p in $(DEB_PKGS); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		if ! command -v apt-get >/dev/null; then \
			echo "deps: install these packages (or their equivalents): $$missing" >&2; exit 1; fi; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		echo "deps: installing $$missing"; \
		$$sudo apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# pkg-config files: hwloc and UCX through their own .pc files (Requires.private); METIS has
# none, nor has the CUDA runtime that a CUDA build links statically. dcp_mpi names the MPI
# the library was built with (its .pc when it has one, else mpicc's flags).
LIBS_PRIVATE = $(filter-out -lucp -luct -lucs -lhwloc,$(LDLIBS_ALL))
MPI_PC := $(firstword $(foreach m,ompi-c mpich mpi,$(shell pkg-config --exists $(m) 2>/dev/null && echo $(m))))
INSTALLED = lib/libdcp.a lib/libdcp_mpi.a lib/$(SOFILE) lib/$(SONAME) lib/libdcp.so \
	lib/pkgconfig/dcp.pc lib/pkgconfig/dcp_mpi.pc include/dcp.h $(TOOLS:%=bin/%)
install: all
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(BUILD)/lib/libdcp.a $(BUILD)/lib/libdcp_mpi.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/lib/$(SOFILE) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(SOFILE) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SOFILE) $(DESTDIR)$(PREFIX)/lib/libdcp.so
	install -m 644 include/dcp.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(TOOL_BINS) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
		-e 's|@LIBS_PRIVATE@|$(LIBS_PRIVATE)|' plugin/pkgconfig/dcp.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/dcp.pc
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' -e 's|@MPI_REQUIRES@|$(MPI_PC)|' \
		-e 's|@MPI_CFLAGS@|$(if $(MPI_PC),,$(MPI_CFLAGS))|' \
		-e 's|@MPI_LIBS@|$(if $(MPI_PC),,$(MPI_LIBS))|' plugin/pkgconfig/dcp_mpi.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/dcp_mpi.pc

uninstall:
	rm -f $(INSTALLED:%=$(DESTDIR)$(PREFIX)/%)
	-rmdir $(DESTDIR)$(PREFIX)/lib/pkgconfig 2>/dev/null

clean:
	rm -rf build build-asan build-fuzz build-tsan

-include $(shell find $(BUILD)/obj $(BUILD)/obj-hooks -name '*.d' 2>/dev/null)
