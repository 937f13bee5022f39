package container_test

import (
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// newContainer returns an empty container for worker 3, whose first id is
// 844424930131968 (3 << 48).
func newContainer(t *testing.T, opts ...container.Option) *container.Container {
	t.Helper()
	c, err := container.New(3, opts...)
	require.NoError(t, err)
	return c
}

// assertErr checks an error's code and exact message.
func assertErr(t *testing.T, err error, code container.Code, msg string) {
	t.Helper()
	if assert.Error(t, err) {
		assert.Equal(t, code, container.CodeOf(err), "code of %q", err)
		assert.Equal(t, msg, err.Error())
	}
}

const first3 = int64(844424930131968) // the first id of worker 3

func TestNewContextBecomesCurrent(t *testing.T) {
	c := newContainer(t)
	th := container.NewThread()
	assert.False(t, th.HasValidContext())
	assert.Equal(t, int64(-1), th.CurrentID())

	ctx, err := c.NewContext(th)
	require.NoError(t, err)
	assert.Equal(t, first3, ctx.ID())
	assert.Equal(t, first3, th.CurrentID())
	assert.True(t, th.HasValidContext())
	assert.Equal(t, int64(1), c.NumContexts())

	cur, err := c.CurrentContext(th)
	require.NoError(t, err)
	assert.Same(t, ctx, cur)
}

func TestNewContextWhenThreadHasOne(t *testing.T) {
	c := newContainer(t)
	th := container.NewThread()
	_, err := c.NewContext(th)
	require.NoError(t, err)

	ctx, err := c.NewContext(th)
	assert.Nil(t, ctx)
	assertErr(t, err, container.ErrAlreadyHasContext, "Already have an autograd context id for this thread.")
	assert.Equal(t, int64(1), c.NumContexts(), "a failed NewContext stores nothing")
	assert.Equal(t, first3, th.CurrentID())

	// The refused attempt took no id: the next one is the second id.
	th.Clear()
	ctx, err = c.NewContext(th)
	require.NoError(t, err)
	assert.Equal(t, first3+1, ctx.ID())
}

func TestCurrentContextWithoutOne(t *testing.T) {
	c := newContainer(t)
	ctx, err := c.CurrentContext(container.NewThread())
	assert.Nil(t, ctx)
	assertErr(t, err, container.ErrNoCurrentContext,
		"Current thread doesn't have a valid autograd context. Please wrap your code using: "+
			"`with torch.distributed.autograd.context() as context_id` to generate a valid context")
}

func TestRetrieve(t *testing.T) {
	c := newContainer(t)
	th := container.NewThread()
	ctx, err := c.NewContext(th)
	require.NoError(t, err)

	got, err := c.RetrieveContext(ctx.ID())
	require.NoError(t, err)
	assert.Same(t, ctx, got)
	assert.Same(t, ctx, c.RetrieveContextIfPresent(ctx.ID()))
	assert.NoError(t, c.IsValidContext(ctx.ID()))

	got, err = c.RetrieveContext(12345)
	assert.Nil(t, got)
	assertErr(t, err, container.ErrNotFound, "Could not find autograd context with id: 12345")
	assert.Nil(t, c.RetrieveContextIfPresent(12345))
	assertErr(t, c.IsValidContext(12345), container.ErrNotFound, "Could not find autograd context with id: 12345")
	// Negative ids (workers >= 32768) print as signed numbers, as in C++.
	assertErr(t, c.IsValidContext(-7187745005283311616), container.ErrNotFound,
		"Could not find autograd context with id: -7187745005283311616")
}

func TestGetOrCreate(t *testing.T) {
	c := newContainer(t)
	th := container.NewThread()
	// A message from worker 5 names a pass this worker has not seen.
	remote := container.FirstID(5) + 42

	ctx, err := c.GetOrCreateContext(remote)
	require.NoError(t, err)
	assert.Equal(t, remote, ctx.ID())
	assert.Equal(t, int64(1), c.NumContexts())
	assert.False(t, th.HasValidContext(), "get_or_create does not touch the current id")

	again, err := c.GetOrCreateContext(remote)
	require.NoError(t, err)
	assert.Same(t, ctx, again)
	assert.Equal(t, int64(1), c.NumContexts())

	// It does not use the local counter: the first local id is still first3.
	local, err := c.NewContext(th)
	require.NoError(t, err)
	assert.Equal(t, first3, local.ID())

	// And it finds contexts made by NewContext.
	got, err := c.GetOrCreateContext(first3)
	require.NoError(t, err)
	assert.Same(t, local, got)
	assert.Equal(t, int64(2), c.NumContexts())
}

func TestRelease(t *testing.T) {
	c := newContainer(t)
	th := container.NewThread()
	ctx, err := c.NewContext(th)
	require.NoError(t, err)
	id := ctx.ID()

	require.NoError(t, c.ReleaseContext(th, id))
	assert.Zero(t, c.NumContexts())
	assert.Equal(t, container.InvalidID, th.CurrentID(), "releasing the current context resets it")
	assertErr(t, c.IsValidContext(id), container.ErrNotFound, "Could not find autograd context with id: "+itoa(id))

	assertErr(t, c.ReleaseContext(th, id), container.ErrNotFound, "Could not find autograd context with id: "+itoa(id))
	assertErr(t, c.ReleaseContext(th, 12345), container.ErrNotFound, "Could not find autograd context with id: 12345")
}

func TestReleaseResetsOnlyTheGivenThread(t *testing.T) {
	c := newContainer(t)
	a, b := container.NewThread(), container.NewThread()
	ctxA, err := c.NewContext(a)
	require.NoError(t, err)
	ctxB, err := c.NewContext(b)
	require.NoError(t, err)

	// b releases a's context: a keeps a stale current id.
	require.NoError(t, c.ReleaseContext(b, ctxA.ID()))
	assert.Equal(t, ctxA.ID(), a.CurrentID())
	assert.True(t, a.HasValidContext(), "has_valid_context does not look the context up")
	assert.Equal(t, ctxB.ID(), b.CurrentID(), "b's own current id is a different one: kept")

	cur, err := c.CurrentContext(a)
	assert.Nil(t, cur)
	assertErr(t, err, container.ErrNotFound, "Couldn't find autograd context data for current autograd context id")
	// The stale id still blocks a new context on a.
	_, err = c.NewContext(a)
	assertErr(t, err, container.ErrAlreadyHasContext, container.MsgAlreadyHasCtx)

	// Releasing without a thread (a cleanup message) resets nobody.
	require.NoError(t, c.ReleaseContext(nil, ctxB.ID()))
	assert.Equal(t, ctxB.ID(), b.CurrentID())
	assert.Zero(t, c.NumContexts())
}

func TestReleaseIfPresentTwice(t *testing.T) {
	c := newContainer(t)
	th := container.NewThread()
	ctx, err := c.NewContext(th)
	require.NoError(t, err)

	assert.True(t, c.ReleaseContextIfPresent(th, ctx.ID()))
	assert.Equal(t, container.InvalidID, th.CurrentID())
	// A cleanup message may arrive twice: the second is a silent no-op.
	assert.False(t, c.ReleaseContextIfPresent(th, ctx.ID()))
	assert.False(t, c.ReleaseContextIfPresent(nil, 12345))
	assert.Zero(t, c.NumContexts())
}

func TestReleaseContextsOfWorker(t *testing.T) {
	c := newContainer(t)
	th := container.NewThread()
	local, err := c.NewContext(th)
	require.NoError(t, err)
	for i := range int64(5) {
		_, err := c.GetOrCreateContext(container.FirstID(5) + i)
		require.NoError(t, err)
	}
	_, err = c.GetOrCreateContext(container.FirstID(6))
	require.NoError(t, err)
	// A negative id belongs to a worker >= 32768, not to "worker -1".
	_, err = c.GetOrCreateContext(container.FirstID(65535))
	require.NoError(t, err)
	assert.Equal(t, int64(8), c.NumContexts())

	assert.Equal(t, 5, c.ReleaseContextsOfWorker(5))
	assert.Equal(t, int64(3), c.NumContexts())
	assert.Zero(t, c.ReleaseContextsOfWorker(5))

	assert.Equal(t, 1, c.ReleaseContextsOfWorker(65535))

	// The calling thread's current id is not reset: nobody called it for a thread.
	assert.Equal(t, 1, c.ReleaseContextsOfWorker(3))
	assert.Equal(t, local.ID(), th.CurrentID())

	assert.NoError(t, c.IsValidContext(container.FirstID(6)))
	assert.ElementsMatch(t, []int64{container.FirstID(6)}, c.ContextIDs())

	// Out of range is refused at the edge, before the conversion to uint16.
	for _, w := range []int64{-1, 65536} {
		assertErr(t, container.CheckWorkerID(w), container.ErrInvalidArgument, container.MsgWorkerRange)
	}
}

// newClockedContainer returns a container whose uses are dated by a clock
// that moves only when the test says (container.WithClock): what a test of
// idle time asserts then holds however long the machine stalls it.
func newClockedContainer(t *testing.T) (*container.Container, *container.ManualClock) {
	t.Helper()
	clock, err := container.NewManualClock()
	require.NoError(t, err)
	return newContainer(t, container.WithClock(clock)), clock
}

func TestReapIdleContexts(t *testing.T) {
	c, clock := newClockedContainer(t)
	th := container.NewThread()
	idle, err := c.NewContext(th)
	require.NoError(t, err)
	used, err := c.GetOrCreateContext(first3 + 100)
	require.NoError(t, err)

	// Fresh contexts are not idle for a minute.
	n, err := c.ReapIdleContexts(60_000)
	require.NoError(t, err)
	assert.Zero(t, n)

	// Past the idle limit, one context touched: only the other is idle.
	require.NoError(t, clock.Advance(400))
	_, err = c.RetrieveContext(used.ID())
	require.NoError(t, err)
	n, err = c.ReapIdleContexts(200)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assertErr(t, c.IsValidContext(idle.ID()), container.ErrNotFound, "Could not find autograd context with id: "+itoa(idle.ID())+
		" (distautograd: it was reaped by dac_reap_idle_contexts, unused for 200 ms or more)")
	assert.NoError(t, c.IsValidContext(used.ID()))
	assert.Equal(t, int64(1), c.NumContexts())

	// 0: everything is idle.
	n, err = c.ReapIdleContexts(0)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Zero(t, c.NumContexts())

	n, err = c.ReapIdleContexts(-1)
	assert.Zero(t, n)
	assertErr(t, err, container.ErrInvalidArgument, "distautograd: max_idle_ms must be >= 0, got -1")
}

func TestReapCountsChangesAsUse(t *testing.T) {
	c, clock := newClockedContainer(t)
	a, err := c.GetOrCreateContext(first3)
	require.NoError(t, err)
	b, err := c.GetOrCreateContext(first3 + 1)
	require.NoError(t, err)
	d, err := c.GetOrCreateContext(first3 + 2)
	require.NoError(t, err)
	require.NoError(t, clock.Advance(400))
	a.AddKnownWorkerID(4)
	require.NoError(t, b.AddSendFunction(1, 1))

	n, err := c.ReapIdleContexts(200)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.ElementsMatch(t, []int64{a.ID(), b.ID()}, c.ContextIDs())
	assert.Error(t, c.IsValidContext(d.ID()))
}

func TestSetMaxContexts(t *testing.T) {
	c := newContainer(t)
	assert.Zero(t, c.MaxContexts())
	require.NoError(t, c.SetMaxContexts(2))
	assert.Equal(t, int64(2), c.MaxContexts())

	th := container.NewThread()
	_, err := c.NewContext(th)
	require.NoError(t, err)
	_, err = c.GetOrCreateContext(container.FirstID(5))
	require.NoError(t, err)

	const limitMsg = "distautograd: the container holds 2 contexts, its limit (max_contexts); release some or raise the limit"
	other := container.NewThread()
	ctx, err := c.NewContext(other)
	assert.Nil(t, ctx)
	assertErr(t, err, container.ErrLimit, limitMsg)
	assert.False(t, other.HasValidContext(), "a refused NewContext sets no current id")
	ctx, err = c.GetOrCreateContext(container.FirstID(5) + 1)
	assert.Nil(t, ctx)
	assertErr(t, err, container.ErrLimit, limitMsg)
	assert.Equal(t, int64(2), c.RefusedContexts())
	assert.Equal(t, int64(2), c.NumContexts())

	// Existing contexts are still found through get_or_create at the cap.
	got, err := c.GetOrCreateContext(container.FirstID(5))
	require.NoError(t, err)
	assert.Equal(t, container.FirstID(5), got.ID())

	// A refused NewContext took no id, nor a run: th's run goes on, and
	// other's is the next one.
	require.NoError(t, c.ReleaseContext(th, first3))
	ctx, err = c.NewContext(th)
	require.NoError(t, err)
	assert.Equal(t, first3+1, ctx.ID())
	require.NoError(t, c.ReleaseContext(th, first3+1))
	ctx, err = c.NewContext(other)
	require.NoError(t, err)
	assert.Equal(t, first3+container.ContextIDRun, ctx.ID())

	// 0 lifts the cap.
	require.NoError(t, c.SetMaxContexts(0))
	_, err = c.GetOrCreateContext(container.FirstID(5) + 1)
	require.NoError(t, err)
	assert.Equal(t, int64(3), c.NumContexts())
	assert.Equal(t, int64(2), c.RefusedContexts())

	assertErr(t, c.SetMaxContexts(-1), container.ErrInvalidArgument, "distautograd: max_contexts must be >= 0, got -1")
	assert.Zero(t, c.MaxContexts())
}

func TestContextIDs(t *testing.T) {
	c := newContainer(t)
	assert.Empty(t, c.ContextIDs())
	want := []int64{first3 + 7, container.FirstID(65535), 0}
	for _, id := range want {
		_, err := c.GetOrCreateContext(id)
		require.NoError(t, err)
	}
	assert.ElementsMatch(t, want, c.ContextIDs())
}

func TestShardCountDoesNotChangeBehaviour(t *testing.T) {
	for _, shards := range []int{0, 1, 3, 64} {
		c := newContainer(t, container.WithShards(shards))
		th := container.NewThread()
		var ids []int64
		for range 50 {
			th.Clear()
			ctx, err := c.NewContext(th)
			require.NoError(t, err)
			ids = append(ids, ctx.ID())
		}
		assert.Equal(t, int64(50), c.NumContexts(), "shards=%d", shards)
		got := c.ContextIDs()
		slices.Sort(got)
		assert.Equal(t, ids, got, "shards=%d", shards)
		for _, id := range ids {
			require.NoError(t, c.ReleaseContext(th, id))
		}
		assert.Zero(t, c.NumContexts())
	}
}

// recorder is a Fanout that remembers what it was told.
type recorder struct {
	mu    sync.Mutex
	calls map[int64][]uint16
	// during, if set, runs inside Release: the container must hold
	// no lock then.
	during func(id int64)
}

func (r *recorder) Release(id int64, workers []uint16) {
	r.mu.Lock()
	if r.calls == nil {
		r.calls = map[int64][]uint16{}
	}
	r.calls[id] = workers
	r.mu.Unlock()
	if r.during != nil {
		r.during(id)
	}
}

// The deferred release tells the Fanout only when its caller runs the
// notice, after the thread's state is settled: a host that keeps that
// state itself stores it first (the C ABI), as the Fanout may run its code.
func TestReleaseDeferredTellsOnItsNotice(t *testing.T) {
	c := newContainer(t)
	rec := &recorder{}
	c.SetFanout(rec)
	th := container.NewThread()
	ctx, err := c.NewContext(th)
	require.NoError(t, err)
	ctx.AddKnownWorkerID(4)
	other, err := c.GetOrCreateContext(container.FirstID(5))
	require.NoError(t, err)

	released, _, n := c.ReleaseContextWithWorkersDeferred(th, ctx.ID(), nil)
	assert.True(t, released)
	assert.Equal(t, container.InvalidID, th.CurrentID(), "the current id reset before the notice")
	released, _, n2 := c.ReleaseContextWithWorkersDeferred(nil, other.ID(), []uint16{7, 8})
	assert.True(t, released)
	assert.Empty(t, rec.calls, "told before the notices ran")
	c.RunNotice(n, nil)
	c.RunNotice(n2, []uint16{7, 8})
	c.RunNotice(container.PendingNotice{}, []uint16{9})
	assert.Equal(t, map[int64][]uint16{ctx.ID(): {4}, other.ID(): {7, 8}}, rec.calls)
}

func TestReleaseNotifiesKnownWorkers(t *testing.T) {
	c := newContainer(t, container.WithShards(1)) // one shard: any lock held would be hit
	rec := &recorder{}
	rec.during = func(id int64) {
		// Calling back into the container from the fanout must not deadlock.
		_, _ = c.GetOrCreateContext(container.FirstID(9))
		c.ReleaseContextIfPresent(nil, container.FirstID(9))
	}
	c.SetFanout(rec)
	th := container.NewThread()

	ctx, err := c.NewContext(th)
	require.NoError(t, err)
	ctx.AddKnownWorkerID(4)
	ctx.AddKnownWorkerID(1)
	silent, err := c.GetOrCreateContext(container.FirstID(5))
	require.NoError(t, err)
	ofSix, err := c.GetOrCreateContext(container.FirstID(6))
	require.NoError(t, err)
	ofSix.AddKnownWorkerID(6)
	ofSix.AddKnownWorkerID(3)
	idle, err := c.GetOrCreateContext(container.FirstID(7))
	require.NoError(t, err)
	idle.AddKnownWorkerID(2)

	require.NoError(t, c.ReleaseContext(th, ctx.ID()))
	assert.True(t, c.ReleaseContextIfPresent(nil, silent.ID()))
	assert.Equal(t, 1, c.ReleaseContextsOfWorker(6))
	n, err := c.ReapIdleContexts(0)
	require.NoError(t, err)
	assert.Equal(t, 1, n)

	// A context without known workers notifies nobody; a dead worker's,
	// its other workers but not it.
	assert.Equal(t, map[int64][]uint16{
		ctx.ID():   {4, 1},
		ofSix.ID(): {3},
		idle.ID():  {2},
	}, rec.calls)

	// nil: nobody is told.
	c.SetFanout(nil)
	again, err := c.GetOrCreateContext(first3 + 50)
	require.NoError(t, err)
	again.AddKnownWorkerID(8)
	require.NoError(t, c.ReleaseContext(nil, again.ID()))
	assert.NotContains(t, rec.calls, again.ID())
}

func TestReleasedContextStaysReadable(t *testing.T) {
	c := newContainer(t)
	th := container.NewThread()
	ctx, err := c.NewContext(th)
	require.NoError(t, err)
	ctx.AddKnownWorkerID(4)
	require.NoError(t, ctx.AddSendFunction(10, 0xabc))
	require.NoError(t, c.ReleaseContext(th, ctx.ID()))

	// Whoever still holds it reads it (the native API hands out shared pointers).
	assert.Equal(t, first3, ctx.ID())
	assert.Equal(t, []uint16{4}, ctx.KnownWorkerIDs())
	fn, err := ctx.SendFunction(10)
	require.NoError(t, err)
	assert.Equal(t, uint64(0xabc), fn)
}

func TestThread(t *testing.T) {
	th := container.NewThread()
	assert.Equal(t, container.InvalidID, th.CurrentID())
	assert.False(t, th.HasValidContext())

	// set_current_context_id does not look the id up.
	require.NoError(t, th.SetCurrentID(12345))
	assert.Equal(t, int64(12345), th.CurrentID())
	assert.True(t, th.HasValidContext())
	assertErr(t, th.SetCurrentID(7), container.ErrAlreadyHasContext, "Already have an autograd context id for this thread.")
	assert.Equal(t, int64(12345), th.CurrentID())

	th.ForceCurrentID(7)
	assert.Equal(t, int64(7), th.CurrentID())
	th.Clear()
	assert.Equal(t, container.InvalidID, th.CurrentID())
	require.NoError(t, th.SetCurrentID(0), "0 is a valid id (worker 0's first)")
	assert.True(t, th.HasValidContext())

	// Forcing -1 is the same as clearing.
	th.ForceCurrentID(container.InvalidID)
	assert.False(t, th.HasValidContext())
}

func TestCurrentContextFollowsForcedID(t *testing.T) {
	c := newContainer(t)
	remote, err := c.GetOrCreateContext(container.FirstID(5))
	require.NoError(t, err)
	th := container.NewThread()
	th.ForceCurrentID(remote.ID())
	cur, err := c.CurrentContext(th)
	require.NoError(t, err)
	assert.Same(t, remote, cur)

	th.ForceCurrentID(12345)
	_, err = c.CurrentContext(th)
	assertErr(t, err, container.ErrNotFound, container.MsgCurrentGone)
}
