package capi_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unpatchedEnv returns the environment that runs a test program against
// build/nooverlay/libdistautograd.so, the library built with Go's runtime
// as shipped (make nooverlay-lib).
func unpatchedEnv(t testing.TB) []string {
	t.Helper()
	lib := requireLibrary(t, "build/nooverlay/libdistautograd.so", "nooverlay-lib")
	return []string{"LD_LIBRARY_PATH=" + filepath.Dir(lib)}
}

// msLine is a line of a program's stderr that ends in how long something
// took: "...: 123 ms".
var msLine = regexp.MustCompile(`(?m)^(.*): (\d+) ms$`)

// stderrMillis sums the "...: N ms" lines of a program's stderr.
func stderrMillis(stderr string) (sum int64, lines []string) {
	for _, m := range msLine.FindAllStringSubmatch(stderr, -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		sum += n
		lines = append(lines, m[0])
	}
	return sum, lines
}

const timedPromisesVerdict = `
	flush(50 ms) beside a blocked sender: DAC_ERR_TIMEOUT, pending 1: every time, while the callers looped: yes
	set_cleanup_sender_timeout(50 ms) past a blocked sender: DAC_ERR_TIMEOUT, while the callers looped: yes
	a message retried after 1 ms, flushed: every time, delivered 5 of 5, while the callers looped: yes
	a context idle 150 ms reaped at 30 ms: 5 of 5, flushed: every time, delivered 5, while the callers looped: yes
	every looping call worked: yes
`

// Every promise of the header that runs on a clock (a flush's timeout, the
// bounded wait for a replaced sender, a failed message's retry after its
// back-off, reaping and the reaped context's message) holds while C threads
// call into the library in tight loops: 1 to 8 threads, GOMAXPROCS 1, 2
// and 8 (c/timed_promises.c, 5 rounds of each).
//
// Two checks. Each promise is kept while the threads still loop: they stop
// by themselves only after 20 s, so a promise that waits for them to stop
// reads "no" (a timer or goroutine queued on a P that a looping thread
// keeps out in C runs only once that thread leaves it). And the library
// takes no longer to keep them than the same library built with Go's
// runtime as shipped (build/nooverlay) in the same run: the patched
// runtime's changes may make calls from C cheaper, never a timed promise
// later. Timings on a loaded 2-core machine vary by whole seconds from run
// to run, whichever runtime; so the comparison allows twice the unpatched
// time plus a second, and a configuration that exceeds it is run again, up
// to three times: it fails only if the patched runtime is slower every
// time. A runtime that starves the timers (one that moves a P's
// scheduler tick on every call from C, so the monitor never takes the P
// back from a looping thread) fails it at GOMAXPROCS=1 every
// time on a loaded machine, where only the system descheduling the looping
// thread lets its timers run at all, and never ends on an idle one
// (docs/perf-data/2026-12-06-go-runtime-changes.txt has such figures).
func TestTimedPromisesHoldBesideLoopingCallers(t *testing.T) {
	// Not t.Parallel: it compares two builds (see comparisonsOfBuilds).
	bin := buildC(t, "c/timed_promises.c", "-lpthread")
	unpatched := unpatchedEnv(t)
	for _, cfg := range []struct{ procs, loopers int }{{1, 1}, {1, 2}, {1, 8}, {2, 1}, {2, 2}, {2, 8}, {8, 1}, {8, 8}} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d/loopers=%d", cfg.procs, cfg.loopers), func(t *testing.T) {
			procs := "GOMAXPROCS=" + itoa(cfg.procs)
			args := []string{itoa(cfg.loopers), "5", "20000"}
			var attempts []string
			for attempt := 1; attempt <= 3; attempt++ {
				p := runEnv(t, []string{procs}, bin, args...)
				require.Equal(t, 0, p.Code, "stdout:\n%s\nstderr:\n%s", p.Stdout, p.Stderr)
				require.True(t, assertTranscript(t, timedPromisesVerdict, p.Stdout), "stderr:\n%s", p.Stderr)
				u := runEnv(t, append([]string{procs}, unpatched...), bin, args...)
				require.Equal(t, 0, u.Code, "unpatched: stdout:\n%s\nstderr:\n%s", u.Stdout, u.Stderr)
				pSum, pLines := stderrMillis(p.Stderr)
				uSum, uLines := stderrMillis(u.Stderr)
				require.Len(t, pLines, 4, "stderr:\n%s", p.Stderr)
				require.Len(t, uLines, 4, "unpatched stderr:\n%s", u.Stderr)
				attempts = append(attempts, fmt.Sprintf("attempt %d: patched %d ms (%s); unpatched %d ms (%s)",
					attempt, pSum, strings.Join(pLines, ", "), uSum, strings.Join(uLines, ", ")))
				t.Log(attempts[len(attempts)-1])
				if pSum <= 2*uSum+1000 {
					return
				}
			}
			assert.Fail(t, "the patched runtime kept the timed promises later than Go's runtime as shipped, three times running", strings.Join(attempts, "\n"))
		})
	}
}
