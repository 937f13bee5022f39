package abi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository root, from this package's directory.
const root = ".."

// librarySources are what make builds build/libdistautograd.so and
// build/cgo_generated.h from (the Makefile's GOSRC and CSRC, tests aside).
var librarySources = []string{"*.go", "container/*.go", "capi.c", "capi_internal.h", "capi_status.h", "include/distautograd.h", "libdistautograd.map", "go.mod", "go.sum"}

// built fails the test unless make has built the library and cgo's header
// from the current sources: the contract of a stale build is not the one
// under test. (Like capi_test, these tests never build: `make test` does.)
func built(t *testing.T) {
	t.Helper()
	for _, out := range []string{libPath, cgoHeader} {
		st, err := os.Stat(out)
		if err != nil {
			t.Fatalf("%v: run make first", err)
		}
		for _, pattern := range librarySources {
			matches, _ := filepath.Glob(filepath.Join(root, pattern))
			for _, src := range matches {
				if strings.HasSuffix(src, "_test.go") {
					continue
				}
				if s, err := os.Stat(src); err == nil && s.ModTime().After(st.ModTime()) {
					t.Fatalf("%s is older than %s: run make first", out, src)
				}
			}
		}
	}
}

// inCI reports whether the tests run in CI, where a missing tool is a failure.
func inCI() bool { return os.Getenv("CI") == "true" }

// need returns the path of a tool the test needs: without it the test is
// skipped, loudly, outside CI and fails in CI.
func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err == nil {
		return p
	}
	if inCI() {
		t.Fatalf("%s is required in CI: %v", tool, err)
	}
	os.Stderr.WriteString("SKIP " + t.Name() + ": " + tool + " not found (this test runs in CI)\n")
	t.Skipf("%s not found: %v", tool, err)
	return ""
}
