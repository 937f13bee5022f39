package capi_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// examples/demo.c builds with the strict flags and tells its story: each
// pass's context current on its own thread, found from an RPC thread, released
// with a cleanup to each known worker, and nothing left at the end.
func TestDemo(t *testing.T) {
	t.Parallel()
	out := run(t, buildC(t, "../examples/demo.c"))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, want := range []string{
		"init(3): ids are [worker | 48-bit counter]; max_id = 1125899906842623 [worker 3 #281474976710655]",
		"pass 1, on its own thread: new context 844424930131968 [worker 3 #0], now this thread's current (yes)",
		"    forward: RPC to worker 4, message 844424930131968 [worker 3 #0]",
		"    [rpc thread] reply from worker 4 for context 844424930131968 [worker 3 #0] (this thread's current context: none);",
		"    known workers: 4 5",
		"    cleanup sent to 2 workers: 4 5",
		"pass 2, on its own thread: new context 844424930132032 [worker 3 #64], now this thread's current (yes)",
		"    cleanup sent to 3 workers: 4 6 7",
		"    cleanup sent to 1 worker: 5",
		"    released; this thread's current context id is now -1",
		"worker 6's pass 1688849860263977 [worker 6 #41] arrived: contexts held: 1",
		"    its cleanup again: released 0 (a no-op)",
	} {
		assert.Contains(t, lines, want)
	}
	assert.Contains(t, out, `"live_handles":0`)
	assert.Contains(t, out, `"cleanup_sent":6`)
	assert.Equal(t, "num_contexts 0", lines[len(lines)-1])
}
