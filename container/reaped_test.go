package container_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

const (
	whyIdle0  = " (distautograd: it was reaped by dac_reap_idle_contexts, unused for 0 ms or more)"
	whyWorker = " (distautograd: it was released by dac_release_contexts_of_worker(3), which clears what a dead worker left)"
)

// A thread whose current context the container's clean-up released (the
// reaper, or the release of a dead worker's contexts) is not stuck: it can
// start a new pass, its lookups say why the context is gone, and releasing
// the id resets it. Before reaped.go: "Already have an autograd context id
// for this thread." for good.
func TestReapedCurrentIDStartsANewPass(t *testing.T) {
	c := newContainer(t)
	for _, reap := range []struct {
		name, why string
		run       func() int
	}{
		{"dead origin", whyWorker, func() int { return c.ReleaseContextsOfWorker(3) }},
		{"idle", whyIdle0, func() int { n, err := c.ReapIdleContexts(0); require.NoError(t, err); return n }},
	} {
		t.Run(reap.name, func(t *testing.T) {
			a, b := container.NewThread(), container.NewThread()
			ctx, err := c.NewContext(a)
			require.NoError(t, err)
			id := ctx.ID()
			b.ForceCurrentID(id) // a second thread on the same pass
			require.Equal(t, 1, reap.run())

			// Nobody told the threads: their current id stays, and says why.
			assert.Equal(t, id, a.CurrentID())
			msg := "Could not find autograd context with id: " + itoa(id) + reap.why
			_, err = c.RetrieveContext(id)
			assertErr(t, err, container.ErrNotFound, msg)
			assertErr(t, c.IsValidContext(id), container.ErrNotFound, msg)
			_, err = c.CurrentContext(a)
			assertErr(t, err, container.ErrNotFound, container.MsgCurrentGone+" (context "+itoa(id)+": "+reap.why[2:])

			// a starts a new pass; b ends the old one (the `with` block's
			// exit): not found, and its current id is reset.
			next, err := c.NewContext(a)
			require.NoError(t, err)
			assert.Equal(t, next.ID(), a.CurrentID())
			assertErr(t, c.ReleaseContext(b, id), container.ErrNotFound, msg)
			assert.Equal(t, container.InvalidID, b.CurrentID())
			_, err = c.NewContext(b)
			require.NoError(t, err)
			require.NoError(t, c.ReleaseContext(a, next.ID()))
			require.NoError(t, c.ReleaseContext(b, b.CurrentID()))
			assert.Zero(t, c.NumContexts())
		})
	}
}

// Every other way a context goes keeps the native answers: a thread whose
// current context another thread released holds a stale id. A reaped id
// that a late message of its pass stored again is a context as any other
// while stored (its thread cannot start a new pass over it), and reaped
// again once released, by any means.
func TestStaleCurrentIDKeepsItsNativeMeaning(t *testing.T) {
	c := newContainer(t)
	a, b := container.NewThread(), container.NewThread()
	ctx, err := c.NewContext(a)
	require.NoError(t, err)
	require.NoError(t, c.ReleaseContext(b, ctx.ID()))
	_, err = c.NewContext(a)
	assertErr(t, err, container.ErrAlreadyHasContext, container.MsgAlreadyHasCtx)
	_, err = c.RetrieveContext(ctx.ID())
	assertErr(t, err, container.ErrNotFound, "Could not find autograd context with id: "+itoa(ctx.ID()))
	a.Clear()

	ctx, err = c.NewContext(a)
	require.NoError(t, err)
	assert.Equal(t, 1, c.ReleaseContextsOfWorker(3))
	_, err = c.GetOrCreateContext(ctx.ID())
	require.NoError(t, err)
	_, err = c.NewContext(a)
	assertErr(t, err, container.ErrAlreadyHasContext, container.MsgAlreadyHasCtx)
	_, err = c.CurrentContext(a)
	require.NoError(t, err)
	require.NoError(t, c.ReleaseContext(b, ctx.ID()))
	assertErr(t, c.IsValidContext(ctx.ID()), container.ErrNotFound, "Could not find autograd context with id: "+itoa(ctx.ID())+whyWorker)
	_, err = c.NewContext(a)
	require.NoError(t, err)
}

// The record is bounded: with one shard it keeps the last 65,536 reaped
// ids, and a thread whose context was reaped before those gets the native
// answers.
func TestReapedIDsAreBounded(t *testing.T) {
	c := newContainer(t, container.WithShards(1))
	a, b := container.NewThread(), container.NewThread()
	_, err := c.NewContext(a)
	require.NoError(t, err)
	require.Equal(t, 1, c.ReleaseContextsOfWorker(3))
	for i := range int64(1 << 16) {
		_, err := c.GetOrCreateContext(container.FirstID(5) + i)
		require.NoError(t, err)
		if c.NumContexts() == 1<<12 {
			require.Equal(t, 1<<12, c.ReleaseContextsOfWorker(5))
		}
	}
	_, err = c.NewContext(b)
	require.NoError(t, err)
	require.Equal(t, 1, c.ReleaseContextsOfWorker(3))
	// 65,537 reaped since a's: a's is forgotten, b's is still known.
	_, err = c.NewContext(a)
	assertErr(t, err, container.ErrAlreadyHasContext, container.MsgAlreadyHasCtx)
	_, err = c.NewContext(b)
	require.NoError(t, err)
}
