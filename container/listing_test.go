package container_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

// unrefAll drops one reference from each handle, as C's dac_context_unref
// (csrc/handles.c) does: the last of a released context through Go, any
// other by a decrement.
func unrefAll(t *testing.T, c *container.Container, hs []uint64) {
	for _, h := range hs {
		done, err := c.UnrefLast(h)
		require.NoError(t, err)
		if !done {
			container.DropRefAsC(c, h)
		}
	}
	assert.Zero(t, c.LiveReferences(), "every listed reference dropped")
}

func TestListHandlesListsEveryStoredContext(t *testing.T) {
	c := newContainer(t, container.WithShards(4))
	th := container.NewThread()
	own, err := c.NewContext(th)
	require.NoError(t, err)
	want := []int64{own.ID()}
	for k := range int64(40) {
		ctx, err := c.GetOrCreateContext(container.FirstID(5) + k)
		require.NoError(t, err)
		want = append(want, ctx.ID())
	}

	hs, total := c.ListHandles(1000)
	assert.Equal(t, len(want), total)
	var got []int64
	for _, h := range hs {
		ctx, err := c.HandleContext(h)
		require.NoError(t, err, "every listed handle holds a reference")
		got = append(got, ctx.ID())
	}
	assert.ElementsMatch(t, want, got)

	// Less room than contexts: as many handles as there is room for, and
	// the count of all.
	few, total := c.ListHandles(7)
	assert.Len(t, few, 7)
	assert.Equal(t, len(want), total)
	none, total := c.ListHandles(0)
	assert.Empty(t, none)
	assert.Equal(t, len(want), total)

	// A listed context released stays readable through its handle.
	require.NoError(t, c.ReleaseContext(th, own.ID()))
	for _, h := range hs {
		_, err := c.HandleContext(h)
		assert.NoError(t, err)
	}
	unrefAll(t, c, append(hs, few...))
	hs, total = c.ListHandles(1000)
	assert.Equal(t, len(want)-1, total)
	assert.Len(t, hs, total)
	unrefAll(t, c, hs)
}

func TestHandleTimesAgeAndIdle(t *testing.T) {
	c, clock := newClockedContainer(t)
	require.True(t, container.ViewReadsClock(c, clock), "C's lookups date uses by the container's clock")
	old, err := c.GetOrCreateContext(first3)
	require.NoError(t, err)
	require.NoError(t, clock.Advance(300))
	young, err := c.GetOrCreateContext(first3 + 1)
	require.NoError(t, err)
	require.NoError(t, clock.Advance(20))

	// Listing is not a use: it leaves the idle times as they were, so a
	// listing host never keeps a context from the reaper.
	hs, total := c.ListHandles(10)
	require.Equal(t, 2, total)
	times := map[int64][3]int64{}
	for _, h := range hs {
		ctx, err := c.HandleContext(h)
		require.NoError(t, err)
		born, last, now, err := c.HandleTimes(h)
		require.NoError(t, err)
		times[ctx.ID()] = [3]int64{born, last, now}
	}
	assert.Equal(t, [3]int64{0, 0, 320}, times[old.ID()], "the old one: born, last used, now")
	assert.Equal(t, [3]int64{300, 300, 320}, times[young.ID()], "the young one: born, last used, now")
	n, err := c.ReapIdleContexts(250)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "only the old one was idle: the listing touched nothing")

	// A use moves the idle time, not the age.
	require.NoError(t, clock.Advance(30))
	_, err = c.RetrieveContext(young.ID())
	require.NoError(t, err)
	h := slices.IndexFunc(hs, func(h uint64) bool { ctx, err := c.HandleContext(h); return err == nil && ctx.ID() == young.ID() })
	require.GreaterOrEqual(t, h, 0)
	born, last, now, err := c.HandleTimes(hs[h])
	require.NoError(t, err)
	assert.Equal(t, [3]int64{300, 350, 350}, [3]int64{born, last, now}, "the young one after a use")
	unrefAll(t, c, hs)

	// A dead handle is refused.
	_, _, _, err = c.HandleTimes(hs[0])
	assert.Error(t, err)
}
