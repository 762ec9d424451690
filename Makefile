# dlbridge build and test entry points. `make test` is what CI runs (via .ci/run).
SHELL := /bin/bash
GO ?= go
PY ?= /usr/bin/python3
BUILD := build
LIB := $(BUILD)/libdlbridge.so
CORE := ./dlpack/... ./cai/... ./zerocopy/... ./cuda/...

.PHONY: all lib test gotest nocgo pytest fmt vet fuzz bench demo gpu clean

all: lib

# The c-shared library and its Python package (cgo is needed here only).
lib:
	$(GO) build -buildmode=c-shared -o $(LIB) ./pybridge/cmd/libdlbridge

fmt:
	@out="$$(gofmt -l $$(git ls-files '*.go'; git ls-files --others --exclude-standard '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# The core packages must build and pass without cgo (purego only).
nocgo:
	CGO_ENABLED=0 $(GO) build $(CORE)
	CGO_ENABLED=0 $(GO) test -count=1 $(CORE)

gotest:
	$(GO) test -race -count=1 ./...

pytest: lib
	@set +e; DLBRIDGE_LIB=$(CURDIR)/$(LIB) PYTHONPATH=$(CURDIR)/pybridge/python \
	  $(PY) -m pytest -q pybridge/python/tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

# Short fuzz runs over every parser of foreign input (seeds also run in gotest).
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzImport$$' -fuzztime=15s ./dlpack/
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeValidate$$' -fuzztime=15s ./cai/
	$(GO) test -run='^$$' -fuzz='^FuzzTypestr$$' -fuzztime=15s ./cai/

test: fmt vet nocgo gotest pytest fuzz

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=1 ./dlpack/ ./cai/ ./zerocopy/ ./cuda/

# The main job: build the library and run the demo (NumPy/PyTorch, CuPy on a GPU machine).
demo: lib
	DLBRIDGE_LIB=$(CURDIR)/$(LIB) PYTHONPATH=$(CURDIR)/pybridge/python bash examples/demo.sh

# Everything the GPU machine needs, under build/gpu (see shared GPU.md); run there with
#   bash build/gpu/run.sh
gpu:
	bash scripts/build-gpu.sh

clean:
	rm -rf $(BUILD)
