package container_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

// fakeUncounted holds references uncounted as the C ABI does
// (csrc/uncounted.c, csrc/refs.c): a settle counts each in the record's
// state word first, then forgets it; with dropWhileSettled, its holder drops it between the two,
// and the settle takes its count out again.
type fakeUncounted struct {
	c                *container.Container
	mu               sync.Mutex
	held             map[uint64]int
	settles          int
	dropWhileSettled bool
}

func newFakeUncounted(c *container.Container) *fakeUncounted {
	f := &fakeUncounted{c: c, held: map[uint64]int{}}
	c.SetUncountedRefs(f)
	return f
}

func (f *fakeUncounted) record(h uint64) *container.Record { return container.RecordOf(f.c, h) }

// hold takes an uncounted reference to h, as a lookup does: the record
// marked first (by an earlier lookup, counted), then the slot written.
func (f *fakeUncounted) hold(h uint64) {
	f.record(h).State.Or(container.UncountedBit)
	f.mu.Lock()
	f.held[h]++
	f.mu.Unlock()
}

func (f *fakeUncounted) Settle(h uint64, state *atomic.Uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settles++
	if state != &f.record(h).State {
		panic("Settle was not given h's state word")
	}
	for ; f.held[h] > 0; f.held[h]-- {
		state.Add(1)
		if f.dropWhileSettled {
			state.Add(^uint64(0))
		}
	}
}

func (f *fakeUncounted) Count() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, k := range f.held {
		n += k
	}
	return int64(n)
}

// uncountedOnly leaves a new context of id with its one reference held
// uncounted (its counted one dropped, as C drops one while it is listed).
func uncountedOnly(t *testing.T, c *container.Container, f *fakeUncounted, id int64, value uint64) uint64 {
	t.Helper()
	h, err := c.GetOrCreateContextHandle(id)
	require.NoError(t, err)
	setHostValue(t, c, h, value, 1)
	f.hold(h)
	f.record(h).State.Add(^uint64(0))
	return h
}

// A released record some thread holds uncounted does not die: the release
// counts that reference, and its unref is the death.
func TestReleaseCountsUncountedReferences(t *testing.T) {
	c := newContainer(t)
	dropped := recordDrops(c)
	f := newFakeUncounted(c)
	h := uncountedOnly(t, c, f, first3, 7)
	assert.Equal(t, int64(1), c.LiveReferences(), "an uncounted reference is live")
	assert.Equal(t, int64(1), c.UncountedReferences())

	require.True(t, c.ReleaseContextIfPresent(nil, first3))
	assert.Equal(t, 1, f.settles)
	assert.Empty(t, *dropped, "not dropped while held")
	assert.Equal(t, int64(1), c.LiveReferences())
	assert.Zero(t, c.UncountedReferences(), "counted by the release")
	_, err := c.HandleContext(h)
	require.NoError(t, err, "still readable through its handle")

	done, err := c.UnrefLast(h)
	require.NoError(t, err)
	assert.True(t, done)
	assert.Equal(t, []uint64{7}, *dropped)
	assert.Zero(t, c.LiveReferences())
}

// A marked record whose uncounted references are gone dies at its release,
// also when its holder drops the last one while the release counts it.
func TestReleaseOfMarkedRecordWithoutReferences(t *testing.T) {
	for _, racing := range []bool{false, true} {
		c := newContainer(t)
		dropped := recordDrops(c)
		f := newFakeUncounted(c)
		h := uncountedOnly(t, c, f, first3, 8)
		if !racing {
			f.held[h] = 0 // its holder dropped it before the release
		}
		f.dropWhileSettled = racing
		require.True(t, c.ReleaseContextIfPresent(nil, first3))
		assert.Equal(t, 1, f.settles)
		assert.Equal(t, []uint64{8}, *dropped, "racing %v", racing)
		assert.Zero(t, c.LiveReferences())
		_, err := c.HandleContext(h)
		assert.Equal(t, container.ErrBadHandle, container.CodeOf(err))
	}
}

// A record never marked is never settled; nor is one with counted
// references (its last goes through UnrefLast, whose caller settles).
func TestSettleOnlyWhereNeeded(t *testing.T) {
	c := newContainer(t)
	dropped := recordDrops(c)
	f := newFakeUncounted(c)
	h, err := c.GetOrCreateContextHandle(first3)
	require.NoError(t, err)
	setHostValue(t, c, h, 1, 1)
	f.record(h).State.Add(^uint64(0))
	require.True(t, c.ReleaseContextIfPresent(nil, first3))
	assert.Equal(t, []uint64{1}, *dropped)

	h, err = c.GetOrCreateContextHandle(first3 + 1)
	require.NoError(t, err)
	f.hold(h)
	require.True(t, c.ReleaseContextIfPresent(nil, first3+1))
	assert.Zero(t, f.settles)
	f.mu.Lock()
	f.held[h] = 0
	f.mu.Unlock()
	done, err := c.UnrefLast(h)
	require.NoError(t, err)
	assert.True(t, done, "the uncounted bit does not hide the last reference")
}
