package capi_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Each call from C into Go counts as a schedule of the P it runs on, while
// no goroutine waits to run (scripts/go-runtime-overlay,
// callback-is-a-schedule), read off Go's own scheduler trace: a thread that
// calls 200,000 times moves the ticks of the Ps by about as much. Go 1.26 as
// built moves them only when a goroutine is scheduled, which calls from C
// never do, so its monitor took the P back from such a thread at every look
// after 10 ms.
// (TestCallsFromCMoveTheirPsTick reads the same change off the machine code.)
func TestCallsFromCMoveThePsTick(t *testing.T) {
	t.Parallel()
	r := runEnv(t, []string{"GODEBUG=schedtrace=10,scheddetail=1"}, buildC(t, "c/schedtick.c"))
	assert.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	assertTranscript(t, `calls into Go: at least 200000: 1, every one worked: 1`, r.Stdout)
	// A trace is a "SCHED" line, then a line per P: "  P0: status=1 schedtick=N syscalltick=M ...".
	pLine := regexp.MustCompile(`^\s+P\d+: status=\d+ schedtick=(\d+) `)
	most, sum, traces := int64(0), int64(0), 0
	for _, line := range strings.Split(r.Stderr, "\n") {
		if strings.HasPrefix(line, "SCHED ") {
			most, sum = max(most, sum), 0
			traces++
			continue
		}
		if m := pLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			sum += n
		}
	}
	most = max(most, sum)
	if !assert.NotZero(t, traces, "no scheduler trace on stderr:\n%s", r.Stderr) {
		return
	}
	// A build with Go's runtime as it is (GO_RUNTIME_OVERLAY=0, an untested
	// Go) keeps Go's rule: the calls move no tick.
	if goRuntimeStatus(t)[callbackIsASchedule.name] {
		assert.GreaterOrEqual(t, most, int64(100000), "the Ps' ticks, summed, at most %d over %d traces: calls from C do not move them", most, traces)
	} else {
		assert.Less(t, most, int64(100000), "the Ps' ticks, summed, reached %d over %d traces in a build without callback-is-a-schedule", most, traces)
	}
}

// More C threads than Ps (GOMAXPROCS=1), each calling into Go without
// pause: every one makes progress (c/fairness.c). Moving the P's tick on
// every call would let the first thread keep the P for good (Go's monitor
// takes a P back from a thread in C only if its system-call tick stood
// still between two looks, and these calls move it); the overlay moves it
// only while no goroutine waits to run, so a waiting thread gets the P
// within about 10 ms, as from a goroutine that runs long.
func TestCallsFromCThreadsShareThePs(t *testing.T) {
	t.Parallel()
	r := runEnv(t, []string{"GOMAXPROCS=1"}, buildC(t, "c/fairness.c", "-lpthread"))
	assert.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	assertTranscript(t, `
		4 threads, each made 10000 calls: 1
		every call worked: 1
	`, r.Stdout)
}
