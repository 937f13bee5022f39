package container

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the release fan-out as wired into a Container: which releases
// notify whom, that the container calls out with no lock held, and that a
// FanoutQueue as its Fanout keeps releasing fast whatever the peers do.

// newFanoutContainer returns a container for worker whose Fanout is a
// FanoutQueue sending through send.
func newFanoutContainer(t *testing.T, worker int64, send SendFunc, opts CleanupOptions, l *logRecorder, copts ...Option) (*Container, *FanoutQueue) {
	t.Helper()
	c, err := New(worker, copts...)
	require.NoError(t, err)
	cl := newTestCleanup(t, send, opts, l)
	c.SetFanout(cl)
	return c, cl
}

// withinDeadline runs f on its own goroutine and fails the test if it has
// not returned within fanoutWait: a deadlock fails instead of hanging.
func withinDeadline(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(fanoutWait):
		t.Fatalf("%s did not return: deadlock or blocked on the network", what)
	}
}

// addWorkers records ws as known workers of ctx.
func addWorkers(ctx *Context, ws ...uint16) {
	for _, w := range ws {
		ctx.AddKnownWorkerID(w)
	}
}

func TestReleaseSendsOneMessagePerKnownWorker(t *testing.T) {
	var r sendRecorder
	c, cl := newFanoutContainer(t, 1, r.send, CleanupOptions{}, nil)
	th := NewThread()

	ctx, err := c.NewContext(th)
	require.NoError(t, err)
	addWorkers(ctx, 2, 3, 2, 65535, 3) // repeats are one known worker
	require.NoError(t, c.ReleaseContext(th, ctx.ID()))
	assert.Equal(t, InvalidID, th.CurrentID(), "release resets the releasing thread's current id")
	flushCleanup(t, cl)
	assert.ElementsMatch(t, []sentMsg{{2, ctx.ID()}, {3, ctx.ID()}, {65535, ctx.ID()}}, r.messages())

	// release-if-present of a context that is there notifies the same way.
	remote := FirstID(9) + 5 // a pass that worker 9 started
	rctx, err := c.GetOrCreateContext(remote)
	require.NoError(t, err)
	addWorkers(rctx, 9, 4)
	assert.True(t, c.ReleaseContextIfPresent(nil, remote))
	flushCleanup(t, cl)
	assert.ElementsMatch(t, []sentMsg{{2, ctx.ID()}, {3, ctx.ID()}, {65535, ctx.ID()}, {9, remote}, {4, remote}}, r.messages())

	// A missing id notifies nobody: not on release-if-present (a cleanup
	// that arrives twice), not on release (which fails).
	assert.False(t, c.ReleaseContextIfPresent(nil, remote))
	assert.False(t, c.ReleaseContextIfPresent(th, ctx.ID()))
	err = c.ReleaseContext(th, 12345)
	require.Error(t, err)
	assert.Equal(t, ErrNotFound, CodeOf(err))
	assert.Equal(t, "Could not find autograd context with id: 12345", err.Error())

	// A context with no known workers notifies nobody either.
	lonely, err := c.NewContext(th)
	require.NoError(t, err)
	require.NoError(t, c.ReleaseContext(th, lonely.ID()))

	s := flushCleanup(t, cl)
	assert.Len(t, r.messages(), 5)
	assert.Equal(t, CleanupStats{Sent: 5}, s)

	// A released context still held by a caller keeps its known workers.
	assert.ElementsMatch(t, []uint16{2, 3, 65535}, ctx.KnownWorkerIDs())
}

func TestReleaseWithoutNotifierOrSender(t *testing.T) {
	c, err := New(1)
	require.NoError(t, err)
	th := NewThread()
	ctx, err := c.NewContext(th)
	require.NoError(t, err)
	addWorkers(ctx, 2)
	require.NoError(t, c.ReleaseContext(th, ctx.ID()), "no fanout: release still works")

	// A FanoutQueue with no sender counts what it could not tell.
	c2, cl := newFanoutContainer(t, 2, nil, CleanupOptions{}, nil)
	ctx, err = c2.NewContext(th)
	require.NoError(t, err)
	addWorkers(ctx, 1, 3)
	require.NoError(t, c2.ReleaseContext(th, ctx.ID()))
	assert.Equal(t, CleanupStats{Skipped: 2}, cl.Stats())

	// SetFanout(nil) unplugs it.
	c2.SetFanout(nil)
	ctx, err = c2.NewContext(th)
	require.NoError(t, err)
	addWorkers(ctx, 1)
	require.NoError(t, c2.ReleaseContext(th, ctx.ID()))
	assert.Equal(t, CleanupStats{Skipped: 2}, cl.Stats())
}

// reentrantNotifier is a synchronous Fanout that calls back into its
// container on the releasing goroutine. Were the container to notify while
// holding a shard lock (one shard: every id shares it), these calls would
// deadlock: sync.RWMutex is not reentrant.
type reentrantNotifier struct {
	c        *Container
	mu       sync.Mutex
	notified map[int64][]uint16
	stillIn  []int64 // contexts found still stored while being notified
	scratch  atomic.Int64
}

func (n *reentrantNotifier) Release(id int64, workers []uint16) {
	c := n.c
	if c.IsValidContext(id) == nil {
		n.mu.Lock()
		n.stillIn = append(n.stillIn, id)
		n.mu.Unlock()
	}
	_ = c.RetrieveContextIfPresent(id)
	_ = c.NumContexts()
	_ = c.ContextIDs()
	// Create and release another context from inside the notification: a
	// nested release (it has no known workers, so it notifies nobody).
	tmp := FirstID(60000) + n.scratch.Add(1)
	if _, err := c.GetOrCreateContext(tmp); err == nil {
		c.ReleaseContextIfPresent(nil, tmp)
	}
	n.mu.Lock()
	n.notified[id] = workers
	n.mu.Unlock()
}

func TestContainerNotifiesOutsideItsLocks(t *testing.T) {
	c, err := New(1, WithShards(1))
	require.NoError(t, err)
	n := &reentrantNotifier{c: c, notified: map[int64][]uint16{}}
	c.SetFanout(n)
	th := NewThread()

	newCtx := func(ws ...uint16) int64 {
		ctx, err := c.NewContext(th)
		require.NoError(t, err)
		addWorkers(ctx, ws...)
		th.Clear()
		return ctx.ID()
	}
	a, b := newCtx(2), newCtx(3, 4)
	withinDeadline(t, "ReleaseContext", func() { assert.NoError(t, c.ReleaseContext(th, a)) })
	withinDeadline(t, "ReleaseContextIfPresent", func() { assert.True(t, c.ReleaseContextIfPresent(th, b)) })

	// The bulk releases notify after their shard's lock is let go too.
	for k := range int64(3) {
		ctx, err := c.GetOrCreateContext(FirstID(7) + k)
		require.NoError(t, err)
		addWorkers(ctx, 7, uint16(10+k))
	}
	withinDeadline(t, "ReleaseContextsOfWorker", func() {
		assert.Equal(t, 3, c.ReleaseContextsOfWorker(7))
	})
	d := newCtx(5)
	withinDeadline(t, "ReapIdleContexts", func() {
		n, err := c.ReapIdleContexts(0)
		assert.NoError(t, err)
		assert.Equal(t, 1, n)
	})

	n.mu.Lock()
	defer n.mu.Unlock()
	assert.Equal(t, map[int64][]uint16{
		a: {2}, b: {3, 4}, d: {5},
		// The dead origin itself is not told: only the others.
		FirstID(7): {10}, FirstID(7) + 1: {11}, FirstID(7) + 2: {12},
	}, n.notified)
	assert.Empty(t, n.stillIn, "a context is removed before its workers are notified")
	assert.Zero(t, c.NumContexts())
}

func TestCleanupSenderCallsBackIntoContainer(t *testing.T) {
	// The sender runs on a FanoutQueue goroutine and may call anything on the
	// container, releases included (a host that delivers a cleanup to
	// itself); a chain of releases made from inside senders completes.
	c, cl, calls := releaseChain(t, false)
	s := flushCleanup(t, cl)
	assert.Zero(t, c.NumContexts(), "the chain released every context")
	assert.Equal(t, CleanupStats{Sent: chainLen}, s)
	assert.Equal(t, int64(chainLen), calls.Load())
}

// chainLen is how many contexts releaseChain stores.
const chainLen = 50

// releaseChain stores chainLen contexts, each known to worker 1 (to its
// sender, this container itself), and releases the first, from whose
// delivery the sender releases the next, and so on: the chain goes one
// release inside another, on a FanoutQueue goroutine, or on the releasing
// goroutine when inline. The sender checks that its context is gone before
// it is told, and calls is how many times it ran.
func releaseChain(t *testing.T, inline bool) (c *Container, cl *FanoutQueue, calls *atomic.Int64) {
	calls = new(atomic.Int64)
	send := func(worker uint16, id int64) error {
		calls.Add(1)
		if _, err := c.RetrieveContext(id); err == nil {
			return errors.New("a context is removed before its workers are told")
		}
		_ = c.NumContexts()
		c.ReleaseContextIfPresent(nil, id+1)
		c.ReleaseContextsOfWorker(worker)
		return nil
	}
	c, cl = newFanoutContainer(t, 1, send, CleanupOptions{MaxAttempts: 1}, nil, WithShards(1))
	cl.SetFirstAttemptInline(inline)
	first := FirstID(2)
	for k := range int64(chainLen) {
		ctx, err := c.GetOrCreateContext(first + k)
		require.NoError(t, err)
		addWorkers(ctx, 1)
	}
	withinDeadline(t, "release", func() { c.ReleaseContextIfPresent(nil, first) })
	return c, cl, calls
}

// peers joins containers whose Cleanups deliver to each other directly: the
// receiving worker calls ReleaseContextIfPresent, as a host's RPC handler does.
type peers struct {
	cs    map[uint16]*Container
	cls   map[uint16]*FanoutQueue
	dup   atomic.Bool // deliver every message twice
	calls atomic.Int64
}

func newPeers(t *testing.T, workers ...uint16) *peers {
	p := &peers{cs: map[uint16]*Container{}, cls: map[uint16]*FanoutQueue{}}
	for _, w := range workers {
		c, cl := newFanoutContainer(t, int64(w), p.deliver, CleanupOptions{}, nil)
		p.cs[w], p.cls[w] = c, cl
	}
	return p
}

func (p *peers) deliver(worker uint16, id int64) error {
	c, ok := p.cs[worker]
	if !ok {
		return errors.New("no such worker")
	}
	p.calls.Add(1)
	c.ReleaseContextIfPresent(nil, id)
	if p.dup.Load() {
		c.ReleaseContextIfPresent(nil, id) // harmless: already gone
	}
	return nil
}

func (p *peers) flush(t *testing.T) {
	t.Helper()
	// A delivery may queue more on another FanoutQueue: flush until all are idle.
	require.Eventually(t, func() bool {
		for _, cl := range p.cls {
			if cl.Flush(0) != 0 {
				return false
			}
		}
		return true
	}, fanoutWait, fanoutPoll)
}

func TestFanOutCleansTheWholePass(t *testing.T) {
	for _, dup := range []bool{false, true} {
		p := newPeers(t, 0, 1, 2, 3)
		p.dup.Store(dup)
		th := NewThread()
		// Worker 0 starts a pass and sends to 1 and 3; 1 forwards to 2. Each
		// receiver replies, so it knows its sender too.
		ctx, err := p.cs[0].NewContext(th)
		require.NoError(t, err)
		id := ctx.ID()
		hop := func(src, dst uint16) {
			from, err := p.cs[src].RetrieveContext(id)
			require.NoError(t, err)
			from.AddKnownWorkerID(dst)
			to, err := p.cs[dst].GetOrCreateContext(id)
			require.NoError(t, err)
			to.AddKnownWorkerID(src)
		}
		hop(0, 1)
		hop(0, 3)
		hop(1, 2)
		for w := range uint16(4) {
			require.Equal(t, int64(1), p.cs[w].NumContexts())
		}
		require.NoError(t, p.cs[0].ReleaseContext(th, id))
		p.flush(t)
		for w := range uint16(4) {
			assert.Zero(t, p.cs[w].NumContexts(), "worker %d still holds the pass (dup %v)", w, dup)
		}
		// 0 tells 1 and 3; 1 tells 0 and 2; 3 tells 0; 2 tells 1: six messages,
		// the last three finding nothing left to release.
		assert.Equal(t, int64(6), p.calls.Load())
	}
}

func TestBlockedSenderDoesNotBlockReleases(t *testing.T) {
	g := newSendGate()
	var l logRecorder
	opts := CleanupOptions{Senders: 1, MaxPending: 8}
	c, cl := newFanoutContainer(t, 1, g.send, opts, &l)
	t.Cleanup(func() { openGate(g.open) }) // runs before Close

	th := NewThread()
	const n = 200
	withinDeadline(t, "releases behind a stuck sender", func() {
		for range n {
			ctx, err := c.NewContext(th)
			if !assert.NoError(t, err) {
				return
			}
			addWorkers(ctx, 2, 3)
			assert.NoError(t, c.ReleaseContext(th, ctx.ID()))
		}
	})
	assert.Zero(t, c.NumContexts())
	s := cl.Stats()
	assert.LessOrEqual(t, s.Pending, int64(opts.MaxPending))
	assert.GreaterOrEqual(t, s.Dropped, int64(2*n-opts.MaxPending))
	assert.Len(t, l.find(LogWarning, "dropped the release of context"), int(s.Dropped))
	checkAccounted(t, s, 2*n)

	// Retrieving and releasing keep working while the sender is stuck.
	withinDeadline(t, "container calls", func() {
		ctx, err := c.NewContext(th)
		assert.NoError(t, err)
		_, err = c.RetrieveContext(ctx.ID())
		assert.NoError(t, err)
		assert.NoError(t, c.ReleaseContext(th, ctx.ID()))
	})

	openGate(g.open)
	s = flushCleanup(t, cl)
	assert.Equal(t, int64(2*n), s.Sent+s.Dropped)
}

func TestDeadPeerIsRetriedThenGivenUp(t *testing.T) {
	// Worker 2 is down: its messages are retried, then counted failed and
	// logged; worker 3's are delivered.
	var l logRecorder
	r := sendRecorder{fail: func(m sentMsg, _ int) error {
		if m.worker == 2 {
			return errors.New("connection refused")
		}
		return nil
	}}
	c, cl := newFanoutContainer(t, 1, r.send, fastRetryOptions, &l)
	th := NewThread()
	ctx, err := c.NewContext(th)
	require.NoError(t, err)
	addWorkers(ctx, 2, 3)
	withinDeadline(t, "release", func() { assert.NoError(t, c.ReleaseContext(th, ctx.ID())) })
	s := flushCleanup(t, cl)
	assert.Equal(t, CleanupStats{Sent: 1, Failed: 1, Retried: int64(fastRetryOptions.MaxAttempts - 1)}, s)
	lines := l.find(LogError, "Could not release Dist Autograd Context on node 2: connection refused")
	assert.Len(t, lines, 1)
	assert.Empty(t, l.find(LogError, "node 3"))
}

func TestReleaseContextsOfWorkerFansOut(t *testing.T) {
	var r sendRecorder
	c, cl := newFanoutContainer(t, 1, r.send, CleanupOptions{}, nil)
	// Contexts of passes started by workers 3 and 40000 (whose ids are
	// negative), and one of this worker's own.
	var want []sentMsg
	for k := range int64(4) {
		id := FirstID(3) + k
		ctx, err := c.GetOrCreateContext(id)
		require.NoError(t, err)
		addWorkers(ctx, 3, uint16(20+k))
		want = append(want, sentMsg{uint16(20 + k), id}) // not 3: it is gone
	}
	far, err := c.GetOrCreateContext(FirstID(40000) + 1)
	require.NoError(t, err)
	require.Negative(t, far.ID())
	addWorkers(far, 40000, 9)
	th := NewThread()
	own, err := c.NewContext(th)
	require.NoError(t, err)
	addWorkers(own, 3)

	assert.Equal(t, 4, c.ReleaseContextsOfWorker(3))
	flushCleanup(t, cl)
	assert.ElementsMatch(t, want, r.messages())
	assert.ElementsMatch(t, []int64{far.ID(), own.ID()}, c.ContextIDs())

	assert.Equal(t, 1, c.ReleaseContextsOfWorker(40000))
	flushCleanup(t, cl)
	assert.Contains(t, r.messages(), sentMsg{9, far.ID()})
	assert.NotContains(t, r.messages(), sentMsg{40000, far.ID()})

	// Out of range: refused at the edge (the C ABI checks with
	// CheckWorkerID before it converts), nothing released or sent.
	for _, bad := range []int64{-1, 65536} {
		err := CheckWorkerID(bad)
		require.Error(t, err)
		assert.Equal(t, MsgWorkerRange, err.Error())
	}
	assert.Zero(t, c.ReleaseContextsOfWorker(9)) // none of its contexts here
	assert.Equal(t, CleanupStats{Sent: int64(len(want) + 1)}, flushCleanup(t, cl))
	assert.Equal(t, []int64{own.ID()}, c.ContextIDs())
}

func TestReapIdleContextsFansOut(t *testing.T) {
	var r sendRecorder
	c, cl := newFanoutContainer(t, 1, r.send, CleanupOptions{}, nil)
	th := NewThread()
	var want []sentMsg
	for k := range 3 {
		ctx, err := c.NewContext(th)
		require.NoError(t, err)
		addWorkers(ctx, uint16(k+2))
		want = append(want, sentMsg{uint16(k + 2), ctx.ID()})
		th.Clear()
	}
	_, err := c.ReapIdleContexts(-1)
	require.Error(t, err)
	assert.Equal(t, ErrInvalidArgument, CodeOf(err))

	// Every context has been idle for at least 0 ms.
	n, err := c.ReapIdleContexts(0)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	flushCleanup(t, cl)
	assert.ElementsMatch(t, want, r.messages())
	assert.Zero(t, c.NumContexts())
}

func TestConcurrentReleasesFanOut(t *testing.T) {
	// Many threads creating, sharing and releasing contexts: every release
	// notifies every known worker exactly once, whichever thread releases.
	var sent sync.Map // sentMsg -> *atomic.Int64
	send := func(w uint16, id int64) error {
		v, _ := sent.LoadOrStore(sentMsg{w, id}, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		return nil
	}
	c, cl := newFanoutContainer(t, 5, send, CleanupOptions{}, nil)
	const goroutines, each = 8, 300
	ids := make(chan int64, goroutines*each)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			th := NewThread()
			for i := range each {
				ctx, err := c.NewContext(th)
				if !assert.NoError(t, err) {
					return
				}
				addWorkers(ctx, uint16(g), uint16(100+i%3))
				th.Clear()
				ids <- ctx.ID()
				// Release someone's context: maybe our own, maybe another's,
				// and sometimes twice (a duplicate cleanup).
				id := <-ids
				c.ReleaseContextIfPresent(th, id)
				if i%7 == 0 {
					c.ReleaseContextIfPresent(th, id)
				}
			}
		})
	}
	wg.Wait()
	close(ids)
	for id := range ids {
		c.ReleaseContextIfPresent(nil, id)
	}
	s := flushCleanup(t, cl)
	assert.Zero(t, c.NumContexts())
	assert.Equal(t, CleanupStats{Sent: 2 * goroutines * each}, s)
	count := 0
	sent.Range(func(k, v any) bool {
		count++
		assert.Equal(t, int64(1), v.(*atomic.Int64).Load(), "message %+v", k)
		return true
	})
	assert.Equal(t, 2*goroutines*each, count)
}

// A release that brings its workers (torch's: the backend passes those its
// engine recorded), of a context with no *Context, allocates nothing on
// its way to an inline first attempt: the workers reach the sender from
// the caller's slice, not a copy.
func TestReleaseWithWorkersAllocatesNothing(t *testing.T) {
	var sent atomic.Int64
	c, cl := newFanoutContainer(t, 1, func(uint16, int64) error { sent.Add(1); return nil }, CleanupOptions{}, nil)
	cl.SetFirstAttemptInline(true)
	const runs = 100
	ids := make([]int64, 0, runs+1)
	for i := range runs + 1 {
		id := int64(1)<<48 + int64(i) + 1
		h, err := c.GetOrCreateContextHandle(id)
		require.NoError(t, err)
		_, err = c.UnrefLast(h)
		require.NoError(t, err)
		DropRefAsC(c, h)
		ids = append(ids, id)
	}
	workers := []uint16{2, 3}
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		if !c.ReleaseContextWithWorkers(nil, ids[next], workers) {
			t.Fatalf("context %d was not released", ids[next])
		}
		next++
	})
	assert.Zero(t, allocs, "allocations per release")
	assert.Equal(t, int64(2*(runs+1)), sent.Load(), "each release told both workers, inline")
	assert.Equal(t, []uint16{2, 3}, workers, "the caller's workers unchanged")
}
