package container

import (
	"sync/atomic"
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

// GenShift is where a state word's generation starts, and a handle's: the
// bits from GenShift up (C: DACC_GEN_SHIFT, generated from it).
const GenShift = 32

func stateGen(st uint64) uint32    { return uint32(st >> GenShift) }
func stateRefs(st uint64) uint64   { return st & stateRefMask }
func stateListedOf(st uint64) bool { return st&stateListed != 0 }

// genState is the state word of generation gen: dead, unlisted, with no
// references.
func genState(gen uint32) uint64 { return uint64(gen) << GenShift }

// nextGen is the generation after g. After the last it is 0, which no
// handle has: the record is retired, never reused (die), so that no handle
// of an earlier life ever names a later one, as a generation that wrapped
// would after 2^32-1 lives. A retired record costs its 64 bytes.
func nextGen(g uint32) uint32 { return g + 1 }

// Handle returns the handle of the record at index in generation gen.
func Handle(index uint32, gen uint32) uint64 { return genState(gen) | uint64(index) }

// SplitHandle returns a handle's record index and generation.
func SplitHandle(h uint64) (index uint32, gen uint32) { return uint32(h), stateGen(h) }

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
	Clock     uintptr // address of a ManualClock's word (an int64 of milliseconds); 0: the process's coarse clock
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

// bucketOf is where id chains in a shard's index: the id without the
// shard's bits (those above its run's, Container.shard), folded with the
// worker id (so other workers' passes spread too).
func bucketOf(id int64, shardBits uint, mask uint64) uint64 {
	u := uint64(id)
	k := u&(ContextIDRun-1) | u>>(ContextIDRunBits+shardBits)<<ContextIDRunBits
	return (k ^ u>>AutoIncrementBits) & mask
}
