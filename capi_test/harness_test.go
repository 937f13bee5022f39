// Package capi_test tests the built library, build/libdistautograd.so,
// through its public header, from C and C++ programs that it compiles, runs
// and reads the output of. It never builds the library itself: run make first.
package capi_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"distautograd/abi"
	"distautograd/internal/fresh"
)

// repoRoot returns the repository root: the nearest directory at or above the
// test's working directory (the package directory under go test) whose go.mod
// declares module distautograd.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module distautograd\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of module distautograd above the working directory")
		}
		dir = parent
	}
}

// requireLibrary fails the test unless the library at rel (relative to the
// repository root) exists and is newer than its sources, and returns its
// absolute path. A test of a stale library would test the wrong code.
func requireLibrary(t testing.TB, rel, makeTarget string) string {
	t.Helper()
	root := repoRoot(t)
	if err := fresh.Check(root, rel, makeTarget); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, rel)
}

// cFlags are the flags every C test program compiles with.
var cFlags = []string{"-std=c99", "-Wall", "-Wextra", "-Werror", "-pthread"}

// buildC compiles the C source src (relative to capi_test/, e.g. "c/ops.c")
// against include/ and build/libdistautograd.so, with extraFlags after the
// usual ones, and returns the program's path (in the test's temporary
// directory). The program finds the library through its RUNPATH, so
// LD_LIBRARY_PATH can point a run at another build (build/testing).
func buildC(t testing.TB, src string, extraFlags ...string) string {
	t.Helper()
	return buildWith(t, "gcc", cFlags, src, extraFlags)
}

func buildWith(t testing.TB, compiler string, flags []string, src string, extraFlags []string) string {
	t.Helper()
	root := repoRoot(t)
	requireLibrary(t, "build/libdistautograd.so", "")
	cc, err := exec.LookPath(compiler)
	if err != nil {
		t.Fatalf("%s is needed to build the C/C++ tests: %v", compiler, err)
	}
	build := filepath.Join(root, "build")
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), filepath.Ext(src)))
	args := append([]string{}, flags...)
	args = append(args, "-I", filepath.Join(root, "include"), "-I", filepath.Join(root, "capi_test", "c"))
	args = append(args, extraFlags...)
	args = append(args, "-o", bin, filepath.Join(root, "capi_test", src),
		"-L", build, "-ldistautograd", "-Wl,--enable-new-dtags,-rpath,"+build)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(args, " "), err, out)
	}
	return bin
}

// result is what a run of a test program left.
type result struct {
	Stdout, Stderr string
	Code           int // exit status; -1 if killed by a signal
}

// runTimeout bounds every run: a hang is a failure, not a stuck test run.
const runTimeout = 90 * time.Second

// runEnv runs bin with args, env added to the test's environment, and returns
// what it left, whatever its exit status (a crash is reported as a failure).
func runEnv(t testing.TB, env []string, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(append(os.Environ(), "GLOG_minloglevel=2"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var stacks string
	cmd.Cancel = func() error {
		stacks = threadStacks(cmd.Process.Pid)
		return cmd.Process.Kill()
	}
	err := cmd.Run()
	r := result{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s %v did not finish in %v\nstdout:\n%s\nstderr:\n%s\nits threads when it was killed:\n%s", filepath.Base(bin), args, runTimeout, r.Stdout, r.Stderr, stacks)
	case errors.As(err, &exit):
		r.Code = exit.ExitCode()
		if r.Code < 0 {
			t.Errorf("%s %v crashed: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), args, err, r.Stdout, r.Stderr)
		}
	case err != nil:
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return r
}

var (
	versionOnce sync.Once
	version     abi.Version
	versionErr  error
)

// headerVersion returns include/distautograd.h's version, as package abi
// reads it: what the programs' version lines must show, whatever the
// release.
func headerVersion(t testing.TB) abi.Version {
	t.Helper()
	versionOnce.Do(func() {
		version, versionErr = abi.HeaderVersion(filepath.Join(repoRoot(t), "include", "distautograd.h"))
	})
	if versionErr != nil {
		t.Fatal(versionErr)
	}
	return version
}

// threadStacks returns the stack of every thread of process pid, as gdb
// prints them, for the report of a program that hung; or why not.
func threadStacks(pid int) string {
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		return "(no gdb on PATH: no stacks)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gdb, "-p", strconv.Itoa(pid), "-batch", "-nx",
		"-ex", "set pagination off", "-ex", "thread apply all bt").CombinedOutput()
	var keep []string
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "[New LWP") {
			keep = append(keep, line)
		}
	}
	if err != nil {
		keep = append(keep, "(gdb: "+err.Error()+")")
	}
	return strings.Join(keep, "\n")
}

// run runs bin with args, fails the test unless it exits with status 0, and
// returns its standard output.
func run(t testing.TB, bin string, args ...string) string {
	t.Helper()
	return runOK(t, nil, bin, args...)
}

// runOK is run with env added to the environment.
func runOK(t testing.TB, env []string, bin string, args ...string) string {
	t.Helper()
	r := runEnv(t, env, bin, args...)
	if r.Code != 0 {
		t.Fatalf("%s %v exited with status %d\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), args, r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

var (
	handleLine = regexp.MustCompile(`^handle (\w+) = (0x[0-9a-f]+)$`)
	hexNumber  = regexp.MustCompile(`0x[0-9a-f]+`)
)

// transcript normalizes a program's output for comparison: each value named
// by a "handle NAME = 0x..." line becomes {NAME} wherever it appears.
func transcript(out string) string {
	names := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if m := handleLine.FindStringSubmatch(line); m != nil {
			names[m[2]] = "{" + m[1] + "}"
		}
	}
	return hexNumber.ReplaceAllStringFunc(out, func(h string) string {
		if name, ok := names[h]; ok {
			return name
		}
		return h
	})
}

// assertTranscript compares a program's output, normalized, with want; both
// are trimmed of the blank lines and indentation around them, so want can be
// a raw string literal indented with the test.
func assertTranscript(t testing.TB, want, out string) bool {
	t.Helper()
	w, g := trimLines(want), trimLines(transcript(out))
	if w == g {
		return true
	}
	t.Errorf("the transcript differs (-want +got):\n%s", lineDiff(strings.Split(w, "\n"), strings.Split(g, "\n")))
	return false
}

// lineDiff returns a line diff of a and b from their longest common
// subsequence: "  " common, "- " only in a, "+ " only in b.
func lineDiff(a, b []string) string {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			out.WriteString("  " + a[i] + "\n")
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			out.WriteString("- " + a[i] + "\n")
			i++
		default:
			out.WriteString("+ " + b[j] + "\n")
			j++
		}
	}
	return out.String()
}

func trimLines(s string) string {
	var lines []string
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

func itoa(n int) string { return strconv.Itoa(n) }
