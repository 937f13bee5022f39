# distautograd: build, test, demo, bench. `make help` lists the targets.
GO      ?= go
PYTHON  ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
BUILD   := build
SONAME  := libdistautograd.so.0
LIB     := $(BUILD)/libdistautograd.so
GOSRC   := $(wildcard *.go container/*.go)
CSRC    := capi.c capi_internal.h include/distautograd.h libdistautograd.map
LDFLAGS := -extldflags '-Wl,--version-script=$(CURDIR)/libdistautograd.map -Wl,-soname,$(SONAME)'

export GOFLAGS := -buildvcs=false

.PHONY: all help test lint test-go test-python install-python demo bench fuzz clean testing-lib asan-lib generate

all: $(LIB) torch-backend ## build build/libdistautograd.so (and the torch backend where libtorch-dev is) and copy the headers beside it

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(BUILD)/$(SONAME): $(GOSRC) $(CSRC) go.mod go.sum
	@mkdir -p $(BUILD)
	$(GO) build -buildmode=c-shared -trimpath -ldflags "$(LDFLAGS)" -o $@ .
	@# cgo writes the prototypes of the Go side beside the library; the ABI
	@# contract test reads it, nobody includes it.
	mv $(BUILD)/$(SONAME:.so.0=.so.h) $(BUILD)/cgo_generated.h 2>/dev/null || mv $(BUILD)/$(SONAME).h $(BUILD)/cgo_generated.h
	cp include/distautograd.h* $(BUILD)/

$(LIB): $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

# The testing build adds dac_testing_* functions (counters started near
# max_id); the tests that need it build it, the release .so never has them.
testing-lib: $(BUILD)/testing/libdistautograd.so ## build/testing/libdistautograd.so, with -tags dac_testing

$(BUILD)/testing/libdistautograd.so: $(GOSRC) $(CSRC) go.mod go.sum
	@mkdir -p $(BUILD)/testing
	$(GO) build -buildmode=c-shared -tags dac_testing -trimpath -ldflags "$(LDFLAGS)" -o $(BUILD)/testing/$(SONAME) .
	rm -f $(BUILD)/testing/*.h
	ln -sf $(SONAME) $@

# The AddressSanitizer build: go build -asan instruments the Go code and
# compiles capi.c with -fsanitize=address. capi_test runs its stress and
# bad-input programs, built with -fsanitize=address too, against it. Where
# it cannot be built (no libasan), the reason goes to build/asan/UNAVAILABLE
# and those tests say so (and fail under CI=true); the rest runs.
asan-lib: $(BUILD)/asan/libdistautograd.so ## build/asan/libdistautograd.so, with go build -asan

$(BUILD)/asan/libdistautograd.so: $(GOSRC) $(CSRC) go.mod go.sum
	@mkdir -p $(BUILD)/asan
	@rm -f $(BUILD)/asan/UNAVAILABLE
	@if $(GO) build -asan -buildmode=c-shared -trimpath -ldflags "$(LDFLAGS)" -o $(BUILD)/asan/$(SONAME) . 2>$(BUILD)/asan/build.log; then \
	  rm -f $(BUILD)/asan/*.h $(BUILD)/asan/build.log; ln -sf $(SONAME) $@; \
	else \
	  mv $(BUILD)/asan/build.log $(BUILD)/asan/UNAVAILABLE; rm -f $@ $(BUILD)/asan/$(SONAME); \
	  echo "*** go build -asan failed; the sanitized tests will say why ($(BUILD)/asan/UNAVAILABLE)"; \
	fi

lint: ## gofmt and go vet
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi
	$(GO) vet ./...

test-go: $(LIB) $(BUILD)/testing/libdistautograd.so $(BUILD)/asan/libdistautograd.so ## the Go tests with the race detector, the C/C++ ABI tests among them
	$(GO) test -race -count=1 ./...

test-python: $(LIB) ## the Python unit tests and the differential suite against torch
	@if [ -d python_bindings/tests ]; then \
	  PYTHONPATH=python_bindings DISTAUTOGRAD_LIBRARY=$(CURDIR)/$(LIB) $(PYTHON) -m unittest discover -v -s python_bindings/tests -t python_bindings; \
	fi

# `make test` runs the fuzz targets over their seed corpus (container/testdata/fuzz);
# this explores further, FUZZTIME per target, and writes what fails there.
# Then the reliability class tests of capi_test at length (DAC_LONG=1: the
# linearizability race, configuration races, init window; several minutes).
FUZZTIME ?= 30s
LONG_TESTS := TestLinearizableContainer|TestConfigurationRaces|TestInitWindow
fuzz: $(LIB) ## run each fuzz target of container/ for FUZZTIME (default 30s), then the long reliability races
	@for f in $$($(GO) test -list '^Fuzz' ./container/ | grep '^Fuzz'); do \
	  echo "== $$f for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./container/ || exit 1; \
	done
	@echo "== capi_test reliability races, long (DAC_LONG=1)"
	DAC_LONG=1 $(GO) test -count=1 -timeout 60m -v -run '^($(LONG_TESTS))$$' ./capi_test/

test: lint test-go test-python test-torch ## everything that must pass
	@# Without the oracle the differential tests skip (they fail under CI=true):
	@# say so where nobody can miss it.
	@$(PYTHON) -c 'import torch' 2>/dev/null && test -e /usr/lib/x86_64-linux-gnu/libtorch_cpu.so || \
	  echo '*** WARNING: python3-torch/libtorch-dev missing: the differential tests against the native component were SKIPPED (apt-get install python3-torch libtorch-dev)'

# Debian's own Python is externally managed: point PYTHON at a venv's python.
install-python: $(LIB) ## pip-install python_bindings (with its .so) offline: make install-python PYTHON=venv/bin/python
	$(PYTHON) -m pip install --no-build-isolation --no-index $(PIP_FLAGS) ./python_bindings

demo: $(LIB) ## a training runtime's worker, acted out in C
	@mkdir -p $(BUILD)
	$(CC) -std=c99 -Wall -Wextra -Werror -O2 -Iinclude examples/demo.c -L$(BUILD) -ldistautograd -Wl,-rpath,'$$ORIGIN' -lpthread -o $(BUILD)/demo
	$(BUILD)/demo

# Not part of `make test`: it times things. BENCH_FLAGS go to the driver
# (go run ./bench -h lists them), e.g. BENCH_FLAGS='-threads 1,2,4 -reps 9'.
bench: $(LIB) ## distautograd against the native component, C and Python levels, memory; writes build/bench.json
	GLOG_minloglevel=2 $(GO) run ./bench -python $(PYTHON) $(BENCH_FLAGS)

generate: ## regenerate python_bindings/distautograd/_abi.py (ctypes prototypes) from include/distautograd.h
	$(GO) run ./cmd/dacgen

clean: ## remove build outputs
	rm -rf $(BUILD)
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# ---- torch backend (torch_backend/): torch's own distributed autograd on distautograd ----
# The shim (libc only) is what LD_PRELOAD names; the implementation links
# libtorch (libtorch-dev) and libdistautograd, and the shim loads it on the
# first container call. Without libtorch-dev only the shim is built (it then
# says so and leaves torch native).
TORCH_SHIM  := $(BUILD)/libdistautograd_torch.so
TORCH_IMPL  := $(BUILD)/libdistautograd_torch_impl.so
TORCH_SO    ?= /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13
TORCH_INC   ?= /usr/include/torch
HAVE_LIBTORCH := $(shell test -e $(TORCH_SO) && test -d $(TORCH_INC)/csrc/distributed/rpc && echo yes)
.PHONY: torch-backend test-torch bench-torch
torch-backend: $(TORCH_SHIM) $(if $(HAVE_LIBTORCH),$(TORCH_IMPL)) ## build/libdistautograd_torch.so (+ _impl.so with libtorch-dev)
$(TORCH_SHIM): torch_backend/shim.S torch_backend/shim.c torch_backend/symbols.h torch_backend/shim.map
	@mkdir -p $(BUILD)
	$(CC) -std=gnu11 -O2 -fPIC -Wall -Wextra -Werror -shared -o $@ torch_backend/shim.S torch_backend/shim.c \
	  -Wl,--version-script=torch_backend/shim.map -Wl,-z,now -Wl,-z,noexecstack
$(TORCH_IMPL): torch_backend/impl.cpp torch_backend/symbols.h torch_backend/impl.map include/distautograd.h $(LIB)
	$(CXX) -std=c++17 -O2 -fPIC -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude -isystem $(TORCH_INC)/csrc/api/include -shared -o $@ torch_backend/impl.cpp \
	  -Wl,--version-script=torch_backend/impl.map -Wl,-z,now -Wl,--no-undefined -Wl,-rpath,'$$ORIGIN' \
	  -L$(BUILD) -ldistautograd -l:$(notdir $(TORCH_SO)) -l:libc10.so.1.13
test-torch: all ## the torch backend against real torch: the 3-worker job native vs backend, guard, kill, fork, launcher
	$(PYTHON) -m unittest -v torch_backend.tests.test_backend torch_backend.tests.test_differential_torch
bench-torch: all ## torch's distributed autograd natively and under the backend, alternating processes; adds level "torch" rows to build/bench.json (run after make bench)
	$(PYTHON) bench/torchbench.py $(TORCH_BENCH_FLAGS)
