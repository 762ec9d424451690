# dlbridge build and test entry points. `make test` is what CI runs (via .ci/run).
SHELL := /bin/bash
GO ?= go
PY ?= /usr/bin/python3
BUILD := build
LIB := $(BUILD)/libdlbridge.so
OPSLIB := $(BUILD)/libopstest.so
WHEELDIR := $(BUILD)/wheel
VENV := $(BUILD)/venv
CORE := ./dlpack/... ./cai/... ./zerocopy/... ./cuda/...

.PHONY: all lib ext wheel dist venv typecheck pytest-pythons gotest-aarch64 pytest-aarch64 gofunc-wheel gofunc-wheel-test gofunc-stub ops-lib test gotest nocgo pytest pytest-fork-repeat pytest-fakecuda gomodule fmt vet fuzz fuzz-long fuzz-long-go fuzz-long-py check-tracked bench demo gpu clean

all: lib

# The c-shared library (cgo is needed here only).
lib:
	$(GO) build -buildmode=c-shared -o $(LIB) ./pybridge/cmd/libdlbridge

# The Python package of the checkout made whole in place: the extension
# dlbridge._core and libdlbridge.so inside pybridge/python/dlbridge, so that
# PYTHONPATH=pybridge/python needs no DLBRIDGE_LIB (needs python3-dev).
ext:
	cd pybridge/python && GO=$(GO) $(PY) setup.py -q build_ext --inplace

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

gofunc-wheel-test: wheel gofunc-wheel
	rm -rf $(GOFUNC_VENV)
	$(PY) -m venv --system-site-packages $(GOFUNC_VENV)
	$(GOFUNC_VENV)/bin/python -m pip install -q --no-index --no-deps $(WHEELDIR)/dlbridge-*.whl $(GOFUNC_WHEELDIR)/gofunc-*.whl
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

# The fork check: test_fork.py (20 children per case, a busy parent
# among them) 20 times in a row against the installed
# wheel; the first failing round stops it and prints its output.
pytest-fork-repeat: venv
	@log=$$(mktemp); for i in $$(seq 20); do \
	  if ! ($(VPY) $(VPYTEST) -x $(CURDIR)/pybridge/python/tests/test_fork.py) > $$log 2>&1; then \
	    cat $$log; rm -f $$log; echo "pytest-fork-repeat: round $$i of 20 failed"; exit 1; \
	  fi; \
	done; tail -n 1 $$log; rm -f $$log; echo "pytest-fork-repeat: 20 rounds in a row passed"

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
fuzz-long: fuzz-long-go fuzz-long-py

fuzz-long-go:
	$(call fuzz-go,$(FUZZTIME))

# No build artefact (ignored file, binary, archive) may be tracked.
check-tracked:
	bash scripts/check-tracked.sh

test: check-tracked fmt vet nocgo gotest gomodule pytest pytest-fork-repeat pytest-fakecuda gofunc-wheel-test typecheck pytest-pythons gotest-aarch64 pytest-aarch64 fuzz

# A Go user's module outside this repository builds against it with
# CGO_ENABLED=0 and runs the README's example.
gomodule:
	GO=$(GO) bash scripts/check-gomodule.sh

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=1 ./dlpack/ ./cai/ ./zerocopy/ ./cuda/

# The main job: build the library and run the demo (NumPy/PyTorch, CuPy on a GPU machine).
demo: lib ext
	DLBRIDGE_LIB=$(CURDIR)/$(LIB) PYTHONPATH=$(CURDIR)/pybridge/python bash examples/demo.sh

# Everything the GPU machine needs, under build/gpu (see docs/development.md); run there with
#   bash build/gpu/run.sh
gpu:
	bash scripts/build-gpu.sh

clean:
	rm -rf $(BUILD) dist pybridge/python/build pybridge/python/dlbridge.egg-info pybridge/python/dlbridge/*.so
	rm -rf examples/gofunc/python/build examples/gofunc/python/gofunc.egg-info
