package container

import (
	"runtime"
	"testing"
	"weak"
)

// A dead slot (its last reference dropped, on either side: capi.c kills
// slots too) must not keep its context reachable until the slot is reused:
// Handles.New sweeps dead slots as it goes.
func TestHandlesSweepDeadSlots(t *testing.T) {
	var hs Handles
	const n = 10
	var dead [n]weak.Pointer[Context]
	func() {
		var hh [n]uint64
		for i := range n {
			ctx := newContext(int64(i) * handleShards) // one shard
			dead[i] = weak.Make(ctx)
			h, err := hs.New(ctx)
			if err != nil {
				t.Fatal(err)
			}
			hh[i] = h
		}
		for _, h := range hh {
			if err := hs.Unref(h); err != nil {
				t.Fatal(err)
			}
		}
	}()
	// Five new handles take five of the ten dead slots (the last freed
	// first) and sweep two slots each: all ten.
	live := newContext(n * handleShards)
	for range n / 2 {
		if _, err := hs.New(live); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	for i, w := range dead {
		if w.Value() != nil {
			t.Errorf("context %d is still reachable after its handle died and New swept its slot", i)
		}
	}
	if got := hs.Live(); got != n/2 {
		t.Errorf("Live() = %d, want %d", got, n/2)
	}
	runtime.KeepAlive(live)
}

// The chunk of a slot index and its offset: chunk k holds 64<<k slots, so
// every index up to maxHandleIndex has a place, and neighbours are adjacent.
func TestHandleChunkOf(t *testing.T) {
	for _, c := range []struct{ index, chunk, offset int }{
		{0, 0, 0}, {63, 0, 63}, {64, 1, 0}, {191, 1, 127}, {192, 2, 0},
		{maxHandleIndex, HandleChunks - 1, maxHandleIndex + handleChunkBase - handleChunkBase<<(HandleChunks-1)},
	} {
		k, off := chunkOf(c.index)
		if k != c.chunk || off != c.offset {
			t.Errorf("chunkOf(%d) = %d, %d; want %d, %d", c.index, k, off, c.chunk, c.offset)
		}
		if off >= handleChunkBase<<k {
			t.Errorf("chunkOf(%d): offset %d outside chunk %d of %d slots", c.index, off, k, handleChunkBase<<k)
		}
	}
}
