package capi_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
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

// The lines of Go's runtime that scripts/go-runtime-overlay replaces in
// every build of the library (scripts/go-runtime-changes, the one place
// they are written), read off the builds' machine code, and its STATUS.

// overlayChange is one of them: its name in STATUS, its file in
// GOROOT/src/runtime, and the lines it replaces there, each with the line
// that replaces it.
type overlayChange struct {
	name, file string
	lines      []lineChange
}

// lineChange is a line of a runtime file and the line that replaces it.
type lineChange struct{ old, new string }

// readOverlayChanges parses a changes file as scripts/go-runtime-overlay
// does: "change NAME FILE", then for each of its lines "-" and the line,
// then "+" and its replacement.
func readOverlayChanges(t *testing.T, path string) []overlayChange {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(b), "\r", "%s: a carriage return", path)
	var changes []overlayChange
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "change "):
			f := strings.Fields(l)
			require.Len(t, f, 3, "%s: %q is not change NAME FILE", path, l)
			if n := len(changes); n > 0 && changes[n-1].file != f[2] {
				require.False(t, slices.ContainsFunc(changes, func(c overlayChange) bool { return c.file == f[2] }),
					"%s: %s's changes are not together", path, f[2])
			}
			changes = append(changes, overlayChange{name: f[1], file: f[2]})
		case strings.HasPrefix(l, "-"), strings.HasPrefix(l, "+"):
			require.NotEmpty(t, changes, "%s: %q before any change line", path, l)
			c := &changes[len(changes)-1]
			n := len(c.lines)
			if l[0] == '-' {
				require.True(t, n == 0 || c.lines[n-1].new != "", "%s: %s has two lines to replace in a row", path, c.name)
				c.lines = append(c.lines, lineChange{old: l[1:]})
			} else {
				require.True(t, n > 0 && c.lines[n-1].new == "", "%s: %s's new line comes before its old one", path, c.name)
				c.lines[n-1].new = l[1:]
			}
		case l == "" || strings.HasPrefix(l, "#"):
		default:
			require.Fail(t, "not a line of a changes file", "%s: %q", path, l)
		}
	}
	for _, c := range changes {
		require.NotEmpty(t, c.lines, "%s: %s has no line", path, c.name)
		for _, l := range c.lines {
			require.True(t, l.old != "" && l.new != "", "%s: %s lacks a line or its new line", path, c.name)
		}
	}
	return changes
}

// overlayChanges are the library's, from scripts/go-runtime-changes.
func overlayChanges(t *testing.T) []overlayChange {
	t.Helper()
	return readOverlayChanges(t, filepath.Join(repoRoot(t), "scripts", "go-runtime-changes"))
}

// overlayChangeNamed returns the library's change of that name.
func overlayChangeNamed(t *testing.T, name string) overlayChange {
	t.Helper()
	for _, c := range overlayChanges(t) {
		if c.name == name {
			return c
		}
	}
	require.Fail(t, "scripts/go-runtime-changes has no change "+name)
	return overlayChange{}
}

// Every change of the overlay, and only those, is in docs/go-runtime.md's
// table of changes kept, and in the build's STATUS, in order; the doc
// quotes the line each replaces and its replacement (less the trailing
// comment) as scripts/go-runtime-changes has them; each new line is marked
// as the overlay's, so a traceback through it says where it came from.
func TestOverlayChangesDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "go-runtime.md"))
	require.NoError(t, err)
	var names []string
	for _, c := range overlayChanges(t) {
		names = append(names, c.name)
		assert.Contains(t, string(doc), c.name, "docs/go-runtime.md says nothing of %s", c.name)
		for _, lc := range c.lines {
			assert.Contains(t, lc.new, "distautograd: scripts/go-runtime-overlay", "%s's new line is not marked", c.name)
			code, _, _ := strings.Cut(lc.new, " // ")
			for _, l := range []string{lc.old, code} {
				assert.Contains(t, string(doc), "    "+l+"\n", "docs/go-runtime.md does not quote %s's line as scripts/go-runtime-changes has it: %q", c.name, l)
			}
		}
	}
	var status []string
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, filepath.Join(repoRoot(t), "build", "go-runtime", "STATUS"))), "\n") {
		name, _, _ := strings.Cut(line, ": ")
		status = append(status, name)
	}
	assert.Equal(t, names, status, "build/go-runtime/STATUS's changes are scripts/go-runtime-changes's")
}

// readFile returns a file's text.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
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
	goTool, applied := requireOverlay(t, overlayChangeNamed(t, "take-a-p-from-c"))
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
		missed := false
		for _, l := range change.lines {
			missed = missed || strings.Count(string(src), "\n"+l.old+"\n") != 1
		}
		assert.True(t, missed, "this Go's runtime has each line that %s replaces, and the overlay did not apply it", change.name)
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
// GOROOT, a list of tested runtime files, and changes of its own: three,
// in two files, through GO_RUNTIME_CHANGES; and the library's own): where
// every file it changes is on the list (by its hash, under one Go), a line
// found once is replaced, line for line; a line found twice or not at all
// is left as it is and STATUS says so, and so does a line on stderr unless
// the list says that Go lacks it ("GOVERSION lacks NAME": a build says
// nothing of what it expects). A Go whose files are not all on the
// list, or a build with GO_RUNTIME_OVERLAY=0, takes none, and one line on
// stderr says so. --without=NAME leaves that change out (make
// without-lib's builds), and a name that is no change's is refused. The
// overlay names only the files that changed and is valid JSON; BUILT_WITH
// says name=1 or name=0 for each change, in order.
func TestOverlayScriptOnOtherGos(t *testing.T) {
	t.Parallel()
	script := filepath.Join(repoRoot(t), "scripts", "go-runtime-overlay")
	ours := filepath.Join(t.TempDir(), "changes")
	require.NoError(t, os.WriteFile(ours, []byte("# three changes, two files\n"+
		"change first a.go\n-\tx := 1 // first\n+\tx := 2 // first (distautograd: scripts/go-runtime-overlay)\n"+
		"change second a.go\n-\t\ty := f()\n+\t\ty := g() // (distautograd: scripts/go-runtime-overlay)\n"+
		"change third b.go\n-\tprint(\"third\\n\")\n+\tprint(\"3\\n\\t\") // (distautograd: scripts/go-runtime-overlay)"), 0o644))
	// The third's lines hold backslashes, as a runtime's print("...\\n")
	// does, and the file ends without a newline: each taken as it is.
	synthetic := readOverlayChanges(t, ours)
	require.Len(t, synthetic, 3)
	require.Equal(t, "\tprint(\"third\\n\")", synthetic[2].lines[0].old)
	first, second, third := synthetic[0].lines[0].old, synthetic[1].lines[0].old, synthetic[2].lines[0].old
	asTested := map[string]string{
		"a.go": "package runtime\n" + second + "\n" + first + "\n",
		"b.go": "package runtime\n" + third + "\n"}
	libChanges := overlayChanges(t)
	realFiles := map[string]string{}
	var realNames []string
	for _, c := range libChanges {
		for _, l := range c.lines {
			realFiles[c.file] += l.old + "\n"
		}
		realNames = append(realNames, c.name)
	}
	all := []string{"first", "second", "third"}
	for _, tc := range []struct {
		name    string
		changes []overlayChange   // nil: ours
		files   map[string]string // runtime file: its text (absent: missing)
		tested  map[string]string // the tested list's text of each file (absent: as in files)
		lacks   []string          // the changes the list says this Go lacks
		off     bool              // GO_RUNTIME_OVERLAY=0
		args    []string          // after GO DIR
		refused bool              // exits 2, with stderr
		applied []string
		changed []string // files in the overlay
		stderr  string   // the line on stderr when none applies
		loud    []string // else the changes not applied that stderr names, a line each
	}{
		{name: "the library's changes", changes: libChanges, files: realFiles, applied: realNames, changed: slices.Sorted(maps.Keys(realFiles))},
		{name: "as tested", files: asTested, applied: all, changed: []string{"a.go", "b.go"}},
		{name: "a line twice", files: map[string]string{
			"a.go": "package runtime\n" + first + "\n" + first + "\n" + second + "\n",
			"b.go": "package runtime\n"},
			applied: []string{"second"}, changed: []string{"a.go"}, loud: []string{"first", "third"}},
		{name: "one of a file's two lines", files: map[string]string{
			"a.go": "package runtime\n" + first + "\n",
			"b.go": "package runtime\n" + third + "\n" + third + "\n"},
			applied: []string{"first"}, changed: []string{"a.go"}, loud: []string{"second", "third"}},
		{name: "lines the list says this Go lacks", files: map[string]string{
			"a.go": "package runtime\n" + first + "\n",
			"b.go": "package runtime\n"},
			lacks: []string{"second", "third"}, applied: []string{"first"}, changed: []string{"a.go"}},
		{name: "one the list says this Go lacks, one missed", files: map[string]string{
			"a.go": "package runtime\n" + first + "\n",
			"b.go": "package runtime\n"},
			lacks: []string{"third"}, applied: []string{"first"}, changed: []string{"a.go"}, loud: []string{"second"}},
		{name: "untested: a file differs from the list's", files: asTested,
			tested: map[string]string{"b.go": "package runtime\n" + third + "\n// another Go\n"},
			stderr: "go-runtime-overlay: go1.99.0's runtime is not one the overlay was tested with"},
		{name: "untested: a file missing", files: map[string]string{"a.go": asTested["a.go"]},
			stderr: "go-runtime-overlay: go1.99.0's runtime is not one the overlay was tested with"},
		{name: "switched off", files: asTested, off: true,
			stderr: "go-runtime-overlay: switched off (GO_RUNTIME_OVERLAY=0): Go's runtime as it is"},
		{name: "without one change", files: asTested, args: []string{"--without=second"},
			applied: []string{"first", "third"}, changed: []string{"a.go", "b.go"}},
		{name: "without a file's every change", files: asTested, args: []string{"--without=third"},
			applied: []string{"first", "second"}, changed: []string{"a.go"}},
		{name: "without a change that is none", files: asTested, args: []string{"--without=no-such-change"}, refused: true,
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
			for _, name := range tc.lacks {
				list += "go1.99.0 lacks " + name + "\n"
			}
			listFile := filepath.Join(t.TempDir(), "tested")
			require.NoError(t, os.WriteFile(listFile, []byte(list), 0o644))
			cmd := exec.Command(script, append([]string{standInGo(t, goroot), out}, tc.args...)...)
			changes, changesFile := synthetic, ours
			if tc.changes != nil {
				changes, changesFile = tc.changes, filepath.Join(repoRoot(t), "scripts", "go-runtime-changes")
			}
			cmd.Env = append(os.Environ(), "GO_RUNTIME_TESTED="+listFile, "GO_RUNTIME_OVERLAY=1", "GO_RUNTIME_CHANGES="+changesFile)
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
			} else {
				assert.Equal(t, len(tc.loud), strings.Count(stderr.String(), "\n"), "a line on stderr per change missed: %s", stderr.String())
				for _, name := range tc.loud {
					assert.Contains(t, stderr.String(), "go-runtime-overlay: "+name+" not applied: ")
				}
			}

			status, err := os.ReadFile(filepath.Join(out, "STATUS"))
			require.NoError(t, err)
			builtWith, err := os.ReadFile(filepath.Join(out, "BUILT_WITH"))
			require.NoError(t, err)
			var want []string
			for _, change := range changes {
				if slices.Contains(tc.applied, change.name) {
					assert.Contains(t, string(status), change.name+": applied\n")
					want = append(want, change.name+"=1")
				} else {
					assert.Contains(t, string(status), change.name+": not applied: ")
					want = append(want, change.name+"=0")
				}
			}
			assert.Equal(t, strings.Join(want, ",")+"\n", string(builtWith))
			for _, name := range tc.lacks {
				assert.Contains(t, string(status), name+": not applied: go1.99.0 lacks its line (")
			}
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
				for _, change := range changes {
					switch {
					case change.file != name:
					case slices.Contains(tc.applied, change.name):
						for _, l := range change.lines {
							assert.NotContains(t, string(now), l.old+"\n", "%s replaced", change.name)
							assert.Contains(t, string(now), l.new+"\n", "%s's new line", change.name)
						}
					default:
						for _, l := range change.lines {
							assert.Equal(t, strings.Count(string(was), l.old+"\n"), strings.Count(string(now), l.old+"\n"),
								"%s not applied: its lines kept", change.name)
						}
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
	for _, c := range overlayChanges(t) {
		name := c.file
		b, err := os.ReadFile(filepath.Join(fields[1], "src", "runtime", name))
		require.NoError(t, err)
		assert.Contains(t, string(list), fmt.Sprintf("\n%s %s %x\n", fields[0], name, sha256.Sum256(b)),
			"scripts/go-runtime-tested names %s, but not its %s as it is here", fields[0], name)
	}
}

// A changes file the script cannot read as changes is refused, with its
// file and line, before anything is written: a change that lacks a line,
// a file's changes split by another's, a line that is none of the three,
// a line before any change, two changes of one name, and a change whose
// lines would replace one another (its lines are found in the file as it
// was, so applied in turn they would not all be what was checked).
func TestOverlayScriptRefusesABadChangesFile(t *testing.T) {
	t.Parallel()
	script := filepath.Join(repoRoot(t), "scripts", "go-runtime-overlay")
	goroot := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(goroot, "src", "runtime"), 0o755))
	fakeGo := standInGo(t, goroot)
	for _, tc := range []struct{ name, text, why string }{
		{"no new line", "change a a.go\n-x\n", ":2: a lacks its + line"},
		{"a file's changes apart", "change a a.go\n-x\n+y\nchange b b.go\n-x\n+y\nchange c a.go\n-z\n+w\n", ":7: a.go's changes are not together"},
		{"a stray line", "change a a.go\n-x\nx\n", ":3: not the + line that comes next: x"},
		{"a line before any change", "-x\n+y\nchange a a.go\n-x\n+y\n", ":1: a line before any change line: -x"},
		{"a name twice", "change a a.go\n-x\n+y\nchange a b.go\n-z\n+w\n", ": two changes named a"},
		{"a line replaced twice", "change a a.go\n-x\n+y\n-x\n+z\n", ": a replaces a line twice, or a line another of its lines puts in"},
		{"a line another puts in", "change a a.go\n-x\n+y\n-y\n+z\n", ": a replaces a line twice, or a line another of its lines puts in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changes := filepath.Join(t.TempDir(), "changes")
			require.NoError(t, os.WriteFile(changes, []byte(tc.text), 0o644))
			out := t.TempDir()
			cmd := exec.Command(script, fakeGo, out)
			cmd.Env = append(os.Environ(), "GO_RUNTIME_CHANGES="+changes, "GO_RUNTIME_OVERLAY=0")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", stderr.String())
			assert.Equal(t, 2, exit.ExitCode())
			assert.Contains(t, stderr.String(), "go-runtime-overlay: "+changes+tc.why)
			_, err = os.Stat(filepath.Join(out, "overlay.json"))
			assert.True(t, os.IsNotExist(err), "no overlay.json written")
		})
	}
}

// standInGo writes a go command that answers `go env GOROOT` with goroot
// and `go env GOVERSION` with go1.99.0, all the overlay script asks of Go.
func standInGo(t *testing.T, goroot string) string {
	t.Helper()
	goTool := filepath.Join(t.TempDir(), "go")
	require.NoError(t, os.WriteFile(goTool, []byte("#!/bin/sh\ncase \"$2\" in GOROOT) echo '"+goroot+"';; GOVERSION) echo go1.99.0;; esac\n"), 0o755))
	return goTool
}

// A change of several lines applies whole or not at all: where one of its
// lines is missing, none of the others is replaced either (a change's
// lines only make sense together), and STATUS and stderr say so.
func TestOverlayScriptAppliesAChangeWhole(t *testing.T) {
	t.Parallel()
	script := filepath.Join(repoRoot(t), "scripts", "go-runtime-overlay")
	changes := filepath.Join(t.TempDir(), "changes")
	require.NoError(t, os.WriteFile(changes, []byte("change pair a.go\n"+
		"-\tx := 1\n+\tx := 2 // (distautograd: scripts/go-runtime-overlay)\n"+
		"-\ty := 1\n+\ty := 2 // (distautograd: scripts/go-runtime-overlay)\n"+
		"change other a.go\n-\tz := 1\n+\tz := 2 // (distautograd: scripts/go-runtime-overlay)\n"), 0o644))
	read := readOverlayChanges(t, changes)
	require.Len(t, read, 2)
	require.Equal(t, []lineChange{
		{"\tx := 1", "\tx := 2 // (distautograd: scripts/go-runtime-overlay)"},
		{"\ty := 1", "\ty := 2 // (distautograd: scripts/go-runtime-overlay)"}}, read[0].lines)
	for _, tc := range []struct {
		name, text, want, status string
	}{
		{"both lines", "package runtime\n\tx := 1\n\tz := 1\n\ty := 1\n",
			"package runtime\n\tx := 2 // (distautograd: scripts/go-runtime-overlay)\n\tz := 2 // (distautograd: scripts/go-runtime-overlay)\n\ty := 2 // (distautograd: scripts/go-runtime-overlay)\n",
			"pair: applied\nother: applied\n"},
		{"one line missing", "package runtime\n\tx := 1\n\tz := 1\n",
			"package runtime\n\tx := 1\n\tz := 2 // (distautograd: scripts/go-runtime-overlay)\n",
			"pair: not applied: GOROOT/src/runtime/a.go has its line 0 times, not once\nother: applied\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			goroot, out := t.TempDir(), t.TempDir()
			src := filepath.Join(goroot, "src", "runtime", "a.go")
			require.NoError(t, os.MkdirAll(filepath.Dir(src), 0o755))
			require.NoError(t, os.WriteFile(src, []byte(tc.text), 0o644))
			list := filepath.Join(t.TempDir(), "tested")
			require.NoError(t, os.WriteFile(list, []byte(fmt.Sprintf("go1.99.0 a.go %x\n", sha256.Sum256([]byte(tc.text)))), 0o644))
			cmd := exec.Command(script, standInGo(t, goroot), out)
			cmd.Env = append(os.Environ(), "GO_RUNTIME_TESTED="+list, "GO_RUNTIME_OVERLAY=1", "GO_RUNTIME_CHANGES="+changes)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Run(), "%s", stderr.String())
			status := strings.ReplaceAll(readFile(t, filepath.Join(out, "STATUS")), goroot, "GOROOT")
			assert.Equal(t, tc.status, status)
			if strings.Contains(tc.status, "not applied") {
				assert.Equal(t, "go-runtime-overlay: pair not applied: "+src+" has its line 0 times, not once\n", stderr.String())
			} else {
				assert.Empty(t, stderr.String())
			}
			assert.Equal(t, tc.want, readFile(t, filepath.Join(out, "a.go.overlay")))
			assert.NoFileExists(t, filepath.Join(out, "lines.tmp"))
		})
	}
}
