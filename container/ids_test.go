package container_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

// The id layout for workers across the whole range, the values worked out
// with signed 64-bit arithmetic as the native code does it: from 32768 up the
// top bit is set and the ids are negative, and worker 65535's max_id is -1.
var layoutCases = []struct {
	worker  int64
	firstID int64
	maxID   int64
}{
	{0, 0, 281474976710655},
	{3, 844424930131968, 1125899906842623},
	{7, 1970324836974592, 2251799813685247},
	{32767, 9223090561878065152, 9223372036854775807},
	{32768, -9223372036854775808, -9223090561878065153},
	{40000, -7187745005283311616, -7187463530306600961},
	{65535, -281474976710656, -1},
}

func TestIDLayout(t *testing.T) {
	for _, tc := range layoutCases {
		assert.Equal(t, tc.firstID, container.FirstID(tc.worker), "FirstID(%d)", tc.worker)
		assert.Equal(t, tc.maxID, container.MaxIDOf(tc.worker), "MaxIDOf(%d)", tc.worker)
		assert.Equal(t, uint16(tc.worker), container.OriginWorker(tc.firstID), "OriginWorker(first id of %d)", tc.worker)
		assert.Equal(t, uint16(tc.worker), container.OriginWorker(tc.maxID), "OriginWorker(max_id of %d)", tc.worker)
	}
}

func TestContainerIDsFollowTheLayout(t *testing.T) {
	for _, tc := range layoutCases {
		c, err := container.New(tc.worker)
		require.NoError(t, err)
		assert.Equal(t, tc.worker, c.WorkerID())
		assert.Equal(t, tc.maxID, c.MaxID())

		// Context ids and message ids are two counters with the same layout.
		th := container.NewThread()
		ctx, err := c.NewContext(th)
		require.NoError(t, err)
		assert.Equal(t, tc.firstID, ctx.ID(), "first context id of worker %d", tc.worker)
		th.Clear()
		ctx, err = c.NewContext(th)
		require.NoError(t, err)
		assert.Equal(t, tc.firstID+1, ctx.ID(), "second context id of worker %d", tc.worker)

		msg, err := c.NewAutogradMessageID()
		require.NoError(t, err)
		assert.Equal(t, tc.firstID, msg, "first message id of worker %d", tc.worker)
		msg, err = c.NewAutogradMessageID()
		require.NoError(t, err)
		assert.Equal(t, tc.firstID+1, msg)
	}
}

func TestNewRejectsWorkerIDsOutOfRange(t *testing.T) {
	for _, w := range []int64{-1, 65536, -1 << 63, 1<<63 - 1} {
		c, err := container.New(w)
		assert.Nil(t, c)
		assert.EqualError(t, err, "worker_id needs to be in the range [0, 65535]", "New(%d)", w)
		assert.Equal(t, container.ErrInvalidArgument, container.CodeOf(err))
	}
	assert.NoError(t, container.CheckWorkerID(0))
	assert.NoError(t, container.CheckWorkerID(65535))
	assert.EqualError(t, container.CheckWorkerID(65536), container.MsgWorkerRange)
	assert.EqualError(t, container.CheckWorkerID(-1), container.MsgWorkerRange)
}

// nearTheEnd is the offset that leaves two ids before max_id: the native
// component asserts id < max_id, so the last id issued is max_id - 1.
const nearTheEnd = container.AutoIncrementMask - 2

func TestContextIDsExhaustAtMaxID(t *testing.T) {
	for _, tc := range layoutCases {
		c, err := container.New(tc.worker, container.WithCounterOffsets(nearTheEnd, 0))
		require.NoError(t, err)
		th := container.NewThread()

		ctx, err := c.NewContext(th)
		require.NoError(t, err)
		assert.Equal(t, tc.maxID-2, ctx.ID())
		th.Clear()
		ctx, err = c.NewContext(th)
		require.NoError(t, err)
		assert.Equal(t, tc.maxID-1, ctx.ID(), "the last context id of worker %d is max_id-1", tc.worker)
		th.Clear()

		ctx, err = c.NewContext(th)
		assert.Nil(t, ctx)
		assert.Equal(t, container.ErrExhausted, container.CodeOf(err))
		assert.EqualError(t, err, "distautograd: context ids are exhausted: the next id would reach max_id "+itoa(tc.maxID))
		// A failure changes nothing: no context stored, no current id set.
		assert.Equal(t, int64(2), c.NumContexts())
		assert.Equal(t, container.InvalidID, th.CurrentID())
		// And it keeps failing: the counter never wraps.
		_, err = c.NewContext(th)
		assert.Equal(t, container.ErrExhausted, container.CodeOf(err))

		// The message counter is separate and still at its start.
		msg, err := c.NewAutogradMessageID()
		require.NoError(t, err)
		assert.Equal(t, tc.firstID, msg)
	}
}

func TestMessageIDsExhaustAtMaxID(t *testing.T) {
	for _, tc := range layoutCases {
		c, err := container.New(tc.worker, container.WithCounterOffsets(0, nearTheEnd))
		require.NoError(t, err)
		for _, want := range []int64{tc.maxID - 2, tc.maxID - 1} {
			id, err := c.NewAutogradMessageID()
			require.NoError(t, err)
			assert.Equal(t, want, id)
		}
		for range 2 {
			id, err := c.NewAutogradMessageID()
			assert.Zero(t, id)
			assert.Equal(t, container.ErrExhausted, container.CodeOf(err))
			assert.EqualError(t, err, "distautograd: autograd message ids are exhausted: the next id would reach max_id "+itoa(tc.maxID))
		}
		// The context counter is separate and still at its start.
		ctx, err := c.NewContext(container.NewThread())
		require.NoError(t, err)
		assert.Equal(t, tc.firstID, ctx.ID())
	}
}

func TestMessageIDBlocks(t *testing.T) {
	c, err := container.New(3, container.WithCounterOffsets(0, container.AutoIncrementMask-5))
	require.NoError(t, err)
	maxID := c.MaxID()

	first, n, err := c.NewAutogradMessageIDBlock(3)
	require.NoError(t, err)
	assert.Equal(t, maxID-5, first)
	assert.Equal(t, int64(3), n)

	// Near the end a block is cut short, never past max_id - 1.
	first, n, err = c.NewAutogradMessageIDBlock(10)
	require.NoError(t, err)
	assert.Equal(t, maxID-2, first)
	assert.Equal(t, int64(2), n)

	_, _, err = c.NewAutogradMessageIDBlock(1)
	assert.Equal(t, container.ErrExhausted, container.CodeOf(err))

	_, _, err = c.NewAutogradMessageIDBlock(0)
	assert.EqualError(t, err, "distautograd: block size must be >= 1, got 0")
	assert.Equal(t, container.ErrInvalidArgument, container.CodeOf(err))
}

func TestIDsAreNeverReused(t *testing.T) {
	c, err := container.New(3)
	require.NoError(t, err)
	th := container.NewThread()
	seen := map[int64]bool{}
	for range 100 {
		ctx, err := c.NewContext(th)
		require.NoError(t, err)
		require.False(t, seen[ctx.ID()], "id %d issued twice", ctx.ID())
		seen[ctx.ID()] = true
		require.NoError(t, c.ReleaseContext(th, ctx.ID()))
	}
	assert.Zero(t, c.NumContexts())
}

// A counter at max_id refuses every take and block after, however many: a
// take that overruns it still moves the counter on (one atomic add), and
// worker 32767's max_id is the largest int64, so its counter goes on into
// ids below its first, which are refused as well.
func TestExhaustedCountersStayExhausted(t *testing.T) {
	for _, tc := range layoutCases {
		c, err := container.New(tc.worker, container.WithCounterOffsets(0, tc.maxID-tc.firstID))
		require.NoError(t, err)
		for range 3 {
			id, err := c.NewAutogradMessageID()
			assert.Zero(t, id)
			assert.Equal(t, container.ErrExhausted, container.CodeOf(err), "worker %d", tc.worker)
		}
		first, count, err := c.NewAutogradMessageIDBlock(container.MessageIDBlock)
		assert.Zero(t, first)
		assert.Zero(t, count)
		assert.Equal(t, container.ErrExhausted, container.CodeOf(err), "worker %d: a block after overrunning takes", tc.worker)
	}
}
