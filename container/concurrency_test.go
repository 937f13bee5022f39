package container_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

// These tests mean most under -race (make test runs them so).

const goroutines = 8

// Each goroutine is a thread of a training runtime: new context, message id,
// release, many times over. Every id is unique, every goroutine's current id
// is its own, and the container ends empty.
func TestConcurrentNewRelease(t *testing.T) {
	const cycles = 20_000
	c := newContainer(t)
	ctxIDs := make([][]int64, goroutines)
	msgIDs := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			th := container.NewThread()
			for range cycles {
				ctx, err := c.NewContext(th)
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, ctx.ID(), th.CurrentID())
				msg, err := c.NewAutogradMessageID()
				assert.NoError(t, err)
				assert.NoError(t, c.ReleaseContext(th, ctx.ID()))
				assert.Equal(t, container.InvalidID, th.CurrentID())
				ctxIDs[g] = append(ctxIDs[g], ctx.ID())
				msgIDs[g] = append(msgIDs[g], msg)
			}
		})
	}
	wg.Wait()
	assert.Zero(t, c.NumContexts())

	all := func(ids [][]int64) []int64 {
		out := slices.Concat(ids...)
		slices.Sort(out)
		return out
	}
	// Message ids: exactly the first goroutines*cycles ids of worker 3,
	// each once.
	want := make([]int64, goroutines*cycles)
	for i := range want {
		want[i] = first3 + int64(i)
	}
	assert.Equal(t, want, all(msgIDs), "message ids")
	// Context ids: each once, a goroutine's consecutive within each of its
	// runs (ids.go), and at most a run's worth a goroutine left unused.
	for g, ids := range ctxIDs {
		for i := 1; i < len(ids); i++ {
			if ids[i] != ids[i-1]+1 && ids[i]%container.ContextIDRun != 0 {
				t.Fatalf("goroutine %d: id %d after %d, neither the next nor a run's first", g, ids[i], ids[i-1])
			}
		}
	}
	ids := all(ctxIDs)
	for i := 1; i < len(ids); i++ {
		require.NotEqual(t, ids[i-1], ids[i], "a context id issued twice")
	}
	assert.GreaterOrEqual(t, ids[0], first3)
	assert.Less(t, ids[len(ids)-1], first3+int64(goroutines*(cycles+container.ContextIDRun)))
}

// A message naming the same unseen pass arrives on many threads at once: one
// context is created, and every caller gets it.
func TestConcurrentGetOrCreate(t *testing.T) {
	const ids = 2000
	c := newContainer(t)
	got := make([][]*container.Context, goroutines)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for k := range int64(ids) {
				ctx, err := c.GetOrCreateContext(container.FirstID(5) + k)
				if !assert.NoError(t, err) {
					return
				}
				got[g] = append(got[g], ctx)
			}
		})
	}
	close(start)
	wg.Wait()
	assert.Equal(t, int64(ids), c.NumContexts())
	for k := range ids {
		want, err := c.RetrieveContext(container.FirstID(5) + int64(k))
		require.NoError(t, err)
		for g := range goroutines {
			require.Same(t, want, got[g][k], "goroutine %d, id %d", g, k)
		}
	}
}

// Releases, lookups, bulk releases and reaping racing each other never lose
// count: every context is released exactly once.
func TestConcurrentReleasePaths(t *testing.T) {
	const ids = 5000
	c := newContainer(t)
	for k := range int64(ids) {
		_, err := c.GetOrCreateContext(container.FirstID(5) + k)
		require.NoError(t, err)
	}
	var mu sync.Mutex
	released := 0
	count := func(n int) {
		mu.Lock()
		released += n
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			n := 0
			for k := range int64(ids) {
				id := container.FirstID(5) + k
				switch (int(k) + g) % 4 {
				case 0:
					if c.ReleaseContextIfPresent(nil, id) {
						n++
					}
				case 1:
					if c.ReleaseContext(nil, id) == nil {
						n++
					}
				case 2:
					_ = c.IsValidContext(id)
					if ctx := c.RetrieveContextIfPresent(id); ctx != nil {
						ctx.AddKnownWorkerID(uint16(g))
					}
				}
			}
			count(n)
		})
	}
	wg.Go(func() {
		count(c.ReleaseContextsOfWorker(5))
	})
	wg.Go(func() {
		n, err := c.ReapIdleContexts(0)
		assert.NoError(t, err)
		count(n)
	})
	wg.Wait()
	count(c.ReleaseContextsOfWorker(5)) // what the racing ones left
	assert.Equal(t, ids, released, "each context released exactly once")
	assert.Zero(t, c.NumContexts())
	assert.Empty(t, c.ContextIDs())
}

// The cap holds under contention: successes never exceed it, and every
// refusal is counted.
func TestConcurrentCap(t *testing.T) {
	const limit, attempts = 50, 200
	c := newContainer(t)
	require.NoError(t, c.SetMaxContexts(limit))
	var mu sync.Mutex
	created := 0
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			n := 0
			for k := range int64(attempts) {
				_, err := c.GetOrCreateContext(container.FirstID(int64(10+g)) + k)
				if err == nil {
					n++
				} else {
					assert.Equal(t, container.ErrLimit, container.CodeOf(err))
				}
			}
			mu.Lock()
			created += n
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, limit, created)
	assert.Equal(t, int64(limit), c.NumContexts())
	assert.Equal(t, int64(goroutines*attempts-limit), c.RefusedContexts())
}

// Many threads add known workers to one context at once, across the switch
// from slice to map at 32: each worker is recorded once.
func TestConcurrentKnownWorkers(t *testing.T) {
	ctx := newTestContext(t, newContainer(t), first3)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for w := range uint16(200) {
				ctx.AddKnownWorkerID(w)
				_ = ctx.KnownWorkerIDs()
			}
		})
	}
	for g := range goroutines {
		wg.Go(func() {
			for k := range int64(100) {
				assert.NoError(t, ctx.AddSendFunction(int64(g)*1000+k, uint64(k)))
				_ = ctx.SendFunctions()
			}
		})
	}
	wg.Wait()
	ids := ctx.KnownWorkerIDs()
	slices.Sort(ids)
	want := make([]uint16, 200)
	for i := range want {
		want[i] = uint16(i)
	}
	assert.Equal(t, want, ids)
	sends, _ := ctx.FunctionCounts()
	assert.Equal(t, goroutines*100, sends)
}

// Records from many goroutines: handles to contexts that are created,
// looked up, released and dropped all at once name their own context while
// referenced, die exactly once (their host value dropped once), and leave
// nothing behind; the index grows under it all.
func TestConcurrentRecords(t *testing.T) {
	c := newContainer(t)
	var drops sync.Map
	c.SetHostDrop(func(drop uintptr, value uint64) {
		_, twice := drops.LoadOrStore(value, true)
		assert.False(t, twice, "host value %d dropped twice", value)
		assert.Equal(t, uintptr(7), drop)
	})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for k := range 2000 {
				id := first3 + int64(g*100000+k)
				h, err := c.GetOrCreateContextHandle(id)
				if !assert.NoError(t, err) {
					return
				}
				ctx, err := c.HandleContext(h)
				assert.NoError(t, err)
				assert.Equal(t, id, ctx.ID())
				ctx.AddKnownWorkerID(uint16(k % 9))
				setHostValue(t, c, h, uint64(id), 7)
				// A neighbour's context, looked up and released while its
				// owner uses it: the owner's handle keeps it readable.
				other := first3 + int64(((g+1)%goroutines)*100000+k)
				if ctx := c.RetrieveContextIfPresent(other); ctx != nil {
					assert.Equal(t, other, ctx.ID())
				}
				if k%3 == 0 {
					c.ReleaseContextIfPresent(nil, other)
				}
				c.ReleaseContextIfPresent(nil, id)
				ctx, err = c.HandleContext(h)
				assert.NoError(t, err, "released but referenced: readable")
				assert.Equal(t, id, ctx.ID())
				done, err := c.UnrefLast(h)
				assert.NoError(t, err)
				assert.True(t, done, "a released context's last reference kills it")
				_, err = c.HandleContext(h)
				assert.Equal(t, container.ErrBadHandle, container.CodeOf(err), "dead after the last reference")
			}
		})
	}
	wg.Wait()
	assert.Zero(t, c.NumContexts())
	assert.Zero(t, c.LiveReferences())
	n := 0
	drops.Range(func(any, any) bool { n++; return true })
	assert.Equal(t, goroutines*2000, n, "every context's host value dropped once")
}
