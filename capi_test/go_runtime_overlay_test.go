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

// The two lines of Go's runtime that scripts/go-runtime-overlay replaces in
// every build of the library, read off its machine code, and its STATUS.

// A call from C into Go takes no lock that every thread shares: the
// library's runtime waits for its package initialization with a receive
// that reads the closed channel without its lock (Go 1.26's blocking one
// locked it on every call). In runtime.cgocallbackg1 of each build of the
// library: a blocking receive (chanrecv1) only behind a non-blocking one
// (selectnbrecv).
func TestCallsFromCTakeNoSharedLock(t *testing.T) {
	t.Parallel()
	goTool := requireOverlay(t, "wait-without-lock", "\n\t\t<-main_init_done\n")
	call := regexp.MustCompile(`CALL (runtime\.\w+)\(SB\)`)
	for _, rel := range overlaidLibraries {
		out := objdump(t, goTool, rel, "runtime.cgocallbackg1")
		var calls []string
		for _, m := range call.FindAllStringSubmatch(out, -1) {
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

// A call from C into Go counts as a schedule of the P it runs on: its
// scheduler tick moves, so Go's monitor takes the P back from a C thread by
// the rules of a system call, not as from a goroutine that ran 10 ms. In
// runtime.cgocallbackg of each build: on the line of its call of
// exitsyscall, an increment of memory (the P's schedtick) after the call.
func TestCallsFromCMoveTheirPsTick(t *testing.T) {
	t.Parallel()
	goTool := requireOverlay(t, "callback-is-a-schedule", "\n\texitsyscall() // coming out of cgo call\n")
	line := regexp.MustCompile(`^\s*(\S+:\d+)\s+0x[0-9a-f]+\s+[0-9a-f]+\s+(.*)$`)
	for _, rel := range overlaidLibraries {
		out := objdump(t, goTool, rel, "runtime.cgocallbackg")
		exitLine, incremented := "", false
		for _, l := range strings.Split(out, "\n") {
			m := line.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			switch {
			case strings.HasPrefix(m[2], "CALL runtime.exitsyscall(SB)"):
				exitLine = m[1]
			case exitLine != "" && m[1] == exitLine && strings.HasPrefix(m[2], "INCL "):
				incremented = true
			}
		}
		require.NotEmpty(t, exitLine, "%s: runtime.cgocallbackg calls no runtime.exitsyscall", rel)
		assert.True(t, incremented, "%s: runtime.cgocallbackg increments nothing after exitsyscall (%s):\n%s", rel, exitLine, out)
	}
}

// The builds of the library that take the overlay (the sanitized one is
// built from the same sources and overlay; its machine code differs).
var overlaidLibraries = []string{"build/libdistautograd.so", "build/testing/libdistautograd.so"}

// requireOverlay returns the go command, after checking that where this
// Go's runtime/cgocall.go has the line that change name replaces (exactly
// once), build/go-runtime/STATUS says the change was applied.
func requireOverlay(t *testing.T, name, line string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to read the library's machine code")
	goroot, err := exec.Command(goTool, "env", "GOROOT").Output()
	require.NoError(t, err)
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(goroot)), "src", "runtime", "cgocall.go"))
	require.NoError(t, err)
	status, err := os.ReadFile(filepath.Join(repoRoot(t), "build", "go-runtime", "STATUS"))
	require.NoError(t, err, "make writes build/go-runtime/STATUS")
	if strings.Count(string(src), line) == 1 {
		assert.Contains(t, string(status), name+": applied\n", "this Go's runtime has the line that %s replaces, and the overlay did not apply it", name)
	}
	return goTool
}

// objdump returns go tool objdump's listing of function fn in the build rel.
func objdump(t *testing.T, goTool, rel, fn string) string {
	t.Helper()
	lib := requireLibrary(t, rel, "")
	out, err := exec.Command(goTool, "tool", "objdump", "-s", "^"+regexp.QuoteMeta(fn)+"$", lib).CombinedOutput()
	require.NoError(t, err, "go tool objdump %s: %s", rel, out)
	return string(out)
}

// Go's monitor backs off at once after a wake: in runtime.sysmon of each
// build, the line that doubles its nap (a shift) compares idle with 0, not
// with 50 (Go 1.26 naps 20 us for 50 looks first, and C threads that call
// now and then kept it there).
func TestMonitorBacksOffAtOnce(t *testing.T) {
	t.Parallel()
	goTool := requireOverlay(t, "monitor-backs-off-at-once", "\n\t\t} else if idle > 50 { // start doubling the sleep after 1ms...\n")
	line := regexp.MustCompile(`^\s*(\S+:\d+)\s+0x[0-9a-f]+\s+[0-9a-f]+\s+(.*)$`)
	for _, rel := range overlaidLibraries {
		out := objdump(t, goTool, rel, "runtime.sysmon")
		byLine := map[string][]string{}
		doubling := ""
		for _, l := range strings.Split(out, "\n") {
			if m := line.FindStringSubmatch(l); m != nil {
				byLine[m[1]] = append(byLine[m[1]], m[2])
				if strings.HasPrefix(m[2], "SHLL ") && doubling == "" {
					doubling = m[1]
				}
			}
		}
		require.NotEmpty(t, doubling, "%s: runtime.sysmon doubles no nap (no shift found)", rel)
		for _, ins := range byLine[doubling] {
			assert.NotContains(t, ins, "$0x32", "%s: runtime.sysmon still naps 20 us for 50 looks (%s: %v)", rel, doubling, byLine[doubling])
		}
	}
}
