package abi

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// root is the repository root, from this package's directory.
const root = ".."

var (
	buildOnce sync.Once
	buildErr  error
	buildOut  []byte
)

// built runs `make all` once per test run, so the tests read a library and a
// cgo header that match the sources (under `make test` it is a no-op). An
// flock on build/.make.lock keeps concurrent test packages from building
// into build/ at the same time.
func built(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() { buildOut, buildErr = runMake("all") })
	if buildErr != nil {
		t.Fatalf("make all: %v\n%s", buildErr, buildOut)
	}
}

func runMake(target string) ([]byte, error) {
	if err := os.MkdirAll(filepath.Join(root, "build"), 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(root, "build", ".make.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	cmd := exec.Command("make", "--no-print-directory", "-s", target)
	cmd.Dir = root
	// A make that runs `make test` passes its jobserver in MAKEFLAGS; this
	// one is independent.
	cmd.Env = withoutEnv(os.Environ(), "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.Bytes(), err
}

func withoutEnv(env []string, names ...string) []string {
	var out []string
next:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
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
