package container

// Slabs: the records region, grown a slab at a time and committed a chunk
// at a time, so that no record ever moves (records.go says why), and the
// mappings that hold it and the rest of a Container's off-heap memory.

import (
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// recordTable is the record slabs and the Go side of each record: the
// *Context it stands for, and when its context was stored.
type recordTable struct {
	slabs *[MaxSlabs]slab
	maps  *mappings
	view  *View // where C finds the slabs

	mu        sync.Mutex // serializes growth
	committed int        // records committed
	used      atomic.Int64
}

type slab struct {
	recs atomic.Pointer[Record] // record 0 of the slab, off the Go heap; nil until made
	ctxs atomic.Pointer[[chunksPerSlab]atomic.Pointer[ctxChunk]]
}

// ctxChunk is the Go side of recordChunk records: each one's *Context, and
// the coarse clock when its context was stored (a context's age, which only
// the listings read: on the Go heap, as C never needs it). A record's slots
// are at chunkSlot's place, not its own.
type ctxChunk struct {
	ctxs  [recordChunk]atomic.Pointer[Context]
	borns [recordChunk]atomic.Int64
}

// offHeap maps n zeroed bytes outside the Go heap; prot PROT_READ reserves
// address space only (its pages read as zeros, all one shared page, and a
// read-only private mapping is not charged to the system's commit limit).
func offHeap(n int, prot int) ([]byte, error) {
	flags := syscall.MAP_ANON | syscall.MAP_PRIVATE
	if prot != syscall.PROT_READ|syscall.PROT_WRITE {
		flags |= syscall.MAP_NORESERVE
	}
	b, err := syscall.Mmap(-1, 0, n, prot, flags)
	if err != nil {
		return nil, Errorf(ErrLimit, "cannot map %d bytes for contexts: %v", n, err)
	}
	return b, nil
}

// mappings are the regions a Container mapped outside the Go heap (its
// records, view and bucket arrays, retired ones included). They stay mapped
// while the Container is reachable, and so while C may read them: C reads
// only the process's one container, which a global keeps, and every Go
// object that points into them (a *Context's record) keeps its Container.
// Once it is not reachable they are unmapped (runtime.AddCleanup, in New),
// so that a program, or a fuzzer, that makes many containers gets their
// address space back.
type mappings struct {
	mu      sync.Mutex
	regions [][]byte // nil once unmapped
}

func (m *mappings) offHeap(n int, prot int) (unsafe.Pointer, error) {
	b, err := offHeap(n, prot)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.regions = append(m.regions, b)
	m.mu.Unlock()
	return unsafe.Pointer(&b[0]), nil
}

func (m *mappings) unmapAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.regions {
		_ = syscall.Munmap(b) // nothing to do about a failure: the space stays reserved
	}
	m.regions = nil
}

func (t *recordTable) init(m *mappings, v *View) error {
	t.slabs = new([MaxSlabs]slab)
	t.maps, t.view = m, v
	if err := t.makeSlab(0); err != nil {
		return err
	}
	v.Records = v.Slabs[0].Load()
	return nil
}

// makeSlab maps slab k (t.mu held, or at init). Readable from the start: a
// record never committed reads as zeros, generation 0, which no handle has,
// so C needs no bound but the slab's presence.
func (t *recordTable) makeSlab(k int) error {
	p, err := t.maps.offHeap(slabRecords*recordSize, syscall.PROT_READ)
	if err != nil {
		return err
	}
	sl := &t.slabs[k]
	sl.ctxs.Store(new([chunksPerSlab]atomic.Pointer[ctxChunk]))
	sl.recs.Store((*Record)(p))
	t.view.Slabs[k].Store(uintptr(p))
	return nil
}

// at returns the record at index (which must have been allocated).
func (t *recordTable) at(index uint32) *Record {
	base := t.slabs[index>>SlabBits].recs.Load()
	return (*Record)(unsafe.Add(unsafe.Pointer(base), uintptr(index&slabMask)*uintptr(recordSize)))
}

// chunk returns the Go side of the records around index, or nil if no
// such record was ever allocated.
func (t *recordTable) chunk(index uint32) *ctxChunk {
	chunks := t.slabs[index>>SlabBits].ctxs.Load()
	if chunks == nil {
		return nil
	}
	return chunks[(index&slabMask)/recordChunk].Load()
}

// chunkSlot is where a ctxChunk keeps the slots of the record at index:
// consecutive records' slots lie a line apart (a line holds the slots of
// records chunkStride apart), as threads creating at once mostly hold
// records made one after the other, and each creation writes its born
// slot.
func chunkSlot(index uint32) uint32 {
	i := index % recordChunk
	return i%chunkStride*slotsPerLine + i/chunkStride
}

const (
	slotsPerLine = cacheLine / 8 // 8-byte slots: *Context, and born's int64
	chunkStride  = recordChunk / slotsPerLine
)

// ctxSlot returns where the *Context of the record at index is kept, or nil
// if no such record was ever allocated.
func (t *recordTable) ctxSlot(index uint32) *atomic.Pointer[Context] {
	if ch := t.chunk(index); ch != nil {
		return &ch.ctxs[chunkSlot(index)]
	}
	return nil
}

// bornSlot returns where the coarse clock is kept when the context of the
// record at index was stored (written under its shard's lock at each
// creation), or nil if no such record was ever allocated.
func (t *recordTable) bornSlot(index uint32) *atomic.Int64 {
	if ch := t.chunk(index); ch != nil {
		return &ch.borns[chunkSlot(index)]
	}
	return nil
}

// grow allocates a fresh record (never used before) and returns its index.
// Past the handle format's bound, or where the system refuses the memory,
// it fails with ErrLimit.
func (t *recordTable) grow() (uint32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := int(t.used.Load())
	if n >= MaxRecords {
		return 0, Errorf(ErrLimit, "too many contexts alive at once (%d, listed or referenced by handles: a handle's index has 32 bits); release some or drop their handles", MaxRecords)
	}
	if n == t.committed {
		k := n >> SlabBits
		if t.slabs[k].recs.Load() == nil {
			if err := t.makeSlab(k); err != nil {
				return 0, err
			}
		}
		base := unsafe.Pointer(t.slabs[k].recs.Load())
		off := uintptr(n&slabMask) * uintptr(recordSize)
		chunk := unsafe.Slice((*byte)(unsafe.Add(base, off)), recordChunk*recordSize)
		if err := syscall.Mprotect(chunk, syscall.PROT_READ|syscall.PROT_WRITE); err != nil {
			return 0, Errorf(ErrLimit, "cannot commit memory for contexts: %v", err)
		}
		for i := range recordChunk {
			t.at(uint32(n + i)).State.Store(genState(1)) // generation 1, dead
		}
		t.slabs[k].ctxs.Load()[(n&slabMask)/recordChunk].Store(new(ctxChunk))
		t.committed += recordChunk
	}
	t.used.Store(int64(n + 1))
	return uint32(n), nil
}
