package container

// The index: each shard's chained hash table of listed records, whose
// bucket arrays C reads (records.go: Buckets), and the creation of a
// record into it.

import (
	"sync"
	"syscall"
	"unsafe"
)

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
	now := c.clock.now()
	storeI64(&r.LastUsed, now)                             // dead until the state's store below: no other writer
	c.recs.bornSlot(idx).Store(now)                        // atomic: a listing may read it through a handle of the record's last life
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
	st := genState(gen) | stateListed
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
