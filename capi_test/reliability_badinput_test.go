package capi_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// badRow is one line of c/badinput.c's table.
type badRow struct {
	fn, what, call, status, msg string
}

// A row is "ROW fn | what | call -> STATUS[: message]", or "... => value"
// for the functions that cannot fail (the value is then in msg).
var badRowLine = regexp.MustCompile(`^ROW (\w+) \| (.*?) \| (.*) (?:-> (DAC_\w+)(?:: (.*))?|=> (.*))$`)

// nativeMessages are how the native component's messages start; every other
// failure message must start "distautograd: ".
var nativeMessages = []string{
	"Could not find autograd context with id: ", "Could not find send function", "Could not find recv function",
	"worker_id needs to be in the range [0, 65535]", "Container is already initialized with worker_id: ",
	"Already have an autograd context id for this thread.", "Current thread doesn't have a valid autograd context.",
	"Couldn't find autograd context data for current autograd context id",
}

// checkBadInput runs c/badinput.c's table and checks it: every function of
// the header has a row, every row gave its status (the program checks, and
// prints BUG otherwise), every failure has a clear message, a normal
// operation worked after each row, and nothing was left behind. It returns
// the number of rows.
func checkBadInput(t *testing.T, out string) int {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "BUG") {
			t.Error(line)
		}
	}
	var rows []badRow
	for _, line := range strings.Split(out, "\n") {
		if m := badRowLine.FindStringSubmatch(line); m != nil {
			rows = append(rows, badRow{m[1], m[2], m[3], m[4], m[5] + m[6]})
		} else if strings.HasPrefix(line, "ROW ") {
			t.Errorf("unparsed row: %s", line)
		}
	}
	covered := map[string]bool{}
	for _, r := range rows {
		covered[r.fn] = true
		if !strings.HasPrefix(r.status, "DAC_ERR_") {
			continue
		}
		assert.NotEmpty(t, r.msg, "%s: no message", r.call)
		assert.NotContains(t, r.msg, "internal error", r.call)
		assert.NotContains(t, r.msg, "%!", "%s: a formatting error", r.call)
		if !strings.HasPrefix(r.msg, "distautograd: ") {
			assert.True(t, slices.ContainsFunc(nativeMessages, func(p string) bool { return strings.HasPrefix(r.msg, p) }),
				"%s: neither a native message nor distautograd's: %q", r.call, r.msg)
		}
		// A NULL out-pointer is named, with the function, in the message.
		if strings.HasPrefix(r.what, "NULL ") && r.status == "DAC_ERR_INVALID_ARGUMENT" {
			assert.Contains(t, r.msg, r.fn+": ", r.call)
		}
		if r.status == "DAC_ERR_BAD_HANDLE" {
			assert.Contains(t, r.msg, "context handle", r.call)
		}
	}
	var missing []string
	for _, fn := range headerFunctions(t) {
		if !covered[fn] {
			missing = append(missing, fn)
		}
		delete(covered, fn)
	}
	assert.Empty(t, missing, "functions of the header without a bad-input row")
	assert.Empty(t, covered, "rows for functions the header does not declare")
	for _, line := range []string{"a dead handle's slot was given out again: yes", "num_contexts = 0, live handles 0: yes",
		"rows = " + strconv.Itoa(len(rows)) + ", bugs = 0"} {
		assert.True(t, strings.Contains("\n"+out, "\n"+line+"\n"), "no line %q in the output", line)
	}
	return len(rows)
}

// pythonBadInput runs the Python half of the table
// (python_bindings/tests/test_reliability_badinput.py) and returns its count.
func pythonBadInput(t *testing.T) int {
	t.Helper()
	root := repoRoot(t)
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		python = "python3"
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "tests.test_reliability_badinput")
	cmd.Dir = filepath.Join(root, "python_bindings")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+cmd.Dir, "DISTAUTOGRAD_LIBRARY="+filepath.Join(root, "build", "libdistautograd.so"), "GLOG_minloglevel=2")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := regexp.MustCompile(`bad-input cases: (\d+) Python`).FindSubmatch(out)
	require.NotNil(t, m, "%s", out)
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// Every function of the header with bad input: NULL pointers, negative,
// huge and extreme values, other workers' ids, dead, reused and never-issued
// handles, a second unref, the cap. Each gets its status and a clear message
// and the process keeps working; then the Python table, every function of
// the package with wrong types and out-of-range values.
func TestBadInputEverywhere(t *testing.T) {
	t.Parallel()
	nC := checkBadInput(t, run(t, buildC(t, "c/badinput.c")))
	nPy := pythonBadInput(t)
	t.Logf("bad-input cases: %d C, %d Python", nC, nPy)
}

// The C table again, the program and the library under the sanitizers: a
// bad handle or a short buffer must not make the library read or write
// memory it does not own.
func TestBadInputSanitized(t *testing.T) {
	t.Parallel()
	checkBadInput(t, runSanitized(t, "c/badinput.c").Stdout)
}
