package abi

import (
	"os"
	"os/exec"
	"testing"

	"distautograd/internal/fresh"
)

// root is the repository root, from this package's directory.
const root = ".."

// built fails the test unless make has built the library and cgo's header
// from the current sources: the contract of a stale build is not the one
// under test. (Like capi_test, these tests never build: `make test` does.)
func built(t *testing.T) {
	t.Helper()
	for _, out := range []string{"build/libdistautograd.so", "build/cgo_generated.h"} {
		if err := fresh.Check(root, out, ""); err != nil {
			t.Fatal(err)
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
