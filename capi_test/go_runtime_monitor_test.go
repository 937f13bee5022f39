package capi_test

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// monitorWakesLine is c/monitor_wakes.c's verdict.
var monitorWakesLine = regexp.MustCompile(`(?m)^other threads' voluntary switches: (-?\d+) over (\d+) rounds$`)

// monitorWakes runs c/monitor_wakes.c (rounds of a pause, then the calls
// of mode: "new", a creation and a release; "lookup", a retrieve) with
// env, and returns how often the process's other threads (Go's own) gave
// up their CPU over the rounds.
func monitorWakes(t *testing.T, bin string, env []string, rounds, pauseMs int, mode string) int {
	t.Helper()
	r := runEnv(t, append([]string{"GOMAXPROCS=2"}, env...), bin, itoa(rounds), itoa(pauseMs), mode)
	require.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	m := monitorWakesLine.FindStringSubmatch(r.Stdout)
	require.NotNil(t, m, "stdout:\n%s", r.Stdout)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// A C thread that calls into Go after a pause, while a P stays idle beside
// the one it takes, leaves Go's threads asleep: with Go's runtime as
// shipped each such call wakes the monitor from its deep sleep (which then
// takes the thread's P back and hands it off, waking an M), a few wakes a
// call; with monitor-sleeps-beside-an-idle-p, nothing wakes. A count of
// context switches, not a time: what load changes is whether the monitor
// as shipped got to its deep sleep between two calls, so the build as
// shipped need only show its wakes in one of three attempts, which proves
// the count sees them.
func TestCallsFromCLeaveTheMonitorAsleep(t *testing.T) {
	t.Parallel()
	_, applied := requireOverlay(t, overlayChangeNamed(t, "monitor-sleeps-beside-an-idle-p"))
	bin := buildC(t, "c/monitor_wakes.c")
	const rounds, pauseMs = 100, 5
	unpatched := unpatchedEnv(t)
	seen := false
	for attempt := 1; attempt <= 3 && !seen; attempt++ {
		asBuilt, asShipped := monitorWakes(t, bin, nil, rounds, pauseMs, "new"), monitorWakes(t, bin, unpatched, rounds, pauseMs, "new")
		t.Logf("attempt %d: Go's threads switched %d times as built, %d as shipped, over %d calls after a %d ms pause", attempt, asBuilt, asShipped, 2*rounds, pauseMs)
		if applied {
			assert.LessOrEqual(t, asBuilt, rounds/10, "Go's threads woke as the calls came")
		}
		seen = asShipped >= rounds/4
	}
	assert.True(t, seen, "as shipped, Go's threads never woke with the calls: the count cannot see the wakes")
}
