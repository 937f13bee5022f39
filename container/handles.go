package container

import (
	"sync"
)

// Handles gives out the opaque handles that the C ABI hands to callers in
// place of *Context (C may not hold Go pointers). A handle is a reference:
// it keeps its context alive, released from the container or not, until the
// last Unref. A handle value is never reused while the process lives (up to
// 2^32 reuses of a slot), so a dead or invented handle is an error, never a
// crash or someone else's context. The zero Handles is ready to use.
//
// Layout of a handle: generation (32 bits) | slot index (26 bits) | shard (6
// bits). Generation starts at 1, so 0 is never a handle (it is C's NULL).
type Handles struct {
	shards [handleShards]handleShard
}

const (
	handleShardBits = 6
	handleShards    = 1 << handleShardBits
	handleIndexBits = 26
	maxHandleIndex  = 1<<handleIndexBits - 1
)

type handleShard struct {
	mu    sync.RWMutex
	slots []handleSlot
	free  []uint32
	live  int
	_     [64 - 8]byte
}

type handleSlot struct {
	ctx  *Context
	gen  uint32
	refs int32
}

func splitHandle(h uint64) (shard, index int, gen uint32) {
	return int(h & (handleShards - 1)), int(h>>handleShardBits) & maxHandleIndex, uint32(h >> 32)
}

func errBadHandle(h uint64) error {
	if h == 0 {
		return Errorf(ErrBadHandle, "context handle is NULL")
	}
	return Errorf(ErrBadHandle, "context handle %#x is not a live handle (never issued, or its last reference was dropped)", h)
}

// New returns a new handle to ctx holding one reference.
func (hs *Handles) New(ctx *Context) (uint64, error) {
	si := int(uint64(ctx.id) & (handleShards - 1))
	s := &hs.shards[si]
	s.mu.Lock()
	defer s.mu.Unlock()
	var idx uint32
	if n := len(s.free); n > 0 {
		idx = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		if len(s.slots) > maxHandleIndex {
			return 0, Errorf(ErrLimit, "too many live context handles (%d in one shard); drop some with dac_context_unref", len(s.slots))
		}
		s.slots = append(s.slots, handleSlot{gen: 1})
		idx = uint32(len(s.slots) - 1)
	}
	sl := &s.slots[idx]
	sl.ctx, sl.refs = ctx, 1
	s.live++
	return uint64(sl.gen)<<32 | uint64(idx)<<handleShardBits | uint64(si), nil
}

// Get returns the context of a live handle.
func (hs *Handles) Get(h uint64) (*Context, error) {
	si, idx, gen := splitHandle(h)
	s := &hs.shards[si]
	s.mu.RLock()
	var ctx *Context
	if idx < len(s.slots) && s.slots[idx].gen == gen && s.slots[idx].refs > 0 {
		ctx = s.slots[idx].ctx
	}
	s.mu.RUnlock()
	if ctx == nil {
		return nil, errBadHandle(h)
	}
	return ctx, nil
}

// Ref adds a reference to a live handle.
func (hs *Handles) Ref(h uint64) error {
	return hs.update(h, 1)
}

// Unref drops a reference; the last one kills the handle.
func (hs *Handles) Unref(h uint64) error {
	return hs.update(h, -1)
}

func (hs *Handles) update(h uint64, delta int32) error {
	si, idx, gen := splitHandle(h)
	s := &hs.shards[si]
	s.mu.Lock()
	defer s.mu.Unlock()
	if idx >= len(s.slots) || s.slots[idx].gen != gen || s.slots[idx].refs <= 0 {
		return errBadHandle(h)
	}
	sl := &s.slots[idx]
	if delta > 0 && sl.refs == 1<<31-1 {
		return Errorf(ErrLimit, "context handle %#x has too many references", h)
	}
	sl.refs += delta
	if sl.refs == 0 {
		sl.ctx = nil
		if sl.gen++; sl.gen == 0 {
			sl.gen = 1
		}
		s.free = append(s.free, uint32(idx))
		s.live--
	}
	return nil
}

// Live returns how many handles are live: a leak check for tests.
func (hs *Handles) Live() int {
	n := 0
	for i := range hs.shards {
		s := &hs.shards[i]
		s.mu.RLock()
		n += s.live
		s.mu.RUnlock()
	}
	return n
}
