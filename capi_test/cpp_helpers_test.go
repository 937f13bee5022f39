package capi_test

// Helpers of the C++ tests (cpp_*_test.go) that harness_test.go does not
// have: compile with a chosen C++ standard and -pedantic, and against the
// native component instead of the library. Their names start with cpp so
// that they never collide with the package's other helpers.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cppAbs returns the absolute path of a path relative to the repository root.
func cppAbs(t *testing.T, rel string) string {
	t.Helper()
	return filepath.Join(repoRoot(t), rel)
}

// cppInCI reports whether the tests run in CI, where nothing may be skipped.
func cppInCI() bool { return os.Getenv("CI") == "true" }

// cppSkipOrFail skips the test outside CI, loudly (t.Skip, and a SKIP line
// on stderr, which `go test` shows without -v when it tests this package
// alone), and fails it in CI.
func cppSkipOrFail(t *testing.T, why string) {
	t.Helper()
	if cppInCI() {
		t.Fatalf("CI=true and %s", why)
	}
	os.Stderr.WriteString("SKIP " + t.Name() + ": " + why + " (CI runs it)\n")
	t.Skip(why)
}

// cppCompiler returns the path of g++, which the C++ tests need.
func cppCompiler(t *testing.T) string {
	t.Helper()
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Fatalf("g++ is needed to build the C++ tests: %v", err)
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
// include/distautograd.hpp and build/libdistautograd.so (which must be up
// to date). The run path is a RUNPATH, so LD_LIBRARY_PATH can point a run at
// another build of the same library (build/testing).
func cppAgainstLibrary(t *testing.T) []string {
	t.Helper()
	requireLibrary(t, "build/libdistautograd.so", "")
	lib := cppAbs(t, "build")
	return []string{"-I", cppAbs(t, "include"), "-L", lib, "-ldistautograd", "-Wl,--enable-new-dtags,-rpath," + lib}
}
