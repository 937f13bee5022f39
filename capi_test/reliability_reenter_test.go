package capi_test

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A row of c/reenter.c: "ROW WHERE fn | call -> STATUS | MS ms".
var reenterRow = regexp.MustCompile(`^ROW (sender|hook|main, [^|]*?) (dac_\w+) \| (.*) -> (\w+) \| (\d+) ms$`)

// reenterBoundMs is c/reenter.c's BOUND_MS: a row that takes longer waits
// for the callback it runs in (the program's watchdog ends it then).
const reenterBoundMs = 10000

// From inside a cleanup sender and from inside the log hook, every function
// of the header (a table checked against the header, so a new function
// cannot be forgotten) returns within a hang bound with the result the
// header documents: dac_cleanup_flush answers at once (a sender's own
// message is pending), dac_set_cleanup_sender and _timeout do not wait for
// the call they are made from, dac_fork_prepare does not wait for it either.
// Then a sender replaces itself while the main thread waits in
// dac_set_cleanup_sender for it: neither waits for the other.
func TestReentrance(t *testing.T) {
	t.Parallel()
	r := runEnv(t, nil, buildC(t, "c/reenter.c"))
	require.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	covered := map[string]map[string]bool{"sender": {}, "hook": {}}
	n := 0
	for _, line := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(line, "BUG") || strings.HasPrefix(line, "HANG") {
			t.Error(line)
		}
		if !strings.HasPrefix(line, "ROW ") {
			continue
		}
		m := reenterRow.FindStringSubmatch(line)
		if !assert.NotNil(t, m, "unparsed row: %s", line) {
			continue
		}
		n++
		if ms, _ := strconv.Atoi(m[5]); ms >= reenterBoundMs {
			t.Errorf("%s: took %d ms, past the hang bound", line, ms)
		}
		if c, ok := covered[m[1]]; ok {
			c[m[2]] = true
		}
	}
	for where, c := range covered {
		var missing []string
		for _, fn := range headerFunctions(t) {
			if !c[fn] {
				missing = append(missing, fn)
			}
			delete(c, fn)
		}
		sort.Strings(missing)
		assert.Empty(t, missing, "functions of the header without a row from inside the %s", where)
		assert.Empty(t, c, "rows from inside the %s for functions the header does not declare", where)
	}
	assert.Contains(t, r.Stdout, "\nnum_contexts = 0\nlive_handles = 0\nrows = "+strconv.Itoa(n)+", bugs = 0\n")
	assert.Empty(t, strings.TrimSpace(r.Stderr))
}
