package container

import (
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Records: where a Container keeps its contexts, in memory outside the Go
// heap that the C ABI reads without entering Go (as user space reads the
// vDSO page the kernel writes). Go is the only writer of what the container
// holds: it creates records, links them into the index, unlists them on
// release and recycles them. The C side only reads (lookups, ids, known
// workers) and takes and drops references with the protocol of the state
// word (docs/state-word.md), or holds them uncounted, one per thread, where
// the record's life is marked (UncountedRefs); the one transition it leaves
// to Go is the last one, the death of a record, so that everything a death
// does (dropping the host's value, recycling) is written once, here.
//
// Every context has one record for as long as it lives: from its creation
// until it is out of the container and no handle refers to it. A handle is
// the record's index and its generation, so a handle outlives its record
// safely: once the record dies its generation moves on, and the handle is
// recognised as dead however the record is reused (and a record out of
// generations is retired: nextGen).
//
// Reclaiming what C may be reading: record memory is never returned while
// the container lives (slabs, each a reserved region committed as it fills,
// made as the records grow, so a record's address is fixed), and an index's bucket array replaced by a
// larger one is kept, not freed (they grow by doubling, so the retired ones
// take at most as much as the live one). A C reader can therefore always
// read what it reached; what it read may be stale, and every read it acts
// on is validated against the record's state word: a record counts as the
// context for id only while its state says listed and its id is id. (C
// reads only the process's one container, which lives as long as the
// process; a container made by New and dropped gives its memory back when
// it is garbage: mappings.)

// Record is one context as the C ABI sees it (capi_layout.h declares it to
// C as dacc_record, generated from this type by cmd/dacgen).
// 64 bytes: one cache line.
type Record struct {
	// State is the generation (high 32 bits), the listed bit (bit 31: the
	// context is in the container), the uncounted bit (bit 30: a reference to
	// this life may be held uncounted, see UncountedRefs) and the number of
	// references counted here (low 30 bits). docs/state-word.md is its
	// protocol: every state, and who moves it to which, by which operation.
	State atomic.Uint64
	// ID is the context id, written before State makes the record listed.
	ID atomic.Int64
	// Next links the record into its index bucket's chain, and a dead one
	// into its free list: index+1 of the next record, 0 at the end.
	Next atomic.Uint32
	// NWorkers is how many known worker ids the context has (C reads the
	// first min(NWorkers, InlineWorkers) of them from Workers, written
	// before NWorkers counts them; beyond that, Go has them).
	NWorkers atomic.Uint32
	Workers  [InlineWorkers]uint16
	// LastUsed is the coarse clock (clock.go) when the context was last
	// created, retrieved or changed: what ReapIdleContexts reads. C's
	// lookups store it too.
	LastUsed atomic.Int64
	// HostValue and HostDrop are the host's value for the context and the
	// function that drops it (a C function pointer, called once when the
	// record dies). C sets them, through a handle: the value by
	// compare-and-swap from 0, then the drop; the record cannot die before
	// that handle's reference goes, which orders both before the death
	// that takes them (die).
	HostValue atomic.Uint64
	HostDrop  atomic.Uintptr
}

// InlineWorkers is how many known worker ids a record carries for C.
const InlineWorkers = 8

// The state word.
const (
	stateListed    = uint64(1) << 31
	stateUncounted = uint64(1) << 30
	stateRefMask   = stateUncounted - 1
	// MaxRefs is the most references one context's state word can count.
	MaxRefs = stateRefMask
	// ListedBit is the state word's listed bit.
	ListedBit = stateListed
	// UncountedBit is the state word's uncounted bit (see UncountedRefs).
	UncountedBit = stateUncounted
)

func stateGen(st uint64) uint32    { return uint32(st >> 32) }
func stateRefs(st uint64) uint64   { return st & stateRefMask }
func stateListedOf(st uint64) bool { return st&stateListed != 0 }

// nextGen is the generation after g. After the last it is 0, which no
// handle has: the record is retired, never reused (die), so that no handle
// of an earlier life ever names a later one, as a generation that wrapped
// would after 2^32-1 lives. A retired record costs its 64 bytes.
func nextGen(g uint32) uint32 { return g + 1 }

// Handle returns the handle of the record at index in generation gen.
func Handle(index uint32, gen uint32) uint64 { return uint64(gen)<<32 | uint64(index) }

// SplitHandle returns a handle's record index and generation.
func SplitHandle(h uint64) (index uint32, gen uint32) { return uint32(h), uint32(h >> 32) }

const (
	recordSize = int(unsafe.Sizeof(Record{}))
	// SlabBits: records come in slabs of 1<<SlabBits, each a region of
	// its own (64 MiB of address space, reserved when the slab is first
	// needed and committed recordChunk records at a time), so that the
	// records grow while memory allows and none ever moves: C reads a
	// record at a fixed address from a handle's index alone.
	SlabBits    = 20
	slabRecords = 1 << SlabBits
	slabMask    = slabRecords - 1
	// MaxSlabs is as many slabs as a handle's 32-bit index can name.
	MaxSlabs = 1 << (32 - SlabBits)
	// MaxRecords is the handle format's bound on contexts alive at once
	// (listed or referenced): every 32-bit index but the last, as the
	// chains store index+1. Memory runs out long before (64 bytes each).
	MaxRecords = MaxSlabs*slabRecords - 1
	// recordChunk is how many records are committed at a time (64 KiB).
	recordChunk   = 1024
	chunksPerSlab = slabRecords / recordChunk
)

// View is what a Container publishes for C, outside the Go heap (capi_layout.h:
// dacc_view). C reads it without locks; Go writes Buckets when an index
// grows, everything else once.
type View struct {
	Records   uintptr // address of record 0: slab 0, where most handles' records are
	ShardMask uint64  // shards - 1
	ShardBits uint64  // log2(shards)
	Clock     uintptr // address of the coarse clock (an int64 of milliseconds)
	Buckets   [MaxShards]atomic.Uintptr
	// Slabs[k] is the address of record k<<SlabBits, 0 until that slab is
	// made (a handle's index with none is no live handle's). Written once
	// each, before any record in the slab is handed out.
	Slabs [MaxSlabs]atomic.Uintptr
}

// MaxShards bounds the shards of a Container.
const MaxShards = 256

// Buckets is the head of an index shard's bucket array, outside the Go
// heap (capi_layout.h: dacc_buckets): the mask, the chains' change count,
// then mask+1 chain heads (index+1 of a record, 0: empty) from
// BucketsHeadsOffset.
type Buckets struct {
	Mask uint64
	// Changes is odd while Go rewrites a chain link that a reader may be
	// following (an unlink; a growth, after which this array is retired
	// and Changes stays odd) and counts those rewrites: a C lookup that
	// misses with Changes even and the same before and after has read
	// chains no one rewrote meanwhile, so its miss is the answer, not a
	// question for Go. An insert needs no count: a reader that misses the
	// new head has a miss that precedes the insert.
	Changes atomic.Uint64
}

// BucketsHeadsOffset is where a bucket array's chain heads start.
const BucketsHeadsOffset = unsafe.Sizeof(Buckets{})

func (b *Buckets) head(i uint64) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Add(unsafe.Pointer(b), BucketsHeadsOffset+uintptr(i)*4))
}

// bucketOf is where id chains in a shard's index: the bits above the
// shard's, folded with the worker id (so other workers' passes spread too).
func bucketOf(id int64, shardBits uint, mask uint64) uint64 {
	u := uint64(id)
	return ((u >> shardBits) ^ (u >> AutoIncrementBits)) & mask
}

// recordTable is the record slabs and the Go side of each record: the
// *Context it stands for.
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

type ctxChunk [recordChunk]atomic.Pointer[Context]

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

// ctxSlot returns where the *Context of the record at index is kept, or nil
// if no such record was ever allocated.
func (t *recordTable) ctxSlot(index uint32) *atomic.Pointer[Context] {
	chunks := t.slabs[index>>SlabBits].ctxs.Load()
	if chunks == nil {
		return nil
	}
	chunk := chunks[(index&slabMask)/recordChunk].Load()
	if chunk == nil {
		return nil
	}
	return &chunk[index%recordChunk]
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
			t.at(uint32(n + i)).State.Store(1 << 32) // generation 1, dead
		}
		t.slabs[k].ctxs.Load()[(n&slabMask)/recordChunk].Store(new(ctxChunk))
		t.committed += recordChunk
	}
	t.used.Store(int64(n + 1))
	return uint32(n), nil
}

// indexShard is one shard of the container's index: a chained hash table
// of records whose bucket array C reads, under a lock for Go's writers.
//
// Each shard is two cache lines, its state in the first bytes: wherever Go
// puts the slice (with pointers in it, and past 512 bytes, 8 bytes into a
// line), no two shards' states share a line, so threads working in two
// shards at once, as the consecutive ids of two threads' creations do, do
// not trade one.
type indexShard struct {
	shardState
	_ [2*cacheLine - unsafe.Sizeof(shardState{})]byte
}

type shardState struct {
	// mu is Go's writers' lock, and its own lookups': a plain mutex, as C
	// reads without it (a read-write lock would cost every creation and
	// release four more locked instructions).
	mu      sync.Mutex
	buckets *Buckets
	count   int    // records linked in
	slot    int    // its place in View.Buckets
	free    uint32 // index+1 of the top of this shard's free records
	// reapedIDs: ids of this shard the container's clean-up released
	// (reaped.go); nil until its first.
	reapedIDs *reapedIDs
}

func newBucketArray(m *mappings, n int) (*Buckets, error) {
	p, err := m.offHeap(int(BucketsHeadsOffset)+4*n, syscall.PROT_READ|syscall.PROT_WRITE)
	if err != nil {
		return nil, err
	}
	b := (*Buckets)(p)
	b.Mask = uint64(n - 1)
	return b, nil
}

// find returns the record listed under id in shard s, and its index, or nil;
// s.mu is held, so the chains are still.
func (c *Container) find(s *indexShard, id int64) (*Record, uint32) {
	b := s.buckets
	for i := b.head(bucketOf(id, c.shardBits, b.Mask)).Load(); i != 0; {
		r := c.recs.at(i - 1)
		if r.ID.Load() == id && stateListedOf(r.State.Load()) {
			return r, i - 1
		}
		i = r.Next.Load()
	}
	return nil, 0
}

// each calls f for every record linked into shard s; s.mu is held.
func (c *Container) each(s *indexShard, f func(r *Record, idx uint32)) {
	b := s.buckets
	for k := uint64(0); k <= b.Mask; k++ {
		for i := b.head(k).Load(); i != 0; {
			r := c.recs.at(i - 1)
			next := r.Next.Load() // f may unlink r
			f(r, i-1)
			i = next
		}
	}
}

// create makes a record for a new context under id and links it into s
// (s.mu held), referenced once if ref.
func (c *Container) create(s *indexShard, id int64, ref bool) (*Context, uint64, error) {
	var idx uint32
	if s.free != 0 {
		idx = s.free - 1
		s.free = c.recs.at(idx).Next.Load()
	} else {
		var err error
		if idx, err = c.recs.grow(); err != nil {
			return nil, 0, err
		}
	}
	r := c.recs.at(idx)
	gen := stateGen(r.State.Load()) // dead: the generation its next life takes
	storeI64(&r.ID, id)
	// The rest is zero already (die took the host's value, and most
	// contexts have no known workers): each Go atomic store is a locked
	// exchange, so only what is not gets written.
	if r.NWorkers.Load() != 0 {
		r.NWorkers.Store(0)
	}
	storeI64(&r.LastUsed, coarseNow())                     // dead until the state's store below: no other writer
	if r.HostValue.Load() != 0 || r.HostDrop.Load() != 0 { // set through a dead handle after the death
		r.HostValue.Store(0)
		r.HostDrop.Store(0)
	}
	if s.count >= int(s.buckets.Mask+1) {
		if err := c.growIndex(s); err != nil {
			c.freeRecord(s, r, idx)
			return nil, 0, err
		}
	}
	// The Go API hands its *Context out; a context made for a handle gets
	// one only when something needs it (contextOf): most never do, and
	// their creation then allocates nothing on Go's heap. (A free record
	// has none: its death took it.)
	var ctx *Context
	if !ref {
		ctx = c.contextOf(r, idx)
	}
	head := s.buckets.head(bucketOf(id, c.shardBits, s.buckets.Mask))
	storeU32(&r.Next, head.Load())
	storeU32(head, idx+1) // published, with ID and Next, by the state's store below
	s.count++
	st := uint64(gen)<<32 | stateListed
	if ref {
		st++
	}
	r.State.Store(st) // listed: C may find it from here
	if ref {
		return ctx, Handle(idx, gen), nil
	}
	return ctx, 0, nil
}

// growIndex moves shard s to a bucket array twice the size (s.mu held). C
// readers still in the old array may miss a record while its chain is
// rewritten: the old array's change count, odd from here on, sends their
// misses to Go, which looks under the lock. The old array is kept,
// never freed, as a reader may still be in it.
func (c *Container) growIndex(s *indexShard) error {
	old := s.buckets
	b, err := newBucketArray(c.maps, int(old.Mask+1)*2)
	if err != nil {
		return err
	}
	old.Changes.Add(1)
	for k := uint64(0); k <= old.Mask; k++ {
		for i := old.head(k).Load(); i != 0; {
			r := c.recs.at(i - 1)
			next := r.Next.Load()
			head := b.head(bucketOf(r.ID.Load(), c.shardBits, b.Mask))
			r.Next.Store(head.Load())
			head.Store(i)
			i = next
		}
	}
	s.buckets = b
	c.view.Buckets[s.slot].Store(uintptr(unsafe.Pointer(b)))
	return nil
}

// unlink takes the record at idx out of s's chains (s.mu held).
func (c *Container) unlink(s *indexShard, r *Record, idx uint32) {
	link := s.buckets.head(bucketOf(r.ID.Load(), c.shardBits, s.buckets.Mask))
	for i := link.Load(); i != 0; i = link.Load() {
		if i == idx+1 {
			// A reader on r may follow r.Next after r is recycled (into
			// the free list, or another chain): its miss must not count.
			s.buckets.Changes.Add(1)
			storeU32(link, r.Next.Load()) // between the change count's two increments
			s.buckets.Changes.Add(1)
			s.count--
			return
		}
		link = &c.recs.at(i - 1).Next
	}
}

// PendingDrop is what remains to do, outside every lock, for a record that
// died: its host value and the drop function the host gave for it (Fn 0:
// nothing to run). Run it once, on the thread that dropped the last
// reference: Container.RunDrop, or the host itself.
type PendingDrop struct {
	Fn    uintptr
	Value uint64
}

// unlist releases the record at idx: out of the index and no longer listed
// (from here no lookup on either side finds it); if no handle refers to it,
// it dies (died). s.mu is held: a record that did not die stays
// alive until it is released (its last reference goes through Go, under
// s.mu).
func (c *Container) unlist(s *indexShard, r *Record, idx uint32) (d PendingDrop, died bool) {
	c.unlink(s, r, idx)
	for {
		st := r.State.Load()
		next := st &^ stateListed
		dies := stateRefs(st) == 0 && st&stateUncounted == 0
		if dies {
			next = uint64(nextGen(stateGen(st))) << 32
		}
		if !r.State.CompareAndSwap(st, next) {
			continue
		}
		if dies {
			return c.die(s, r, idx), true
		}
		if stateRefs(st) != 0 {
			return PendingDrop{}, false // its last reference goes through Go (UnrefLast)
		}
		// Counted out, but references may be held uncounted: those are
		// moved into the count first (none can be taken any more, as it is
		// unlisted), and it dies only if none was.
		return c.dieIfUnreferenced(s, r, idx, stateGen(st))
	}
}

// dieIfUnreferenced kills the unlisted record at idx in life gen (s.mu
// held) if no reference to it is held, counted or not.
func (c *Container) dieIfUnreferenced(s *indexShard, r *Record, idx uint32, gen uint32) (PendingDrop, bool) {
	if u := c.uncounted.Load(); u != nil {
		(*u).Settle(Handle(idx, gen))
	}
	for {
		st := r.State.Load()
		if stateGen(st) != gen || stateRefs(st) != 0 {
			return PendingDrop{}, false // referenced: its last reference goes through Go (UnrefLast)
		}
		if r.State.CompareAndSwap(st, uint64(nextGen(gen))<<32) {
			return c.die(s, r, idx), true
		}
	}
}

// contextOf returns the *Context of the record at idx, made now if it has
// none yet. The caller holds the shard's lock, under which alone a slot is
// written, and the record is alive (listed, referenced, or being created
// under the lock): it cannot die meanwhile, as a death takes the lock.
func (c *Container) contextOf(r *Record, idx uint32) *Context {
	slot := c.recs.ctxSlot(idx)
	if ctx := slot.Load(); ctx != nil {
		return ctx
	}
	ctx := newContext(c, r.ID.Load())
	ctx.rec.Store(r)
	slot.Store(ctx)
	return ctx
}

// die recycles a record whose state just turned dead, into the free list
// of s (s.mu held), and returns its host value to drop.
func (c *Container) die(s *indexShard, r *Record, idx uint32) PendingDrop {
	if slot := c.recs.ctxSlot(idx); slot.Load() != nil { // most have none (contextOf)
		ctx := slot.Swap(nil)
		ctx.mu.Lock()
		ctx.rec.Store(nil)
		ctx.mu.Unlock()
	}
	var d PendingDrop
	if r.HostValue.Load() != 0 { // the drop is set after the value, if at all
		d = PendingDrop{Fn: r.HostDrop.Swap(0), Value: r.HostValue.Swap(0)}
	}
	if stateGen(r.State.Load()) != 0 { // 0: retired (nextGen)
		c.freeRecord(s, r, idx)
	}
	return d
}

func (c *Container) freeRecord(s *indexShard, r *Record, idx uint32) {
	storeU32(&r.Next, s.free) // a reader still on r follows it only to miss, unsettled (unlink)
	s.free = idx + 1
}

// RunDrop runs a dead record's host drop function (through the function
// SetHostDrop gave), outside every lock.
func (c *Container) RunDrop(d PendingDrop) {
	if d.Fn == 0 {
		return
	}
	if f := c.dropper.Load(); f != nil {
		(*f)(d.Fn, d.Value)
	}
}

// retain takes a reference to the listed record at idx, for a handle (the
// shard's lock is held, so it stays listed meanwhile).
func retain(r *Record, idx uint32) (uint64, error) {
	for {
		st := r.State.Load()
		if stateRefs(st) == MaxRefs {
			return 0, Errorf(ErrLimit, "context %d has too many references (%d)", r.ID.Load(), MaxRefs)
		}
		if r.State.CompareAndSwap(st, st+1) {
			return Handle(idx, stateGen(st)), nil
		}
	}
}

func errBadHandle(h uint64) error {
	if h == 0 {
		return Errorf(ErrBadHandle, "context handle is NULL")
	}
	return Errorf(ErrBadHandle, "context handle %#x is not a live handle (never issued, or its last reference was dropped)", h)
}

// record returns the record a handle names and its generation, or nil if no
// such record was ever allocated.
func (c *Container) record(h uint64) (*Record, uint32, uint32) {
	idx, gen := SplitHandle(h)
	if gen == 0 || int64(idx) >= c.recs.used.Load() {
		return nil, 0, 0
	}
	return c.recs.at(idx), idx, gen
}

func referenced(st uint64, gen uint32) bool { return stateGen(st) == gen && stateRefs(st) != 0 }

// HandleContext returns the context of a live handle.
func (c *Container) HandleContext(h uint64) (*Context, error) {
	r, idx, gen := c.record(h)
	if r == nil || !referenced(r.State.Load(), gen) {
		return nil, errBadHandle(h)
	}
	ctx := c.recs.ctxSlot(idx).Load()
	if ctx == nil {
		// Made on first use, under the lock of the record's shard, where a
		// record still referenced in the handle's life cannot die. (Had it
		// died and been reused meanwhile, under another id, the generation
		// says so and nothing is made.)
		s := c.shard(r.ID.Load())
		s.mu.Lock()
		if referenced(r.State.Load(), gen) {
			ctx = c.contextOf(r, idx)
		}
		s.mu.Unlock()
	}
	// Still the same life of the record: one that died in between has
	// another generation now, even if it was reused.
	if ctx == nil || !referenced(r.State.Load(), gen) {
		return nil, errBadHandle(h)
	}
	return ctx, nil
}

// CheckRef says why a reference could not be added to h (C adds them): a
// dead handle, or one at MaxRefs. nil if it could have been.
func (c *Container) CheckRef(h uint64) error {
	r, _, gen := c.record(h)
	if r == nil {
		return errBadHandle(h)
	}
	st := r.State.Load()
	if !referenced(st, gen) {
		return errBadHandle(h)
	}
	if stateRefs(st) == MaxRefs {
		return Errorf(ErrLimit, "context handle %#x has too many references", h)
	}
	return nil
}

// UnrefLast drops the last reference of a record no longer listed, which
// then dies (C drops every other reference itself), and runs its host
// drop. It returns false, having changed nothing, if the handle's record is
// in another state now (referenced again, or listed): the caller tries
// again.
func (c *Container) UnrefLast(h uint64) (bool, error) {
	done, d, err := c.UnrefLastDeferred(h)
	c.RunDrop(d)
	return done, err
}

// UnrefLastDeferred is UnrefLast that leaves the host drop to the caller:
// the C ABI runs it after its call into Go has returned, which spares a
// call from Go back into C.
func (c *Container) UnrefLastDeferred(h uint64) (bool, PendingDrop, error) {
	r, idx, gen := c.record(h)
	if r == nil {
		return false, PendingDrop{}, errBadHandle(h)
	}
	st := r.State.Load()
	if !referenced(st, gen) {
		return false, PendingDrop{}, errBadHandle(h)
	}
	if st&^stateUncounted != uint64(gen)<<32|1 {
		return false, PendingDrop{}, nil
	}
	// Under the shard's lock: the free list is the shard's.
	s := c.shard(r.ID.Load())
	s.mu.Lock()
	if !r.State.CompareAndSwap(st, uint64(nextGen(gen))<<32) {
		s.mu.Unlock()
		return false, PendingDrop{}, nil
	}
	d := c.die(s, r, idx)
	s.mu.Unlock()
	return true, d, nil
}

// LiveReferences returns how many references handles hold now, over every
// context, counted or not: a leak check (a scan, not for hot paths).
func (c *Container) LiveReferences() int64 {
	var n int64
	for i := range uint32(c.recs.used.Load()) {
		n += int64(stateRefs(c.recs.at(i).State.Load()))
	}
	return n + c.UncountedReferences()
}

// UncountedReferences returns how many of LiveReferences are held
// uncounted (see UncountedRefs) now.
func (c *Container) UncountedReferences() int64 {
	if u := c.uncounted.Load(); u != nil {
		return (*u).Count()
	}
	return 0
}

// UncountedRefs is where the host keeps references to records that their
// state words do not count (the C ABI: one per thread, so that a thread's
// retrieve and unref of a context every thread uses write no line the
// others read; csrc/uncounted.c says how). A record's life that may have some has
// the uncounted bit set. Settle moves every uncounted reference to handle h
// into h's count, each as one compare-and-swap that requires h's life (a
// reference whose holder drops it meanwhile is taken out again, without
// killing the record: Go, which calls it under the record's shard lock,
// decides after), and must not call into the container. Count says how
// many uncounted references there are now.
type UncountedRefs interface {
	Settle(h uint64)
	Count() int64
}

// SetUncountedRefs sets where uncounted references are kept (nil: nowhere).
// Set before any record is marked: a release never sees what it does not
// know of.
func (c *Container) SetUncountedRefs(u UncountedRefs) {
	if u == nil {
		c.uncounted.Store(nil)
		return
	}
	c.uncounted.Store(&u)
}

// HostValue returns the host's value of h's context (0: none).
func (c *Container) HostValue(h uint64) (uint64, error) {
	r, _, gen := c.record(h)
	if r == nil || !referenced(r.State.Load(), gen) {
		return 0, errBadHandle(h)
	}
	return r.HostValue.Load(), nil
}

// AgeRecord moves the dead record that handle h named on to generation
// gen, as if it had lived and died that many more times, so that a test
// reaches the last generation without 2^32 lives (the C ABI offers it only
// in builds with the dac_testing tag). The record must be dead and not
// retired, and gen no earlier than its generation.
func (c *Container) AgeRecord(h uint64, gen uint32) error {
	idx, hgen := SplitHandle(h)
	if hgen == 0 || int64(idx) >= c.recs.used.Load() {
		return errBadHandle(h)
	}
	r := c.recs.at(idx)
	s := c.shard(r.ID.Load()) // a dead record is in the free list of its last id's shard
	s.mu.Lock()
	defer s.mu.Unlock()
	st := r.State.Load()
	if uint32(st) != 0 || stateGen(st) == 0 || gen < stateGen(st) {
		return Errorf(ErrInvalidArgument, "record %d (state %#x) is not dead, or is retired, or is past generation %d", idx, st, gen)
	}
	r.State.Store(uint64(gen) << 32)
	return nil
}
