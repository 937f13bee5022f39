package container_test

import (
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

func TestHandleLifecycle(t *testing.T) {
	var hs container.Handles
	c := newContainer(t)
	ctx := newTestContext(t, c, first3)
	assert.Zero(t, hs.Live())

	h, err := hs.New(ctx)
	require.NoError(t, err)
	assert.NotZero(t, h, "0 is never a handle: it is C's NULL")
	assert.Equal(t, 1, hs.Live())
	got, err := hs.Get(h)
	require.NoError(t, err)
	assert.Same(t, ctx, got)

	// Two references: the first Unref leaves it alive.
	require.NoError(t, hs.Ref(h))
	require.NoError(t, hs.Unref(h))
	_, err = hs.Get(h)
	require.NoError(t, err)
	assert.Equal(t, 1, hs.Live())

	// The last Unref kills it; every use after is ErrBadHandle.
	require.NoError(t, hs.Unref(h))
	assert.Zero(t, hs.Live())
	dead := "distautograd: context handle " + hex(h) + " is not a live handle (never issued, or its last reference was dropped)"
	_, err = hs.Get(h)
	assertErr(t, err, container.ErrBadHandle, dead)
	assertErr(t, hs.Unref(h), container.ErrBadHandle, dead)
	assertErr(t, hs.Ref(h), container.ErrBadHandle, dead)
}

func TestHandleOutlivesRelease(t *testing.T) {
	var hs container.Handles
	c := newContainer(t)
	th := container.NewThread()
	ctx, err := c.NewContext(th)
	require.NoError(t, err)
	ctx.AddKnownWorkerID(4)
	h, err := hs.New(ctx)
	require.NoError(t, err)

	require.NoError(t, c.ReleaseContext(th, ctx.ID()))
	got, err := hs.Get(h)
	require.NoError(t, err, "a handle keeps a released context readable")
	assert.Equal(t, first3, got.ID())
	assert.Equal(t, []uint16{4}, got.KnownWorkerIDs())
	require.NoError(t, hs.Unref(h))
}

func TestHandleNeverIssued(t *testing.T) {
	var hs container.Handles
	_, err := hs.Get(0)
	assertErr(t, err, container.ErrBadHandle, "distautograd: context handle is NULL")
	assertErr(t, hs.Unref(0), container.ErrBadHandle, "distautograd: context handle is NULL")
	assertErr(t, hs.Ref(0), container.ErrBadHandle, "distautograd: context handle is NULL")

	for _, h := range []uint64{1, 0xdeadbeef, 1<<64 - 1, 1 << 32} {
		_, err := hs.Get(h)
		assertErr(t, err, container.ErrBadHandle,
			"distautograd: context handle "+hex(h)+" is not a live handle (never issued, or its last reference was dropped)")
	}
	assert.Zero(t, hs.Live())
}

func TestHandleGenerationAfterSlotReuse(t *testing.T) {
	var hs container.Handles
	c := newContainer(t)
	a := newTestContext(t, c, first3)
	b := newTestContext(t, c, first3+64) // same low bits: same handle shard

	ha, err := hs.New(a)
	require.NoError(t, err)
	require.NoError(t, hs.Unref(ha))
	hb, err := hs.New(b)
	require.NoError(t, err)

	// b took a's freed slot, under a new generation: the old handle does not
	// reach b.
	assert.Equal(t, ha&(1<<32-1), hb&(1<<32-1), "the slot was reused")
	assert.NotEqual(t, ha, hb)
	_, err = hs.Get(ha)
	assert.Equal(t, container.ErrBadHandle, container.CodeOf(err))
	assert.Equal(t, container.ErrBadHandle, container.CodeOf(hs.Unref(ha)))
	got, err := hs.Get(hb)
	require.NoError(t, err)
	assert.Same(t, b, got)
	assert.Equal(t, 1, hs.Live(), "the stale unref did not touch b's reference")

	// A forged handle: a live slot with another generation.
	_, err = hs.Get(hb + 1<<32)
	assert.Equal(t, container.ErrBadHandle, container.CodeOf(err))
	require.NoError(t, hs.Unref(hb))
}

func TestHandleLiveCount(t *testing.T) {
	var hs container.Handles
	c := newContainer(t)
	ctx := newTestContext(t, c, first3)
	var hh []uint64
	for range 200 {
		// Many handles to one context: each is its own reference.
		h, err := hs.New(ctx)
		require.NoError(t, err)
		hh = append(hh, h)
	}
	assert.Equal(t, 200, hs.Live())
	seen := map[uint64]bool{}
	for _, h := range hh {
		assert.False(t, seen[h], "handle %#x issued twice", h)
		seen[h] = true
		require.NoError(t, hs.Unref(h))
	}
	assert.Zero(t, hs.Live())
}
