package capi_test

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (the
// harness's process runs and pipes must all be waited for).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Leak bounds, generous: a leak of one small object per iteration over
// millions of iterations is tens of MiB, far past them; allocator and
// runtime noise is far below.
const (
	rssSlack    = 64 << 20
	goHeapSlack = 16 << 20
)

var leakSample = regexp.MustCompile(`(?m)^sample (\d+): iterations (\d+), rss (\d+), go_heap (\d+)$`)

// 3 million iterations (or 10 s, whichever comes first) of a pass's worth of
// calls with every handle dropped: new context, retrieve, message id, known
// worker and send function now and then, get-or-create of another worker's
// pass, releases. The resident set and the Go heap after the first tenth
// (the warm-up) stay within generous bounds of where they were then, and
// nothing is left: no context, no live handle.
func TestLeakLoopStaysFlat(t *testing.T) {
	t.Parallel()
	out := run(t, buildC(t, "c/leak.c"), "3000000", "10")
	samples := leakSample.FindAllStringSubmatch(out, -1)
	require.GreaterOrEqual(t, len(samples), 2, out)
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	warmRSS, warmHeap := num(samples[0][3]), num(samples[0][4])
	assert.Positive(t, warmHeap, "go_heap_bytes after a million calls: the collector has run")
	for _, s := range samples[1:] {
		assert.Less(t, num(s[3]), warmRSS+rssSlack, "resident set at %s iterations", s[2])
		assert.Less(t, num(s[4]), warmHeap+goHeapSlack, "Go heap at %s iterations", s[2])
	}
	last := samples[len(samples)-1]
	t.Logf("leak loop: %s iterations; resident %.1f -> %.1f MiB, Go heap %.2f -> %.2f MiB (after warm-up -> end)",
		last[2], float64(warmRSS)/(1<<20), float64(num(last[3]))/(1<<20), float64(warmHeap)/(1<<20), float64(num(last[4]))/(1<<20))
	assert.Regexp(t, `(?m)^done: \d+ iterations in [0-9.]+ s, num_contexts = 0, live_handles = 0$`, out)
}
