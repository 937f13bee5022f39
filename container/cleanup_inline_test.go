package container

import (
	"bytes"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of inline first attempts (SetFirstAttemptInline): the releasing
// goroutine makes each message's first attempt, the queue's goroutines the
// retries, and every guarantee of the queued path holds for them too.

// goroutineID returns the calling goroutine's id, from its stack's header
// ("goroutine 17 [running]:"): which goroutine made an attempt is the thing
// tested.
func goroutineID() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, err := strconv.ParseInt(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}

// newInlineCleanup returns a FanoutQueue with inline first attempts.
func newInlineCleanup(t *testing.T, send SendFunc, opts CleanupOptions, l *logRecorder) *FanoutQueue {
	t.Helper()
	c := newTestCleanup(t, send, opts, l)
	c.SetFirstAttemptInline(true)
	require.True(t, c.FirstAttemptInline())
	return c
}

func TestCleanupInlineFirstAttemptIsTheCallers(t *testing.T) {
	var r sendRecorder
	c := newInlineCleanup(t, r.send, CleanupOptions{}, nil)
	caller := goroutineID()
	var on []int64
	r.fail = func(sentMsg, int) error {
		on = append(on, goroutineID()) // no lock: only the caller's goroutine may be here
		return nil
	}
	c.Release(7, []uint16{2, 3})
	assert.Equal(t, []int64{caller, caller}, on)
	// Delivered before Release returned: no flush, no wait.
	assert.Equal(t, []sentMsg{{2, 7}, {3, 7}}, r.messages())
	assert.Equal(t, CleanupStats{Sent: 2}, c.Stats())
	assert.False(t, c.started.Load(), "no sender goroutine starts while every first attempt succeeds")
}

func TestCleanupInlineFailureIsRetriedByTheQueue(t *testing.T) {
	var r sendRecorder
	caller := goroutineID()
	var firstOn, retryOn atomic.Int64
	r.fail = func(m sentMsg, attempt int) error {
		if attempt == 1 {
			firstOn.Store(goroutineID())
			return errors.New("peer not reachable yet")
		}
		retryOn.Store(goroutineID())
		return nil
	}
	var l logRecorder
	c := newInlineCleanup(t, r.send, CleanupOptions{InitialBackoff: time.Millisecond}, &l)
	c.Release(7, []uint16{2})
	// The first attempt failed on this goroutine; it stays pending for its retry.
	assert.Equal(t, []sentMsg{{2, 7}}, r.messages())
	assert.Equal(t, int64(1), c.Stats().Retried)
	s := flushCleanup(t, c)
	assert.Equal(t, CleanupStats{Sent: 1, Retried: 1}, s)
	assert.Equal(t, []sentMsg{{2, 7}, {2, 7}}, r.messages())
	assert.Equal(t, caller, firstOn.Load(), "the first attempt is the releasing goroutine's")
	assert.NotEqual(t, caller, retryOn.Load(), "the retry is a queue goroutine's")
	assert.True(t, c.started.Load(), "retries run on the queue's goroutines")
	assert.Len(t, l.find(LogDebug, "failed (attempt 1)"), 1)
}

func TestCleanupInlineGivesUpAfterMaxAttempts(t *testing.T) {
	var r sendRecorder
	r.fail = func(sentMsg, int) error { return errors.New("dead peer") }
	var l logRecorder
	c := newInlineCleanup(t, r.send, fastRetryOptions, &l)
	c.Release(9, []uint16{4, 5})
	s := flushCleanup(t, c)
	assert.Equal(t, CleanupStats{Failed: 2, Retried: 2 * int64(fastRetryOptions.MaxAttempts-1)}, s)
	assert.Len(t, r.messages(), 2*fastRetryOptions.MaxAttempts)
	assert.Len(t, l.find(LogError, "gave up after 4 attempts"), 2)

	// One attempt in all: the inline one fails for good, counted at once.
	c2 := newInlineCleanup(t, r.send, CleanupOptions{MaxAttempts: 1}, nil)
	c2.Release(10, []uint16{4})
	assert.Equal(t, CleanupStats{Failed: 1}, c2.Stats())
}

func TestCleanupInlineAttemptCountsPendingAndTheBound(t *testing.T) {
	// While a first attempt runs its message is pending, and counts against
	// MaxPending: a release inside the sender that would pass it drops.
	var c *FanoutQueue
	var seen []CleanupStats
	var mu sync.Mutex
	send := func(worker uint16, id int64) error {
		mu.Lock()
		seen = append(seen, c.Stats())
		mu.Unlock()
		if id == 1 {
			c.Release(2, []uint16{worker}) // from inside: over the bound
		}
		return nil
	}
	var l logRecorder
	c = newInlineCleanup(t, send, CleanupOptions{MaxPending: 1}, &l)
	c.Release(1, []uint16{3})
	assert.Equal(t, []CleanupStats{{Pending: 1}}, seen)
	assert.Equal(t, CleanupStats{Sent: 1, Dropped: 1}, c.Stats())
	assert.Len(t, l.find(LogWarning, "dropped the release of context 2 on worker 3"), 1)
}

func TestCleanupInlineWithoutSenderSkips(t *testing.T) {
	c := newInlineCleanup(t, nil, CleanupOptions{}, nil)
	c.Release(1, []uint16{2, 3})
	assert.Equal(t, CleanupStats{Skipped: 2}, c.Stats())
}

func TestCleanupInlineSetSenderAndWaitWaitsForIt(t *testing.T) {
	// An installation that waits sees the inline calls of the sender it
	// replaces as it sees the queue's.
	entered, release := make(chan struct{}), make(chan struct{})
	send := func(uint16, int64) error {
		close(entered)
		<-release
		return nil
	}
	c := newInlineCleanup(t, send, CleanupOptions{}, nil)
	notified := make(chan struct{})
	go func() {
		defer close(notified)
		c.Release(1, []uint16{2})
	}()
	<-entered
	installed := make(chan struct{})
	go func() {
		defer close(installed)
		c.SetSenderAndWait(func(uint16, int64) error { return nil })
	}()
	select {
	case <-installed:
		t.Fatal("SetSenderAndWait returned while the replaced sender's inline call was running")
	case <-time.After(20 * time.Millisecond): // a negative check: a longer wait only makes it stricter
	}
	close(release)
	<-notified
	<-installed
	assert.Equal(t, CleanupStats{Sent: 1}, c.Stats())
}

func TestCleanupInlineCloseWaitsAndAccounts(t *testing.T) {
	// Close while an inline attempt runs: it returns after that attempt,
	// whose message ends counted once (sent, or dropped when it failed), and
	// nothing is pending after.
	for _, fail := range []bool{false, true} {
		entered, release := make(chan struct{}), make(chan struct{})
		send := func(uint16, int64) error {
			close(entered)
			<-release
			if fail {
				return errors.New("failed while closing")
			}
			return nil
		}
		c := NewFanoutQueue(send, CleanupOptions{InitialBackoff: time.Hour})
		c.SetFirstAttemptInline(true)
		notified := make(chan struct{})
		go func() {
			defer close(notified)
			c.Release(1, []uint16{2})
		}()
		<-entered
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			c.Close()
		}()
		require.Eventually(t, func() bool {
			c.closeMu.RLock()
			defer c.closeMu.RUnlock()
			return c.closed
		}, fanoutWait, fanoutPoll)
		select {
		case <-closed:
			t.Fatal("Close returned while an inline attempt was running")
		default:
		}
		close(release)
		<-notified
		<-closed
		s := c.Stats()
		checkAccounted(t, s, 1)
		assert.Zero(t, s.Pending)
		if fail {
			assert.Equal(t, int64(1), s.Dropped, "a failed attempt after Close is dropped: %+v", s)
		} else {
			assert.Equal(t, int64(1), s.Sent)
		}
		// After Close, releases count dropped and call nothing.
		c.Release(3, []uint16{4})
		assert.Equal(t, s.Dropped+1, c.Stats().Dropped)
	}
}

func TestCleanupInlineConcurrentAccounting(t *testing.T) {
	// Many releasing goroutines, a sender failing one attempt in three, the
	// mode switched back and forth meanwhile: every message ends counted
	// exactly once, and Flush sees the inline attempts.
	var n atomic.Int64
	send := func(uint16, int64) error {
		if n.Add(1)%3 == 0 {
			return errors.New("flaky")
		}
		return nil
	}
	c := newInlineCleanup(t, send, CleanupOptions{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if g == 0 && i%50 == 0 {
					c.SetFirstAttemptInline(i%100 == 0)
				}
				c.Release(int64(g*each+i), []uint16{1, 2})
			}
		}()
	}
	wg.Wait()
	s := flushCleanup(t, c)
	checkAccounted(t, s, goroutines*each*2)
	assert.Zero(t, s.Dropped)
	assert.Equal(t, int64(goroutines*each*2), s.Sent+s.Failed)
}

func TestInlineSenderCallsBackIntoContainer(t *testing.T) {
	// On the releasing goroutine the sender runs after the release took
	// effect and outside the container's locks: it can release the next of
	// a chain from inside (each release a level deeper), and sees its
	// context gone.
	c, cl, calls := releaseChain(t, true)
	// Everything happened inside that release.
	assert.Zero(t, c.NumContexts(), "the chain released every context")
	assert.Equal(t, CleanupStats{Sent: chainLen}, cl.Stats())
	assert.Equal(t, int64(chainLen), calls.Load())
}
