package container

import (
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// dropCounts records the drops of one test: value -> how many times.
type dropCounts struct {
	mu sync.Mutex
	n  map[uint64]int
}

func (d *dropCounts) get(v uint64) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[v]
}

// withDropper sets a dropper that counts drops, for the length of a test.
func withDropper(t *testing.T) *dropCounts {
	d := &dropCounts{n: map[uint64]int{}}
	SetHostDropper(func(fn unsafe.Pointer, value uint64) {
		d.mu.Lock()
		d.n[value]++
		d.mu.Unlock()
	})
	t.Cleanup(func() { SetHostDropper(nil) })
	return d
}

var fakeDrop = unsafe.Pointer(new(byte)) // never called: the test dropper stands in

func TestHostValueSetOnce(t *testing.T) {
	c, _ := New(1)
	ctx, _ := c.GetOrCreateContext(5)
	if v := ctx.HostValue(); v != 0 {
		t.Fatalf("fresh context has host value %d", v)
	}
	if _, err := ctx.SetHostValue(0, nil); CodeOf(err) != ErrInvalidArgument {
		t.Fatalf("value 0: %v", err)
	}
	if v, err := ctx.SetHostValue(7, nil); err != nil || v != 7 {
		t.Fatalf("first set: %d, %v", v, err)
	}
	if v, err := ctx.SetHostValue(8, nil); err != nil || v != 7 {
		t.Fatalf("second set: %d, %v (the first must stay)", v, err)
	}
}

// The drop runs once the context is out of the container and its last
// handle went, in either order, and only then.
func TestHostValueDropAfterLastReference(t *testing.T) {
	d := withDropper(t)
	var hs Handles
	c, _ := New(1)

	ctx, _ := c.GetOrCreateContext(1)
	h, err := hs.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx.SetHostValue(101, fakeDrop)
	c.ReleaseContextIfPresent(nil, 1)
	if d.get(101) != 0 {
		t.Fatal("dropped while a handle was live")
	}
	if err := hs.Ref(h); err != nil {
		t.Fatal(err)
	}
	hs.Unref(h)
	if d.get(101) != 0 {
		t.Fatal("dropped while a reference of the handle was left")
	}
	hs.Unref(h)
	if d.get(101) != 1 || !ctx.Dead() {
		t.Fatalf("drops after the last handle: %d", d.get(101))
	}

	ctx2, _ := c.GetOrCreateContext(2)
	h2, _ := hs.New(ctx2)
	ctx2.SetHostValue(102, fakeDrop)
	hs.Unref(h2)
	if d.get(102) != 0 {
		t.Fatal("dropped while still in the container")
	}
	c.ReapIdleContexts(0)
	if d.get(102) != 1 {
		t.Fatalf("drops after the reap: %d", d.get(102))
	}
	if _, err := hs.New(ctx2); !IsGone(err) {
		t.Fatalf("a handle to a dead context: %v", err)
	}

	ctx3, _ := c.GetOrCreateContext(3 << 48)
	h3, _ := hs.New(ctx3)
	ctx3.SetHostValue(103, nil) // no drop function: nothing runs
	hs.Unref(h3)
	c.ReleaseContextsOfWorker(3)
	if d.get(103) != 0 || !ctx3.Dead() {
		t.Fatal("a value without a drop function was dropped")
	}
}

// Threads racing retrieve, set, read and unref against releases: every
// context's value is dropped exactly once, never while a handle to it is
// live, and readers always see the one value that was agreed on.
func TestHostValueRace(t *testing.T) {
	var live sync.Map // value -> *atomic.Int64 (handles held by readers)
	var bad atomic.Int64
	drops := map[uint64]int{}
	var mu sync.Mutex
	SetHostDropper(func(fn unsafe.Pointer, value uint64) {
		if n, ok := live.Load(value); ok && n.(*atomic.Int64).Load() != 0 {
			bad.Add(1)
		}
		mu.Lock()
		drops[value]++
		mu.Unlock()
	})
	t.Cleanup(func() { SetHostDropper(nil) })
	var hs Handles
	c, _ := New(2)
	const ids = 300
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := int64(0); id < ids; id++ {
				if w == 0 {
					c.ReleaseContextIfPresent(nil, id)
					continue
				}
				ctx, err := c.GetOrCreateContext(id)
				if err != nil {
					t.Error(err)
					return
				}
				h, err := hs.New(ctx)
				if IsGone(err) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				cand := uint64(id)<<8 | uint64(w)
				v, _ := ctx.SetHostValue(cand, fakeDrop)
				n, _ := live.LoadOrStore(v, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				if ctx.HostValue() != v {
					bad.Add(1)
				}
				n.(*atomic.Int64).Add(-1)
				hs.Unref(h)
			}
		}()
	}
	wg.Wait()
	c.ReapIdleContexts(0)
	mu.Lock()
	defer mu.Unlock()
	if bad.Load() != 0 {
		t.Fatalf("%d drops while a handle was live or values disagreed", bad.Load())
	}
	seen := 0
	live.Range(func(k, _ any) bool {
		seen++
		if drops[k.(uint64)] != 1 {
			t.Errorf("value %#x dropped %d times", k, drops[k.(uint64)])
		}
		return true
	})
	if seen == 0 || len(drops) != seen {
		t.Fatalf("%d values set, %d dropped", seen, len(drops))
	}
	if hs.Live() != 0 {
		t.Fatalf("%d handles live", hs.Live())
	}
}
