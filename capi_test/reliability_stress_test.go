package capi_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What the sanitizers can and cannot do beside the Go runtime (tried on this
// project's Debian gcc 12 and Go 1.26):
//
//   - AddressSanitizer works: a C program built with -fsanitize=address runs
//     against the Go library, and against the library built with go build
//     -asan (make asan-lib), which instruments the Go code's loads and stores
//     and builds capi.c with -fsanitize=address: then a write by Go past the
//     end of a buffer the caller passed is reported (the canary below proves
//     it every run). LeakSanitizer works too (detect_leaks=1, the default):
//     the Go heap is not malloc's, so only C allocations are checked, and
//     none leak. No ASAN_OPTIONS are needed (handle_segv and
//     allow_user_segv_handler can stay at their defaults: Go installs its
//     handlers after ASan's and forwards the signals it does not own).
//   - UndefinedBehaviorSanitizer (-fsanitize=undefined) works on the C
//     program; capi.c inside the Go library is not built with it.
//   - ThreadSanitizer cannot be used: Go's synchronization is invisible to
//     it, so it reports races between a C.malloc and a C.free that Go orders
//     (a goroutine moving between threads); go test -race covers the Go side.
//   - MemorySanitizer needs every library built with it (libc included): not
//     tried.

// sanitizerFlags are the flags of the sanitized C test programs.
var sanitizerFlags = []string{"-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"}

// sanitizerEnv makes any report fatal and leak checking explicit.
var sanitizerEnv = []string{
	"ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=23",
	"UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1",
}

// inCI reports whether CI=true: what cannot run here is then a failure.
func inCI() bool { return os.Getenv("CI") == "true" }

// cannotSanitize says loudly why the sanitized half of a test cannot run:
// a failure under CI=true, a skip elsewhere (the unsanitized half has run).
func cannotSanitize(t *testing.T, why string) {
	t.Helper()
	msg := "the AddressSanitizer build cannot run here, so only the unsanitized program ran: " + why
	if inCI() {
		t.Fatal("CI=true and " + msg)
	}
	t.Log("!!! " + msg)
	t.Skip(msg)
}

// buildSanitized builds src with the sanitizers and returns the program and
// the environment that runs it against build/asan/libdistautograd.so;
// it skips (fails under CI) where that cannot be done, saying why.
func buildSanitized(t *testing.T, src string) (string, []string) {
	t.Helper()
	env := sanitizedEnv(t)
	return buildC(t, src, sanitizerFlags...), env
}

// runSanitized builds src with the sanitizers, runs it with args against
// build/asan/libdistautograd.so and requires a clean run: exit 0, no
// sanitizer report.
func runSanitized(t *testing.T, src string, args ...string) result {
	t.Helper()
	bin, env := buildSanitized(t, src)
	return runCleanSanitized(t, env, bin, args...)
}

// runCleanSanitized runs a sanitized program and requires exit 0 and no
// sanitizer report.
func runCleanSanitized(t *testing.T, env []string, bin string, args ...string) result {
	t.Helper()
	r := runEnv(t, env, bin, args...)
	require.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	assertNoSanitizerReport(t, r.Stderr)
	return r
}

// sanitizedEnv returns the environment that runs a sanitized program
// against build/asan/libdistautograd.so, once it has checked that one can
// be built and run here; it skips (fails under CI) where not, saying why.
func sanitizedEnv(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	if why, err := os.ReadFile(filepath.Join(root, "build", "asan", "UNAVAILABLE")); err == nil {
		cannotSanitize(t, "go build -asan failed: "+strings.TrimSpace(string(why)))
	}
	lib := requireLibrary(t, "build/asan/libdistautograd.so", "asan-lib ")
	// Probe the compiler first, so a missing libasan is a clear message.
	probe := filepath.Join(t.TempDir(), "probe.c")
	require.NoError(t, os.WriteFile(probe, []byte("int main(void) { return 0; }\n"), 0o644))
	if out, err := exec.Command("gcc", append(sanitizerFlags, "-o", probe+".bin", probe)...).CombinedOutput(); err != nil {
		cannotSanitize(t, "gcc -fsanitize=address,undefined does not link: "+strings.TrimSpace(string(out)))
	}
	return append([]string{"LD_LIBRARY_PATH=" + filepath.Dir(lib)}, sanitizerEnv...)
}

// assertNoSanitizerReport fails the test if stderr holds a sanitizer's report.
func assertNoSanitizerReport(t *testing.T, stderr string) {
	t.Helper()
	for _, mark := range []string{"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "WARNING: "} {
		assert.NotContains(t, stderr, mark)
	}
}

const stressVerdict = `
	dac_cleanup_flush(60000, &pending) -> DAC_OK
	unexpected statuses = 0
	every operation ran: yes
	context ids unique and of worker 3: yes (some)
	message ids unique and of worker 3: yes (some)
	num_contexts = 0
	live_handles = 0
	cleanup: delivered = sent: yes, own contexts' messages among them: yes, failed 0, dropped 0, pending 0
`

// 8 pthreads do mixed operations for 2 seconds (see c/stress.c): contexts
// made on one thread and released from another (release_if_present twice),
// retrieves of others' ids, message ids, get-or-create of other workers' ids
// that all threads race for, stale current ids, extra references, a flaky
// cleanup sender. Every status is one its operation allows; every id is
// unique; nothing is left: no context, no live handle, no pending message.
func TestStress(t *testing.T) {
	t.Parallel()
	r := runEnv(t, nil, buildC(t, "c/stress.c"), "8", "2")
	require.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	t.Log(strings.TrimSpace(r.Stderr))
	assertTranscript(t, stressVerdict, r.Stdout)
}

// The same under AddressSanitizer, UndefinedBehaviorSanitizer and
// LeakSanitizer, the program and the library (go build -asan) both
// instrumented. First the canary: a buffer the library writes past must be
// reported, or the sanitizers are not watching.
func TestStressSanitized(t *testing.T) {
	t.Parallel()
	bin, env := buildSanitized(t, "c/stress.c")
	canary := runEnv(t, env, bin, "canary")
	assert.NotEqual(t, 0, canary.Code, "the overflow went unnoticed:\n%s", canary.Stdout)
	assert.Contains(t, canary.Stderr, "ERROR: AddressSanitizer: heap-buffer-overflow")
	assert.Contains(t, canary.Stderr, "dacgo_context_known_worker_ids", "reported in the library's Go code")

	r := runCleanSanitized(t, env, bin, "8", "2")
	t.Log(strings.TrimSpace(r.Stderr))
	assertTranscript(t, stressVerdict, r.Stdout)
}
