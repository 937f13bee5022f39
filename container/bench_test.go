package container

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkMaps compares the Container's sharded RWMutex maps with the same
// container built on sync.Map, on the three things every pass does: create
// and release a context, retrieve it, get-or-create it (a message naming a
// pass), from 1 to 16 goroutines. Run it with
//
//	go test -run '^$' -bench BenchmarkMaps -benchmem ./container
//
// ns/op is per operation across all goroutines (wall time / b.N).
func BenchmarkMaps(b *testing.B) {
	impls := []struct {
		name string
		make func() benchMap
	}{
		{"sharded", func() benchMap { return benchSharded(b) }},
		{"syncmap", func() benchMap { return newBenchSyncMap() }},
	}
	workloads := []struct {
		name string
		run  func(m benchMap, g, n int)
	}{
		{"new+release", benchNewRelease},
		{"retrieve", benchRetrieve},
		{"get-or-create", benchGetOrCreate},
	}
	for _, w := range workloads {
		for _, g := range []int{1, 2, 4, 8, 16} {
			for _, impl := range impls {
				b.Run(fmt.Sprintf("%s/goroutines=%d/%s", w.name, g, impl.name), func(b *testing.B) {
					m := impl.make()
					prefill(m)
					b.ReportAllocs()
					b.ResetTimer()
					benchParallel(g, b.N, func(worker, n int) { w.run(m, worker, n) })
				})
			}
		}
	}
}

// benchMap is what the workloads need of a container.
type benchMap interface {
	newContext(t *Thread) (*Context, error)
	release(t *Thread, id int64) bool
	retrieve(id int64) *Context
	getOrCreate(id int64) (*Context, error)
}

// benchPrefilled contexts, for retrieve to find: 4096 ids of worker 5.
const benchPrefilled = 4096

func prefill(m benchMap) {
	for k := range int64(benchPrefilled) {
		if _, err := m.getOrCreate(FirstID(5) + k); err != nil {
			panic(err)
		}
	}
}

// benchParallel runs n operations split over g goroutines and waits.
func benchParallel(g, n int, op func(worker, n int)) {
	var wg sync.WaitGroup
	for w := range g {
		share := n / g
		if w < n%g {
			share++
		}
		wg.Go(func() { op(w, share) })
	}
	wg.Wait()
}

func benchNewRelease(m benchMap, _, n int) {
	t := NewThread()
	for range n {
		ctx, err := m.newContext(t)
		if err != nil {
			panic(err)
		}
		m.release(t, ctx.id)
	}
}

func benchRetrieve(m benchMap, worker, n int) {
	k := int64(worker * 997)
	for range n {
		if m.retrieve(FirstID(5)+k%benchPrefilled) == nil {
			panic("missing")
		}
		k += 7
	}
}

// benchGetOrCreate is a message naming an unseen pass (create), a second
// message of it (get), and its cleanup (release), as remote passes go.
func benchGetOrCreate(m benchMap, worker, n int) {
	base := FirstID(int64(100 + worker))
	for i := range int64((n + 2) / 3) {
		if _, err := m.getOrCreate(base + i); err != nil {
			panic(err)
		}
		if _, err := m.getOrCreate(base + i); err != nil {
			panic(err)
		}
		m.release(nil, base+i)
	}
}

// benchContainer is the Container as it is.
type benchContainer struct{ c *Container }

func benchSharded(b *testing.B) benchMap {
	c, err := New(3)
	if err != nil {
		b.Fatal(err)
	}
	return benchContainer{c}
}

func (s benchContainer) newContext(t *Thread) (*Context, error) { return s.c.NewContext(t) }
func (s benchContainer) release(t *Thread, id int64) bool       { return s.c.ReleaseContextIfPresent(t, id) }
func (s benchContainer) retrieve(id int64) *Context             { return s.c.RetrieveContextIfPresent(id) }
func (s benchContainer) getOrCreate(id int64) (*Context, error) {
	return s.c.GetOrCreateContext(id)
}

// benchSyncMap is the same container on one sync.Map: the same counter, live
// count, cap check, fanout load and touch, so only the map differs.
type benchSyncMap struct {
	m       sync.Map
	ids     counter
	live    atomic.Int64
	maxLive atomic.Int64
	fanout  atomic.Pointer[fanoutBox]
}

func newBenchSyncMap() *benchSyncMap {
	s := &benchSyncMap{}
	s.ids.reset(3, "context")
	return s
}

func (s *benchSyncMap) reserve() error {
	n := s.live.Add(1)
	if limit := s.maxLive.Load(); limit > 0 && n > limit {
		s.live.Add(-1)
		return errNotFound(0)
	}
	return nil
}

func (s *benchSyncMap) newContext(t *Thread) (*Context, error) {
	if t.current != InvalidID {
		return nil, errAlreadyHasCtx
	}
	if err := s.reserve(); err != nil {
		return nil, err
	}
	id, err := s.ids.take()
	if err != nil {
		s.live.Add(-1)
		return nil, err
	}
	ctx := newContext(nil, id)
	s.m.Store(id, ctx)
	t.current = id
	return ctx, nil
}

func (s *benchSyncMap) release(t *Thread, id int64) bool {
	v, ok := s.m.LoadAndDelete(id)
	if !ok {
		return false
	}
	s.live.Add(-1)
	if t != nil && t.current == id {
		t.current = InvalidID
	}
	if box := s.fanout.Load(); box != nil {
		box.n.Release(id, v.(*Context).KnownWorkerIDs())
	}
	return true
}

func (s *benchSyncMap) retrieve(id int64) *Context {
	v, ok := s.m.Load(id)
	if !ok {
		return nil
	}
	ctx := v.(*Context)
	ctx.touch()
	return ctx
}

func (s *benchSyncMap) getOrCreate(id int64) (*Context, error) {
	if v, ok := s.m.Load(id); ok {
		ctx := v.(*Context)
		ctx.touch()
		return ctx, nil
	}
	if err := s.reserve(); err != nil {
		return nil, err
	}
	v, loaded := s.m.LoadOrStore(id, newContext(nil, id))
	if loaded {
		s.live.Add(-1)
		v.(*Context).touch()
	}
	return v.(*Context), nil
}
