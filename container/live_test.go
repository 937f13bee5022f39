package container_test

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

// Without a cap the container counts its contexts in its shards only; with
// one, also in the count the cap is enforced against, which SetMaxContexts
// starts from the shards when it sets a cap where there was none. Here the
// cap is set, changed and lifted over and over while goroutines create (new
// and get-or-create), fail on the cap and release (one by one, and by
// worker, a shard's contexts at once): when they stop, the
// count agrees with the shards, under a cap it is enforced exactly, and it
// is 0 once everything is released.
func TestCapSetWhileCreating(t *testing.T) {
	c, err := container.New(3)
	require.NoError(t, err)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var refused, attempts, exited atomic.Int64
	// progress waits for n more creation attempts (not a time), or for
	// every goroutine to have stopped (one failed): never forever.
	progress := func(n int64) {
		for start := attempts.Load(); attempts.Load() < start+n && exited.Load() < goroutines; {
			runtime.Gosched()
		}
	}
	for g := range goroutines {
		wg.Go(func() {
			defer exited.Add(1)
			th := container.NewThread()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var held []int64
			next := container.FirstID(9) + int64(g)<<32
			for !stop.Load() {
				attempts.Add(1)
				var id int64
				var err error
				if rng.IntN(2) == 0 {
					var ctx *container.Context
					if ctx, err = c.NewContext(th); err == nil {
						id = ctx.ID()
						th.Clear()
					}
				} else {
					next++
					id = next
					_, err = c.GetOrCreateContext(id)
				}
				switch {
				case err == nil:
					held = append(held, id)
				case container.CodeOf(err) == container.ErrLimit:
					refused.Add(1)
				default:
					assert.NoError(t, err)
					return
				}
				for len(held) > 16 || (len(held) > 0 && rng.IntN(3) == 0) {
					k := rng.IntN(len(held))
					c.ReleaseContextIfPresent(nil, held[k]) // or released by worker already
					held[k] = held[len(held)-1]
					held = held[:len(held)-1]
				}
			}
			for _, id := range held {
				c.ReleaseContextIfPresent(nil, id)
			}
		})
	}
	caps := []int64{0, 40, 100, 0, 60, 30, 0, 100}
	for i := range 400 {
		require.NoError(t, c.SetMaxContexts(caps[i%len(caps)]))
		if i%10 == 0 {
			c.ReleaseContextsOfWorker(9) // the get-or-created ones, in one batch per shard
		}
		progress(50) // each cap in force for some creations
	}
	// Then one cap for a while: what every release takes out of the count
	// since its last recount shows at the end.
	require.NoError(t, c.SetMaxContexts(0))
	require.NoError(t, c.SetMaxContexts(1000))
	for range 20 {
		progress(200)
		c.ReleaseContextsOfWorker(9)
	}
	stop.Store(true)
	wg.Wait()
	assert.Positive(t, refused.Load(), "no creation met a cap")
	assert.Zero(t, c.NumContexts())
	assert.Zero(t, container.CountedLive(c))

	// Under a steady cap: exactly as many as it allows.
	require.NoError(t, c.SetMaxContexts(0))
	for k := range int64(5) {
		_, err := c.GetOrCreateContext(container.FirstID(9) + k)
		require.NoError(t, err)
	}
	require.NoError(t, c.SetMaxContexts(8)) // recounts: 5
	assert.Equal(t, int64(5), container.CountedLive(c))
	for k := int64(5); k < 20; k++ {
		_, err := c.GetOrCreateContext(container.FirstID(9) + k)
		if k < 8 {
			assert.NoError(t, err)
		} else {
			assert.Equal(t, container.ErrLimit, container.CodeOf(err), "%v", err)
		}
	}
	assert.Equal(t, int64(8), c.NumContexts())
	assert.Equal(t, int64(8), container.CountedLive(c))
}
