package capi_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A call from C into Go takes no lock that every thread shares: the
// library's runtime waits for its package initialization with a receive
// that reads the closed channel without its lock (scripts/go-runtime-overlay
// patches Go 1.26's blocking one, which locked on every call). Read off the
// machine code of runtime.cgocallbackg1 in each build of the library: a
// blocking receive (chanrecv1) only behind a non-blocking one (selectnbrecv).
// Where this Go's runtime has the blocking receive, the overlay must have
// been applied.
func TestCallsFromCTakeNoSharedLock(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to read the library's machine code")
	goroot, err := exec.Command(goTool, "env", "GOROOT").Output()
	require.NoError(t, err)
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(goroot)), "src", "runtime", "cgocall.go"))
	require.NoError(t, err)
	if strings.Count(string(src), "\n\t\t<-main_init_done\n") == 1 {
		status, err := os.ReadFile(filepath.Join(root, "build", "go-runtime", "STATUS"))
		require.NoError(t, err, "make writes build/go-runtime/STATUS")
		assert.True(t, strings.HasPrefix(string(status), "applied:"), "this Go locks on every call from C, and the overlay was not applied: %s", status)
	}
	call := regexp.MustCompile(`CALL (runtime\.\w+)\(SB\)`)
	for _, rel := range []string{"build/libdistautograd.so", "build/testing/libdistautograd.so"} {
		lib := requireLibrary(t, rel, "")
		out, err := exec.Command(goTool, "tool", "objdump", "-s", `^runtime\.cgocallbackg1$`, lib).CombinedOutput()
		require.NoError(t, err, "go tool objdump %s: %s", rel, out)
		var calls []string
		for _, m := range call.FindAllStringSubmatch(string(out), -1) {
			calls = append(calls, m[1])
		}
		require.NotEmpty(t, calls, "%s: no runtime.cgocallbackg1 found", rel)
		nonBlocking := false
		for _, c := range calls {
			switch c {
			case "runtime.selectnbrecv":
				nonBlocking = true
			case "runtime.chanrecv1":
				assert.True(t, nonBlocking, "%s: every call from C into Go makes a blocking channel receive (a lock all threads share); calls: %v", rel, calls)
			}
		}
	}
}
