package container

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
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
//
// The slots are shared with C: each one's state (generation and references
// in one word) and its context id live outside the Go heap, where the C ABI
// reads and changes them with the same lock-free protocol as Ref, Unref and
// the check in Get (see Table and capi.c), so that dac_context_id, dac_context_ref and
// dac_context_unref never enter Go. The *Context of a slot stays on the Go
// side. That memory is never returned to the system: it is as large as the
// most handles ever live at once.
type Handles struct {
	table  atomic.Pointer[Table]
	once   sync.Once
	shards [handleShards]handleShard
}

const (
	handleShardBits = 6
	handleShards    = 1 << handleShardBits
	handleIndexBits = 26
	maxHandleIndex  = 1<<handleIndexBits - 1

	// Slots come in chunks that double in size, so that neither side ever
	// moves one: chunk k holds handleChunkBase<<k slots.
	handleChunkBaseBits = 6
	handleChunkBase     = 1 << handleChunkBaseBits
	// HandleChunks is how many chunks a shard can have: enough for
	// maxHandleIndex+1 slots.
	HandleChunks = handleIndexBits - handleChunkBaseBits + 1

	maxRefs = 1<<31 - 1
)

// HandleSlot is one slot, as C sees it too (capi_internal.h declares the
// same layout, and export.go checks it at compile time). Both sides access
// every field atomically.
type HandleSlot struct {
	// State is the generation (high 32 bits) and the number of references
	// (low 32 bits); no references: the slot is dead, and its generation is
	// already the one its next handle will carry.
	State atomic.Uint64
	// ID is the context id, written before State makes the slot live. Only C
	// reads it (dac_context_id), and only between two loads of State that
	// show the same live generation: a plain store is enough, and saves New
	// a locked instruction.
	ID int64
	// Next links the free list: index+1 of the next free slot, 0 at the end.
	Next atomic.Uint32
	_    uint32
}

// TableShard is the part of a shard that C reads and changes too.
type TableShard struct {
	// Free is the top of the shard's free list: index+1 of a dead slot, 0
	// if empty. Either side pushes the slot it kills; only Go pops, under
	// the shard's lock, so the stack has no ABA problem.
	Free atomic.Uint64
	// Freed counts the slots killed, on either side (Live is issued - freed).
	Freed atomic.Int64
	// Chunks are the shard's slot chunks; nil until allocated, never freed.
	Chunks [HandleChunks]atomic.Pointer[HandleSlot]
}

// Table is what the C ABI is given: one TableShard per shard. It and the
// chunks it points to are outside the Go heap (cgo lets C keep pointers to
// such memory, not to Go's).
type Table [handleShards]TableShard

type handleShard struct {
	mu     sync.Mutex                             // serializes New: popping, growing, sweeping
	issued int64                                  // handles issued, under mu
	slots  int                                    // slots allocated so far
	ctxs   [HandleChunks]atomic.Pointer[ctxChunk] // per chunk, the contexts by slot offset
	sweep  int                                    // next slot to look at when sweeping
	_      [64]byte
}

type ctxChunk []atomic.Pointer[Context]

func splitHandle(h uint64) (shard, index int, gen uint32) {
	return int(h & (handleShards - 1)), int(h>>handleShardBits) & maxHandleIndex, uint32(h >> 32)
}

// chunkOf returns the chunk of a slot index and the slot's offset in it.
func chunkOf(index int) (chunk, offset int) {
	j := uint(index) + handleChunkBase
	chunk = bits.Len(j) - handleChunkBaseBits - 1
	return chunk, int(j - handleChunkBase<<chunk)
}

func errBadHandle(h uint64) error {
	if h == 0 {
		return Errorf(ErrBadHandle, "context handle is NULL")
	}
	return Errorf(ErrBadHandle, "context handle %#x is not a live handle (never issued, or its last reference was dropped)", h)
}

// Table returns the slots shared with C, allocating them on first use. The
// memory stays valid for the life of the process.
func (hs *Handles) Table() *Table {
	hs.once.Do(func() {
		p, err := offHeap(int(unsafe.Sizeof(Table{})))
		if err != nil {
			panic(err) // no room for 12 KiB: nothing else will work either
		}
		hs.table.Store((*Table)(p))
	})
	return hs.table.Load()
}

// offHeap returns n zeroed bytes outside the Go heap, never freed.
func offHeap(n int) (unsafe.Pointer, error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, Errorf(ErrLimit, "cannot allocate %d bytes for context handles: %v", n, err)
	}
	return unsafe.Pointer(&b[0]), nil
}

// slot returns the slot of a handle and its generation, or nil if the
// handle names no allocated slot.
func (hs *Handles) slot(h uint64) (sl *HandleSlot, shard, index int, gen uint32) {
	t := hs.table.Load()
	if t == nil {
		return nil, 0, 0, 0
	}
	shard, index, gen = splitHandle(h)
	k, off := chunkOf(index)
	base := t[shard].Chunks[k].Load()
	if base == nil {
		return nil, 0, 0, 0
	}
	return (*HandleSlot)(unsafe.Add(unsafe.Pointer(base), uintptr(off)*unsafe.Sizeof(HandleSlot{}))), shard, index, gen
}

func live(state uint64, gen uint32) bool {
	return uint32(state>>32) == gen && uint32(state) != 0
}

// nextGen is the generation after g: never 0, so that 0 is never a handle.
func nextGen(g uint32) uint32 {
	if g++; g == 0 {
		g = 1
	}
	return g
}

// New returns a new handle to ctx holding one reference. It fails with an
// error that IsGone recognizes if ctx died (out of its container, no handle
// left) since it was looked up.
func (hs *Handles) New(ctx *Context) (uint64, error) {
	if !ctx.acquire() {
		return 0, errGone
	}
	h, err := hs.newHandle(ctx)
	if err != nil {
		ctx.handleGone()
	}
	return h, err
}

func (hs *Handles) newHandle(ctx *Context) (uint64, error) {
	t := hs.Table()
	si := int(uint64(ctx.id) & (handleShards - 1))
	s, ts := &hs.shards[si], &t[si]
	s.mu.Lock()
	defer s.mu.Unlock()
	idx, err := hs.pop(s, ts)
	if err != nil {
		return 0, err
	}
	k, off := chunkOf(idx)
	sl := hs.slotAt(ts, k, off)
	(*s.ctxs[k].Load())[off].Store(ctx)
	sl.ID = ctx.id
	gen := uint32(sl.State.Load() >> 32)
	sl.State.Store(uint64(gen)<<32 | 1) // live: C may use it from here
	s.issued++
	hs.sweepSome(s, ts)
	return uint64(gen)<<32 | uint64(idx)<<handleShardBits | uint64(si), nil
}

func (hs *Handles) slotAt(ts *TableShard, k, off int) *HandleSlot {
	return (*HandleSlot)(unsafe.Add(unsafe.Pointer(ts.Chunks[k].Load()), uintptr(off)*unsafe.Sizeof(HandleSlot{})))
}

// pop takes a dead slot off the free list, or a new one; s.mu is held.
func (hs *Handles) pop(s *handleShard, ts *TableShard) (int, error) {
	for {
		top := ts.Free.Load()
		if top == 0 {
			break
		}
		k, off := chunkOf(int(top - 1))
		next := hs.slotAt(ts, k, off).Next.Load()
		if ts.Free.CompareAndSwap(top, uint64(next)) {
			return int(top - 1), nil
		}
	}
	if s.slots > maxHandleIndex {
		return 0, Errorf(ErrLimit, "too many live context handles (%d in one shard); drop some with dac_context_unref", s.slots)
	}
	idx := s.slots
	if k, off := chunkOf(idx); off == 0 {
		n := handleChunkBase << k
		p, err := offHeap(n * int(unsafe.Sizeof(HandleSlot{})))
		if err != nil {
			return 0, err
		}
		chunk := unsafe.Slice((*HandleSlot)(p), n)
		for i := range chunk {
			chunk[i].State.Store(1 << 32) // generation 1, dead
		}
		ctxs := make(ctxChunk, n)
		s.ctxs[k].Store(&ctxs)
		ts.Chunks[k].Store(&chunk[0])
	}
	s.slots++
	return idx, nil
}

// sweepSome drops the *Context of up to two dead slots (their handles were
// unreffed, on either side, since the slot was last issued), so that a
// released context does not stay reachable through a dead slot until the
// slot is reused. s.mu is held: nothing can make a dead slot live meanwhile.
func (hs *Handles) sweepSome(s *handleShard, ts *TableShard) {
	for range 2 {
		if s.sweep >= s.slots {
			s.sweep = 0
		}
		k, off := chunkOf(s.sweep)
		if uint32(hs.slotAt(ts, k, off).State.Load()) == 0 {
			(*s.ctxs[k].Load())[off].Store(nil)
		}
		s.sweep++
	}
}

// Get returns the context of a live handle.
func (hs *Handles) Get(h uint64) (*Context, error) {
	sl, si, idx, gen := hs.slot(h)
	if sl == nil || !live(sl.State.Load(), gen) {
		return nil, errBadHandle(h)
	}
	k, off := chunkOf(idx)
	ctx := (*hs.shards[si].ctxs[k].Load())[off].Load()
	// Still the same live incarnation: a slot that died in between has
	// another generation now, even if it was reissued.
	if ctx == nil || !live(sl.State.Load(), gen) {
		return nil, errBadHandle(h)
	}
	return ctx, nil
}

// Ref adds a reference to a live handle.
func (hs *Handles) Ref(h uint64) error {
	sl, _, _, gen := hs.slot(h)
	if sl == nil {
		return errBadHandle(h)
	}
	for {
		st := sl.State.Load()
		if !live(st, gen) {
			return errBadHandle(h)
		}
		if uint32(st) == maxRefs {
			return Errorf(ErrLimit, "context handle %#x has too many references", h)
		}
		if sl.State.CompareAndSwap(st, st+1) {
			return nil
		}
	}
}

// Unref drops a reference; the last one kills the handle. C drops the
// others itself, and leaves the last to this (capi.c), which tells the
// context that one handle fewer holds it.
func (hs *Handles) Unref(h uint64) error {
	sl, si, idx, gen := hs.slot(h)
	if sl == nil {
		return errBadHandle(h)
	}
	k, off := chunkOf(idx)
	for {
		st := sl.State.Load()
		if !live(st, gen) {
			return errBadHandle(h)
		}
		next := st - 1
		var ctx *Context
		if uint32(st) == 1 {
			next = uint64(nextGen(gen)) << 32 // dead, and the generation moves on
			// Read while the slot is live: a sweep clears dead slots only.
			ctx = (*hs.shards[si].ctxs[k].Load())[off].Load()
		}
		if sl.State.CompareAndSwap(st, next) {
			if uint32(st) == 1 {
				hs.push(&hs.table.Load()[si], sl, idx)
				if ctx != nil {
					ctx.handleGone()
				}
			}
			return nil
		}
	}
}

// push puts the slot just killed on its shard's free list; C does the same.
func (hs *Handles) push(ts *TableShard, sl *HandleSlot, idx int) {
	for {
		top := ts.Free.Load()
		sl.Next.Store(uint32(top))
		if ts.Free.CompareAndSwap(top, uint64(idx)+1) {
			break
		}
	}
	ts.Freed.Add(1)
}

// Live returns how many handles are live: a leak check for tests.
func (hs *Handles) Live() int {
	t := hs.table.Load()
	if t == nil {
		return 0
	}
	var n int64
	for i := range hs.shards {
		s := &hs.shards[i]
		s.mu.Lock()
		n += s.issued - t[i].Freed.Load()
		s.mu.Unlock()
	}
	return int(n)
}
