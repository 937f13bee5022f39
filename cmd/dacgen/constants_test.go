package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"distautograd/abi"
)

// Each default and limit the C ABI states is written once, in container/:
// the header states it between its dacgen:constants markers with Go's
// value (generated, so current when TestGeneratedFilesAreCurrent passes),
// C takes the header's macro, and no document, wrapper or comment restates
// the figure by hand: they name the header's macro (or Go's constant).
func TestSharedConstantsHaveOneOwner(t *testing.T) {
	u, err := abi.Parse(filepath.Join(root, HeaderPath), abi.Options{Prefix: "DAC_"})
	if err != nil {
		t.Fatal(err)
	}
	inHeader := map[string]int64{}
	for _, c := range u.Consts {
		inHeader[c.Name] = c.Value
	}
	for _, c := range sharedConsts() {
		if v, ok := inHeader[c.name]; !ok || v != c.value {
			t.Errorf("%s: %s is %d (present: %v), container.%s is %d: run `make generate`", HeaderPath, c.name, v, ok, c.owner, c.value)
		}
	}

	// The atfork handler's wait is the header's macro (C owns it: no Go
	// code waits there).
	fork, err := os.ReadFile(filepath.Join(root, "csrc", "fork.c"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^#define DACC_FORK_WAIT_MS DAC_FORK_WAIT_MS\b`).Match(fork) {
		t.Errorf("csrc/fork.c: DACC_FORK_WAIT_MS is not defined as the header's DAC_FORK_WAIT_MS")
	}

	// C's message-id block is the header's macro.
	lib, err := os.ReadFile(filepath.Join(root, "csrc", "library.c"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#define DACC_MESSAGE_ID_BLOCK (\S+)`).FindSubmatch(lib)
	if m == nil || string(m[1]) != "DAC_MESSAGE_ID_BLOCK" {
		t.Errorf("csrc/library.c: DACC_MESSAGE_ID_BLOCK is not defined as the header's DAC_MESSAGE_ID_BLOCK (%q)", m)
	}

	// The figures restated by hand, as they were before they had an owner.
	restated := map[string]*regexp.Regexp{}
	for name, re := range map[string]string{
		"DAC_CLEANUP_DEFAULT_MAX_ATTEMPTS":       `\b21\b[^.;]{0,25}attempts|attempts[^.;]{0,25}\b21\b`,
		"DAC_CLEANUP_DEFAULT_INITIAL_BACKOFF_US": `\b10 ?ms[^.;]{0,25}backoff|backoff[^.;]{0,25}\b10 ?ms\b|\(0\.01\)`,
		"DAC_CLEANUP_DEFAULT_MAX_BACKOFF_US":     `backoff[^.;]{0,25}\bto 2 ?s\b|\(2\.0\)`,
		"DAC_CLEANUP_DEFAULT_MAX_PENDING":        `\b65,?536\b[^.;]{0,25}pending|pending[^.;]{0,25}\b65,?536\b`,
		"DAC_CLEANUP_MAX_PENDING_LIMIT":          `\b4,?194,?304\b`,
		"DAC_MESSAGE_ID_BLOCK":                   `blocks? of 4,?096|4,?096 ids|\b4,?096 from the one counter`,
		"DAC_REAPED_IDS_KEPT":                    `\b65,?536\b[^.;]{0,25}reaped|reaped[^.;]{0,40}\b65,?536\b`,
		"DAC_REAPED_IDS_MIN_PER_SHARD":           `at least 256\b`,
		"DAC_FORK_WAIT_MS":                       `(fork|atfork)[^.;]{0,60}\b(up to|within|holds[^.;]{0,20}up) 2 ?s\b|\b2 ?s from the library's pthread_atfork`,
	} {
		// A space of the pattern is any run of white space (a line break).
		restated[name] = regexp.MustCompile(strings.ReplaceAll(re, " ", `\s+`))
	}
	for _, rel := range restatingFiles(t) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if rel == HeaderPath {
			begin, end := strings.Index(text, constantsBegin), strings.Index(text, constantsEnd)
			text = text[:begin] + strings.Repeat("\n", strings.Count(text[begin:end], "\n")) + text[end:]
		}
		for name, re := range restated {
			for _, loc := range re.FindAllStringIndex(text, -1) {
				line := 1 + strings.Count(text[:loc[0]], "\n")
				t.Errorf("%s:%d: %q restates %s: name it instead", rel, line, strings.Join(strings.Fields(text[loc[0]:loc[1]]), " "), name)
			}
		}
	}
}

// restatingFiles are the files that could restate a default: the docs
// (benchmarks.md is written by make bench, and perf-data holds raw runs),
// the READMEs, the public headers, the Python package but its generated
// _abi.py, and the library's Go sources and C headers.
func restatingFiles(t *testing.T) []string {
	var files []string
	for _, pattern := range []string{"docs/*.md", "*.md", "python_bindings/*.md", "include/*", "python_bindings/distautograd/*.py",
		"*.go", "container/*.go", "*.h", "csrc/*.h", "csrc/*.c"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case rel == "docs/benchmarks.md", rel == PythonPath, strings.HasSuffix(rel, "_test.go"):
				continue
			}
			files = append(files, rel)
		}
	}
	if len(files) < 20 {
		t.Fatalf("only %d files to read from %s: run from cmd/dacgen", len(files), root)
	}
	return files
}
