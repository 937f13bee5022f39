package container

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Tests of FanoutQueue on its own: delivery, retries, failures, the queue bound,
// Flush and Close. Its wiring into a Container is in fanout_test.go.

// fanoutWait is how long a test waits for something that should happen at once;
// generous, because the race detector on two busy cores is slow.
const fanoutWait = 5 * time.Second

// fanoutPoll is how often require.Eventually looks.
const fanoutPoll = time.Millisecond

// fastRetryOptions makes retries quick so that tests of giving up finish at once.
var fastRetryOptions = CleanupOptions{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}

// sentMsg is one call of a SendFunc.
type sentMsg struct {
	worker  uint16
	context int64
}

// sendRecorder is a SendFunc that records every call, and fails or panics as
// its fail function says (nil: always succeeds).
type sendRecorder struct {
	mu    sync.Mutex
	calls []sentMsg
	at    []time.Time
	fail  func(m sentMsg, attempt int) error // attempt counts calls for m, from 1
}

func (r *sendRecorder) send(worker uint16, contextID int64) error {
	m := sentMsg{worker, contextID}
	r.mu.Lock()
	r.calls = append(r.calls, m)
	r.at = append(r.at, time.Now())
	attempt := 0
	for _, c := range r.calls {
		if c == m {
			attempt++
		}
	}
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		return fail(m, attempt)
	}
	return nil
}

func (r *sendRecorder) messages() []sentMsg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (r *sendRecorder) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.at)
}

// logRecorder records log lines.
type logRecorder struct {
	mu    sync.Mutex
	lines []string // "LEVEL message"
}

func (l *logRecorder) log(level LogLevel, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("%d %s", level, msg))
}

// find returns the lines at level that contain substr.
func (l *logRecorder) find(level LogLevel, substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	prefix := fmt.Sprintf("%d ", level)
	for _, s := range l.lines {
		if strings.HasPrefix(s, prefix) && strings.Contains(s, substr) {
			out = append(out, strings.TrimPrefix(s, prefix))
		}
	}
	return out
}

// newTestCleanup returns a FanoutQueue logging into l, closed when the test ends.
func newTestCleanup(t *testing.T, send SendFunc, opts CleanupOptions, l *logRecorder) *FanoutQueue {
	t.Helper()
	c := NewFanoutQueue(send, opts)
	if l != nil {
		c.SetLog(l.log)
	}
	t.Cleanup(c.Close)
	return c
}

// waitCleanupStats waits until cond holds for c's counters.
func waitCleanupStats(t *testing.T, c *FanoutQueue, cond func(CleanupStats) bool, what string) {
	t.Helper()
	require.Eventuallyf(t, func() bool { return cond(c.Stats()) }, fanoutWait, fanoutPoll, "%s; stats: %+v", what, c.Stats())
}

// flushCleanup waits until c has nothing pending and returns its counters.
func flushCleanup(t *testing.T, c *FanoutQueue) CleanupStats {
	t.Helper()
	require.Zero(t, c.Flush(fanoutWait), "cleanup messages still pending")
	return c.Stats()
}

// checkAccounted checks that every message c was given ended up counted once.
func checkAccounted(t *testing.T, s CleanupStats, given int64) {
	t.Helper()
	assert.Equal(t, given, s.Sent+s.Failed+s.Dropped+s.Pending, "sent+failed+dropped+pending must be every message given: %+v", s)
}

func TestMain(m *testing.M) {
	// Everything a test starts must be gone: nothing of the container's
	// runs for the life of the process (the coarse clock is read on demand).
	goleak.VerifyTestMain(m)
}

func TestCleanupOptionsDefaults(t *testing.T) {
	c := NewFanoutQueue(nil, CleanupOptions{})
	defer c.Close()
	assert.Equal(t, CleanupOptions{
		MaxAttempts:    DefaultCleanupAttempts,
		InitialBackoff: 10 * time.Millisecond,
		MaxBackoff:     2 * time.Second,
		MaxPending:     65536,
		Senders:        4,
	}, c.Options())
	assert.Equal(t, 21, DefaultCleanupAttempts, "the native component retries 20 times after the first attempt")

	// A MaxBackoff below InitialBackoff is raised to it; negatives are defaults.
	c2 := NewFanoutQueue(nil, CleanupOptions{MaxAttempts: -1, InitialBackoff: time.Second, MaxBackoff: time.Millisecond, MaxPending: -5, Senders: -2})
	defer c2.Close()
	o := c2.Options()
	assert.Equal(t, DefaultCleanupAttempts, o.MaxAttempts)
	assert.Equal(t, time.Second, o.InitialBackoff)
	assert.Equal(t, time.Second, o.MaxBackoff)
	assert.Equal(t, 65536, o.MaxPending)
	assert.Equal(t, 4, o.Senders)
}

func TestCleanupBackoffDoublesUpToMax(t *testing.T) {
	c := NewFanoutQueue(nil, CleanupOptions{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 70 * time.Millisecond})
	defer c.Close()
	var got []time.Duration
	for attempt := 1; attempt <= 6; attempt++ {
		got = append(got, c.backoff(attempt))
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{10 * ms, 20 * ms, 40 * ms, 70 * ms, 70 * ms, 70 * ms}, got)
	// Large attempt numbers must not overflow into a zero or negative wait.
	assert.Equal(t, 70*ms, c.backoff(1000))
}

// A doubling past int64 nanoseconds is the longest backoff, not a negative
// wait (a retry at once).
func TestCleanupBackoffDoublingPastInt64IsTheLongest(t *testing.T) {
	c := NewFanoutQueue(nil, CleanupOptions{InitialBackoff: 1 << 62, MaxBackoff: math.MaxInt64})
	defer c.Close()
	for attempt := 1; attempt <= 4; attempt++ {
		d := c.backoff(attempt)
		assert.Positive(t, d, "attempt %d", attempt)
		assert.GreaterOrEqual(t, d, time.Duration(1<<62), "attempt %d", attempt)
	}
	assert.Equal(t, time.Duration(math.MaxInt64), c.backoff(2))
}

// retryTimers is how many retries of c wait on a timer.
func retryTimers(c *FanoutQueue) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// A retry already waiting under a long backoff takes the shorter one that
// SetOptions puts in force: options put back take effect at once, and a
// Flush does not wait out the long one (the C table flaked on this when a
// failed attempt armed its retry just after the longest backoffs were set).
func TestCleanupSetOptionsShortensWaitingRetries(t *testing.T) {
	r := sendRecorder{fail: func(_ sentMsg, attempt int) error {
		if attempt == 1 {
			return errors.New("connection reset")
		}
		return nil
	}}
	c := newTestCleanup(t, r.send, CleanupOptions{InitialBackoff: time.Hour}, nil)
	c.Release(7, []uint16{3})
	require.Eventually(t, func() bool { return retryTimers(c) == 1 }, fanoutWait, fanoutPoll, "the failed attempt's retry is armed")
	require.NoError(t, c.SetOptions(CleanupOptions{InitialBackoff: time.Millisecond}))
	s := flushCleanup(t, c)
	assert.Equal(t, CleanupStats{Sent: 1, Retried: 1}, s)
	assert.Zero(t, retryTimers(c))
}

// Never later: a retry armed under a short backoff keeps it when the
// options in force grow (its timer keeps its wait; the retry runs).
func TestCleanupSetOptionsNeverDelaysWaitingRetries(t *testing.T) {
	const short = 500 * time.Millisecond // far above a poll's delay, well below fanoutWait
	r := sendRecorder{fail: func(_ sentMsg, attempt int) error {
		if attempt == 1 {
			return errors.New("connection reset")
		}
		return nil
	}}
	c := newTestCleanup(t, r.send, CleanupOptions{InitialBackoff: short}, nil)
	c.Release(7, []uint16{3})
	require.Eventually(t, func() bool { return retryTimers(c) == 1 || len(r.messages()) == 2 }, fanoutWait, fanoutPoll, "the failed attempt's retry is armed")
	require.NoError(t, c.SetOptions(CleanupOptions{InitialBackoff: time.Hour}))
	c.mu.Lock()
	for _, w := range c.timers {
		assert.Equal(t, short, w.wait, "a waiting retry's wait grew with the options")
	}
	c.mu.Unlock()
	s := flushCleanup(t, c)
	assert.Equal(t, CleanupStats{Sent: 1, Retried: 1}, s)
}

// Options flipping between the longest and the shortest backoffs while
// attempts fail and retries are armed: once the short ones are in force,
// every retry runs, whichever order the flips and the arming took.
func TestCleanupSetOptionsRacingRetries(t *testing.T) {
	var attempts atomic.Int64
	c := newTestCleanup(t, func(uint16, int64) error {
		if attempts.Add(1)%2 == 1 {
			return errors.New("connection reset")
		}
		return nil
	}, CleanupOptions{MaxAttempts: 1000}, nil)
	long := CleanupOptions{MaxAttempts: 1000, InitialBackoff: math.MaxInt64, MaxBackoff: math.MaxInt64}
	short := CleanupOptions{MaxAttempts: 1000, InitialBackoff: time.Microsecond, MaxBackoff: time.Microsecond}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Until most attempts were made (each message's first and the retries
		// that ran), or a bound: with retries lost, the attempts stop short.
		deadline := time.Now().Add(fanoutWait)
		for i := 0; attempts.Load() < 600 && time.Now().Before(deadline); i++ {
			if i%2 == 0 {
				assert.NoError(t, c.SetOptions(long))
			} else {
				assert.NoError(t, c.SetOptions(short))
			}
		}
	}()
	for i := range 200 {
		c.Release(int64(i), []uint16{1, 2})
	}
	<-done
	require.NoError(t, c.SetOptions(short))
	s := flushCleanup(t, c)
	assert.Equal(t, int64(400), s.Sent)
	assert.Zero(t, s.Failed+s.Dropped)
}

func TestCleanupSendsOneMessagePerWorker(t *testing.T) {
	var r sendRecorder
	c := newTestCleanup(t, r.send, CleanupOptions{}, nil)
	c.Release(42, []uint16{1, 2, 65535})
	c.Release(43, []uint16{2})
	c.Release(44, nil) // nothing to tell
	s := flushCleanup(t, c)
	assert.ElementsMatch(t, []sentMsg{{1, 42}, {2, 42}, {65535, 42}, {2, 43}}, r.messages())
	assert.Equal(t, CleanupStats{Sent: 4}, s)
}

func TestCleanupRetriesWithBackoffThenSucceeds(t *testing.T) {
	r := sendRecorder{fail: func(m sentMsg, attempt int) error {
		if attempt < 3 {
			return errors.New("connection reset")
		}
		return nil
	}}
	opts := CleanupOptions{MaxAttempts: 5, InitialBackoff: 5 * time.Millisecond, MaxBackoff: time.Second}
	c := newTestCleanup(t, r.send, opts, nil)
	c.Release(7, []uint16{3})
	s := flushCleanup(t, c)
	assert.Equal(t, CleanupStats{Sent: 1, Retried: 2}, s)
	assert.Equal(t, []sentMsg{{3, 7}, {3, 7}, {3, 7}}, r.messages())
	// A timer never fires early, so each wait is at least its backoff (5ms,
	// then 10ms); nothing here bounds how long a wait may take.
	at := r.times()
	assert.GreaterOrEqual(t, at[1].Sub(at[0]), 5*time.Millisecond)
	assert.GreaterOrEqual(t, at[2].Sub(at[1]), 10*time.Millisecond)
}

func TestCleanupGivesUpAfterMaxAttempts(t *testing.T) {
	r := sendRecorder{fail: func(sentMsg, int) error { return errors.New("connection refused") }}
	var l logRecorder
	c := newTestCleanup(t, r.send, fastRetryOptions, &l)
	c.Release(99, []uint16{7, 8})
	s := flushCleanup(t, c)
	assert.Equal(t, CleanupStats{Failed: 2, Retried: 2 * 3}, s)
	assert.Len(t, r.messages(), 2*fastRetryOptions.MaxAttempts, "every attempt calls the sender")

	for _, w := range []uint16{7, 8} {
		lines := l.find(LogError, fmt.Sprintf("Could not release Dist Autograd Context on node %d: ", w))
		require.Len(t, lines, 1, "one error line per message given up on")
		assert.True(t, strings.HasPrefix(lines[0], fmt.Sprintf("Could not release Dist Autograd Context on node %d: connection refused", w)), lines[0])
		assert.Contains(t, lines[0], "context 99")
	}
	assert.Len(t, l.find(LogDebug, "retrying"), 6, "each retry is logged at debug level")
}

// A message given up on is pending until its error line was logged: a
// Flush that returned 0 leaves nothing for the log hook still to see, however
// long the hook takes (the Python package's own test flaked on this, 1 run in
// several under load).
func TestCleanupFlushWaitsForTheLogLine(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	c := newTestCleanup(t, func(uint16, int64) error { return errors.New("connection refused") },
		CleanupOptions{MaxAttempts: 1, Senders: 1}, nil)
	c.SetLog(func(level LogLevel, msg string) {
		if level != LogError {
			return
		}
		time.Sleep(30 * time.Millisecond) // a slow hook: Flush polls meanwhile
		mu.Lock()
		lines = append(lines, msg)
		mu.Unlock()
	})
	c.Release(5, []uint16{4})
	s := flushCleanup(t, c)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, int64(1), s.Failed)
	require.Len(t, lines, 1, "Flush returned before the error line reached the log hook")
	assert.True(t, strings.HasPrefix(lines[0], "Could not release Dist Autograd Context on node 4: connection refused"), lines[0])
}

func TestCleanupPanickingSenderIsAFailedAttempt(t *testing.T) {
	r := sendRecorder{fail: func(sentMsg, int) error { panic("boom") }}
	var l logRecorder
	c := newTestCleanup(t, r.send, CleanupOptions{MaxAttempts: 2, InitialBackoff: time.Millisecond}, &l)
	c.Release(5, []uint16{1})
	s := flushCleanup(t, c)
	assert.Equal(t, CleanupStats{Failed: 1, Retried: 1}, s)
	lines := l.find(LogError, "Could not release Dist Autograd Context on node 1: ")
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], "cleanup sender panicked: boom")

	// The senders survived the panics: a working sender now delivers.
	var ok sendRecorder
	c.SetSender(ok.send)
	c.Release(6, []uint16{2})
	assert.Equal(t, int64(1), flushCleanup(t, c).Sent)
	assert.Equal(t, []sentMsg{{2, 6}}, ok.messages())
}

func TestCleanupWithoutSenderSkips(t *testing.T) {
	var l logRecorder
	c := newTestCleanup(t, nil, CleanupOptions{}, &l)
	c.Release(1, []uint16{1, 2, 3})
	assert.Equal(t, CleanupStats{Skipped: 3}, c.Stats())
	assert.Len(t, l.find(LogDebug, "no cleanup sender set"), 1)

	// A sender set later serves later releases; unset again, they skip.
	var r sendRecorder
	c.SetSender(r.send)
	c.Release(2, []uint16{4})
	assert.Equal(t, CleanupStats{Sent: 1, Skipped: 3}, flushCleanup(t, c))
	c.SetSender(nil)
	c.Release(3, []uint16{5})
	assert.Equal(t, CleanupStats{Sent: 1, Skipped: 4}, flushCleanup(t, c))
	assert.Equal(t, []sentMsg{{4, 2}}, r.messages())
}

func TestCleanupSenderUnsetWhileRetrying(t *testing.T) {
	// A message already queued when the sender goes away is an attempt that
	// fails ("no cleanup sender set"), and is given up on like any other.
	r := sendRecorder{fail: func(sentMsg, int) error { return errors.New("unreachable") }}
	var l logRecorder
	c := newTestCleanup(t, r.send, fastRetryOptions, &l)
	c.Release(1, []uint16{9})
	waitCleanupStats(t, c, func(s CleanupStats) bool { return s.Retried >= 1 }, "first attempt failed")
	c.SetSender(nil)
	s := flushCleanup(t, c)
	assert.Equal(t, int64(1), s.Failed)
	assert.NotEmpty(t, l.find(LogError, "on node 9: "))
}

// sendGate is a SendFunc that blocks until opened, counting the callers inside.
type sendGate struct {
	open   chan struct{}
	inside atomic.Int64
	calls  atomic.Int64
}

func newSendGate() *sendGate { return &sendGate{open: make(chan struct{})} }

func (g *sendGate) send(uint16, int64) error {
	g.calls.Add(1)
	g.inside.Add(1)
	defer g.inside.Add(-1)
	<-g.open
	return nil
}

func TestCleanupBlockedSenderDoesNotBlockNotify(t *testing.T) {
	g := newSendGate()
	var l logRecorder
	opts := CleanupOptions{Senders: 2, MaxPending: 4}
	c := newTestCleanup(t, g.send, opts, &l)
	t.Cleanup(func() { openGate(g.open) }) // before Close, which waits for the senders

	const n = 50
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			c.Release(int64(i), []uint16{1})
		}
	}()
	select {
	case <-done:
	case <-time.After(fanoutWait):
		t.Fatal("Release blocked behind a stuck sender")
	}
	require.Eventually(t, func() bool { return g.inside.Load() == 2 }, fanoutWait, fanoutPoll, "both senders stuck")

	// Both senders hold one message each; at most MaxPending wait; the rest
	// overflowed, were counted and logged.
	s := c.Stats()
	assert.LessOrEqual(t, s.Pending, int64(opts.MaxPending+opts.Senders))
	assert.GreaterOrEqual(t, s.Dropped, int64(n-opts.MaxPending-opts.Senders))
	checkAccounted(t, s, n)
	assert.Len(t, l.find(LogWarning, "dropped the release of context"), int(s.Dropped))
	assert.Contains(t, l.find(LogWarning, "dropped")[0], "cleanup queue full")

	// Unstuck, everything still pending is delivered.
	openGate(g.open)
	s = flushCleanup(t, c)
	assert.Equal(t, int64(n), s.Sent+s.Dropped)
	assert.Equal(t, s.Sent, g.calls.Load())
}

var gateMu sync.Mutex

func openGate(ch chan struct{}) {
	gateMu.Lock()
	defer gateMu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func TestCleanupQueueBoundCoversRetries(t *testing.T) {
	// MaxPending bounds what is queued *or awaiting a retry* (the header's
	// contract): a dead peer whose messages all wait for their next attempt
	// must not let pending grow past it.
	r := sendRecorder{fail: func(sentMsg, int) error { return errors.New("peer dead") }}
	opts := CleanupOptions{Senders: 1, MaxPending: 4, MaxAttempts: 3, InitialBackoff: time.Hour}
	c := newTestCleanup(t, r.send, opts, nil)
	const n = 20
	for i := range n {
		c.Release(int64(i), []uint16{1})
		// Wait for this message to fail its first attempt (or be refused),
		// so that it waits on a retry timer rather than in the queue.
		waitCleanupStats(t, c, func(s CleanupStats) bool { return s.Retried+s.Dropped == int64(i+1) }, "message handled")
	}
	s := c.Stats()
	assert.Equal(t, int64(opts.MaxPending), s.Pending, "pending must stop at MaxPending: %+v", s)
	assert.Equal(t, int64(n-opts.MaxPending), s.Dropped)
	checkAccounted(t, s, n)
}

func TestCleanupFlush(t *testing.T) {
	g := newSendGate()
	c := newTestCleanup(t, g.send, CleanupOptions{Senders: 1}, nil)
	t.Cleanup(func() { openGate(g.open) })
	assert.Zero(t, c.Flush(0), "nothing pending: Flush returns at once")

	c.Release(1, []uint16{1, 2, 3})
	// The sender is stuck, so a short Flush times out and says what is left.
	assert.Equal(t, int64(3), c.Flush(20*time.Millisecond))
	openGate(g.open)
	assert.Zero(t, c.Flush(fanoutWait))
	assert.Equal(t, int64(3), c.Stats().Sent)
}

func TestCleanupCloseDropsPendingAndStopsGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := sendRecorder{fail: func(sentMsg, int) error { return errors.New("down") }}
	var l logRecorder
	// Retries wait an hour, so everything stays pending until Close.
	c := NewFanoutQueue(r.send, CleanupOptions{InitialBackoff: time.Hour, Senders: 3})
	c.SetLog(l.log)
	c.Release(1, []uint16{1, 2, 3, 4, 5})
	waitCleanupStats(t, c, func(s CleanupStats) bool { return s.Retried == 5 }, "every first attempt failed")
	require.Equal(t, int64(5), c.Stats().Pending)

	c.Close()
	s := c.Stats()
	assert.Equal(t, CleanupStats{Retried: 5, Dropped: 5}, s, "Close drops what waits for a retry")

	// After Close nothing is sent; releases count as dropped and are logged.
	c.Release(2, []uint16{6, 7})
	s = c.Stats()
	assert.Equal(t, int64(7), s.Dropped)
	assert.Zero(t, s.Pending)
	assert.Len(t, l.find(LogWarning, "or closed: dropped the release of context 2"), 2)
	assert.Len(t, r.messages(), 5, "no attempt after Close")
	c.Close() // a second Close is a no-op
	assert.Zero(t, c.Flush(0))
}

func TestCleanupCloseDropsQueued(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// One sender, stuck on the first message; the others wait in the queue.
	g := newSendGate()
	c := NewFanoutQueue(g.send, CleanupOptions{Senders: 1})
	c.Release(1, []uint16{1, 2, 3, 4})
	require.Eventually(t, func() bool { return g.inside.Load() == 1 }, fanoutWait, fanoutPoll)
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	// Close waits for the message being sent (the sender owns it), then
	// drops the queued ones: open the sendGate once Close has begun.
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.closed
	}, fanoutWait, fanoutPoll)
	openGate(g.open)
	select {
	case <-closed:
	case <-time.After(fanoutWait):
		t.Fatal("Close did not return once the sender did")
	}
	assert.Equal(t, CleanupStats{Sent: 1, Dropped: 3}, c.Stats())
}

func TestCleanupNeverUsedStartsNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// The senders start on the first message, so an idle FanoutQueue (every
	// process that never sets a sender) costs no goroutines.
	c := NewFanoutQueue(func(uint16, int64) error { return nil }, CleanupOptions{Senders: 8})
	require.NoError(t, goleak.Find(goleak.IgnoreCurrent()))
	c.Close()
}

func TestCleanupCloseWhileNotifying(t *testing.T) {
	// Close racing with releases and retries: every message is counted once,
	// nothing stays pending, no goroutine is left.
	for round := range 20 {
		var calls atomic.Int64
		send := func(uint16, int64) error {
			if calls.Add(1)%3 == 0 {
				return errors.New("flaky")
			}
			return nil
		}
		c := NewFanoutQueue(send, CleanupOptions{InitialBackoff: time.Microsecond, MaxBackoff: 10 * time.Microsecond, MaxPending: 64})
		const goroutines, each = 4, 200
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := range each {
					c.Release(int64(g*each+i), []uint16{1, 2})
				}
			})
		}
		time.Sleep(time.Duration(round%5) * 100 * time.Microsecond)
		c.Close()
		wg.Wait()
		s := c.Stats()
		require.Zero(t, s.Pending, "round %d: messages stuck after Close: %+v", round, s)
		checkAccounted(t, s, goroutines*each*2)
	}
}

func TestCleanupConcurrentAccounting(t *testing.T) {
	var calls atomic.Int64
	send := func(uint16, int64) error {
		if calls.Add(1)%4 == 0 {
			return errors.New("flaky")
		}
		return nil
	}
	c := newTestCleanup(t, send, CleanupOptions{MaxAttempts: 3, InitialBackoff: 10 * time.Microsecond, MaxBackoff: 100 * time.Microsecond}, nil)
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				c.Release(int64(g*each+i), []uint16{uint16(i), uint16(i + 1)})
			}
		})
	}
	wg.Wait()
	s := flushCleanup(t, c)
	checkAccounted(t, s, goroutines*each*2)
	assert.Zero(t, s.Dropped)
	assert.Equal(t, calls.Load(), s.Sent+s.Retried+s.Failed, "every call is a delivery, a retry's cause or a final failure")
}

func TestCleanupSetOptions(t *testing.T) {
	fail := func(uint16, int64) error { return errors.New("no") }
	c := newTestCleanup(t, fail, CleanupOptions{MaxAttempts: 5, InitialBackoff: time.Microsecond, MaxPending: 8}, nil)
	// Before the first message the queue may still grow.
	require.NoError(t, c.SetOptions(CleanupOptions{MaxAttempts: 2, InitialBackoff: time.Microsecond, MaxPending: 16}))
	assert.Equal(t, 16, c.Options().MaxPending)
	c.Release(1, []uint16{1})
	assert.Equal(t, CleanupStats{Retried: 1, Failed: 1}, flushCleanup(t, c), "the new MaxAttempts applies")
	// Once senders run, it may shrink or stay, not grow.
	err := c.SetOptions(CleanupOptions{MaxPending: 17})
	require.Error(t, err)
	assert.Equal(t, ErrInvalidArgument, CodeOf(err))
	assert.Contains(t, err.Error(), "max_pending cannot grow past 16")
	require.NoError(t, c.SetOptions(CleanupOptions{MaxAttempts: 1, InitialBackoff: time.Microsecond, MaxPending: 4}))
	c.Release(2, []uint16{1})
	assert.Equal(t, CleanupStats{Retried: 1, Failed: 2}, flushCleanup(t, c), "changed options apply to later messages")
}

func TestCleanupSetLogNil(t *testing.T) {
	c := newTestCleanup(t, func(uint16, int64) error { return errors.New("x") }, CleanupOptions{MaxAttempts: 1}, nil)
	c.SetLog(nil) // log lines are dropped, not a nil call
	c.Release(1, []uint16{1})
	assert.Equal(t, int64(1), flushCleanup(t, c).Failed)
}

// senderInCall returns a queue whose sender is in the middle of a call,
// and the channel that lets that call return.
func senderInCall(t *testing.T) (*FanoutQueue, chan struct{}) {
	entered, release := make(chan struct{}), make(chan struct{})
	c := newTestCleanup(t, func(uint16, int64) error {
		close(entered)
		<-release
		return nil
	}, CleanupOptions{}, nil)
	c.Release(1, []uint16{1})
	<-entered
	return c, release
}

func TestCleanupSetSenderAndWaitWaitsForCallsInProgress(t *testing.T) {
	c, release := senderInCall(t)
	swapped := make(chan struct{})
	go func() {
		c.SetSenderAndWait(nil)
		close(swapped)
	}()
	select {
	case <-swapped:
		t.Fatal("SetSenderAndWait returned while a call of the old sender was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-swapped
	assert.Equal(t, int64(1), flushCleanup(t, c).Sent)
}

// Installations racing each other: the record the same-key check trusts is
// the sender in force, and when all have returned the last one to return is
// in force, and no replaced sender is ever called after that.
func TestCleanupInstallSenderRacesAreLinearizable(t *testing.T) {
	type key struct{ n int }
	c := newTestCleanup(t, nil, CleanupOptions{Senders: 2}, nil)
	var called [4]atomic.Int64
	senders := [4]SendFunc{}
	for i := range senders {
		senders[i] = func(uint16, int64) error { called[i].Add(1); return nil }
	}
	for round := range 300 {
		var wg sync.WaitGroup
		var order atomic.Int64
		returned := make([]int64, 3)
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i == 2 {
					c.InstallSender(key{-1}, nil, -1)
				} else {
					c.InstallSender(key{i}, senders[i], -1)
				}
				returned[i] = order.Add(1)
			}()
		}
		c.Release(int64(round), []uint16{1, 2}) // calls in flight while they swap
		wg.Wait()
		last := 0
		for i := range 3 {
			if returned[i] == 3 {
				last = i
			}
		}
		for i := range called {
			called[i].Store(0)
		}
		// Re-installing what the last one installed must be a no-op that
		// leaves it in force, whatever order the swaps happened in.
		if last == 2 {
			require.True(t, c.InstallSender(key{-1}, nil, -1))
			require.Nil(t, c.send.Load(), "round %d: nil was installed last", round)
			continue
		}
		require.True(t, c.InstallSender(key{last}, senders[last], -1))
		c.Release(int64(round), []uint16{3})
		require.Zero(t, c.Flush(time.Minute))
		for i := range 2 {
			if i != last {
				require.Zero(t, called[i].Load(), "round %d: sender %d was replaced but still called", round, i)
			}
		}
		require.NotZero(t, called[last].Load(), "round %d: sender %d returned last but is not in force", round, last)
	}
}

// A waiting installation that runs out of time says so; the new sender is
// in force at once all the same.
func TestCleanupInstallSenderTimeout(t *testing.T) {
	c, release := senderInCall(t)
	require.False(t, c.InstallSender("other", nil, 10*time.Millisecond))
	require.Nil(t, c.send.Load())
	close(release)
	require.True(t, c.InstallSender("again", nil, -1))
}
