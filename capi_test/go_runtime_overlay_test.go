package capi_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The four lines of Go's runtime that scripts/go-runtime-overlay replaces
// in every build of the library, read off its machine code, and its STATUS.

// overlayChange is one of them: its name in STATUS, its file in
// GOROOT/src/runtime and the line it replaces there.
type overlayChange struct{ name, file, line string }

var (
	waitWithoutLock       = overlayChange{"wait-without-lock", "cgocall.go", "\t\t<-main_init_done"}
	callbackIsASchedule   = overlayChange{"callback-is-a-schedule", "cgocall.go", "\texitsyscall() // coming out of cgo call"}
	monitorBacksOffAtOnce = overlayChange{"monitor-backs-off-at-once", "proc.go", "\t\t} else if idle > 50 { // start doubling the sleep after 1ms..."}
	takeAPFromC           = overlayChange{"take-a-p-from-c", "proc.go", "\t// Try to get an idle P."}
	monitorServesWork     = overlayChange{"monitor-serves-work-on-ps-in-c", "proc.go", "\t\tsysretake := false"}
	overlayChanges        = []overlayChange{waitWithoutLock, callbackIsASchedule, monitorBacksOffAtOnce, takeAPFromC, monitorServesWork}
)

// A call from C into Go takes no lock that every thread shares: the
// library's runtime waits for its package initialization with a receive
// that reads the closed channel without its lock (Go 1.26's blocking one
// locked it on every call). In runtime.cgocallbackg1 of each build of the
// library: a blocking receive (chanrecv1) only behind a non-blocking one
// (selectnbrecv).
func TestCallsFromCTakeNoSharedLock(t *testing.T) {
	t.Parallel()
	goTool := requireOverlay(t, waitWithoutLock)
	for _, rel := range overlaidLibraries {
		calls := callees(objdump(t, goTool, rel, "runtime.cgocallbackg1"))
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
	goTool := requireOverlay(t, callbackIsASchedule)
	for _, rel := range overlaidLibraries {
		listing := objdump(t, goTool, rel, "runtime.cgocallbackg")
		exitLine, incremented := "", false
		for _, ins := range listing {
			switch {
			case strings.HasPrefix(ins.text, "CALL runtime.exitsyscall(SB)"):
				exitLine = ins.line
			case exitLine != "" && ins.line == exitLine && strings.HasPrefix(ins.text, "INCL "):
				incremented = true
			}
		}
		require.NotEmpty(t, exitLine, "%s: runtime.cgocallbackg calls no runtime.exitsyscall", rel)
		assert.True(t, incremented, "%s: runtime.cgocallbackg increments nothing after exitsyscall (%s):\n%v", rel, exitLine, listing)
	}
}

// Go's monitor backs off at once after a wake, unless a thread waits for a
// P: in runtime.sysmon of each build, the comparison of idle with 50 and
// the doubling of the nap (a shift) are on the one line of the change (Go
// 1.26 as shipped doubles on the line after its comparison; backing off at
// once whatever waits compared idle with 0, not 50).
func TestMonitorBacksOffAtOnce(t *testing.T) {
	t.Parallel()
	goTool := requireOverlay(t, monitorBacksOffAtOnce)
	line := overlaidLine(t, monitorBacksOffAtOnce, "unless a thread waits for a P")
	for _, rel := range overlaidLibraries {
		var onLine []string
		for _, ins := range objdump(t, goTool, rel, "runtime.sysmon") {
			if ins.line == line {
				onLine = append(onLine, ins.text)
			}
		}
		compared := slices.ContainsFunc(onLine, func(s string) bool { return strings.HasPrefix(s, "CMPQ ") && strings.HasSuffix(s, "$0x32") })
		doubled := slices.ContainsFunc(onLine, func(s string) bool { return strings.HasPrefix(s, "SHLL ") })
		assert.True(t, compared && doubled, "%s: runtime.sysmon's %s neither compares idle with 50 nor doubles the nap: %v", rel, line, onLine)
	}
}

// Go's monitor takes a P from a thread out in C, however often that thread
// calls, when a timer of the P is due or a goroutine waits on its queue: in
// runtime.retake of each build, the line of the change compares the P's
// next timer with the time of the look (Go 1.26 sets sysretake false there).
func TestMonitorServesWorkOnPsInC(t *testing.T) {
	t.Parallel()
	goTool := requireOverlay(t, monitorServesWork)
	line := overlaidLine(t, monitorServesWork, "work waits on pp")
	for _, rel := range overlaidLibraries {
		var onLine []string
		for _, ins := range objdump(t, goTool, rel, "runtime.retake") {
			if ins.line == line {
				onLine = append(onLine, ins.text)
			}
		}
		assert.True(t, slices.ContainsFunc(onLine, func(s string) bool { return strings.HasPrefix(s, "CMPQ ") }),
			"%s: runtime.retake's %s compares nothing (no timer read): %v", rel, line, onLine)
	}
}

// overlaidLine returns "file:N", the line of the overlay's copy of
// change's file that holds the replacement, found by a piece of its text.
func overlaidLine(t *testing.T, change overlayChange, piece string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "build", "go-runtime", change.file+".overlay"))
	require.NoError(t, err, "make writes the overlay's copy of %s", change.file)
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, piece) {
			return fmt.Sprintf("%s:%d", change.file, i+1)
		}
	}
	require.Fail(t, "no line of the overlay's "+change.file+" has "+piece)
	return ""
}

// A C thread that calls into Go and finds no P of its own and none idle
// takes one from a thread that is out in C, as Go's monitor would at its
// next look (which, backed off, can be 10 ms away), rather than waiting
// for that look. In runtime.exitsyscallTryGetP of each build: besides the
// attempt on the thread's old P, a second one (setBlockOnExitSyscall) over
// every P, which holds allpLock as the monitor's retake does.
func TestCallsFromCTakeAPFromC(t *testing.T) {
	t.Parallel()
	goTool := requireOverlay(t, takeAPFromC)
	for _, rel := range overlaidLibraries {
		listing := objdump(t, goTool, rel, "runtime.exitsyscallTryGetP")
		attempts := 0
		for _, c := range callees(listing) {
			if c == "runtime.setBlockOnExitSyscall" {
				attempts++
			}
		}
		allp := slices.ContainsFunc(listing, func(ins instruction) bool { return strings.Contains(ins.text, "runtime.allpLock(SB)") })
		assert.Equal(t, 2, attempts, "%s: runtime.exitsyscallTryGetP tries to take a P from a thread in C %d times, not 2 (its old P, then any):\n%v", rel, attempts, listing)
		assert.True(t, allp, "%s: runtime.exitsyscallTryGetP does not walk allp under allpLock:\n%v", rel, listing)
	}
}

// The builds of the library that take the overlay (the sanitized one is
// built from the same sources and overlay; its machine code differs).
var overlaidLibraries = []string{"build/libdistautograd.so", "build/testing/libdistautograd.so"}

// requireOverlay returns the go command, after checking that where this
// Go's runtime file has the line that change replaces (exactly once),
// build/go-runtime/STATUS says the change was applied.
func requireOverlay(t *testing.T, change overlayChange) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to read the library's machine code")
	goroot, err := exec.Command(goTool, "env", "GOROOT").Output()
	require.NoError(t, err)
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(goroot)), "src", "runtime", change.file))
	require.NoError(t, err)
	status, err := os.ReadFile(filepath.Join(repoRoot(t), "build", "go-runtime", "STATUS"))
	require.NoError(t, err, "make writes build/go-runtime/STATUS")
	if strings.Count(string(src), "\n"+change.line+"\n") == 1 {
		assert.Contains(t, string(status), change.name+": applied\n", "this Go's runtime has the line that %s replaces, and the overlay did not apply it", change.name)
	}
	return goTool
}

// instruction is a line of go tool objdump's listing: the source line it
// came from (file:line) and the instruction.
type instruction struct{ line, text string }

var listingLine = regexp.MustCompile(`^\s*(\S+:\d+)\s+0x[0-9a-f]+\s+[0-9a-f]+\s+(.*)$`)

// objdump returns go tool objdump's listing of function fn in the build rel.
func objdump(t *testing.T, goTool, rel, fn string) []instruction {
	t.Helper()
	lib := requireLibrary(t, rel, "")
	out, err := exec.Command(goTool, "tool", "objdump", "-s", "^"+regexp.QuoteMeta(fn)+"$", lib).CombinedOutput()
	require.NoError(t, err, "go tool objdump %s: %s", rel, out)
	var listing []instruction
	for _, l := range strings.Split(string(out), "\n") {
		if m := listingLine.FindStringSubmatch(l); m != nil {
			listing = append(listing, instruction{m[1], strings.TrimSpace(m[2])})
		}
	}
	return listing
}

// callees returns the functions a listing calls, in order.
func callees(listing []instruction) []string {
	var calls []string
	for _, ins := range listing {
		if c, ok := strings.CutPrefix(ins.text, "CALL "); ok {
			calls = append(calls, strings.TrimSuffix(strings.Fields(c)[0], "(SB)"))
		}
	}
	return calls
}

// scripts/go-runtime-overlay against other Gos (a stand-in go command and
// GOROOT): a line found once is replaced, line for line; a line found
// twice or not at all, or a file missing, is left as it is and STATUS says
// so; the overlay names only the files that changed, and is valid JSON.
func TestOverlayScriptOnOtherGos(t *testing.T) {
	t.Parallel()
	script := filepath.Join(repoRoot(t), "scripts", "go-runtime-overlay")
	wait, callback, monitor, take, serve := waitWithoutLock.line, callbackIsASchedule.line, monitorBacksOffAtOnce.line, takeAPFromC.line, monitorServesWork.line
	for _, tc := range []struct {
		name    string
		files   map[string]string // runtime file: its text ("" : missing)
		applied []string
		changed []string // files in the overlay
	}{
		{"as Go 1.26", map[string]string{
			"cgocall.go": "package runtime\n" + wait + "\n" + callback + "\n",
			"proc.go":    "package runtime\n" + monitor + "\n" + take + "\n" + serve + "\n"},
			[]string{"wait-without-lock", "callback-is-a-schedule", "monitor-backs-off-at-once", "take-a-p-from-c", "monitor-serves-work-on-ps-in-c"},
			[]string{"cgocall.go", "proc.go"}},
		{"a line twice", map[string]string{
			"cgocall.go": "package runtime\n" + wait + "\n" + wait + "\n" + callback + "\n",
			"proc.go":    "package runtime\n"},
			[]string{"callback-is-a-schedule"},
			[]string{"cgocall.go"}},
		{"one of a file's two lines", map[string]string{
			"proc.go": "package runtime\n" + monitor + "\n" + take + "\n" + take + "\n"},
			[]string{"monitor-backs-off-at-once"},
			[]string{"proc.go"}},
		{"no runtime files", map[string]string{}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			goroot, out := t.TempDir(), t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(goroot, "src", "runtime"), 0o755))
			for name, text := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(goroot, "src", "runtime", name), []byte(text), 0o644))
			}
			fakeGo := filepath.Join(t.TempDir(), "go")
			require.NoError(t, os.WriteFile(fakeGo, []byte("#!/bin/sh\necho '"+goroot+"'\n"), 0o755))
			res, err := exec.Command(script, fakeGo, out).CombinedOutput()
			require.NoError(t, err, "%s", res)

			status, err := os.ReadFile(filepath.Join(out, "STATUS"))
			require.NoError(t, err)
			for _, change := range overlayChanges {
				if slices.Contains(tc.applied, change.name) {
					assert.Contains(t, string(status), change.name+": applied\n")
				} else {
					assert.Contains(t, string(status), change.name+": not applied: ")
				}
			}
			var overlay struct{ Replace map[string]string }
			b, err := os.ReadFile(filepath.Join(out, "overlay.json"))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &overlay), "%s", b)
			require.Len(t, overlay.Replace, len(tc.changed), "%s", b)
			for _, name := range tc.changed {
				orig := filepath.Join(goroot, "src", "runtime", name)
				repl, ok := overlay.Replace[orig]
				require.True(t, ok, "%s is not replaced: %s", orig, b)
				was, err := os.ReadFile(orig)
				require.NoError(t, err)
				now, err := os.ReadFile(repl)
				require.NoError(t, err)
				assert.Equal(t, strings.Count(string(was), "\n"), strings.Count(string(now), "\n"), "line for line")
				assert.Contains(t, string(now), "distautograd: scripts/go-runtime-overlay")
				for _, change := range overlayChanges {
					if change.file == name && strings.Count(string(was), change.line+"\n") == 1 {
						assert.NotContains(t, string(now), change.line+"\n", "replaced")
					}
				}
			}
		})
	}
}
