# dlbridge build and test entry points. `make test` is what CI runs (via .ci/run).
SHELL := /bin/bash
GO ?= go
PY ?= /usr/bin/python3
BUILD := build
LIB := $(BUILD)/libdlbridge.so
OPSLIB := $(BUILD)/libopstest.so
WHEELDIR := $(BUILD)/wheel
VENV := $(BUILD)/venv
CORE := ./dlpack/... ./cai/... ./zerocopy/... ./cuda/... ./nccl/...

.PHONY: all lib ext wheel dist venv docs-test typecheck pytest-pythons gotest-aarch64 pytest-aarch64 gofunc-wheel gofunc-wheel-test gofunc-stub ops-lib test gotest nocgo pytest pytest-fork-repeat pytest-fakecuda gomodule fmt vet fuzz fuzz-long fuzz-long-go fuzz-long-py fuzz-long-ipc check-tracked bench demo gpu clean

all: lib

# The c-shared library (cgo is needed here only).
lib:
	$(GO) build -buildmode=c-shared -o $(LIB) ./pybridge/cmd/libdlbridge

# The Python package of the checkout made whole in place: the extension
# dlbridge._core and libdlbridge.so inside pybridge/python/dlbridge, so that
# PYTHONPATH=pybridge/python needs no DLBRIDGE_LIB (needs python3-dev).
# Against this machine's glibc (DLBRIDGE_GLIBC_FLOOR empty: no stub
# libraries in CGO_LDFLAGS, which only a wheel's tag needs): the packages are
# then compiled exactly as `dlbridge build` compiles them (make ops-lib, make
# demo), and go build compiles them once for both.
ext:
	cd pybridge/python && GO=$(GO) DLBRIDGE_GLIBC_FLOOR= $(PY) setup.py -q build_ext --inplace

# The wheel users install (cp310-abi3 on CPython 3.10+ with the GIL; tagged
# manylinux_2_X as its binaries' glibc needs decide), built offline with
# Debian's setuptools from the checkout: build/wheel/dlbridge-*.whl.
wheel:
	rm -rf $(WHEELDIR)
	GO=$(GO) $(PY) -m pip wheel -q --no-build-isolation --no-deps -w $(WHEELDIR) ./pybridge/python

# The release files: the sdist (Go modules vendored) and a wheel for each of
# DIST_ARCHES (aarch64 cross-built with Debian's gcc-aarch64-linux-gnu) built
# from it offline, twice, byte-identical; checked by scripts/check-dist.py
# (tags against the binaries' glibc needs, LICENSE, py.typed, stubs).
DIST_ARCHES ?= x86_64 aarch64
HOST_WHEEL = dist/dlbridge-*_$(shell uname -m).whl
dist:
	GO=$(GO) PY=$(PY) DIST_ARCHES="$(DIST_ARCHES)" bash scripts/dist.sh

# A fresh virtual environment with the release wheel installed, as a user
# has it (Debian's numpy, torch and pytest visible through the system
# site-packages).
venv: dist
	rm -rf $(VENV)
	$(PY) -m venv --system-site-packages $(VENV)
	$(VENV)/bin/python -m pip install -q --no-index --no-deps $(HOST_WHEEL)

# Types: mypy --strict on the package (its stubs, pyproject's [tool.mypy]),
# stubtest of the stubs against the installed package, and a user's script
# checked for its revealed types and for the errors mypy must report.
typecheck: venv
	cd pybridge/python && $(PY) -m mypy --no-incremental -p dlbridge
	cd /tmp && $(CURDIR)/$(VENV)/bin/python -m mypy.stubtest --mypy-config-file $(CURDIR)/pybridge/python/pyproject.toml \
	  --allowlist $(CURDIR)/pybridge/python/tests/typing/stubtest-allowlist.txt dlbridge
	$(PY) pybridge/python/tests/typing/check.py --python-executable $(CURDIR)/$(VENV)/bin/python

# Every CPython from 3.10 up that the machine image carries (pyenv): the
# release wheel installed in a fresh venv of each, import and the suite's
# NumPy-free part (scripts/pytest-pythons.sh). PYTHONS overrides the list.
PYENV_ROOT ?= /root/.pyenv
PYTHONS ?= $(shell ls -d $(PYENV_ROOT)/versions/3.* 2>/dev/null | grep -Ev '/3\.[0-9]([.]|$$)' | sed 's|$$|/bin/python|')
pytest-pythons: dist
	bash scripts/pytest-pythons.sh $(HOST_WHEEL) $(PYTHONS)

# aarch64 under qemu-user (Debian's qemu-user-static, no binfmt_misc needed):
# the Go tests for GOARCH=arm64 without and with cgo (scripts/qemu-exec.sh
# runs the test binaries), and the aarch64 wheel in a venv of Debian's arm64
# CPython (scripts/arm64-root.sh) with the suite of pytest-pythons.
QEMU_EXEC := $(CURDIR)/scripts/qemu-exec.sh
gotest-aarch64:
	GOARCH=arm64 CGO_ENABLED=0 CC=aarch64-linux-gnu-gcc $(GO) test -count=1 -exec $(QEMU_EXEC) $(CORE)
	GOARCH=arm64 CGO_ENABLED=1 CC=aarch64-linux-gnu-gcc $(GO) test -count=1 -exec $(QEMU_EXEC) ./...

pytest-aarch64: dist
	CC=aarch64-linux-gnu-gcc bash scripts/pytest-pythons.sh dist/dlbridge-*_aarch64.whl build/arm64/python3

fmt:
	@out="$$(gofmt -l $$(git ls-files '*.go'; git ls-files --others --exclude-standard '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags dlbtrace ./zerocopy # the diagnosis build (trace_dlbtrace.go)

# The Go author's shipping path: examples/gofunc/python builds a wheel of its own
# (libgofunc.so by `dlbridge build`, run as `go run .../cmd/dlbridge` from the
# Go package's module), installed with dlbridge's wheel into a fresh venv;
# tests/check_wheel.py runs from /tmp without DLBRIDGE_LIB or PYTHONPATH: the
# functions on NumPy arrays, the shipped stub against dlbridge.stubgen and
# mypy, and the refusal of a second Go library (one Go runtime per process).
GOFUNC_WHEELDIR := $(BUILD)/gofunc-wheel
GOFUNC_VENV := $(BUILD)/gofunc-venv

gofunc-wheel:
	rm -rf $(GOFUNC_WHEELDIR) examples/gofunc/python/build
	GO=$(GO) $(PY) -m pip wheel -q --no-build-isolation --no-deps -w $(GOFUNC_WHEELDIR) ./examples/gofunc/python

gofunc-wheel-test: dist gofunc-wheel
	rm -rf $(GOFUNC_VENV)
	$(PY) -m venv --system-site-packages $(GOFUNC_VENV)
	$(GOFUNC_VENV)/bin/python -m pip install -q --no-index --no-deps $(HOST_WHEEL) $(GOFUNC_WHEELDIR)/gofunc-*.whl
	$(VPY) $(CURDIR)/$(GOFUNC_VENV)/bin/python $(CURDIR)/examples/gofunc/python/tests/check_wheel.py

# The stub the gofunc wheel ships, written again from the library
# (after a change to examples/gofunc's functions or to dlbridge.stubgen).
gofunc-stub:
	$(GO) run ./cmd/dlbridge build -o $(BUILD)/libgofunc.so ./examples/gofunc
	PYTHONPATH=$(CURDIR)/pybridge/python $(PY) -m dlbridge.stubgen $(BUILD)/libgofunc.so -m gofunc -o examples/gofunc/python/gofunc/__init__.pyi

# The core packages must build and pass without cgo (purego only).
nocgo:
	CGO_ENABLED=0 $(GO) build $(CORE)
	CGO_ENABLED=0 $(GO) test -count=1 $(CORE)

# FAKECUDA_IPC_STRICT: the fake driver aborts an exporter's free of an IPC
# block that another live process still maps (importers must free first).
gotest:
	FAKECUDA_IPC_STRICT=1 $(GO) test -race -count=1 ./...

# The Python suite against the installed wheel, from outside the source tree
# and without DLBRIDGE_LIB or PYTHONPATH (test_install.py checks which
# package it got), once: the extension is the only binding. Its property
# tests use the Hypothesis
# profile "ci" (a fixed, derandomized budget).
VPY := cd /tmp && env -u DLBRIDGE_LIB -u PYTHONPATH DLBRIDGE_EXPECT_INSTALLED=1 DLBRIDGE_TEST_OPS_LIB=$(CURDIR)/$(OPSLIB)
VPYTEST := $(CURDIR)/$(VENV)/bin/python -m pytest -q -p no:cacheprovider

pytest: venv ops-lib
	@set +e; ($(VPY) $(VPYTEST) $(CURDIR)/pybridge/python/tests); r=$$?; \
	if [ $$r -eq 5 ]; then echo "pytest collected no tests"; r=1; fi; exit $$r

# The library of the Go-functions tests (tests/test_ops.py runs
# tests/ops_cases.py against it in a process of its own): examples/gofunc
# and pybridge/pyfunc/pyfunctest linked by `dlbridge build`.
ops-lib:
	$(GO) run ./cmd/dlbridge build -o $(OPSLIB) ./examples/gofunc ./pybridge/pyfunc/pyfunctest

# The fork check: test_fork.py (20 children per case, a busy
# parent among them) 20 times against the installed wheel,
# FORK_JOBS rounds at a time (scripts/fork-repeat.sh), a line as each round
# passes; the first failing round stops it and prints its output.
FORK_JOBS ?= 2
pytest-fork-repeat: venv
	@$(VPY) bash $(CURDIR)/scripts/fork-repeat.sh 20 $(FORK_JOBS) $(VPYTEST) -x $(CURDIR)/pybridge/python/tests/test_fork.py

# The property tests at the Python border with the Hypothesis profile "long"
# (randomized, thousands of examples per test).
fuzz-long-py: venv
	$(VPY) DLBRIDGE_HYPOTHESIS_PROFILE=long $(VPYTEST) $(CURDIR)/pybridge/python/tests/test_props.py

# The Python suite again, against the fake libcuda of testdata/fakecuda (built
# with the flags of internal/fakecuda/builder.go) with two fake devices: every
# CUDA test (marked gpu) runs without a GPU. On a GPU machine `pytest` uses the
# real driver instead.
FAKECUDA := $(BUILD)/fakecuda/libcuda.so.1
$(FAKECUDA): testdata/fakecuda/fakecuda.c
	@mkdir -p $(dir $@)
	gcc -shared -fPIC -O2 -ffp-contract=off -o $@ $< -lpthread

pytest-fakecuda: venv ops-lib $(FAKECUDA)
	@set +e; cd /tmp && env -u DLBRIDGE_LIB -u PYTHONPATH DLBRIDGE_EXPECT_INSTALLED=1 \
	  DLBRIDGE_TEST_OPS_LIB=$(CURDIR)/$(OPSLIB) \
	  DLBRIDGE_LIBCUDA=$(CURDIR)/$(FAKECUDA) FAKECUDA_DEVICES=2 \
	  $(CURDIR)/$(VENV)/bin/python -m pytest -q -rs -p no:cacheprovider $(CURDIR)/pybridge/python/tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

# Every Go fuzz target of the module as package:Name, found by its func
# line, so that a new target is fuzzed without editing this file.
FUZZ_TARGETS = $(shell grep -rH -o --include='*_test.go' --exclude-dir=build '^func Fuzz[A-Za-z0-9_]*' . \
	| sed 's|^\./\(.*\)/[^/]*:func |\1:|' | sort)

# fuzz-go runs each of FUZZ_TARGETS for $(1), a -fuzztime value (the corpus
# seeds also run in gotest); scripts/fuzz-go.sh says why counts suit CI.
define fuzz-go
	@GO=$(GO) bash scripts/fuzz-go.sh $(1) $(FUZZ_TARGETS)
endef

# Short fuzz runs over every parser of foreign input: a count per target
# (a few seconds each on two cores), not a duration, so that a loaded CI
# machine runs slower instead of failing at a deadline.
fuzz:
	$(call fuzz-go,300000x)

# Long runs before a release or after touching a parser: every Go fuzz
# target for FUZZTIME each (make fuzz-long FUZZTIME=1h), then any other
# suite's long run, each a fuzz-long-* prerequisite of its own.
FUZZTIME ?= 10m
fuzz-long: fuzz-long-go fuzz-long-py fuzz-long-ipc

fuzz-long-go:
	$(call fuzz-go,$(FUZZTIME))

# The IPC wire's soak for FUZZTIME: peers that send mutated valid messages
# to a server (fake driver) while an honest peer is served throughout; no
# crash, no descriptor or memory growth (gotest runs it for 3 s).
fuzz-long-ipc:
	FAKECUDA_IPC_STRICT=1 IPC_SOAK=$(FUZZTIME) $(GO) test -count=1 -timeout 0 -v -run '^TestSoakMutatedPeers$$' ./zerocopy/ipc/

# No build artefact (ignored file, binary, archive) may be tracked.
check-tracked:
	bash scripts/check-tracked.sh

# make test: every stage in turn through scripts/stages.sh, which announces
# each (its number and the time so far), times it, and prints the table of
# stage times at the end; the first failure stops the run. The cheap checks
# come first, so that a formatting slip fails in seconds; the release files,
# the venv and the ops library are stages of their own, built once
# (STAGES_ONCE) for every stage after them.
TEST_STAGES := check-tracked fmt vet nocgo gotest gomodule dist venv ops-lib docs-test pytest pytest-fork-repeat \
	pytest-fakecuda gofunc-wheel-test typecheck pytest-pythons gotest-aarch64 pytest-aarch64 fuzz
test:
	@MAKE="$(MAKE)" STAGES_ONCE="dist venv ops-lib" bash scripts/stages.sh $(TEST_STAGES)

# The shell and Go blocks of README.md and docs/*.md, run as written in a
# scratch copy of the checkout, a new Go module and a Go author's module
# (tests/test_readme.py, DLBRIDGE_DOCS_BLOCKS=1): each block says how above
# it (<!-- test: ... -->); a block is skipped only with its reason shown (a
# GPU, the network, or this suite's own entry point). Offline: Go modules
# from the module cache.
docs-test: venv
	@cd /tmp && env -u DLBRIDGE_LIB -u PYTHONPATH DLBRIDGE_DOCS_BLOCKS=1 DLBRIDGE_README=$(CURDIR)/README.md \
	  GO=$(GO) $(VPYTEST) -rs $(CURDIR)/pybridge/python/tests/test_readme.py -k docs_block

# A Go user's module outside this repository builds against it with
# CGO_ENABLED=0 and runs the README's example.
gomodule:
	GO=$(GO) bash scripts/check-gomodule.sh

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=1 ./dlpack/ ./cai/ ./zerocopy/ ./cuda/

# The main job: the package made whole in place (make ext: libdlbridge.so
# and the C extension), examples/gofunc linked by dlbridge build, and the
# demo (NumPy/PyTorch, CuPy on a GPU machine). Each library is built once,
# and the packages they share are compiled once (make ext says why). The
# dlbridge command compiles meanwhile (go/types and the rest of its own:
# about half the work of a cold build), which fills the second core while
# the first compiles C (cgo, the extension); demo.sh's `go run` of it then
# finds it in the build cache.
demo:
	@echo "building pybridge/python/dlbridge in place (libdlbridge.so, the extension dlbridge._core) and cmd/dlbridge"
	@$(GO) build -o /dev/null ./cmd/dlbridge & tool=$$!; \
	$(MAKE) -s ext; rc=$$?; wait $$tool || rc=1; exit $$rc
	@DLBRIDGE_LIB=$(CURDIR)/pybridge/python/dlbridge/libdlbridge.so PYTHONPATH=$(CURDIR)/pybridge/python bash examples/demo.sh

# Everything the GPU machine needs, under build/gpu (see docs/development.md); run there with
#   bash build/gpu/run.sh
gpu:
	bash scripts/build-gpu.sh

clean:
	rm -rf $(BUILD) dist pybridge/python/build pybridge/python/dlbridge.egg-info pybridge/python/dlbridge/*.so
	rm -rf examples/gofunc/python/build examples/gofunc/python/gofunc.egg-info
