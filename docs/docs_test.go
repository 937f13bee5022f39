// Package docs_test checks the Markdown documents of the repository (the
// READMEs and docs/*.md): every relative link resolves, every test a
// document cites by name exists, so that a promise never points to a test
// that was renamed or deleted, and contract.md's map of names covers the
// header and names only what the C++ and Python APIs define.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// root is the repository root, from this package's directory.
const root = ".."

// documents returns the Markdown files checked, relative to root: the
// top-level ones, those one folder down (docs/, bench/, python_bindings/)
// but for build outputs.
func documents(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"*.md", "*/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			if !strings.HasPrefix(rel, "build"+string(filepath.Separator)) {
				out = append(out, rel)
			}
		}
	}
	if len(out) < 5 {
		t.Fatalf("only %d documents under %s", len(out), root)
	}
	return out
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of a document names a file or folder that exists,
// and every #anchor of a link to a Markdown file (make bench rewrites parts
// of some) is one of its headings.
func TestDocsLinksResolve(t *testing.T) {
	for _, rel := range documents(t) {
		file := filepath.Join(root, rel)
		for _, m := range mdLink.FindAllStringSubmatch(read(t, rel), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: the link %s names no file (%v)", rel, target, err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !hasAnchor(t, dest, anchor) {
				t.Errorf("%s: the link %s names no heading of %s", rel, target, filepath.Base(dest))
			}
		}
	}
}

// hasAnchor says whether a Markdown file has a heading whose GitHub anchor
// is anchor (lower case, spaces to hyphens, punctuation but - and _ dropped).
func hasAnchor(t *testing.T, file, anchor string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var id strings.Builder
		for _, r := range heading {
			switch {
			case r == ' ':
				id.WriteRune('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
				id.WriteRune(r)
			}
		}
		if id.String() == anchor {
			return true
		}
	}
	return false
}

// outsiders are tests that documents name and that are not this
// repository's: torch's and Go's own. (The classes of torch's suites are
// read from torch_suites.py's SUITES.)
var outsiders = map[string]bool{
	"test_tensorpipe_agent.py": true, // torch's, which composes the suites torch_suites.py runs
	// Go's runtime tests that make test-go-runtime runs (a -run pattern).
	"TestCgo": true, "TestCallback": true, "TestPreempt": true, "TestSched": true, "TestLockOSThread": true, "TestSyscall": true,
}

// Every test a document cites exists: a Go test, fuzz target or benchmark
// (func TestX in a _test.go file; TestX* is any of that prefix), a C++
// test of capi_test/cpp (void testX), or a Python test module, class or
// method of python_bindings/tests or torch_backend/tests (test_mod,
// test_mod.py, test_mod.Class, test_mod.Class.test_method, Class.test_method,
// test_method). Names are read from `code spans` and fenced blocks.
func TestDocsCiteExistingTests(t *testing.T) {
	known := discoverTests(t)
	if len(known.goTests) < 100 || len(known.cppTests) < 10 || len(known.pyModules) < 10 {
		t.Fatalf("found %d Go tests, %d C++ tests, %d Python modules: the discovery is broken", len(known.goTests), len(known.cppTests), len(known.pyModules))
	}
	for _, rel := range documents(t) {
		text := read(t, rel)
		for _, c := range citations(text) {
			if why := known.check(c.name); why != "" {
				t.Errorf("%s:%d: `%s` %s", rel, c.line, c.name, why)
			}
		}
	}
}

// tests is what the repository's test files define.
type tests struct {
	goTests   map[string]bool            // TestX, FuzzX, BenchmarkX, ExampleX
	torch     map[string]bool            // the classes of torch's suites (torch_suites.py), as composed with TensorPipe
	cppTests  map[string]bool            // testX of capi_test/cpp
	pyModules map[string]map[string]bool // test_mod: its classes and test_ methods
	pyClasses map[string]map[string]bool // Class: its test_ methods (over all modules)
	pyMethods map[string]bool            // test_method, over all modules
}

var (
	goTestFunc = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark|Example)\w*)\(`)
	cppTest    = regexp.MustCompile(`(?m)^(?:static )?void (test[A-Z]\w*)\(`)
	pyClass    = regexp.MustCompile(`(?m)^class (\w+)`)
	pyMethod   = regexp.MustCompile(`(?m)^\s+def (test_\w+)\(`)
)

func discoverTests(t *testing.T) tests {
	t.Helper()
	k := tests{map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]map[string]bool{}, map[string]map[string]bool{}, map[string]bool{}}
	suites := regexp.MustCompile(`(?m)^SUITES = \[([^\]]*)\]`).FindStringSubmatch(read(t, filepath.Join("torch_backend", "tests", "torch_suites.py")))
	if suites == nil {
		t.Fatal("torch_backend/tests/torch_suites.py: no SUITES = [...]")
	}
	for _, c := range strings.Split(suites[1], ",") {
		c = strings.TrimSpace(c)
		k.torch[c], k.torch["TensorPipe"+c] = true, true
	}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "build" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		dir, name := filepath.Dir(rel), d.Name()
		switch {
		case strings.HasSuffix(name, "_test.go"):
			for _, m := range goTestFunc.FindAllStringSubmatch(read(t, rel), -1) {
				k.goTests[m[1]] = true
			}
		case dir == filepath.Join("capi_test", "cpp") && strings.HasSuffix(name, ".cpp"),
			dir == filepath.Join("capi_test", "c") && strings.HasSuffix(name, ".c"):
			for _, m := range cppTest.FindAllStringSubmatch(read(t, rel), -1) {
				k.cppTests[m[1]] = true
			}
		case (dir == filepath.Join("python_bindings", "tests") || dir == filepath.Join("torch_backend", "tests")) &&
			strings.HasPrefix(name, "test_") && strings.HasSuffix(name, ".py"):
			mod := strings.TrimSuffix(name, ".py")
			names := map[string]bool{}
			src := read(t, rel)
			// A method belongs to the class above it.
			classes := pyClass.FindAllStringSubmatchIndex(src, -1)
			for _, c := range classes {
				names[src[c[2]:c[3]]] = true
				if k.pyClasses[src[c[2]:c[3]]] == nil {
					k.pyClasses[src[c[2]:c[3]]] = map[string]bool{}
				}
			}
			for _, m := range pyMethod.FindAllStringSubmatchIndex(src, -1) {
				method := src[m[2]:m[3]]
				names[method] = true
				k.pyMethods[method] = true
				for i := len(classes) - 1; i >= 0; i-- {
					if classes[i][0] < m[0] {
						k.pyClasses[src[classes[i][2]:classes[i][3]]][method] = true
						break
					}
				}
			}
			k.pyModules[mod] = names
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// citation is a name a document gives in code, and its line.
type citation struct {
	name string
	line int
}

var (
	codeSpan   = regexp.MustCompile("(?s)```.*?```|`[^`\n]+`")
	word       = regexp.MustCompile(`[A-Za-z_][\w.*]*`)
	goTestName = regexp.MustCompile(`^(?:Test|Fuzz|Benchmark)[A-Z0-9_]\w*\*?$`)
	cppName    = regexp.MustCompile(`^test[A-Z]\w*$`)
	pyName     = regexp.MustCompile(`^(?:test_\w+(?:\.py)?(?:\.\w+){0,2}|[A-Z]\w*\.test_\w+)$`)
)

// citations returns the test names in a document's code spans and fenced
// blocks.
func citations(text string) []citation {
	var out []citation
	for _, span := range codeSpan.FindAllStringIndex(text, -1) {
		for _, w := range word.FindAllStringIndex(text[span[0]:span[1]], -1) {
			name := strings.TrimRight(text[span[0]+w[0]:span[0]+w[1]], ".")
			if goTestName.MatchString(name) || cppName.MatchString(name) || pyName.MatchString(name) {
				out = append(out, citation{name, 1 + strings.Count(text[:span[0]+w[0]], "\n")})
			}
		}
	}
	return out
}

// check returns why name is no test of the repository, or "".
func (k tests) check(name string) string {
	if outsiders[name] {
		return ""
	}
	switch {
	case goTestName.MatchString(name):
		if prefix, ok := strings.CutSuffix(name, "*"); ok {
			for n := range k.goTests {
				if strings.HasPrefix(n, prefix) {
					return ""
				}
			}
			return "names no Go test (none starts so)"
		}
		if k.goTests[name] || k.pyClasses[name] != nil {
			return ""
		}
		return "names no test: no Go test function, no Python test class of that name"
	case cppName.MatchString(name):
		if k.cppTests[name] {
			return ""
		}
		return "names no C++ test of capi_test/cpp"
	}
	parts := strings.Split(strings.Replace(name, ".py", "", 1), ".")
	if !strings.HasPrefix(parts[0], "test_") { // Class.test_method
		if k.pyClasses[parts[0]][parts[1]] || k.torch[parts[0]] {
			return ""
		}
		return "names no Python test method of that class"
	}
	names, isModule := k.pyModules[parts[0]]
	switch {
	case len(parts) == 1 && (isModule || k.pyMethods[parts[0]]):
		return ""
	case len(parts) == 1:
		return "names no Python test module or method"
	case !isModule:
		return "names no Python test module " + parts[0] + " (python_bindings/tests, torch_backend/tests)"
	}
	for _, p := range parts[1:] {
		if !names[p] {
			return "names nothing " + parts[0] + ".py defines: no " + p
		}
	}
	if len(parts) == 3 && !k.pyClasses[parts[1]][parts[2]] {
		return "names no method " + parts[2] + " of " + parts[1]
	}
	return ""
}

// The check itself: it finds the tests the repository has, and refuses
// names it does not (a deleted test, a misspelt module).
func TestCitationCheck(t *testing.T) {
	k := discoverTests(t)
	for _, name := range []string{"TestDocsCiteExistingTests", "TestDocs*", "testContextIdKept", "test_fanout",
		"test_fanout.py", "test_limits.TestIdExhaustion", "test_reliability_fork.MultiprocessingFork.test_children_get_a_clear_error_and_exit",
		"test_spawn_children_use_the_library", "TestTrainingJob"} {
		if why := k.check(name); why != "" {
			t.Errorf("%s: %s", name, why)
		}
	}
	for _, name := range []string{"TestHandleOutlivesRelease", "TestNoSuch*", "testNoSuch", "test_no_such", "test_fanout.NoSuch",
		"test_limits.TestIdExhaustion.test_no_such", "TestIdExhaustion.test_no_such"} {
		if k.check(name) == "" {
			t.Errorf("%s: taken for a test", name)
		}
	}
	var got []string
	for _, c := range citations("see `TestA` and `go test -run TestB ./x/`, `test_m.C.test_x`;\n```\nTestC\n```\n`Other` `testing`") {
		got = append(got, c.name)
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "TestA TestB TestC test_m.C.test_x" {
		t.Errorf("citations: %v", got)
	}
}

// contract.md maps every function of the header, and every C++ and Python
// name it gives is one distautograd.hpp or the Python package defines, so
// the map cannot fall behind the API.
func TestContractMapsTheAPI(t *testing.T) {
	contract := read(t, filepath.Join("docs", "contract.md"))
	header := read(t, filepath.Join("include", "distautograd.h"))
	hpp := read(t, filepath.Join("include", "distautograd.hpp"))
	var py strings.Builder
	pyFiles, err := filepath.Glob(filepath.Join(root, "python_bindings", "distautograd", "*.py"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pyFiles {
		rel, _ := filepath.Rel(root, p)
		py.WriteString(read(t, rel))
	}
	functions := regexp.MustCompile(`(?m)^(?:int |const char \*)(dac_\w+)\(`).FindAllStringSubmatch(header, -1)
	if len(functions) < 50 {
		t.Fatalf("only %d functions found in the header", len(functions))
	}
	for _, f := range functions {
		if !strings.Contains(contract, "`"+f[1]+"`") {
			t.Errorf("docs/contract.md does not map %s", f[1])
		}
	}
	call := regexp.MustCompile("`(?:[\\w.]+\\.)?(\\w+)\\(")
	for i, line := range strings.Split(contract, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 6 || !strings.HasPrefix(line, "| ") {
			continue
		}
		cpp, python := cells[3], cells[4]
		for _, m := range call.FindAllStringSubmatch(cpp, -1) {
			if !regexp.MustCompile(`\b` + m[1] + `\(`).MatchString(hpp) {
				t.Errorf("docs/contract.md:%d: C++ %s() is not in distautograd.hpp", i+1, m[1])
			}
		}
		for _, m := range call.FindAllStringSubmatch(python, -1) {
			if !regexp.MustCompile(`(?m)^\s*(?:def|class) ` + m[1] + `\b`).MatchString(py.String()) {
				t.Errorf("docs/contract.md:%d: Python %s() is not in the package", i+1, m[1])
			}
		}
	}
}
