package sim

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"distautograd/container"
)

func TestMain(m *testing.M) {
	// Every worker's FanoutQueue must be gone when Run returns.
	goleak.VerifyTestMain(m)
}

// run runs cfg and fails the test if a property failed; it prints the
// figures with -v.
func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	res, err := Run(cfg)
	if testing.Verbose() {
		res.Print(os.Stdout)
	}
	require.NoError(t, err)
	assert.Zero(t, res.Cleanup.Pending)
	return res
}

// faulty is a modest network with every fault: sized to finish in a few
// seconds under the race detector on two cores.
var faulty = Config{
	Workers:  64,
	Passes:   3000,
	Drop:     0.05,
	Dup:      0.05,
	Delay:    0.02,
	MaxDelay: 200 * time.Microsecond,
	Kill:     3,
	Seed:     7,
}

func TestSimCleansUpEveryLiveWorker(t *testing.T) {
	res := run(t, faulty)
	assert.Equal(t, int64(faulty.Passes), res.Passes)
	assert.Len(t, res.Killed, faulty.Kill)
	// Each victim dies in a pass it started, before releasing it; so does
	// any pass of a victim's that was in flight when it died (passes run
	// Concurrency at a time): at most Concurrency per kill. The run itself
	// checks that a pass left unreleased had a dead origin.
	abandoned := res.Passes - res.Released
	assert.GreaterOrEqual(t, abandoned, int64(faulty.Kill))
	assert.LessOrEqual(t, abandoned, int64(faulty.Kill*res.Config.Concurrency))

	// Every fault happened, and was survived.
	assert.Positive(t, res.RPCLost)
	assert.Positive(t, res.RPCDuplicated)
	assert.Positive(t, res.RPCRefused, "RPCs to killed workers")
	assert.Positive(t, res.Delayed)
	assert.Positive(t, res.Cleanup.Sent)
	assert.Positive(t, res.Cleanup.Retried, "lost cleanup messages are retried")
	assert.Positive(t, res.Cleanup.Failed, "messages to killed workers are given up on")
	assert.Positive(t, res.ToDead)
	assert.Positive(t, res.Duplicates)
	assert.Positive(t, res.CleanupNoops, "cleanups arrive twice, and at workers that never saw the pass")
	assert.Positive(t, res.Orphans, "the victims' passes are left on live workers until ReleaseContextsOfWorker")
	assert.Zero(t, res.Cleanup.Skipped)
	// Every attempt succeeded, led to a retry, or was the last.
	assert.GreaterOrEqual(t, res.CleanupAttempts, res.Cleanup.Sent+res.Cleanup.Retried+res.Cleanup.Failed)
}

func TestSimIsDeterministicWithoutKills(t *testing.T) {
	cfg := faulty
	cfg.Kill = 0
	cfg.Passes = 600
	a, b := run(t, cfg), run(t, cfg)
	a.Wall, a.Settle, b.Wall, b.Settle = 0, 0, 0, 0
	assert.Equal(t, a, b, "the same seed must give the same figures")
	assert.Equal(t, a.CleanupAttempts, a.Cleanup.Sent+a.Cleanup.Retried+a.Cleanup.Failed)
	assert.Zero(t, a.Cleanup.Failed+a.Cleanup.Dropped+a.Orphans+a.Stranded)

	cfg.Seed++
	c := run(t, cfg)
	assert.NotEqual(t, a.RPCs, c.RPCs, "another seed, other pass graphs")
}

func TestSimPerfectNetwork(t *testing.T) {
	res := run(t, Config{Workers: 16, Passes: 500, Seed: 1})
	assert.Zero(t, res.RPCLost+res.RPCDuplicated+res.RPCRefused+res.Delayed)
	assert.Zero(t, res.Cleanup.Retried+res.Cleanup.Failed+res.Cleanup.Dropped+res.CleanupLost+res.Duplicates)
	// Every hop makes the two workers know each other, and each release
	// tells every known worker once.
	assert.Equal(t, res.Edges, res.Cleanup.Sent)
	assert.LessOrEqual(t, res.Edges, 2*res.RPCs)
	assert.Equal(t, res.Cleanup.Sent, res.CleanupDelivered)
}

func TestSimDuplicatesAreHarmless(t *testing.T) {
	res := run(t, Config{Workers: 16, Passes: 500, Dup: 0.5, Seed: 2})
	assert.Positive(t, res.Duplicates)
	assert.Positive(t, res.RPCDuplicated)
	assert.Zero(t, res.Cleanup.Failed)
}

func TestSimLostCleanupsStrandContexts(t *testing.T) {
	// One attempt per message and a lossy network: some cleanups are given
	// up on while their receiver lives, which strands its copy (as in the
	// native component); a tiny queue drops some too. The checker must
	// tell these from a broken fan-out, and the reaper clears them.
	res := run(t, Config{
		Workers: 16, Passes: 500, Drop: 0.3, Delay: 0.3, MaxDelay: 100 * time.Microsecond, Seed: 3,
		Cleanup: container.CleanupOptions{MaxAttempts: 1, MaxPending: 2},
	})
	assert.Positive(t, res.Lost)
	assert.Positive(t, res.Cleanup.Failed)
	assert.Positive(t, res.Cleanup.Dropped, "the queue of 2 overflowed")
	assert.Positive(t, res.Stranded)
}

func TestSimDetectsABrokenFanOut(t *testing.T) {
	// Receivers that ignore cleanup messages leave every pass behind: the
	// checker must say so.
	cfg := Config{Workers: 8, Passes: 50, Seed: 4, noRelay: true}
	res, err := Run(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "reachable through live workers")
	assert.Positive(t, res.CleanupDelivered)
}

func TestSimDuration(t *testing.T) {
	// A duration cuts the run short; what ran is still checked.
	const many = 200000 // more than run in the duration, even without -race
	res := run(t, Config{Workers: 8, Passes: many, Duration: 50 * time.Millisecond, Seed: 5})
	assert.Positive(t, res.Passes)
	assert.Less(t, res.Passes, int64(many))
}

func TestResultPrint(t *testing.T) {
	res := run(t, Config{Workers: 4, Passes: 10, Seed: 6})
	var b strings.Builder
	res.Print(&b)
	for _, want := range []string{"workers 4, passes 10", "RPC messages:", "cleanup messages: sent", "duplicates", "wall time"} {
		assert.Contains(t, b.String(), want)
	}
}
