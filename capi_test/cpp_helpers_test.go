package capi_test

// Helpers of the C++ tests (cpp_*_test.go): build the library, compile a C++
// program against include/ and it, run the program. Their names start with
// cpp so that they never collide with the package's other helpers.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// cppRoot is the repository root, from this package's directory.
const cppRoot = ".."

var (
	cppMakeMu   sync.Mutex
	cppMakeDone = map[string]error{}
	cppMakeOut  = map[string][]byte{}
)

// cppMake runs `make TARGET` in the repository root once per test run (under
// `make test` the library is up to date and it does nothing). An flock on
// build/.make.lock keeps test packages that run at the same time from
// building into build/ together.
func cppMake(t *testing.T, target string) {
	t.Helper()
	cppMakeMu.Lock()
	defer cppMakeMu.Unlock()
	err, done := cppMakeDone[target]
	if !done {
		var out []byte
		out, err = cppRunMake(target)
		cppMakeDone[target], cppMakeOut[target] = err, out
	}
	if err != nil {
		t.Fatalf("make %s: %v\n%s", target, err, cppMakeOut[target])
	}
}

func cppRunMake(target string) ([]byte, error) {
	if err := os.MkdirAll(filepath.Join(cppRoot, "build"), 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(cppRoot, "build", ".make.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	cmd := exec.Command("make", "--no-print-directory", "-s", target)
	cmd.Dir = cppRoot
	// `make test` passes its jobserver down in MAKEFLAGS; this make is its own.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MAKEFLAGS=") && !strings.HasPrefix(kv, "MFLAGS=") && !strings.HasPrefix(kv, "MAKELEVEL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.Bytes(), err
}

// cppAbs returns the absolute path of a path relative to the repository root.
func cppAbs(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(cppRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// cppInCI reports whether the tests run in CI, where nothing may be skipped.
func cppInCI() bool { return os.Getenv("CI") == "true" }

// cppSkipOrFail skips the test, loudly (on stderr too, which `go test`
// shows without -v), outside CI, and fails it in CI.
func cppSkipOrFail(t *testing.T, why string) {
	t.Helper()
	if cppInCI() {
		t.Fatalf("CI=true and %s", why)
	}
	os.Stderr.WriteString("SKIP " + t.Name() + ": " + why + " (CI runs it)\n")
	t.Skip(why)
}

// cppCompiler returns g++, or skips (fails in CI) without one.
func cppCompiler(t *testing.T) string {
	t.Helper()
	gxx, err := exec.LookPath("g++")
	if err != nil {
		cppSkipOrFail(t, "no g++: "+err.Error())
	}
	return gxx
}

// cppWarnings are the flags every C++ test program compiles with.
var cppWarnings = []string{"-Wall", "-Wextra", "-Werror", "-pedantic"}

// cppBuild compiles one C++ source of capi_test/cpp into dir/out with the
// given language standard and extra arguments (include paths, libraries),
// and returns the program's path.
func cppBuild(t *testing.T, dir, out, src, std string, extra ...string) string {
	t.Helper()
	gxx := cppCompiler(t)
	bin := filepath.Join(dir, out)
	args := append([]string{"-std=" + std, "-O0", "-g0"}, cppWarnings...)
	args = append(args, "-o", bin, filepath.Join(cppAbs(t, "capi_test/cpp"), src))
	args = append(args, extra...)
	args = append(args, "-pthread")
	cmd := exec.Command(gxx, args...)
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("g++ %s: %v\n%s", strings.Join(args, " "), err, o)
	}
	return bin
}

// cppAgainstLibrary returns the g++ arguments that build against
// include/distautograd.hpp and build/libdistautograd.so. The run path is a
// RUNPATH, so LD_LIBRARY_PATH can point a run at another build of the same
// library (build/testing).
func cppAgainstLibrary(t *testing.T) []string {
	t.Helper()
	lib := cppAbs(t, "build")
	return []string{"-I", cppAbs(t, "include"), "-L", lib, "-ldistautograd", "-Wl,--enable-new-dtags,-rpath," + lib}
}

// cppResult is what a run of a test program left.
type cppResult struct {
	stdout, stderr string
	code           int
}

// cppRun runs bin with args; env entries are added to the test's environment.
func cppRun(t *testing.T, env []string, bin string, args ...string) cppResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), "GLOG_minloglevel=2"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cppResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
		if r.code < 0 {
			t.Errorf("%s %v: %v (a crash)\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), args, err, r.stdout, r.stderr)
		}
	case err != nil:
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return r
}
