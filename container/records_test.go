package container_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

func newTestContext(t *testing.T, c *container.Container, id int64) *container.Context {
	t.Helper()
	ctx, err := c.GetOrCreateContext(id)
	require.NoError(t, err)
	return ctx
}

// A record lives while its context is listed or referenced: a handle keeps a
// released context readable; the last reference kills it, and the handle
// (its generation gone) is dead from then on, also once the record is
// reused for another context.
func TestRecordLifecycle(t *testing.T) {
	c := newContainer(t)
	dropped := recordDrops(c)

	h, err := c.GetOrCreateContextHandle(first3)
	require.NoError(t, err)
	assert.NotZero(t, h, "0 is never a handle: it is C's NULL")
	assert.Equal(t, int64(1), c.LiveReferences())
	setHostValue(t, c, h, 42, 1)
	v, err := c.HostValue(h)
	require.NoError(t, err)
	assert.Equal(t, uint64(42), v)

	// Listed and referenced: the last reference is not Go's to drop.
	done, err := c.UnrefLast(h)
	require.NoError(t, err)
	assert.False(t, done)

	require.True(t, c.ReleaseContextIfPresent(nil, first3))
	ctx, err := c.HandleContext(h)
	require.NoError(t, err, "a handle keeps a released context readable")
	assert.Equal(t, first3, ctx.ID())
	assert.Empty(t, *dropped, "not dropped while referenced")

	done, err = c.UnrefLast(h)
	require.NoError(t, err)
	assert.True(t, done)
	assert.Equal(t, []uint64{42}, *dropped)
	assert.Zero(t, c.LiveReferences())
	_, err = c.HandleContext(h)
	assert.Equal(t, container.ErrBadHandle, container.CodeOf(err))
	_, err = c.UnrefLast(h)
	assert.Equal(t, container.ErrBadHandle, container.CodeOf(err))

	// The record is reused (same shard, same free list): a new generation.
	h2, err := c.GetOrCreateContextHandle(first3)
	require.NoError(t, err)
	i1, g1 := container.SplitHandle(h)
	i2, g2 := container.SplitHandle(h2)
	assert.Equal(t, i1, i2, "the dead record is reused")
	assert.NotEqual(t, g1, g2)
	_, err = c.HandleContext(h)
	assert.Equal(t, container.ErrBadHandle, container.CodeOf(err), "the old handle stays dead")
	assert.NoError(t, c.CheckRef(h2))
	assert.Equal(t, container.ErrBadHandle, container.CodeOf(c.CheckRef(h)))
}

// A released context without handles dies at once, its host value dropped.
func TestRecordDiesOnReleaseWithoutHandles(t *testing.T) {
	c := newContainer(t)
	dropped := recordDrops(c)
	h, err := c.GetOrCreateContextHandle(first3)
	require.NoError(t, err)
	setHostValue(t, c, h, 9, 1)
	// A second handle-less context, to be reaped.
	_, err = c.GetOrCreateContext(first3 + 1)
	require.NoError(t, err)
	require.True(t, c.ReleaseContextIfPresent(nil, first3))
	assert.Empty(t, *dropped)
	done, err := c.UnrefLast(h)
	require.NoError(t, err)
	require.True(t, done)
	assert.Equal(t, []uint64{9}, *dropped)
	assert.Equal(t, 1, c.ReleaseContextsOfWorker(3))
}

// The deferred release and unref hand a dying record's host drop to the
// caller instead of running it (the C ABI runs it after Go returns): the
// dropper is not called, the drop comes back exactly once, with its value,
// and only from the call where the record died.
func TestDeferredDropsComeBackOnce(t *testing.T) {
	c := newContainer(t)
	dropped := recordDrops(c)

	// Released with no handle: it dies in the release, which returns its drop.
	h, err := c.GetOrCreateContextHandle(first3)
	require.NoError(t, err)
	setHostValue(t, c, h, 7, 0x70)
	done, d, err := c.UnrefLastDeferred(h)
	require.NoError(t, err)
	assert.False(t, done, "listed: not Go's to drop")
	assert.Zero(t, d)
	container.DropRefAsC(c, h)
	released, d, _ := c.ReleaseContextWithWorkersDeferred(nil, first3, []uint16{4})
	assert.True(t, released)
	assert.Equal(t, container.PendingDrop{Fn: 0x70, Value: 7}, d)
	released, d, _ = c.ReleaseContextWithWorkersDeferred(nil, first3, nil)
	assert.False(t, released, "gone already")
	assert.Zero(t, d)

	// Released while referenced: the last unref returns it.
	h, err = c.GetOrCreateContextHandle(first3 + 1)
	require.NoError(t, err)
	setHostValue(t, c, h, 8, 0x80)
	released, d, _ = c.ReleaseContextWithWorkersDeferred(nil, first3+1, nil)
	assert.True(t, released)
	assert.Zero(t, d, "a handle still refers to it")
	done, d, err = c.UnrefLastDeferred(h)
	require.NoError(t, err)
	assert.True(t, done)
	assert.Equal(t, container.PendingDrop{Fn: 0x80, Value: 8}, d)
	_, d, err = c.UnrefLastDeferred(h)
	assert.Equal(t, container.ErrBadHandle, container.CodeOf(err))
	assert.Zero(t, d)

	// A context without a host value dies with nothing to drop.
	_, err = c.GetOrCreateContext(first3 + 2)
	require.NoError(t, err)
	released, d, _ = c.ReleaseContextWithWorkersDeferred(nil, first3+2, nil)
	assert.True(t, released)
	assert.Zero(t, d)

	assert.Empty(t, *dropped, "the deferred calls never run the dropper")
	c.RunDrop(container.PendingDrop{Fn: 0x70, Value: 7})
	c.RunDrop(container.PendingDrop{})
	assert.Equal(t, []uint64{7}, *dropped, "RunDrop runs one, and nothing for none")
}

// The index grows past its first buckets many times and every context
// stays findable, through growth and releases.
func TestIndexGrows(t *testing.T) {
	c, err := container.New(3, container.WithShards(1))
	require.NoError(t, err)
	const n = 20000
	for i := range int64(n) {
		_, err := c.GetOrCreateContext(first3 + i*7919)
		require.NoError(t, err)
	}
	assert.Equal(t, int64(n), c.NumContexts())
	for i := range int64(n) {
		require.NoError(t, c.IsValidContext(first3+i*7919))
	}
	for i := int64(0); i < n; i += 2 {
		require.True(t, c.ReleaseContextIfPresent(nil, first3+i*7919))
	}
	for i := range int64(n) {
		assert.Equal(t, i%2 == 1, c.IsValidContext(first3+i*7919) == nil, "context %d", i)
	}
	assert.Len(t, c.ContextIDs(), n/2)
}

// setHostValue gives h's context a host value and drop function, as C's
// dac_context_set_host_value leaves them.
// recordDrops has c's host drops append their values to the slice it
// returns (one goroutine at a time).
func recordDrops(c *container.Container) *[]uint64 {
	var dropped []uint64
	c.SetHostDrop(func(drop uintptr, value uint64) { dropped = append(dropped, value) })
	return &dropped
}

func setHostValue(t testing.TB, c *container.Container, h uint64, value uint64, drop uintptr) {
	t.Helper()
	assert.True(t, container.SetHostValueAsC(c, h, value, drop), "a live handle, no host value yet")
}

// A context made for a handle has no *Context until something needs one
// (its creation allocates nothing on Go's heap); the one made then is the
// context's only one, whoever asks, from any number of goroutines.
func TestHandleContextMadeOnFirstUse(t *testing.T) {
	c := newContainer(t)
	h, err := c.GetOrCreateContextHandle(first3)
	require.NoError(t, err)
	assert.False(t, container.HasGoContext(c, h), "none made at creation")

	const n = 16
	got := make([]*container.Context, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, err := c.HandleContext(h)
			assert.NoError(t, err)
			got[i] = ctx
		}()
	}
	wg.Wait()
	for i := range n {
		require.Same(t, got[0], got[i])
	}
	assert.Equal(t, first3, got[0].ID())
	viaGo, err := c.RetrieveContext(first3)
	require.NoError(t, err)
	assert.Same(t, got[0], viaGo, "the Go API hands out the same one")

	// A context the Go API made has its *Context from the start, and a
	// handle to it names that one.
	goCtx, err := c.GetOrCreateContext(first3 + 1)
	require.NoError(t, err)
	h2, err := c.RetrieveContextHandle(first3 + 1)
	require.NoError(t, err)
	assert.True(t, container.HasGoContext(c, h2))
	viaHandle, err := c.HandleContext(h2)
	require.NoError(t, err)
	assert.Same(t, goCtx, viaHandle)
}

// A release with workers of a context that never had a *Context: when the
// release is its death, the workers go straight to the fan-out (nothing is
// made); when handles still refer to it, they go into its known workers,
// where those handles read them.
func TestReleaseWithWorkersOfAHandleContext(t *testing.T) {
	c := newContainer(t)
	rec := &recorder{}
	c.SetFanout(rec)

	h, err := c.GetOrCreateContextHandle(first3)
	require.NoError(t, err)
	done, err := c.UnrefLast(h)
	require.NoError(t, err)
	require.False(t, done, "listed: C drops it")
	container.DropRefAsC(c, h)
	assert.True(t, c.ReleaseContextWithWorkers(nil, first3, []uint16{3, 5, 3}))
	assert.Equal(t, []uint16{3, 5}, rec.calls[first3], "repeats are one worker")
	_, err = c.HandleContext(h)
	assert.Equal(t, container.ErrBadHandle, container.CodeOf(err), "it died in the release")

	held, err := c.GetOrCreateContextHandle(first3 + 1)
	require.NoError(t, err)
	assert.True(t, c.ReleaseContextWithWorkers(nil, first3+1, []uint16{4, 2}))
	assert.Equal(t, []uint16{4, 2}, rec.calls[first3+1])
	ctx, err := c.HandleContext(held)
	require.NoError(t, err, "a handle keeps it readable")
	assert.Equal(t, []uint16{4, 2}, ctx.KnownWorkerIDs())
	done, err = c.UnrefLast(held)
	require.NoError(t, err)
	assert.True(t, done)
}

// A record whose generation would wrap is retired, never reused: a handle
// of its first life stays dead for good. Before, generation 2^32-1 was
// followed by 1, and a handle of generation 1 named the next context.
func TestRecordRetiredAtLastGeneration(t *testing.T) {
	c := newContainer(t)
	h1, err := c.GetOrCreateContextHandle(first3)
	require.NoError(t, err)
	require.True(t, c.ReleaseContextIfPresent(nil, first3))
	done, err := c.UnrefLast(h1)
	require.NoError(t, err)
	require.True(t, done)
	idx, gen := container.SplitHandle(h1)
	require.Equal(t, uint32(1), gen)

	// As after 2^32-3 more lives of the record. (One id throughout: a
	// shard's free list is its own.)
	require.NoError(t, c.AgeRecord(h1, ^uint32(0)))
	last, err := c.GetOrCreateContextHandle(first3)
	require.NoError(t, err)
	lastIdx, lastGen := container.SplitHandle(last)
	require.Equal(t, idx, lastIdx, "the free record is reused up to its last generation")
	require.Equal(t, ^uint32(0), lastGen)
	require.True(t, c.ReleaseContextIfPresent(nil, first3))
	done, err = c.UnrefLast(last)
	require.NoError(t, err)
	require.True(t, done)
	assert.Zero(t, container.RecordOf(c, last).State.Load(), "retired: generation 0, which no handle has")

	next, err := c.GetOrCreateContextHandle(first3)
	require.NoError(t, err)
	nextIdx, _ := container.SplitHandle(next)
	assert.NotEqual(t, idx, nextIdx, "a retired record is never reused")
	for _, dead := range []uint64{h1, last} {
		_, err = c.HandleContext(dead)
		assert.Equal(t, container.ErrBadHandle, container.CodeOf(err), "handle %#x", dead)
	}
	ctx, err := c.HandleContext(next)
	require.NoError(t, err)
	assert.Equal(t, first3, ctx.ID())
	assert.Error(t, c.AgeRecord(last, ^uint32(0)), "a retired record has no later life")
}
