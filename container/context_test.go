package container_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

func TestNewContextIsEmpty(t *testing.T) {
	ctx := newTestContext(t, newContainer(t), first3)
	assert.Equal(t, first3, ctx.ID())
	assert.Empty(t, ctx.KnownWorkerIDs())
	assert.Zero(t, ctx.NumKnownWorkerIDs())
	assert.Empty(t, ctx.SendFunctions())
	assert.Empty(t, ctx.RecvFunctions())
	sends, recvs := ctx.FunctionCounts()
	assert.Zero(t, sends)
	assert.Zero(t, recvs)
}

func TestKnownWorkerIDs(t *testing.T) {
	ctx := newTestContext(t, newContainer(t), first3)
	for _, w := range []uint16{4, 1, 4, 65535, 0, 1} {
		ctx.AddKnownWorkerID(w)
	}
	assert.Equal(t, []uint16{4, 1, 65535, 0}, ctx.KnownWorkerIDs(), "deduplicated, in the order added")
	assert.Equal(t, 4, ctx.NumKnownWorkerIDs())
}

// Past 32 workers the context indexes them in a map: the dedup must hold
// across the switch.
func TestKnownWorkerIDsMany(t *testing.T) {
	ctx := newTestContext(t, newContainer(t), first3)
	var want []uint16
	for w := uint16(1000); w < 1100; w++ {
		ctx.AddKnownWorkerID(w)
		want = append(want, w)
	}
	for w := uint16(1000); w < 1100; w += 3 {
		ctx.AddKnownWorkerID(w) // all duplicates, before and after the 32nd
	}
	assert.Equal(t, want, ctx.KnownWorkerIDs())
	assert.Equal(t, 100, ctx.NumKnownWorkerIDs())
}

func TestKnownWorkerIDsAreACopy(t *testing.T) {
	ctx := newTestContext(t, newContainer(t), first3)
	ctx.AddKnownWorkerID(4)
	ids := ctx.KnownWorkerIDs()
	ids[0] = 99
	_ = append(ids, 100)
	assert.Equal(t, []uint16{4}, ctx.KnownWorkerIDs())
}

func TestSendAndRecvFunctions(t *testing.T) {
	ctx := newTestContext(t, newContainer(t), first3)
	require.NoError(t, ctx.AddSendFunction(7, 0x1000))
	require.NoError(t, ctx.AddSendFunction(8, 0x2000))
	// The same message id in the other map is no conflict: a send and its
	// receive are paired by one message id (on two workers, usually).
	require.NoError(t, ctx.AddRecvFunction(7, 0x3000))

	fn, err := ctx.SendFunction(7)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x1000), fn)
	fn, err = ctx.RecvFunction(7)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x3000), fn)

	assert.Equal(t, map[int64]uint64{7: 0x1000, 8: 0x2000}, ctx.SendFunctions())
	assert.Equal(t, map[int64]uint64{7: 0x3000}, ctx.RecvFunctions())
	sends, recvs := ctx.FunctionCounts()
	assert.Equal(t, 2, sends)
	assert.Equal(t, 1, recvs)

	_, err = ctx.SendFunction(9)
	assertErr(t, err, container.ErrNotFound, "Could not find send function for autograd message id: 9")
	_, err = ctx.RecvFunction(8)
	assertErr(t, err, container.ErrNotFound, "Could not find recv function for autograd message id: 8")
}

func TestDuplicateFunction(t *testing.T) {
	ctx := newTestContext(t, newContainer(t), first3)
	require.NoError(t, ctx.AddSendFunction(7, 1))
	require.NoError(t, ctx.AddRecvFunction(7, 2))
	assertErr(t, ctx.AddSendFunction(7, 3), container.ErrInvalidArgument,
		"distautograd: a send function is already registered for autograd message id: 7")
	assertErr(t, ctx.AddRecvFunction(7, 4), container.ErrInvalidArgument,
		"distautograd: a recv function is already registered for autograd message id: 7")
	// The first registration stays.
	fn, err := ctx.SendFunction(7)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), fn)
	fn, err = ctx.RecvFunction(7)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), fn)
}

func TestFunctionMapsAreCopies(t *testing.T) {
	ctx := newTestContext(t, newContainer(t), first3)
	require.NoError(t, ctx.AddSendFunction(1, 10))
	require.NoError(t, ctx.AddRecvFunction(1, 20))
	sends, recvs := ctx.SendFunctions(), ctx.RecvFunctions()
	sends[1], sends[2] = 99, 99
	recvs[1] = 99
	delete(recvs, 1)
	assert.Equal(t, map[int64]uint64{1: 10}, ctx.SendFunctions())
	assert.Equal(t, map[int64]uint64{1: 20}, ctx.RecvFunctions())
}

// The function maps are written on first use: a lookup racing the first
// registration must read them under the lock (go test -race).
func TestFunctionLookupsRaceFirstRegistration(t *testing.T) {
	c, err := container.New(0)
	require.NoError(t, err)
	for i := range 50 {
		ctx, err := c.GetOrCreateContext(int64(i))
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); _ = ctx.AddSendFunction(7, 70); _ = ctx.AddRecvFunction(7, 71) }()
		go func() { defer wg.Done(); _, _ = ctx.SendFunction(7); _, _ = ctx.RecvFunction(7) }()
		go func() { defer wg.Done(); _ = ctx.SendFunctions(); _ = ctx.RecvFunctions() }()
		wg.Wait()
		fn, err := ctx.SendFunction(7)
		require.NoError(t, err)
		require.Equal(t, uint64(70), fn)
	}
}
