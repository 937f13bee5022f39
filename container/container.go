package container

import (
	"math/bits"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"distautograd/internal/layout"
)

// Container holds the contexts of one worker and hands out its ids. The C
// ABI keeps one per process (see Singleton); tests and simulations hold many.
// Every method is safe for concurrent use.
//
// Storage: each context has a record (records.go) outside the Go heap, and
// the records are indexed by id in shards, each a chained hash table under
// its own lock, picked by the id's run (ids.go): the bits just above the
// run's, so that threads creating contexts, each from a run of its own,
// mostly write different shards (the native component picks its shards by
// the low bits, so that its threads' interleaved ids spread). C reads the
// same index without locks.
//
// Locking: a method takes at most one shard lock at a time and never calls
// out (to a Fanout, to a host's drop function) while holding it; a
// context's own lock may be taken under a shard lock (to detach a dying
// record), never the other way round.
type Container struct {
	// What every operation reads, and what is written rarely, first; then,
	// between two lines of padding, the counters every creation writes
	// (the next id; live, while a cap is set) and every release (live,
	// while a cap is set), so that threads creating and releasing at once
	// trade those lines only, never the ones they all read.
	worker     int16 // as the native component stores it: see Init's quirk
	workerID   int64 // as given to New, in [0, 65535]
	shards     []indexShard
	shardBits  uint
	mask       int64
	recs       recordTable
	view       *View
	clock      coarseClock // what uses are dated by: the process's (the zero one), unless WithClock
	maps       *mappings
	maxLive    atomic.Int64 // cap on live contexts; 0: none
	refused    atomic.Int64 // contexts refused by the cap
	fanout     atomic.Pointer[fanoutBox]
	dropper    atomic.Pointer[HostDropFunc]
	uncounted  atomic.Pointer[UncountedRefs]
	shardCount int // as asked for (WithShards), before rounding
	msgIDs     counter
	// epoch is the container's number in the process (from 1), which
	// tells a Thread's run of this container's from another's; runsOver
	// is set once the counter reached its last run, which ends every
	// thread's run (nextContextID).
	epoch    uint64
	runsOver atomic.Bool

	_      [cacheLine]byte
	ctxIDs counter
	live   liveCount
	_      [cacheLine]byte
}

const cacheLine = layout.CacheLine

// Fanout is told, outside every lock, which known workers of a released
// context must release their copies. It must not block: see FanoutQueue for the
// queueing, retrying implementation. The workers slice is its own to keep.
type Fanout interface {
	Release(contextID int64, workers []uint16)
}

type fanoutBox struct{ n Fanout }

// HostDropFunc calls a host's drop function on its value (Record.HostDrop);
// the C ABI sets one that calls the C function pointer.
type HostDropFunc func(drop uintptr, value uint64)

// Option configures a Container made by New.
type Option func(*Container)

// WithShards sets the number of shards (rounded up to a power of two, at
// most MaxShards).
func WithShards(n int) Option {
	return func(c *Container) { c.shardCount = n }
}

// WithCounterOffsets starts the context and message counters at the given
// offsets into the worker's range instead of 0, so tests can reach max_id.
// The C ABI exposes it only in builds with the dac_testing tag.
func WithCounterOffsets(ctxOffset, msgOffset int64) Option {
	return func(c *Container) {
		c.ctxIDs.next.Add(ctxOffset)
		c.msgIDs.next.Add(msgOffset)
	}
}

// DefaultShards is the shard count the native component asks for, twice the
// number of cores; New rounds it up to a power of two, as the native does.
func DefaultShards() int { return max(1, 2*runtime.NumCPU()) }

// New returns an empty container for workerID, which must be in [0, 65535].
func New(workerID int64, opts ...Option) (*Container, error) {
	if workerID < 0 || workerID > MaxWorkerID {
		return nil, errWorkerRange
	}
	c := &Container{worker: int16(workerID), workerID: workerID, shardCount: DefaultShards()}
	c.ctxIDs.reset(workerID, "context")
	c.epoch = epochs.Add(1)
	c.msgIDs.reset(workerID, "autograd message")
	for _, o := range opts {
		o(c)
	}
	c.maps = &mappings{}
	if err := c.initStorage(); err != nil {
		c.maps.unmapAll()
		return nil, err
	}
	runtime.AddCleanup(c, (*mappings).unmapAll, c.maps)
	return c, nil
}

// initStorage maps the records and the view C reads, and makes the shards.
func (c *Container) initStorage() error {
	n := 1 << bits.Len(uint(min(max(1, c.shardCount), MaxShards)-1))
	p, err := c.maps.offHeap(int(unsafe.Sizeof(View{})), syscall.PROT_READ|syscall.PROT_WRITE)
	if err != nil {
		return err
	}
	c.view = (*View)(p)
	if err := c.recs.init(c.maps, c.view); err != nil {
		return err
	}
	c.view.ShardMask = uint64(n - 1)
	c.view.ShardBits = uint64(bits.TrailingZeros(uint(n)))
	c.view.Clock = uintptr(unsafe.Pointer(c.clock.word)) // 0: the process's clock, which C reads itself
	c.shards = make([]indexShard, n)
	c.shardBits = uint(bits.TrailingZeros(uint(n)))
	c.mask = int64(n - 1)
	for i := range c.shards {
		b, err := newBucketArray(c.maps, initialBuckets)
		if err != nil {
			return err
		}
		c.shards[i].buckets = b
		c.shards[i].slot = i
		c.view.Buckets[i].Store(uintptr(unsafe.Pointer(b)))
	}
	return nil
}

// initialBuckets is each shard's first bucket array size.
const initialBuckets = 64

// epochs numbers the containers of the process, from 1.
var epochs atomic.Uint64

// shard is id's shard: its run's (ids.go), so that a run's ids share one.
func (c *Container) shard(id int64) *indexShard {
	return &c.shards[id>>ContextIDRunBits&c.mask]
}

// View returns what the container publishes for C (capi_layout.h:
// dacc_view), valid for the life of the process.
func (c *Container) View() unsafe.Pointer { return unsafe.Pointer(c.view) }

// WorkerID returns the worker id given to New, in [0, 65535]. (The native
// getWorkerId returns it as an int16_t: int16(WorkerID()).)
func (c *Container) WorkerID() int64 { return c.workerID }

// MaxID returns max_id of this worker (negative for worker ids >= 32768).
func (c *Container) MaxID() int64 { return c.ctxIDs.max }

// NumContexts returns how many contexts the container holds: the sum of
// its shards' counts, each read under its shard's lock, as the native
// component sums its shards (a count, not a snapshot of every shard at
// once, while other threads create and release).
func (c *Container) NumContexts() int64 {
	var n int64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += int64(s.count)
		s.mu.Unlock()
	}
	return n
}

// SetMaxContexts caps the number of live contexts (0 lifts the cap); past it,
// NewContext and GetOrCreateContext fail with ErrLimit instead of letting a
// flood of remote messages exhaust memory. The cap holds for every creation
// that starts after it returns; one under way meanwhile is counted, never
// refused.
func (c *Container) SetMaxContexts(n int64) error {
	if n < 0 {
		return Errorf(ErrInvalidArgument, "max_contexts must be >= 0, got %d", n)
	}
	// Under every shard lock: whether a cap is set is the same for the
	// whole of any other holder's critical section, and the count starts
	// from the contexts stored now.
	for i := range c.shards {
		c.shards[i].mu.Lock()
	}
	if c.maxLive.Load() == 0 && n > 0 {
		var stored uint64
		for i := range c.shards {
			stored += uint64(c.shards[i].count)
		}
		c.live.recount(stored)
	}
	c.maxLive.Store(n)
	for i := range c.shards {
		c.shards[i].mu.Unlock()
	}
	return nil
}

// MaxContexts returns the cap on live contexts (0: none).
func (c *Container) MaxContexts() int64 { return c.maxLive.Load() }

// RefusedContexts returns how many contexts the cap has refused.
func (c *Container) RefusedContexts() int64 { return c.refused.Load() }

// SetHostDrop sets what runs a host's drop function when a record with a
// host value dies (nil: the values are forgotten).
func (c *Container) SetHostDrop(f HostDropFunc) {
	if f == nil {
		c.dropper.Store(nil)
		return
	}
	c.dropper.Store(&f)
}

// SetFanout sets who is told about releases (nil: nobody).
func (c *Container) SetFanout(n Fanout) {
	if n == nil {
		c.fanout.Store(nil)
		return
	}
	c.fanout.Store(&fanoutBox{n})
}

// reserve counts a context about to be created, or fails past the cap,
// before the creation takes an id: a refusal changes nothing. Without a cap
// nothing is counted (the reservation is empty).
func (c *Container) reserve() (reservation, error) {
	limit := c.maxLive.Load()
	if limit == 0 {
		return reservation{}, nil
	}
	r, ok := c.live.add(limit)
	if !ok {
		c.refused.Add(1)
		return reservation{}, Errorf(ErrLimit, "the container holds %d contexts, its limit (max_contexts); release some or raise the limit", limit)
	}
	return r, nil
}

// confirm makes a creation's reservation agree with the cap as it is now,
// under the lock of the shard it creates in (s.mu held, so no cap is set
// or lifted meanwhile): counted if a cap is set (a cap set, or counted
// again, since reserve counts it now, without refusing it), empty if none
// is.
func (c *Container) confirm(r reservation) reservation {
	if c.maxLive.Load() == 0 {
		return reservation{}
	}
	if !r.counted || !c.live.holds(r) {
		return c.live.force()
	}
	return r
}

// unstore takes n released contexts out of the count, if a cap is set; the
// lock of the shard they were stored in is held.
func (c *Container) unstore(n int) {
	if n > 0 && c.maxLive.Load() > 0 {
		c.live.sub(uint64(n))
	}
}

// NewContext creates a context with t's next context id (nextContextID)
// and makes it t's current context. It fails if t already has a current
// id (unless the container's clean-up reaped that context: reaped.go),
// past max_id, or past the cap; a failure changes nothing (the native
// component sets the current id before its overflow assert, and then
// aborts).
func (c *Container) NewContext(t *Thread) (*Context, error) {
	ctx, _, err := c.newContext(t, false)
	return ctx, err
}

// NewContextHandle is NewContext for the C ABI: it also returns a handle
// to the context, holding one reference.
func (c *Container) NewContextHandle(t *Thread) (uint64, error) {
	_, h, err := c.newContext(t, true)
	return h, err
}

func (c *Container) newContext(t *Thread, ref bool) (*Context, uint64, error) {
	if t.current != InvalidID {
		if !c.reapedAndGone(t.current) {
			return nil, 0, errAlreadyHasCtx
		}
	}
	res, err := c.reserve()
	if err != nil {
		return nil, 0, err
	}
	id, err := c.nextContextID(t)
	if err != nil {
		c.live.cancel(res)
		return nil, 0, err
	}
	s := c.shard(id)
	s.mu.Lock()
	res = c.confirm(res)
	// A get-or-create naming an id of this worker not issued yet may have
	// stored it first: keep that context, as the native emplace does (and
	// count it once).
	ctx, h, created, err := c.getOrCreateLocked(s, id, ref)
	if err != nil || !created {
		c.live.cancel(res)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, 0, err
	}
	t.current = id
	return ctx, h, nil
}

// nextContextID takes t's next context id: from its run, or from a new
// run, or, once the counter is in its last run before max_id, from the
// counter, one at a time. Reaching the last run ends every thread's run
// (their ids left are never issued), so that all threads find the ids
// exhausted at once, after every id of the last run, as natively.
func (c *Container) nextContextID(t *Thread) (int64, error) {
	if !c.runsOver.Load() {
		if t.runEpoch == c.epoch && t.runNext%ContextIDRun != 0 {
			id := t.runNext
			t.runNext++
			return id, nil
		}
		first, last := c.ctxIDs.takeRun()
		if !last {
			t.runNext, t.runEpoch = first+1, c.epoch
			return first, nil
		}
		c.runsOver.Store(true)
	}
	return c.ctxIDs.take()
}

// GetOrCreateContext returns the context stored under id, or stores a new
// one under it (a message from another worker naming a pass this worker has
// not seen). It does not touch any thread's current id.
func (c *Container) GetOrCreateContext(id int64) (*Context, error) {
	ctx, _, err := c.getOrCreate(id, false)
	return ctx, err
}

// GetOrCreateContextHandle is GetOrCreateContext for the C ABI: it returns
// a handle to the context, holding one reference.
func (c *Container) GetOrCreateContextHandle(id int64) (uint64, error) {
	_, h, err := c.getOrCreate(id, true)
	return h, err
}

func (c *Container) getOrCreate(id int64, ref bool) (*Context, uint64, error) {
	s := c.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, h, found, err := c.lookupLocked(s, id, ref)
	if found || err != nil {
		return ctx, h, err
	}
	res, err := c.reserve() // an existing context is never refused
	if err != nil {
		return nil, 0, err
	}
	ctx, h, err = c.create(s, id, ref)
	if err != nil {
		c.live.cancel(res)
	}
	return ctx, h, err
}

// getOrCreateLocked returns the context listed under id or creates it (the
// caller counted it live), with a referenced handle if ref; s.mu is held.
func (c *Container) getOrCreateLocked(s *indexShard, id int64, ref bool) (ctx *Context, h uint64, created bool, err error) {
	found := false
	if ctx, h, found, err = c.lookupLocked(s, id, ref); found || err != nil {
		return ctx, h, false, err
	}
	ctx, h, err = c.create(s, id, ref)
	return ctx, h, err == nil, err
}

// lookupLocked finds the context listed under id and touches it: with a
// referenced handle if ref, else its *Context; s.mu is held.
func (c *Container) lookupLocked(s *indexShard, id int64, ref bool) (ctx *Context, h uint64, found bool, err error) {
	r, idx := c.find(s, id)
	if r == nil {
		return nil, 0, false, nil
	}
	c.touch(r)
	if !ref {
		return c.contextOf(r, idx), 0, true, nil
	}
	if h, err = retain(r, idx); err != nil {
		return nil, 0, true, err
	}
	return nil, h, true, nil
}

// RetrieveContextIfPresent returns the context stored under id, or nil.
func (c *Container) RetrieveContextIfPresent(id int64) *Context {
	s := c.shard(id)
	s.mu.Lock()
	ctx, _, _, _ := c.lookupLocked(s, id, false)
	s.mu.Unlock()
	return ctx
}

// RetrieveContext returns the context stored under id, or ErrNotFound.
func (c *Container) RetrieveContext(id int64) (*Context, error) {
	if ctx := c.RetrieveContextIfPresent(id); ctx != nil {
		return ctx, nil
	}
	return nil, c.notFound(id)
}

// RetrieveContextHandle returns a handle, holding one reference, to the
// context stored under id; 0 and no error if there is none.
func (c *Container) RetrieveContextHandle(id int64) (uint64, error) {
	s := c.shard(id)
	s.mu.Lock()
	_, h, _, err := c.lookupLocked(s, id, true)
	s.mu.Unlock()
	return h, err
}

// IsValidContext returns nil if a context is stored under id, else ErrNotFound.
func (c *Container) IsValidContext(id int64) error {
	s := c.shard(id)
	s.mu.Lock()
	r, _ := c.find(s, id)
	s.mu.Unlock()
	if r == nil {
		return c.notFound(id)
	}
	return nil
}

// CurrentContext returns t's current context: ErrNoCurrentContext if t has
// no current id, ErrNotFound if that context was released (by any thread).
func (c *Container) CurrentContext(t *Thread) (*Context, error) {
	if t.current == InvalidID {
		return nil, errNoCurrentContext
	}
	if ctx := c.RetrieveContextIfPresent(t.current); ctx != nil {
		return ctx, nil
	}
	return nil, c.currentGone(t.current)
}

// CurrentContextHandle is CurrentContext for the C ABI, with a handle.
func (c *Container) CurrentContextHandle(t *Thread) (uint64, error) {
	if t.current == InvalidID {
		return 0, errNoCurrentContext
	}
	h, err := c.RetrieveContextHandle(t.current)
	if err == nil && h == 0 {
		err = c.currentGone(t.current)
	}
	return h, err
}

// NewAutogradMessageID returns the next autograd message id, or ErrExhausted.
func (c *Container) NewAutogradMessageID() (int64, error) { return c.msgIDs.take() }

// MessageIDBlock is how many message ids the C ABI reserves for a thread at
// once (NewAutogradMessageIDBlock), handing them out from its thread-local
// block without entering Go: a block costs one call into Go, spread over
// this many ids. It is also how far apart two threads' ids of one pass
// land, which a torch program can see (docs/torch-compat.md).
// include/distautograd.h states it as DAC_MESSAGE_ID_BLOCK (cmd/dacgen).
const MessageIDBlock = 4096

// NewAutogradMessageIDBlock reserves up to n consecutive message ids (n >= 1)
// and returns the first and how many; the C side hands them out per thread,
// in blocks of MessageIDBlock.
func (c *Container) NewAutogradMessageIDBlock(n int64) (first, count int64, err error) {
	if n < 1 {
		return 0, 0, Errorf(ErrInvalidArgument, "block size must be >= 1, got %d", n)
	}
	return c.msgIDs.takeBlock(n)
}

// ContextIDs returns the ids of the stored contexts, in no particular order.
func (c *Container) ContextIDs() []int64 {
	var ids []int64
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		c.each(s, func(r *Record, _ uint32) { ids = append(ids, r.ID.Load()) })
		s.mu.Unlock()
	}
	return ids
}
