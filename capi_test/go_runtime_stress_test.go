package capi_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const runtimeStressVerdict = `
	dac_cleanup_flush(60000, &pending) -> DAC_OK
	pending = 0
	num_contexts() = 0
	cleanup: failed 0, dropped 0, retried some: yes
	unexpected statuses = 0
	threads came and went: yes, flushes: yes, SIGPROF fired: yes
`

// runtimeStressCounts reads c/runtime_stress.c's counts off its stderr.
var runtimeStressCounts = regexp.MustCompile(`calls (\d+), slow calls (\d+), slow flushes (\d+) of (\d+), worst (\d+) ms`)

// stressCounts is what a run of c/runtime_stress.c counted.
type stressCounts struct{ calls, slow, slowFlushes, flushes, worstMs int64 }

func readStressCounts(t *testing.T, stderr string) stressCounts {
	t.Helper()
	m := runtimeStressCounts.FindStringSubmatch(stderr)
	require.NotNil(t, m, "no counts on stderr:\n%s", stderr)
	n := make([]int64, len(m)-1)
	for i := range n {
		n[i], _ = strconv.ParseInt(m[i+1], 10, 64)
	}
	return stressCounts{n[0], n[1], n[2], n[3], n[4]}
}

// An attack on the patched Go runtime the library is built with
// (c/runtime_stress.c): 128 and then 256 C threads at once for 3 s, calling
// in tight loops and in bursts, threads that start, make a few calls and
// exit all the while, a cleanup sender that blocks 50 ms now and then and
// fails one message in 8 (retried), a thread flushing with a 20 ms timeout
// again and again, SIGPROF every millisecond of CPU time and GOGC=1. No
// deadlock (the program's alarm and runEnv's timeout bound it), no crash,
// every status one its call allows, nothing left at the end.
//
// And no call waits over 100 ms where Go's runtime as shipped does not:
// the same program runs against build/nooverlay in the same test, and the
// patched library may make neither more of its calls slow (over 100 ms; a
// flush: over 100 ms past its timeout) than it nor a larger share of them.
// On a loaded 2-core machine both have hundreds to thousands of slow calls
// from the system's scheduler alone (a few hundred threads on two cores):
// a run that gets through more calls has more of them in flight when the
// system takes the CPU away, and the calls a run makes swing fivefold with
// the load. So the patched count may exceed by half plus 100 the larger of
// the unpatched count and the unpatched share of the patched calls
// (slowCallsWithinAsShipped), and a pair of runs that exceeds that is run
// again, up to three times: the test fails only if the patched runtime is
// worse every time. (A runtime that makes calls wait has more slow calls
// and makes fewer: worse both ways.)
// A monitor that backs off while dozens of threads wait for a P makes
// calls wait where the unpatched runtime does not (make bench's runtime
// level measures such waits).
func TestRuntimeStress(t *testing.T) {
	// Not t.Parallel: it compares two builds (see comparisonsOfBuilds).
	bin := buildC(t, "c/runtime_stress.c", "-lpthread")
	unpatched := unpatchedEnv(t)
	for _, threads := range []int{128, 256} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			asResponsiveAsShipped(t, "calls", func(int) (patched, unpatchedRun slowRun, line string) {
				p := runEnv(t, []string{"GOGC=1"}, bin, itoa(threads), "3")
				require.Equal(t, 0, p.Code, "stdout:\n%s\nstderr:\n%s", p.Stdout, p.Stderr)
				require.True(t, assertTranscript(t, runtimeStressVerdict, p.Stdout), "stderr:\n%s", p.Stderr)
				u := runEnv(t, append([]string{"GOGC=1"}, unpatched...), bin, itoa(threads), "3")
				require.Equal(t, 0, u.Code, "unpatched: stdout:\n%s\nstderr:\n%s", u.Stdout, u.Stderr)
				assertTranscript(t, runtimeStressVerdict, u.Stdout)
				pc, uc := readStressCounts(t, p.Stderr), readStressCounts(t, u.Stderr)
				return slowRun{pc.slow, pc.calls}, slowRun{uc.slow, uc.calls},
					fmt.Sprintf("patched: %s; unpatched: %s", strings.TrimSpace(p.Stderr), strings.TrimSpace(u.Stderr))
			})
		})
	}
}

// comparisonsOfBuilds are the tests that hold the library's timings to
// those of the build with Go's runtime as shipped (build/nooverlay), run
// in turn in the same test. None calls t.Parallel, so that no other test
// of the package loads the machine during one build's runs and not the
// other's (Go runs the package's sequential tests one at a time, before
// the parallel ones). make test runs them so; make test-go-runtime runs
// them again, alone, after the responsiveness battery in full (the
// Makefile takes this list).
var comparisonsOfBuilds = []string{"TestRuntimeBusyThreads", "TestRuntimeStress", "TestTimedPromisesHoldBesideLoopingCallers"}

// The list is the Makefile's BUILD_COMPARISONS, and none of them is
// parallel.
func TestComparisonsOfBuildsRunAlone(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^BUILD_COMPARISONS := (.*)$`).FindSubmatch(mk)
	require.NotNil(t, m, "the Makefile sets BUILD_COMPARISONS")
	assert.Equal(t, comparisonsOfBuilds, strings.Fields(string(m[1])), "the Makefile's BUILD_COMPARISONS")
	sources, err := filepath.Glob(filepath.Join(root, "capi_test", "*_test.go"))
	require.NoError(t, err)
	var all strings.Builder
	for _, f := range sources {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		all.Write(b)
	}
	for _, name := range comparisonsOfBuilds {
		body := regexp.MustCompile(`(?s)\nfunc ` + name + `\(t \*testing\.T\) \{\n(.*?)\n\}\n`).FindStringSubmatch(all.String())
		if assert.NotNil(t, body, "func %s(t *testing.T) in capi_test", name) {
			assert.NotContains(t, body[1], "t.Parallel()", "%s compares two builds: it must not run in parallel with other tests", name)
		}
	}
}

// slowRun is what a run made: its calls over 100 ms, and how many calls (in
// whatever unit both runs of a pair count in).
type slowRun struct{ slow, calls int64 }

// asResponsiveAsShipped runs pair (a run of the library as built and one on
// Go's runtime as shipped, with a line for the log) up to three times, until
// one pair keeps slowCallsWithinAsShipped's rule; three pairs that all break
// it fail the test. what names the calls counted, for the failure.
func asResponsiveAsShipped(t *testing.T, what string, pair func(attempt int) (patched, unpatched slowRun, line string)) {
	t.Helper()
	var attempts []string
	for attempt := 1; attempt <= 3; attempt++ {
		p, u, line := pair(attempt)
		attempts = append(attempts, fmt.Sprintf("attempt %d: %s", attempt, line))
		t.Log(attempts[len(attempts)-1])
		if slowCallsWithinAsShipped(p.slow, p.calls, u.slow, u.calls) {
			return
		}
	}
	assert.Fail(t, "the patched runtime made more "+what+" wait over 100 ms than Go's runtime as shipped, three times running",
		strings.Join(attempts, "\n"))
}

// slowCallsWithinAsShipped says whether a run of the patched library, with
// slow of its calls over 100 ms, was as responsive as a run of the
// unpatched one beside it: slow may exceed by half, plus 100, the larger of
// the unpatched run's count and its share of the patched run's calls
// (calls are whatever unit both runs count in). The system's scheduler
// makes calls wait with either runtime, more of them the more calls a run
// gets through, and a run beside another's load swings by hundreds; a
// runtime that keeps threads from a P makes hundreds more and gets through
// fewer calls, so the larger of the two bounds never excuses it.
func slowCallsWithinAsShipped(slow, calls, unpatchedSlow, unpatchedCalls int64) bool {
	share := float64(unpatchedSlow) / float64(max(unpatchedCalls, 1)) * float64(calls)
	return float64(slow) <= max(float64(unpatchedSlow), share)*1.5+100
}
