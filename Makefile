# distautograd: build, test, demo, bench. `make help` lists the targets.
# The Go that builds and tests the library is go.mod's toolchain line (the
# go command fetches it through the module proxy where it is not
# installed), unless GOTOOLCHAIN says otherwise: GOTOOLCHAIN=local for the
# Go on PATH, GOTOOLCHAIN=go1.26.8 for another. A make that uses another Go
# than go.mod's says which, in one line. docs/go-runtime.md says which Gos
# the library is tested with.
GO_MOD_TOOLCHAIN := $(shell sed -n 's/^toolchain //p' go.mod)
ifndef GOTOOLCHAIN
GOTOOLCHAIN := $(GO_MOD_TOOLCHAIN)
endif
export GOTOOLCHAIN
# The targets that need no Go, so that `make help` works without it; `make
# test` checks for it (and every other tool) itself, first (scripts/run-tests).
# For any other, a missing Go is one line saying what to install.
NO_GO_GOALS := help library-sources clean uninstall torch-root test
ifneq ($(filter-out $(NO_GO_GOALS),$(or $(MAKECMDGOALS),all)),)
# A fetched Go is used from a copy outside the module cache, where
# `go build -overlay` may replace its runtime's files (scripts/go-toolchain);
# recipes, and the tests they run, find the same go first on PATH. (GO=PATH
# names a go command instead: with GOTOOLCHAIN=local, or it hands over to
# the toolchain line's Go.)
ifndef GO
GO := $(shell GOTOOLCHAIN=$(GOTOOLCHAIN) scripts/go-toolchain)
ifneq ($(.SHELLSTATUS),0)
$(error $(GO))
endif
endif
export PATH := $(dir $(GO)):$(PATH)
# This Go's version and GOROOT.
GO_ENV := $(shell $(GO) env GOVERSION GOROOT)
ifeq ($(words $(GO_ENV)),0)
$(error $(GO) env GOVERSION GOROOT failed)
endif
# Said by the make a person ran, not again by each make it starts.
ifeq ($(MAKELEVEL),0)
ifneq ($(firstword $(GO_ENV)),$(GO_MOD_TOOLCHAIN))
$(info make: building with $(firstword $(GO_ENV)) ($(lastword $(GO_ENV))), not go.mod's toolchain $(GO_MOD_TOOLCHAIN): GOTOOLCHAIN=$(GOTOOLCHAIN))
endif
endif
endif
PYTHON  ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
BUILD   := build
# The version is the header's DAC_VERSION_MAJOR, _MINOR and _PATCH: the
# library file, the soname, pkg-config, CMake and the wheel all take it
# from there.
header_version = $(shell sed -n 's/^\#define DAC_VERSION_$(1) \([0-9][0-9]*\)$$/\1/p' include/distautograd.h)
MAJOR   := $(call header_version,MAJOR)
VERSION := $(MAJOR).$(call header_version,MINOR).$(call header_version,PATCH)
ifneq ($(words $(subst ., ,$(VERSION))),3)
$(error include/distautograd.h: no DAC_VERSION_MAJOR, _MINOR and _PATCH lines to take the version from (got "$(VERSION)"))
endif
SONAME  := libdistautograd.so.$(MAJOR)
REALNAME := libdistautograd.so.$(VERSION)
LIB     := $(BUILD)/libdistautograd.so
# What every build of the library depends on, tests aside: the one list
# (the Go tests that check a build is current ask `make -s library-sources`).
GOSRC   := $(filter-out %_test.go,$(wildcard *.go container/*.go internal/layout/*.go))
CSRC    := capi.c $(wildcard csrc/*.c csrc/*.h) capi_status.h capi_layout.h include/distautograd.h libdistautograd.map
LIBRARY_SOURCES := $(GOSRC) $(CSRC) go.mod go.sum scripts/go-runtime-overlay scripts/go-runtime-changes scripts/go-runtime-tested scripts/go-toolchain
# Every build of the library takes the lines of Go's runtime that
# scripts/go-runtime-changes gives, through this overlay, for C threads that
# call into Go (docs/go-runtime.md says what and why; build/go-runtime/STATUS whether each applied to this Go), where this
# Go's runtime is one the overlay was tested with (scripts/go-runtime-tested).
# GO_RUNTIME_OVERLAY=0 builds with Go's runtime untouched: make
# GO_RUNTIME_OVERLAY=0 [all, wheel, install, test...].
GO_RUNTIME_OVERLAY ?= 1
export GO_RUNTIME_OVERLAY
OVERLAY := $(BUILD)/go-runtime/overlay.json
# What the overlay is made from besides the script: the switch and the Go
# (its version and GOROOT). The file changes when they do, so the overlay is
# written again and every build of the library redone: a build made with
# the other setting, or by another Go, is never taken for current.
GO_RUNTIME_SETTING := $(BUILD)/go-runtime/setting
GO_RUNTIME_SETTING_TEXT := GO_RUNTIME_OVERLAY=$(GO_RUNTIME_OVERLAY) $(GO_ENV)
# Written as make reads this file, and only when it changed, so that
# `make -q` still tells a current build (a rule that always ran would make
# it never current); only where a Go was looked for (not for the targets
# that only print).
ifneq ($(GO_ENV),)
$(shell mkdir -p $(dir $(GO_RUNTIME_SETTING)) && { echo '$(GO_RUNTIME_SETTING_TEXT)' | cmp -s - $(GO_RUNTIME_SETTING) || echo '$(GO_RUNTIME_SETTING_TEXT)' >$(GO_RUNTIME_SETTING); })
# Which of the runtime's files it changes is the script's to say: a change
# to any of them writes the overlay again.
GO_RUNTIME_FILES := $(wildcard $(lastword $(GO_ENV))/src/runtime/*.go)
endif
# The library learns which changes it was built with (dac_debug_info's
# go_runtime_* keys) from the script's BUILT_WITH, read when it is linked.
LINKFLAGS := -extldflags '-Wl,--version-script=$(CURDIR)/libdistautograd.map -Wl,-soname,$(SONAME)'
LDFLAGS := -X 'main.goRuntimeBuiltWith=$$(cat $(BUILD)/go-runtime/BUILT_WITH)' $(LINKFLAGS)

export GOFLAGS := -buildvcs=false

.PHONY: all help library-sources install uninstall test lint lint-fmt lint-vet lint-mod lint-staticcheck lint-c test-go test-python wheel install-python demo bench fuzz clean testing-lib asan-lib nooverlay-lib without-lib test-go-runtime generate

all: $(LIB) torch-backend ## build build/libdistautograd.so (and the torch backend where libtorch-dev is) and copy the headers beside it

library-sources: ## print what the library is built from (the tests' staleness checks read it)
	@echo $(LIBRARY_SOURCES)

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

# As an installed library: the file libdistautograd.so.X.Y.Z, its soname
# link libdistautograd.so.X (what programs load) and libdistautograd.so
# (what -ldistautograd finds).
$(OVERLAY): scripts/go-runtime-overlay scripts/go-runtime-changes scripts/go-runtime-tested $(GO_RUNTIME_SETTING) $(GO_RUNTIME_FILES)
	@scripts/go-runtime-overlay $(GO) $(dir $@)


$(BUILD)/$(REALNAME): $(LIBRARY_SOURCES) $(OVERLAY)
	@mkdir -p $(BUILD)
	@echo "go build $@"
	@$(GO) build -buildmode=c-shared -trimpath -overlay $(OVERLAY) -ldflags "$(LDFLAGS)" -o $@ .
	@# cgo writes the prototypes of the Go side beside the library; the ABI
	@# contract test reads it, nobody includes it.
	@mv $(basename $@).h $(BUILD)/cgo_generated.h
	@cp include/distautograd.h* $(BUILD)/

$(BUILD)/$(SONAME): $(BUILD)/$(REALNAME)
	@ln -sf $(REALNAME) $@

$(LIB): $(BUILD)/$(SONAME)
	@ln -sf $(SONAME) $@

# The library built with Go's runtime as shipped (no overlay), for the
# tests and benchmarks that compare the overlay with it: they point
# LD_LIBRARY_PATH at build/nooverlay. It reports every change as not taken
# (BUILT_WITH's names, each =0).
nooverlay-lib: $(BUILD)/nooverlay/libdistautograd.so ## build/nooverlay/libdistautograd.so, with Go's runtime untouched

$(BUILD)/nooverlay/libdistautograd.so: $(LIBRARY_SOURCES) $(OVERLAY)
	@mkdir -p $(BUILD)/nooverlay
	@echo "go build $@ (Go's runtime as shipped)"
	@$(GO) build -buildmode=c-shared -trimpath -ldflags "-X 'main.goRuntimeBuiltWith=$$(sed 's/=1/=0/g' $(BUILD)/go-runtime/BUILT_WITH)' $(LINKFLAGS)" -o $(BUILD)/nooverlay/$(SONAME) .
	@rm -f $(BUILD)/nooverlay/*.h
	@ln -sf $(SONAME) $@

# The library built with the overlay less some of its changes, for
# measuring what each change does: make without-lib WITHOUT='NAME ...'
# (the names are build/go-runtime/STATUS's) builds
# build/without/NAME+.../libdistautograd.so from the overlay that
# `scripts/go-runtime-overlay GO DIR --without=NAME...` writes there; its
# dac_debug_info says which changes it took. Tests and benchmarks load it
# as they load build/nooverlay (LD_LIBRARY_PATH); TestResponsiveness takes
# it in place of the library as built with DAC_RESPONSIVENESS_LIBRARY.
WITHOUT ?=
without-lib: $(if $(strip $(WITHOUT)),$(BUILD)/without/$(subst $(eval) ,+,$(strip $(WITHOUT)))/libdistautograd.so) ## build/without/NAME+.../libdistautograd.so: the overlay less WITHOUT='NAME ...'
	@test -n "$(strip $(WITHOUT))" || { echo "make without-lib WITHOUT='NAME ...': the changes to leave out (build/go-runtime/STATUS names them)"; exit 2; }

$(BUILD)/without/%/libdistautograd.so: $(LIBRARY_SOURCES) $(OVERLAY)
	@mkdir -p $(BUILD)/without/$*
	scripts/go-runtime-overlay $(GO) $(BUILD)/without/$*/go-runtime $(addprefix --without=,$(subst +, ,$*))
	$(GO) build -buildmode=c-shared -trimpath -overlay $(BUILD)/without/$*/go-runtime/overlay.json -ldflags "-X 'main.goRuntimeBuiltWith=$$(cat $(BUILD)/without/$*/go-runtime/BUILT_WITH)' $(LINKFLAGS)" -o $(BUILD)/without/$*/$(SONAME) .
	rm -f $(BUILD)/without/$*/*.h
	ln -sf $(SONAME) $@

# The testing build adds dactest_* functions (counters started near
# max_id); the tests that need it build it, the release .so never has them.
testing-lib: $(BUILD)/testing/libdistautograd.so ## build/testing/libdistautograd.so, with -tags dac_testing

$(BUILD)/testing/libdistautograd.so: $(LIBRARY_SOURCES) $(OVERLAY)
	@mkdir -p $(BUILD)/testing
	@echo "go build -tags dac_testing $@"
	@$(GO) build -buildmode=c-shared -tags dac_testing -trimpath -overlay $(OVERLAY) -ldflags "$(LDFLAGS)" -o $(BUILD)/testing/$(SONAME) .
	@rm -f $(BUILD)/testing/*.h
	@ln -sf $(SONAME) $@

# The AddressSanitizer build: go build -asan instruments the Go code and
# compiles capi.c with -fsanitize=address. capi_test runs its stress and
# bad-input programs, built with -fsanitize=address too, against it. Where
# it cannot be built (no libasan), the reason goes to build/asan/UNAVAILABLE
# and those tests say so (and fail under CI=true); the rest runs.
asan-lib: $(BUILD)/asan/libdistautograd.so ## build/asan/libdistautograd.so, with go build -asan

$(BUILD)/asan/libdistautograd.so: $(LIBRARY_SOURCES) $(OVERLAY)
	@mkdir -p $(BUILD)/asan
	@rm -f $(BUILD)/asan/UNAVAILABLE
	@echo "go build -asan $@"
	@if $(GO) build -asan -buildmode=c-shared -trimpath -overlay $(OVERLAY) -ldflags "$(LDFLAGS)" -o $(BUILD)/asan/$(SONAME) . 2>$(BUILD)/asan/build.log; then \
	  rm -f $(BUILD)/asan/*.h $(BUILD)/asan/build.log; ln -sf $(SONAME) $@; \
	else \
	  mv $(BUILD)/asan/build.log $(BUILD)/asan/UNAVAILABLE; rm -f $@ $(BUILD)/asan/$(SONAME); \
	  echo "*** go build -asan failed; the sanitized tests will say why ($(BUILD)/asan/UNAVAILABLE)"; \
	fi

# `make lint` runs every check; scripts/run-tests (make test) runs them one
# by one and reports each.
LINT_CHECKS := lint-fmt lint-vet lint-mod lint-staticcheck lint-c
lint: $(LINT_CHECKS) ## gofmt, go vet, go mod tidy, staticcheck, each C room alone

lint-fmt:
	@out=$$(gofmt -l . ); if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi

lint-vet:
	@echo "go vet ./..."
	@$(GO) vet ./...

# Each room of the C side compiles alone, as it compiles inside capi.c's
# one unit (csrc/dacc.h): every csrc/*.c, in the release build and the
# testing build (-DDACC_TESTING), and every csrc/*.h included twice (its
# include guard), with the flags cgo compiles the library with (export.go's
# #cgo CFLAGS line, their one owner) at -O2, so that what the optimizer
# warns of shows too.
LIBRARY_CFLAGS := $(shell sed -n 's/^\#cgo CFLAGS: //p' export.go)
lint-c:
	@set -e; for f in csrc/*.c; do for t in '' -DDACC_TESTING; do \
	  $(CC) $(LIBRARY_CFLAGS) $$t -O2 -c -o /dev/null $$f || { echo "lint-c: $$f $$t does not compile alone"; exit 1; }; \
	done; done; \
	for h in csrc/*.h; do \
	  printf '#include "%s"\n#include "%s"\n' $$h $$h | $(CC) $(LIBRARY_CFLAGS) -O2 -iquote . -fsyntax-only -x c - \
	    || { echo "lint-c: $$h does not compile alone (included twice)"; exit 1; }; \
	done

# go.mod and go.sum are as `go mod tidy` leaves them (tidy -diff changes nothing).
lint-mod:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }

# staticcheck is a tool of the module (go.mod's tool block): its version is
# pinned there and it comes through the Go module proxy like the rest.
lint-staticcheck:
	@echo "go tool staticcheck ./..."
	@$(GO) tool staticcheck ./...

# The test targets write their counts under build/test-results for the
# summary of `make test`. GOTESTSUM_FORMAT picks gotestsum's output
# (testname: a line per test as it ends; pkgname: a line per package).
# Only the packages that have tests are named (the others would each be a
# line "EMPTY"); go vet (make lint) checks that every package builds.
RESULTS := $(BUILD)/test-results
export GOTESTSUM_FORMAT ?= testname
TESTED_PACKAGES = $(shell $(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...)

test-go: all $(BUILD)/testing/libdistautograd.so $(BUILD)/asan/libdistautograd.so $(BUILD)/nooverlay/libdistautograd.so ## the Go tests with the race detector, the C/C++ ABI tests among them
	@mkdir -p $(RESULTS)
	@echo "go test -race (gotestsum: a line per test)"
	@$(GO) tool gotestsum --format-hide-empty-pkg --jsonfile $(RESULTS)/go.json -- -race -count=1 $(TESTED_PACKAGES)

test-python: $(LIB) $(BUILD)/testing/libdistautograd.so ## the Python unit tests and the differential suite against torch, a line per test module (the reaper's on the testing build)
	@mkdir -p $(RESULTS)
	@PYTHONPATH=python_bindings DISTAUTOGRAD_LIBRARY=$(CURDIR)/$(LIB) $(PYTHON) scripts/unittest_progress.py \
	  --json $(RESULTS)/python.json -s python_bindings/tests -t python_bindings

# `make test` runs the fuzz targets over their seed corpus (container/testdata/fuzz);
# this explores further, FUZZTIME per target, and writes what fails there.
# Then the reliability class tests of capi_test at length (DAC_LONG=1: the
# linearizability race, configuration races, init window; several minutes).
FUZZTIME ?= 30s
LONG_TESTS := TestLinearizableContainer|TestConfigurationRaces|TestInitWindow|TestSettledMissesUnderChurn|TestUncountedReferencesC|TestUncountedReferencesSanitized
fuzz: $(LIB) ## run each fuzz target of container/ for FUZZTIME (default 30s), then the long reliability races
	@for f in $$($(GO) test -list '^Fuzz' ./container/ | grep '^Fuzz'); do \
	  echo "== $$f for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./container/ || exit 1; \
	done
	@echo "== capi_test reliability races, long (DAC_LONG=1)"
	DAC_LONG=1 $(GO) test -count=1 -timeout 60m -v -run '^($(LONG_TESTS))$$' ./capi_test/

# Every suite runs even when an earlier one failed; the summary at the end
# says what passed, failed and was skipped in each, and the exit status is
# the worst suite's. `scripts/run-tests go` runs one suite.
test: ## everything that must pass: the lint, go, python and torch suites, then a summary
	@MAKE="$(MAKE)" GO="$(GO)" LINT_CHECKS="$(LINT_CHECKS)" PYTHON="$(PYTHON)" $(PYTHON) scripts/run-tests

# make install [PREFIX=/usr/local] [DESTDIR=/staging]: as sqlite or zlib,
# the headers, libdistautograd.so.X.Y.Z with its .so.X and .so links, a
# pkg-config file (pkg-config --cflags --libs distautograd) and a CMake
# package (find_package(distautograd), target distautograd::distautograd);
# where the torch backend was built, its shim and every implementation
# beside the library, and the distautograd-torch launcher in BINDIR.
PREFIX       ?= /usr/local
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
BINDIR       ?= $(PREFIX)/bin
DATADIR      ?= $(PREFIX)/share/distautograd
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
CMAKEDIR     ?= $(LIBDIR)/cmake/distautograd
# The folders install made (scripts/install-dirs): uninstall removes those.
INSTALL_MANIFEST := $(DATADIR)/installed-folders
# ldconfig runs for a LIBDIR the loader's configuration covers, and only
# then (scripts/loader-covers); never for a staged install.
LDCONFIG     ?= ldconfig
LD_SO_CONF   ?= /etc/ld.so.conf

# The .pc file names libdir and includedir through ${prefix} where they are
# under it (what pkg-config --define-prefix and sysroots expect); the CMake
# file finds them relative to itself, so a moved tree still works.
INSTALL_SUBST = sed -e 's|@PREFIX@|$(PREFIX)|g' \
  -e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|g' \
  -e 's|@INCLUDEDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|g' \
  -e "s|@CMAKE_TO_LIBDIR@|$$(realpath -m --relative-to=$(CMAKEDIR) $(LIBDIR))|g" \
  -e "s|@CMAKE_TO_INCLUDEDIR@|$$(realpath -m --relative-to=$(CMAKEDIR) $(INCLUDEDIR))|g" \
  -e 's|@VERSION@|$(VERSION)|g' -e 's|@MAJOR@|$(MAJOR)|g' \
  -e 's|@SONAME@|$(SONAME)|g' -e 's|@REALNAME@|$(REALNAME)|g'

install: all ## install headers, library, pkg-config and CMake files, the torch backend and its launcher: PREFIX (/usr/local), DESTDIR
	@scripts/install-dirs create "$(DESTDIR)" $(INSTALL_MANIFEST) $(INCLUDEDIR) $(LIBDIR) $(PKGCONFIGDIR) $(CMAKEDIR) $(DATADIR)
	install -m 644 include/distautograd.h include/distautograd.hpp $(DESTDIR)$(INCLUDEDIR)/
	install -m 755 $(BUILD)/$(REALNAME) $(DESTDIR)$(LIBDIR)/$(REALNAME)
	ln -sf $(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libdistautograd.so
	@echo 'write $(DESTDIR)$(PKGCONFIGDIR)/distautograd.pc'; $(INSTALL_SUBST) packaging/distautograd.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/distautograd.pc
	@echo 'write $(DESTDIR)$(CMAKEDIR)/distautograd-config.cmake'; $(INSTALL_SUBST) packaging/distautograd-config.cmake.in > $(DESTDIR)$(CMAKEDIR)/distautograd-config.cmake
	@echo 'write $(DESTDIR)$(CMAKEDIR)/distautograd-config-version.cmake'; $(INSTALL_SUBST) packaging/distautograd-config-version.cmake.in > $(DESTDIR)$(CMAKEDIR)/distautograd-config-version.cmake
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/distautograd.pc $(DESTDIR)$(CMAKEDIR)/distautograd-config*.cmake
	@# The implementations are listed when this runs: `all` has just built them.
	@impls=$$(ls $(BUILD)/libdistautograd_torch_impl*.so 2>/dev/null); \
	if [ -z "$$impls" ]; then echo "install: no torch backend built (it needs libtorch-dev): the library only"; exit 0; fi; \
	set -ex; \
	scripts/install-dirs create "$(DESTDIR)" $(INSTALL_MANIFEST) $(BINDIR); \
	install -m 755 $(TORCH_SHIM) $$impls $(DESTDIR)$(LIBDIR)/; \
	install -m 644 $(LAUNCHER_PY) $(DESTDIR)$(DATADIR)/; \
	$(call LAUNCHER_SUBST,$(DATADIR),$(LIBDIR)) > $(DESTDIR)$(BINDIR)/distautograd-torch; \
	chmod 755 $(DESTDIR)$(BINDIR)/distautograd-torch
	@if [ -n "$(DESTDIR)" ]; then echo "staged in $(DESTDIR): no ldconfig (the system that installs the tree runs it)"; \
	elif scripts/loader-covers $(LIBDIR) $(LD_SO_CONF); then echo $(LDCONFIG); $(LDCONFIG) || echo "$(LDCONFIG) failed: run it as root"; \
	else echo "$(LIBDIR) is not in the loader's configuration ($(LD_SO_CONF)): no ldconfig; programs find the library through an rpath or LD_LIBRARY_PATH=$(LIBDIR)"; fi

uninstall: ## remove what make install put under PREFIX (the same PREFIX, DESTDIR), and the folders it made
	rm -f $(DESTDIR)$(INCLUDEDIR)/distautograd.h $(DESTDIR)$(INCLUDEDIR)/distautograd.hpp
	rm -f $(DESTDIR)$(LIBDIR)/$(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libdistautograd.so
	rm -f $(DESTDIR)$(LIBDIR)/$(notdir $(TORCH_SHIM)) $(DESTDIR)$(LIBDIR)/libdistautograd_torch_impl*.so
	rm -f $(DESTDIR)$(BINDIR)/distautograd-torch $(addprefix $(DESTDIR)$(DATADIR)/,$(notdir $(LAUNCHER_PY)))
	@# What Python wrote beside the launcher's code when it ran (any Python's).
	rm -f $(patsubst %.py,$(DESTDIR)$(DATADIR)/__pycache__/%.*.pyc,$(notdir $(LAUNCHER_PY)))
	@rmdir $(DESTDIR)$(DATADIR)/__pycache__ 2>/dev/null || true
	rm -f $(DESTDIR)$(PKGCONFIGDIR)/distautograd.pc
	rm -f $(DESTDIR)$(CMAKEDIR)/distautograd-config.cmake $(DESTDIR)$(CMAKEDIR)/distautograd-config-version.cmake
	@scripts/install-dirs remove "$(DESTDIR)" $(INSTALL_MANIFEST)

# The Python package as a platform wheel with the library inside, built by
# python_bindings/wheel_backend.py (standard library only; pip uses the same
# backend for `pip install ./python_bindings`). Installing it needs nothing
# else: `python -m pip install build/distautograd-*.whl` in any venv.
WHEEL_DIR ?= $(BUILD)
wheel: $(LIB) ## build/distautograd-VERSION-py3-none-manylinux_X_Y_ARCH.whl, the library (and the torch backend) inside
	$(PYTHON) python_bindings/wheel_backend.py --library $(LIB) -o $(WHEEL_DIR)

# Debian's own Python is externally managed: point PYTHON at a venv's python.
install-python: wheel ## pip-install the wheel, offline: make install-python PYTHON=venv/bin/python
	$(PYTHON) -m pip install --no-index --force-reinstall --no-deps $(PIP_FLAGS) \
	  $$($(PYTHON) python_bindings/wheel_backend.py --library $(LIB) --name | sed 's|^|$(WHEEL_DIR)/|')

demo: $(LIB) ## a training runtime's worker, acted out in C
	@mkdir -p $(BUILD)
	$(CC) -std=c99 -Wall -Wextra -Werror -O2 -Iinclude examples/demo.c -L$(BUILD) -ldistautograd -Wl,-rpath,'$$ORIGIN' -lpthread -o $(BUILD)/demo
	$(BUILD)/demo

# Not part of `make test`: it times things. BENCH_FLAGS go to the driver
# (go run ./bench -h lists them), e.g. BENCH_FLAGS='-threads 1,2,4 -reps 9'.
# docs/benchmarks.md's tables and the headline ratios of README.md's Speed
# section are rewritten from build/bench.json, so they show what the last
# run measured, on which machine and when.
bench: all $(BUILD)/nooverlay/libdistautograd.so ## distautograd against the native component (C, C++, Python, torch levels); writes build/bench.json, rewrites docs/benchmarks.md's tables and README.md's Speed section
	GLOG_minloglevel=2 $(GO) run ./bench -python $(PYTHON) $(BENCH_FLAGS)
	$(TORCH_BENCH)
	$(GO) run ./bench -from $(BUILD)/bench.json -tables docs/benchmarks.md -headline README.md

# Go's own tests of cgo, callbacks, scheduling, preemption and system calls
# (the runtime's, with the testprog/testprogcgo programs they build, and
# cmd/cgo/internal's test, testcshared and testcarchive), with the overlay
# of the runtime and without: fails if one fails only with it
# (scripts/test-go-runtime; docs/go-runtime.md says how long it takes).
# Then the responsiveness battery in full (TestResponsiveness with
# DAC_RESPONSIVENESS=full: every pattern; make test runs a few), and the
# other tests that compare the library's timings with build/nooverlay's
# (BUILD_COMPARISONS, capi_test's comparisonsOfBuilds; make test runs them
# too, never in parallel with other tests), alone in one go test: each
# runs whatever the others' results.
BUILD_COMPARISONS := TestRuntimeBusyThreads TestRuntimeStress TestTimedPromisesHoldBesideLoopingCallers
test-go-runtime: $(OVERLAY) $(LIB) $(BUILD)/nooverlay/libdistautograd.so ## Go's runtime and cgo tests with the runtime overlay vs without: none may fail only with it; the responsiveness battery in full, and the other comparisons of the two builds
	@status=0; scripts/test-go-runtime $(GO) $(dir $(OVERLAY)) $(BUILD)/test-go-runtime || status=1; \
	tests='^(TestResponsiveness|$(subst $(eval) ,|,$(BUILD_COMPARISONS)))$$'; \
	echo "DAC_RESPONSIVENESS=full $(GO) test -count=1 -timeout 90m -v -run '$$tests' ./capi_test/"; \
	DAC_RESPONSIVENESS=full $(GO) test -count=1 -timeout 90m -v -run "$$tests" ./capi_test/ || status=1; \
	exit $$status

generate: ## regenerate from include/distautograd.h: _abi.py (ctypes prototypes, Status), container/codes.go, capi_status.h; from container/'s types: capi_layout.h; from container/'s constants: the header's defaults and limits (and _abi.py's)
	$(GO) run ./cmd/dacgen

clean: ## remove build outputs
	rm -rf $(BUILD)
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# ---- torch backend (torch_backend/): torch's own distributed autograd on distautograd ----
# The shim (libc only) is what LD_PRELOAD names; an implementation per
# served torch links that libtorch and libdistautograd, built against that
# torch's own headers, and the shim loads the one for the torch it finds
# (by libtorch_cpu's soname) on the first container call. Each served torch
# whose libtorch-dev the machine has (Debian 12's 1.13, Debian 13's 2.6) is
# built here, with the machine's g++; torch 2.6 on a machine without it
# (Debian 12) is built in a Debian 13 root that scripts/torch-root makes
# (make torch-root), when it is there. Without any, only the shim is built
# (it then says so and leaves torch native).
TORCH_SHIM  := $(BUILD)/libdistautograd_torch.so
# The A/B build of the shim (shim.c: DAT_AB), beside the implementations
# it loads: bench/torchab.py and torchbench.py --aa preload it. Never
# installed.
TORCH_AB_SHIM := $(BUILD)/libdistautograd_torch_ab.so
# The served versions are symbols.h's (the shim's list).
TORCH_VERSIONS := $(shell sed -n 's/^\#define DAT_TORCH_VERSIONS(X) //p' torch_backend/symbols.h | grep -o '[0-9.]*')
TORCH_IMPL   = $(BUILD)/libdistautograd_torch_impl_$(1).so
TORCH_LIBDIR ?= /usr/lib/x86_64-linux-gnu
TORCH_INC   ?= /usr/include/torch
# The served torches this machine's libtorch-dev has: libtorch_cpu.so.V and
# the RPC headers.
HOST_TORCHES := $(foreach v,$(TORCH_VERSIONS),$(shell test -e $(TORCH_LIBDIR)/libtorch_cpu.so.$(v) && test -d $(TORCH_INC)/csrc/distributed/rpc && echo $(v)))
HAVE_LIBTORCH := $(filter 1.13,$(HOST_TORCHES))
# The launcher: python_bindings/distautograd/_launch.py (standard library
# only) and what it imports, run by a script that make writes with the
# folders of the checkout (build/distautograd-torch) or of the install.
LAUNCHER_PY  := python_bindings/distautograd/_launch.py python_bindings/distautograd/_process.py
LAUNCHER     := $(BUILD)/distautograd-torch
LAUNCHER_SUBST = sed -e 's|@LAUNCHERDIR@|$(1)|g' -e 's|@LIBDIR@|$(2)|g' packaging/distautograd-torch.in
# torch 2.6: Debian 13 (trixie)'s python3-torch, in a root under
# $DISTAUTOGRAD_TORCH_ROOTS (default ~/.cache/distautograd/roots).
TORCH_ROOT_RELEASE := trixie
TORCH_ROOT  := $(shell scripts/torch-root path $(TORCH_ROOT_RELEASE) 2>/dev/null)
ROOT_TORCHES := $(if $(TORCH_ROOT),$(filter-out $(HOST_TORCHES),2.6))
TORCH_IMPLS := $(foreach v,$(HOST_TORCHES) $(ROOT_TORCHES),$(call TORCH_IMPL,$(v)))
IMPL_SOURCES := torch_backend/impl.cpp torch_backend/say.h torch_backend/symbols.h torch_backend/impl.map include/distautograd.h $(LIB)
# torch 1.13 logs through glog (its impl writes two of torch's log lines
# through it); Debian's torch 2.6 is built without glog (c10 logs itself).
IMPL_LIBS_1.13 := -lglog
IMPL_FLAGS  = -std=c++20 -O2 -fPIC -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude \
  -DDAT_TORCH_VERSION='"$(1)"' -isystem /usr/include/torch/csrc/api/include -shared torch_backend/impl.cpp \
  -Wl,--version-script=torch_backend/impl.map -Wl,-z,now -Wl,--no-undefined -Wl,-rpath,'$$ORIGIN' \
  -L$(BUILD) -ldistautograd -l:libtorch_cpu.so.$(1) -l:libc10.so.$(1) $(IMPL_LIBS_$(1))
.PHONY: torch-ab torch-backend torch-root test-torch test-torch-versions bench-torch bench-torch-memory
torch-backend: $(TORCH_SHIM) $(TORCH_AB_SHIM) $(LAUNCHER) $(TORCH_IMPLS) ## build/libdistautograd_torch.so (and its A/B build), build/distautograd-torch and an implementation per served torch found (its libtorch-dev here; 2.6 on Debian 12: make torch-root)
$(LAUNCHER): packaging/distautograd-torch.in $(LAUNCHER_PY)
	@mkdir -p $(BUILD)/launcher
	@echo "write $@"
	@cp $(LAUNCHER_PY) $(BUILD)/launcher/
	@$(call LAUNCHER_SUBST,$(CURDIR)/$(BUILD)/launcher,$(CURDIR)/$(BUILD)) > $@.tmp
	@chmod 755 $@.tmp && mv $@.tmp $@
$(TORCH_SHIM): torch_backend/shim.S torch_backend/shim.c torch_backend/say.h torch_backend/symbols.h torch_backend/shim.map
	@mkdir -p $(BUILD)
	@echo "cc $@"
	@$(CC) -std=gnu11 -O2 -fPIC -Wall -Wextra -Werror -shared -o $@ torch_backend/shim.S torch_backend/shim.c \
	  -Wl,--version-script=torch_backend/shim.map -Wl,-z,now -Wl,-z,noexecstack
torch-ab: $(TORCH_AB_SHIM) $(TORCH_IMPLS) ## build/libdistautograd_torch_ab.so: the shim that switches one process between torch's container and the backend, for bench/torchab.py and torchbench.py --aa
$(TORCH_AB_SHIM): torch_backend/shim.S torch_backend/ab.S torch_backend/shim.c torch_backend/say.h torch_backend/symbols.h torch_backend/shim.map
	@mkdir -p $(BUILD)
	@echo "cc $@"
	@$(CC) -std=gnu11 -O2 -fPIC -Wall -Wextra -Werror -DDAT_AB -shared -o $@ torch_backend/shim.S torch_backend/ab.S \
	  torch_backend/shim.c -Wl,--version-script=torch_backend/shim.map -Wl,-z,now -Wl,-z,noexecstack
define HOST_IMPL_RULE
$(call TORCH_IMPL,$(1)): $$(IMPL_SOURCES)
	@echo "g++ $$@ (torch $(1))"
	@$$(CXX) $$(call IMPL_FLAGS,$(1)) -o $$@
endef
$(foreach v,$(HOST_TORCHES),$(eval $(call HOST_IMPL_RULE,$(v))))
# Compiled and linked inside the root by its own g++, against its own
# headers, libstdc++ and libtorch; the checkout is mounted there at its path.
ifeq ($(filter 2.6,$(HOST_TORCHES)),)
$(call TORCH_IMPL,2.6): $(IMPL_SOURCES) $(if $(TORCH_ROOT),$(TORCH_ROOT)/.distautograd-root) scripts/torch-root
	@test -n "$(TORCH_ROOT)" || { echo "no torch 2.6 root: make torch-root"; exit 1; }
	@echo "g++ $@ (torch 2.6, in the Debian 13 root)"
	@scripts/torch-root run $(TORCH_ROOT_RELEASE) --bind $(CURDIR) --cd $(CURDIR) -- g++ $(call IMPL_FLAGS,2.6) -o $@
endif
torch-root: ## make (or reuse) the Debian 13 root with torch 2.6 (scripts/torch-root; needs root and debootstrap; about 2 GB)
	scripts/torch-root make $(TORCH_ROOT_RELEASE)
test-torch: all $(BUILD)/testing/libdistautograd.so ## the torch backend against real torch: the 3-worker job native vs backend, guard, kill, reaper, fork, launcher, id exhaustion and the cap (the testing build), faults across network namespaces (needs root)
	@mkdir -p $(RESULTS)
	@$(PYTHON) scripts/unittest_progress.py --each-test --json $(RESULTS)/torch.json -s torch_backend/tests -t .
# Each served torch: 1.13 here, 2.6 in the Debian 13 root (made when
# missing: needs root and debootstrap). TORCH_VERSIONS_FLAGS go to the
# script: --no-suites leaves torch's own suites out, --versions 2.6 one torch.
test-torch-versions: all ## the torch backend's tests and torch's own dist-autograd suites (133 tests a torch) under it, for every served torch (torch 1.13 here, 2.6 in a Debian 13 root)
	$(PYTHON) scripts/test-torch-versions $(TORCH_VERSIONS_FLAGS)
bench-torch: all ## torch's distributed autograd natively and under the backend, pairs of processes taking turns, for each served torch found (2.6 in its root); adds level "torch" rows to build/bench.json (run after make bench)
	$(TORCH_BENCH)

# pytorch issue 61920's job (bench/torchmem.py; TORCH_MEMORY_FLAGS go to
# it, e.g. '--passes 800' or '--env MALLOC_ARENA_MAX=1'): this machine's torch 1.13,
# then torch 2.6 in its root. Nothing is asserted.
bench-torch-memory: all ## RSS growth per pass of pytorch issue 61920's job (a model behind an RRef, 20 rpc_async forwards and a backward a pass), natively and under the backend, per process, for each served torch found; writes build/torchmem-VERSION.json
	@if [ -n "$(HAVE_LIBTORCH)" ]; then $(PYTHON) bench/torchmem.py --torch 1.13 $(TORCH_MEMORY_FLAGS); \
	else echo "bench-torch-memory: no libtorch-dev: no torch 1.13 figures"; fi
	@if [ -n "$(TORCH_ROOT)" ]; then $(PYTHON) bench/torchmem.py --torch 2.6 $(TORCH_MEMORY_FLAGS); \
	else echo "bench-torch-memory: no torch 2.6 root (make torch-root): no torch 2.6 figures"; fi

# The torch rows: this machine's torch 1.13, then torch 2.6 in its root.
# Each torch's rows, then its training step by thread (bench/torchthreads.py;
# TORCH_THREADS_FLAGS go to it).
define TORCH_BENCH
@if [ -n "$(HAVE_LIBTORCH)" ]; then $(PYTHON) bench/torchbench.py $(TORCH_BENCH_FLAGS) && \
  $(PYTHON) bench/torchthreads.py $(TORCH_THREADS_FLAGS); \
else echo "bench: no libtorch-dev: no torch 1.13 rows"; fi
@if [ -n "$(TORCH_ROOT)" ]; then \
  echo "scripts/torch-root run $(TORCH_ROOT_RELEASE) ... python3 bench/torchbench.py $(TORCH_BENCH_FLAGS)"; \
  scripts/torch-root run $(TORCH_ROOT_RELEASE) --bind $(CURDIR) --cd $(CURDIR) -- python3 bench/torchbench.py $(TORCH_BENCH_FLAGS) && \
  scripts/torch-root run $(TORCH_ROOT_RELEASE) --bind $(CURDIR) --cd $(CURDIR) -- python3 bench/torchthreads.py $(TORCH_THREADS_FLAGS); \
else echo "bench: no torch 2.6 root (make torch-root): no torch 2.6 rows"; fi
endef
