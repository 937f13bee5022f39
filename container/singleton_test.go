package container_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

func TestSingletonBeforeInit(t *testing.T) {
	var s container.Singleton
	c, err := s.Get()
	assert.Nil(t, c)
	assertErr(t, err, container.ErrNotInitialized,
		"Need to initialize distributed autograd using torch.distributed.autograd.init()")
}

func TestSingletonInitRange(t *testing.T) {
	var s container.Singleton
	for _, w := range []int64{-1, 65536, -1 << 63, 1<<63 - 1} {
		c, err := s.Init(w)
		assert.Nil(t, c)
		assertErr(t, err, container.ErrInvalidArgument, "worker_id needs to be in the range [0, 65535]")
	}
	// Failed calls initialize nothing.
	_, err := s.Get()
	assert.Equal(t, container.ErrNotInitialized, container.CodeOf(err))
}

func TestSingletonInitTwice(t *testing.T) {
	var s container.Singleton
	c, err := s.Init(3)
	require.NoError(t, err)
	assert.Equal(t, int64(3), c.WorkerID())
	got, err := s.Get()
	require.NoError(t, err)
	assert.Same(t, c, got)

	// The same id again: a no-op that returns the same container.
	again, err := s.Init(3)
	require.NoError(t, err)
	assert.Same(t, c, again)

	_, err = s.Init(4)
	assertErr(t, err, container.ErrAlreadyInitialized,
		"Container is already initialized with worker_id: 3, cannot initialize with different worker_id: 4")
	// The range check comes first, as in the native init.
	_, err = s.Init(65536)
	assertErr(t, err, container.ErrInvalidArgument, container.MsgWorkerRange)

	got, err = s.Get()
	require.NoError(t, err)
	assert.Same(t, c, got, "a failed Init leaves the container as it was")
}

// The native container stores the worker id as an int16_t and compares it
// with the int64 argument: from 32768 up every second init fails, even with
// the same id, and the message shows the int16_t value.
func TestSingletonInitInt16Quirk(t *testing.T) {
	cases := []struct {
		worker int64
		msg    string // of the second Init with the same id; "" if it succeeds
	}{
		{0, ""},
		{32767, ""},
		{32768, "Container is already initialized with worker_id: -32768, cannot initialize with different worker_id: 32768"},
		{40000, "Container is already initialized with worker_id: -25536, cannot initialize with different worker_id: 40000"},
		{65535, "Container is already initialized with worker_id: -1, cannot initialize with different worker_id: 65535"},
	}
	for _, tc := range cases {
		var s container.Singleton
		c, err := s.Init(tc.worker)
		require.NoError(t, err, "first Init(%d)", tc.worker)
		assert.Equal(t, tc.worker, c.WorkerID(), "WorkerID is the id as given")
		assert.Equal(t, container.MaxIDOf(tc.worker), c.MaxID())

		_, err = s.Init(tc.worker)
		if tc.msg == "" {
			assert.NoError(t, err, "second Init(%d)", tc.worker)
		} else {
			assertErr(t, err, container.ErrAlreadyInitialized, tc.msg)
		}
	}

	// The int16_t value itself would pass the comparison, but it fails the
	// range check, which comes first.
	var s container.Singleton
	_, err := s.Init(40000)
	require.NoError(t, err)
	_, err = s.Init(-25536)
	assertErr(t, err, container.ErrInvalidArgument, container.MsgWorkerRange)
}

func TestSingletonOptions(t *testing.T) {
	var s container.Singleton
	s.SetOptions(container.WithCounterOffsets(container.AutoIncrementMask-1, 0))
	c, err := s.Init(3)
	require.NoError(t, err)
	ctx, err := c.NewContext(container.NewThread())
	require.NoError(t, err)
	assert.Equal(t, c.MaxID()-1, ctx.ID(), "Init passed the options to New")

	// After Init, options have no effect.
	s.SetOptions(container.WithCounterOffsets(0, 0))
	_, err = c.NewContext(container.NewThread())
	assert.Equal(t, container.ErrExhausted, container.CodeOf(err))
}
