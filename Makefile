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

.PHONY: all help test lint lint-fmt lint-vet lint-mod lint-staticcheck test-go test-python install-python demo bench fuzz clean testing-lib asan-lib generate

all: $(LIB) ## build build/libdistautograd.so and copy the headers beside it

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

# `make lint` runs every check; scripts/run-tests (make test) runs them one
# by one and reports each.
LINT_CHECKS := lint-fmt lint-vet lint-mod lint-staticcheck
lint: $(LINT_CHECKS) ## gofmt, go vet, go mod tidy, staticcheck

lint-fmt:
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi

lint-vet:
	$(GO) vet ./...

# go.mod and go.sum are as `go mod tidy` leaves them (tidy -diff changes nothing).
lint-mod:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }

# staticcheck is a tool of the module (go.mod's tool block): its version is
# pinned there and it comes through the Go module proxy like the rest.
lint-staticcheck:
	$(GO) tool staticcheck ./...

# The test targets write their counts under build/test-results for the
# summary of `make test`. GOTESTSUM_FORMAT picks gotestsum's output
# (testname: a line per test as it ends; pkgname: a line per package).
RESULTS := $(BUILD)/test-results
export GOTESTSUM_FORMAT ?= testname

test-go: $(LIB) $(BUILD)/testing/libdistautograd.so $(BUILD)/asan/libdistautograd.so ## the Go tests with the race detector, the C/C++ ABI tests among them
	@mkdir -p $(RESULTS)
	$(GO) tool gotestsum --format-hide-empty-pkg --jsonfile $(RESULTS)/go.json -- -race -count=1 ./...

test-python: $(LIB) ## the Python unit tests and the differential suite against torch, a line per test module
	@mkdir -p $(RESULTS)
	PYTHONPATH=python_bindings DISTAUTOGRAD_LIBRARY=$(CURDIR)/$(LIB) $(PYTHON) scripts/unittest_progress.py \
	  --json $(RESULTS)/python.json -s python_bindings/tests -t python_bindings

# `make test` runs the fuzz targets over their seed corpus (container/testdata/fuzz);
# this explores further, FUZZTIME per target, and writes what fails there.
FUZZTIME ?= 30s
fuzz: ## run each fuzz target of container/ for FUZZTIME (default 30s)
	@for f in $$($(GO) test -list '^Fuzz' ./container/ | grep '^Fuzz'); do \
	  echo "== $$f for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./container/ || exit 1; \
	done

# Every suite runs even when an earlier one failed; the summary at the end
# says what passed, failed and was skipped in each, and the exit status is
# the worst suite's. `scripts/run-tests go` runs one suite.
test: ## everything that must pass: the lint, go and python suites, then a summary
	@MAKE="$(MAKE)" LINT_CHECKS="$(LINT_CHECKS)" PYTHON="$(PYTHON)" $(PYTHON) scripts/run-tests

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
