package capi_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCppAPI runs capi_test/cpp/api_test.cpp, the tests of distautograd.hpp,
// against the built library: one process per scenario, since init() happens
// once per process.
func TestCppAPI(t *testing.T) {
	requireLibrary(t, "build/testing/libdistautograd.so", "testing-lib ")
	bin := cppBuild(t, t.TempDir(), "api_test", "api_test.cpp", "c++17", cppAgainstLibrary(t)...)
	testingLib := "LD_LIBRARY_PATH=" + cppAbs(t, "build/testing")
	for _, sc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"before_init", nil, []string{"before_init"}},
		{"main", nil, []string{"main"}},
		{"worker_32768", nil, []string{"worker", "32768"}},
		{"worker_40000", nil, []string{"worker", "40000"}},
		{"worker_65535", nil, []string{"worker", "65535"}},
		// The testing build starts the counters near max_id.
		{"exhausted", []string{testingLib}, []string{"exhausted"}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			r := runEnv(t, sc.env, bin, sc.args...)
			if r.Code != 0 || !strings.HasPrefix(r.Stdout, "PASS ") {
				t.Fatalf("api_test %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(sc.args, " "), r.Code, r.Stdout, r.Stderr)
			}
			t.Log(strings.TrimSpace(r.Stdout))
		})
	}
}

// TestCppAPISanitized runs the main scenario of api_test.cpp built with
// AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer against the
// library built with go build -asan: ContextPtr's per-thread free lists of
// blocks (a block made on one thread is freed on another, and each thread's
// list goes back to the heap when it ends) are checked there.
func TestCppAPISanitized(t *testing.T) {
	t.Parallel()
	env := sanitizedEnv(t)
	bin := cppBuild(t, t.TempDir(), "api_test_asan", "api_test.cpp", "c++17", append(cppAgainstLibrary(t), sanitizerFlags...)...)
	r := runEnv(t, env, bin, "main")
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "PASS ") {
		t.Fatalf("api_test main (sanitized): exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	assertNoSanitizerReport(t, r.Stderr)
}

// TestCppSignatures compiles capi_test/cpp/signatures_check.cpp, whose
// static_asserts hold distautograd.hpp to the native member function
// signatures (as native_decls.hpp restates them), in C++14 and C++17.
func TestCppSignatures(t *testing.T) {
	gxx := cppCompiler(t)
	for _, std := range []string{"c++14", "c++17"} {
		t.Run(std, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"-std=" + std, "-fsyntax-only", "-I", cppAbs(t, "include")}, cppWarnings...)
			args = append(args, cppAbs(t, "capi_test/cpp/signatures_check.cpp"))
			if out, err := exec.Command(gxx, args...).CombinedOutput(); err != nil {
				t.Fatalf("g++ %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}
