package capi_test

import (
	"crypto/sha256"
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

// The six lines of Go's runtime that scripts/go-runtime-overlay replaces
// in every build of the library, read off its machine code, and its STATUS.

// overlayChange is one of them: its name in STATUS, its file in
// GOROOT/src/runtime and the line it replaces there.
type overlayChange struct{ name, file, line string }

var (
	waitWithoutLock       = overlayChange{"wait-without-lock", "cgocall.go", "\t\t<-main_init_done"}
	callbackIsASchedule   = overlayChange{"callback-is-a-schedule", "cgocall.go", "\texitsyscall() // coming out of cgo call"}
	monitorBacksOffAtOnce = overlayChange{"monitor-backs-off-at-once", "proc.go", "\t\t} else if idle > 50 { // start doubling the sleep after 1ms..."}
	monitorFirstNapLong   = overlayChange{"monitor-first-nap-long", "proc.go", "\t\tif idle == 0 { // start with 20us sleep..."}
	takeAPFromC           = overlayChange{"take-a-p-from-c", "proc.go", "\t// Try to get an idle P."}
	monitorServesWork     = overlayChange{"monitor-serves-work-on-ps-in-c", "proc.go", "\t\tsysretake := false"}
	overlayChanges        = []overlayChange{waitWithoutLock, callbackIsASchedule, monitorBacksOffAtOnce, monitorFirstNapLong, monitorServesWork, takeAPFromC} // in the script's order
)

// A call from C into Go takes no lock that every thread shares: the
// library's runtime waits for its package initialization with a receive
// that reads the closed channel without its lock (Go 1.26's blocking one
// locked it on every call). In runtime.cgocallbackg1 of each build of the
// library: a blocking receive (chanrecv1) only behind a non-blocking one
// (selectnbrecv). A build that did not take the change has no
// non-blocking receive there (Go 1.27 checks an atomic flag instead).
func TestCallsFromCTakeNoSharedLock(t *testing.T) {
	t.Parallel()
	goTool, applied := requireOverlay(t, waitWithoutLock)
	for _, rel := range overlaidLibraries {
		calls := callees(objdump(t, goTool, rel, "runtime.cgocallbackg1"))
		require.NotEmpty(t, calls, "%s: no runtime.cgocallbackg1 found", rel)
		nonBlocking := false
		for _, c := range calls {
			switch c {
			case "runtime.selectnbrecv":
				nonBlocking = true
			case "runtime.chanrecv1":
				if applied {
					assert.True(t, nonBlocking, "%s: every call from C into Go makes a blocking channel receive (a lock all threads share); calls: %v", rel, calls)
				}
			}
		}
		assert.Equal(t, applied, nonBlocking, "%s: a non-blocking receive in runtime.cgocallbackg1, where the build took wait-without-lock (%v); calls: %v", rel, applied, calls)
	}
}

// A call from C into Go counts as a schedule of the P it runs on: its
// scheduler tick moves, so Go's monitor takes the P back from a C thread by
// the rules of a system call, not as from a goroutine that ran 10 ms. In
// runtime.cgocallbackg of each build: on the line of its call of
// exitsyscall, an increment of memory (the P's schedtick) after the call;
// none in a build that did not take the change.
func TestCallsFromCMoveTheirPsTick(t *testing.T) {
	t.Parallel()
	goTool, applied := requireOverlay(t, callbackIsASchedule)
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
		assert.Equal(t, applied, incremented, "%s: runtime.cgocallbackg increments the P's tick after exitsyscall (%s) where the build took callback-is-a-schedule (%v):\n%v", rel, exitLine, applied, listing)
	}
}

// Go's monitor backs off at once after a wake, unless a thread waits for a
// P: in runtime.sysmon of each build, the comparison of idle with 50 and
// the doubling of the nap (a shift) are on the one line of the change (Go
// 1.26 as shipped doubles on the line after its comparison; backing off at
// once whatever waits compared idle with 0, not 50).
func TestMonitorBacksOffAtOnce(t *testing.T) {
	t.Parallel()
	onOverlaidLine(t, monitorBacksOffAtOnce, "unless a thread waits for a P", "runtime.sysmon", func(rel, line string, onLine []string) {
		assert.True(t, hasInstruction(onLine, "CMPQ ", "$0x32") && hasInstruction(onLine, "SHLL ", ""),
			"%s: runtime.sysmon's %s neither compares idle with 50 nor doubles the nap: %v", rel, line, onLine)
	})
}

// After a wake, Go's monitor naps 2.56 ms first unless a thread waits for
// a P: in runtime.sysmon of each build, the change's line stores the nap
// of 2,560 us ($0xa00), and not Go's first nap of 20 us, which stays on
// the line after it for a waiting thread.
func TestMonitorFirstNapLong(t *testing.T) {
	t.Parallel()
	onOverlaidLine(t, monitorFirstNapLong, "a first nap of 2.56 ms", "runtime.sysmon", func(rel, line string, onLine []string) {
		assert.True(t, hasInstruction(onLine, "MOVL $0xa00, ", ""), "%s: runtime.sysmon's %s stores no first nap of 2,560 us: %v", rel, line, onLine)
		assert.False(t, hasInstruction(onLine, "MOVL $0x14, ", ""), "%s: runtime.sysmon's %s stores a nap of 20 us on the change's own line: %v", rel, line, onLine)
	})
}

// Go's monitor takes a P from a thread out in C, however often that thread
// calls, when a timer of the P is due or a goroutine waits on its queue: in
// runtime.retake of each build, the line of the change compares the P's
// next timer with the time of the look (Go 1.26 sets sysretake false there).
func TestMonitorServesWorkOnPsInC(t *testing.T) {
	t.Parallel()
	onOverlaidLine(t, monitorServesWork, "work waits on pp", "runtime.retake", func(rel, line string, onLine []string) {
		assert.True(t, hasInstruction(onLine, "CMPQ ", ""), "%s: runtime.retake's %s compares nothing (no timer read): %v", rel, line, onLine)
	})
}

// onOverlaidLine calls check with the instructions of function fn that
// came from the line of the overlay's copy that has piece (change's line),
// in each build, where the builds took change; a build that did not has no
// such line to read (requireOverlay checks why).
func onOverlaidLine(t *testing.T, change overlayChange, piece, fn string, check func(rel, line string, onLine []string)) {
	t.Helper()
	goTool, applied := requireOverlay(t, change)
	if !applied {
		return
	}
	line := overlaidLine(t, change, piece)
	for _, rel := range overlaidLibraries {
		check(rel, line, instructionsOn(t, goTool, rel, fn, line))
	}
}

// hasInstruction reports whether an instruction of onLine begins with prefix and ends
// with suffix.
func hasInstruction(onLine []string, prefix, suffix string) bool {
	return slices.ContainsFunc(onLine, func(s string) bool { return strings.HasPrefix(s, prefix) && strings.HasSuffix(s, suffix) })
}

// instructionsOn returns the instructions of function fn in the build rel
// that came from source line line ("file:N").
func instructionsOn(t *testing.T, goTool, rel, fn, line string) []string {
	t.Helper()
	var onLine []string
	for _, ins := range objdump(t, goTool, rel, fn) {
		if ins.line == line {
			onLine = append(onLine, ins.text)
		}
	}
	return onLine
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
// every P, which holds allpLock as the monitor's retake does; the first
// alone in a build that did not take the change.
func TestCallsFromCTakeAPFromC(t *testing.T) {
	t.Parallel()
	goTool, applied := requireOverlay(t, takeAPFromC)
	for _, rel := range overlaidLibraries {
		listing := objdump(t, goTool, rel, "runtime.exitsyscallTryGetP")
		attempts := 0
		for _, c := range callees(listing) {
			if c == "runtime.setBlockOnExitSyscall" {
				attempts++
			}
		}
		allp := slices.ContainsFunc(listing, func(ins instruction) bool { return strings.Contains(ins.text, "runtime.allpLock(SB)") })
		want := map[bool]int{true: 2, false: 1}[applied]
		assert.Equal(t, want, attempts, "%s: runtime.exitsyscallTryGetP tries to take a P from a thread in C %d times, not %d (its old P, then any where the build took take-a-p-from-c: %v):\n%v", rel, attempts, want, applied, listing)
		assert.Equal(t, applied, allp, "%s: runtime.exitsyscallTryGetP walks allp under allpLock where the build took take-a-p-from-c (%v):\n%v", rel, applied, listing)
	}
}

// The builds of the library that take the overlay (the sanitized one is
// built from the same sources and overlay; its machine code differs).
var overlaidLibraries = []string{"build/libdistautograd.so", "build/testing/libdistautograd.so"}

// requireOverlay returns the go command and whether the library's builds
// took change, after checking that build/go-runtime/STATUS says why where
// they did not: switched off (GO_RUNTIME_OVERLAY=0), a Go the overlay was
// not tested with, or a runtime file without the line (exactly once) that
// the change replaces.
func requireOverlay(t *testing.T, change overlayChange) (string, bool) {
	t.Helper()
	goTool := libraryGo(t)
	applied, ok := goRuntimeStatus(t)[change.name]
	require.True(t, ok, "build/go-runtime/STATUS has no line for %s", change.name)
	if applied {
		return goTool, true
	}
	status, err := os.ReadFile(filepath.Join(repoRoot(t), "build", "go-runtime", "STATUS"))
	require.NoError(t, err)
	if !strings.Contains(string(status), change.name+": not applied: switched off") &&
		!strings.Contains(string(status), change.name+": not applied: untested Go runtime") {
		goroot, err := exec.Command(goTool, "env", "GOROOT").Output()
		require.NoError(t, err)
		src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(goroot)), "src", "runtime", change.file))
		require.NoError(t, err)
		assert.NotEqual(t, 1, strings.Count(string(src), "\n"+change.line+"\n"), "this Go's runtime has the line that %s replaces, and the overlay did not apply it", change.name)
	}
	return goTool, false
}

// libraryGo returns the go command of the Go that built the library, as
// the build recorded it (build/go-runtime/setting: the switch, the Go's
// version and its GOROOT): its runtime is the one the overlay was made
// from, whatever go is first on PATH.
func libraryGo(t *testing.T) string {
	t.Helper()
	setting, err := os.ReadFile(filepath.Join(repoRoot(t), "build", "go-runtime", "setting"))
	require.NoError(t, err, "make writes build/go-runtime/setting")
	fields := strings.Fields(string(setting))
	require.Len(t, fields, 3, "build/go-runtime/setting: %s", setting)
	goTool := filepath.Join(fields[2], "bin", "go")
	_, err = os.Stat(goTool)
	require.NoError(t, err, "the Go that built the library")
	return goTool
}

// goRuntimeStatus returns, from build/go-runtime/STATUS, whether the
// library's builds took each change of the overlay, by its name.
func goRuntimeStatus(t *testing.T) map[string]bool {
	t.Helper()
	status, err := os.ReadFile(filepath.Join(repoRoot(t), "build", "go-runtime", "STATUS"))
	require.NoError(t, err, "make writes build/go-runtime/STATUS")
	m := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(status)), "\n") {
		name, rest, ok := strings.Cut(line, ": ")
		require.True(t, ok, "a STATUS line is NAME: applied|not applied: WHY, not %q", line)
		m[name] = rest == "applied"
	}
	return m
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
// GOROOT, and a list of tested runtime files): where every file it changes
// is on the list (by its hash, under one Go), a line found once is
// replaced, line for line; a line found twice or not at all is left as it
// is and STATUS says so. A Go whose files are not all on the list, or a
// build with GO_RUNTIME_OVERLAY=0, takes none, and one line on stderr says
// so. --without=NAME leaves that change out (the reproducers' builds), and
// a name that is no change's is refused. The overlay names only the files
// that changed and is valid JSON; BUILT_WITH says name=1 or name=0 for each
// change, in order.
func TestOverlayScriptOnOtherGos(t *testing.T) {
	t.Parallel()
	script := filepath.Join(repoRoot(t), "scripts", "go-runtime-overlay")
	wait, callback, monitor, firstNap, take, serve := waitWithoutLock.line, callbackIsASchedule.line, monitorBacksOffAtOnce.line, monitorFirstNapLong.line, takeAPFromC.line, monitorServesWork.line
	asGo126 := map[string]string{
		"cgocall.go": "package runtime\n" + wait + "\n" + callback + "\n",
		"proc.go":    "package runtime\n" + firstNap + "\n" + monitor + "\n" + take + "\n" + serve + "\n"}
	all := []string{"wait-without-lock", "callback-is-a-schedule", "monitor-backs-off-at-once", "monitor-first-nap-long", "monitor-serves-work-on-ps-in-c", "take-a-p-from-c"}
	for _, tc := range []struct {
		name    string
		files   map[string]string // runtime file: its text (absent: missing)
		tested  map[string]string // the tested list's text of each file (absent: as in files)
		off     bool              // GO_RUNTIME_OVERLAY=0
		args    []string          // after GO DIR
		refused bool              // exits 2, with stderr
		applied []string
		changed []string // files in the overlay
		stderr  string   // the line on stderr when none applies
	}{
		{name: "as Go 1.26", files: asGo126, applied: all, changed: []string{"cgocall.go", "proc.go"}},
		{name: "a line twice", files: map[string]string{
			"cgocall.go": "package runtime\n" + wait + "\n" + wait + "\n" + callback + "\n",
			"proc.go":    "package runtime\n"},
			applied: []string{"callback-is-a-schedule"}, changed: []string{"cgocall.go"}},
		{name: "one of a file's two lines", files: map[string]string{
			"cgocall.go": "package runtime\n",
			"proc.go":    "package runtime\n" + monitor + "\n" + take + "\n" + take + "\n"},
			applied: []string{"monitor-backs-off-at-once"}, changed: []string{"proc.go"}},
		{name: "untested: a file differs from the list's", files: asGo126,
			tested: map[string]string{"proc.go": "package runtime\n" + monitor + "\n" + take + "\n// another Go\n"},
			stderr: "go-runtime-overlay: go1.99.0's runtime is not one the overlay was tested with"},
		{name: "untested: a file missing", files: map[string]string{"proc.go": asGo126["proc.go"]},
			stderr: "go-runtime-overlay: go1.99.0's runtime is not one the overlay was tested with"},
		{name: "switched off", files: asGo126, off: true,
			stderr: "go-runtime-overlay: switched off (GO_RUNTIME_OVERLAY=0): Go's runtime as it is"},
		{name: "without one change", files: asGo126, args: []string{"--without=monitor-serves-work-on-ps-in-c"},
			applied: []string{"wait-without-lock", "callback-is-a-schedule", "monitor-backs-off-at-once", "monitor-first-nap-long", "take-a-p-from-c"},
			changed: []string{"cgocall.go", "proc.go"}},
		{name: "without a change that is none", files: asGo126, args: []string{"--without=no-such-change"}, refused: true,
			stderr: "go-runtime-overlay: --without=no-such-change: no change has that name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			goroot, out := t.TempDir(), t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(goroot, "src", "runtime"), 0o755))
			for name, text := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(goroot, "src", "runtime", name), []byte(text), 0o644))
			}
			list := "# tested\n"
			for name, text := range tc.files {
				if other, ok := tc.tested[name]; ok {
					text = other
				}
				list += fmt.Sprintf("go1.99.0 %s %x\n", name, sha256.Sum256([]byte(text)))
			}
			listFile := filepath.Join(t.TempDir(), "tested")
			require.NoError(t, os.WriteFile(listFile, []byte(list), 0o644))
			fakeGo := filepath.Join(t.TempDir(), "go")
			require.NoError(t, os.WriteFile(fakeGo, []byte("#!/bin/sh\ncase \"$2\" in GOROOT) echo '"+goroot+"';; GOVERSION) echo go1.99.0;; esac\n"), 0o755))
			cmd := exec.Command(script, append([]string{fakeGo, out}, tc.args...)...)
			cmd.Env = append(os.Environ(), "GO_RUNTIME_TESTED="+listFile, "GO_RUNTIME_OVERLAY=1")
			if tc.off {
				cmd.Env = append(cmd.Env, "GO_RUNTIME_OVERLAY=0")
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			if tc.refused {
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "%s", stderr.String())
				assert.Equal(t, 2, exit.ExitCode())
				assert.True(t, strings.HasPrefix(stderr.String(), tc.stderr), "stderr: %s", stderr.String())
				return
			}
			require.NoError(t, err, "%s", stderr.String())
			if tc.stderr != "" {
				assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line on stderr: %s", stderr.String())
				assert.True(t, strings.HasPrefix(stderr.String(), tc.stderr), "stderr: %s", stderr.String())
			}

			status, err := os.ReadFile(filepath.Join(out, "STATUS"))
			require.NoError(t, err)
			builtWith, err := os.ReadFile(filepath.Join(out, "BUILT_WITH"))
			require.NoError(t, err)
			var want []string
			for _, change := range overlayChanges {
				if slices.Contains(tc.applied, change.name) {
					assert.Contains(t, string(status), change.name+": applied\n")
					want = append(want, change.name+"=1")
				} else {
					assert.Contains(t, string(status), change.name+": not applied: ")
					want = append(want, change.name+"=0")
				}
			}
			assert.Equal(t, strings.Join(want, ",")+"\n", string(builtWith))
			for _, arg := range tc.args {
				assert.Contains(t, string(status), strings.TrimPrefix(arg, "--without=")+": not applied: left out ("+arg+")\n")
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
					switch {
					case change.file != name:
					case slices.Contains(tc.applied, change.name):
						assert.NotContains(t, string(now), change.line+"\n", "%s replaced", change.name)
					default:
						assert.Equal(t, strings.Count(string(was), change.line+"\n"), strings.Count(string(now), change.line+"\n"),
							"%s not applied: its line kept", change.name)
					}
				}
			}
		})
	}
}

// Where the list of tested Go runtimes names the Go that built the
// library, it holds that Go's files with the hashes they have here: a typo
// in the list, or a GOROOT changed in place, would otherwise leave the
// overlay off unseen.
func TestOverlayTestedListHasThisGo(t *testing.T) {
	t.Parallel()
	env, err := exec.Command(libraryGo(t), "env", "GOVERSION", "GOROOT").Output()
	require.NoError(t, err)
	fields := strings.Fields(string(env))
	require.Len(t, fields, 2)
	list, err := os.ReadFile(filepath.Join(repoRoot(t), "scripts", "go-runtime-tested"))
	require.NoError(t, err)
	if !strings.Contains(string(list), "\n"+fields[0]+" ") {
		t.Logf("%s is not on scripts/go-runtime-tested: its builds take no change of the runtime", fields[0])
		return
	}
	for _, name := range []string{"cgocall.go", "proc.go"} {
		b, err := os.ReadFile(filepath.Join(fields[1], "src", "runtime", name))
		require.NoError(t, err)
		assert.Contains(t, string(list), fmt.Sprintf("\n%s %s %x\n", fields[0], name, sha256.Sum256(b)),
			"scripts/go-runtime-tested names %s, but not its %s as it is here", fields[0], name)
	}
}
