package container

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// Container holds the contexts of one worker and hands out its ids. The C
// ABI keeps one per process (see Singleton); tests and simulations hold many.
// Every method is safe for concurrent use.
//
// Locking: contexts live in shards, each a map under its own RWMutex, picked
// by the low bits of the id (consecutive ids land in different shards, so
// threads creating contexts do not contend). A method takes at most one shard
// lock at a time and never calls out (to a Notifier, to a context's lock)
// while holding it, so no lock order exists to get wrong.
//
// Why shards and not sync.Map: both were measured on the mixed workload of
// BenchmarkMaps (new+release, retrieve, get-or-create from 1 to 16 goroutines);
// sync.Map allocates on every store and is slower for the insert/delete churn
// that every pass causes, while reads are equally cheap with an RLock on an
// uncontended shard. The shard count follows the native component: the next
// power of two at or above twice the core count.
type Container struct {
	worker   int16 // as the native component stores it: see Init's quirk
	workerID int64 // as given to New, in [0, 65535]
	ctxIDs   counter
	msgIDs   counter

	shards []shard
	mask   int64

	live     atomic.Int64 // contexts stored now
	maxLive  atomic.Int64 // cap on live contexts; 0: none
	refused  atomic.Int64 // contexts refused by the cap
	notifier atomic.Pointer[notifierBox]
}

type shard struct {
	mu sync.RWMutex
	m  map[int64]*Context
	_  [64 - 32]byte // keep neighbouring shard locks off one cache line
}

// Notifier is told, outside every lock, which known workers of a released
// context must release their copies. It must not block: see Cleanup for the
// queueing, retrying implementation.
type Notifier interface {
	NotifyRelease(contextID int64, workers []uint16)
}

type notifierBox struct{ n Notifier }

// Option configures a Container made by New.
type Option func(*Container)

// WithShards sets the number of shards (rounded up to a power of two).
func WithShards(n int) Option {
	return func(c *Container) { c.setShards(n) }
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

// DefaultShards is the native component's shard count: the smallest power of
// two at or above twice the number of cores.
func DefaultShards() int { return max(1, 2*runtime.NumCPU()) }

// New returns an empty container for workerID, which must be in [0, 65535].
func New(workerID int64, opts ...Option) (*Container, error) {
	if workerID < 0 || workerID > MaxWorkerID {
		return nil, errWorkerRange
	}
	c := &Container{worker: int16(workerID), workerID: workerID}
	c.ctxIDs.reset(workerID, "context")
	c.msgIDs.reset(workerID, "autograd message")
	c.setShards(DefaultShards())
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

func (c *Container) setShards(n int) {
	n = 1 << bits.Len(uint(max(1, n)-1))
	c.shards = make([]shard, n)
	for i := range c.shards {
		c.shards[i].m = make(map[int64]*Context)
	}
	c.mask = int64(n - 1)
}

func (c *Container) shard(id int64) *shard { return &c.shards[id&c.mask] }

// WorkerID returns the worker id given to New, in [0, 65535]. (The native
// getWorkerId returns it as an int16_t: int16(WorkerID()).)
func (c *Container) WorkerID() int64 { return c.workerID }

// MaxID returns max_id of this worker (negative for worker ids >= 32768).
func (c *Container) MaxID() int64 { return c.ctxIDs.max }

// NumContexts returns how many contexts the container holds.
func (c *Container) NumContexts() int64 { return c.live.Load() }

// SetMaxContexts caps the number of live contexts (0 lifts the cap); past it,
// NewContext and GetOrCreateContext fail with ErrLimit instead of letting a
// flood of remote messages exhaust memory.
func (c *Container) SetMaxContexts(n int64) error {
	if n < 0 {
		return Errorf(ErrInvalidArgument, "max_contexts must be >= 0, got %d", n)
	}
	c.maxLive.Store(n)
	return nil
}

// MaxContexts returns the cap on live contexts (0: none).
func (c *Container) MaxContexts() int64 { return c.maxLive.Load() }

// RefusedContexts returns how many contexts the cap has refused.
func (c *Container) RefusedContexts() int64 { return c.refused.Load() }

// SetNotifier sets who is told about releases (nil: nobody).
func (c *Container) SetNotifier(n Notifier) {
	if n == nil {
		c.notifier.Store(nil)
		return
	}
	c.notifier.Store(&notifierBox{n})
}

// reserve counts one more live context, or fails past the cap.
func (c *Container) reserve() error {
	n := c.live.Add(1)
	if limit := c.maxLive.Load(); limit > 0 && n > limit {
		c.live.Add(-1)
		c.refused.Add(1)
		return Errorf(ErrLimit, "the container holds %d contexts, its limit (max_contexts); release some or raise the limit", limit)
	}
	return nil
}

// NewContext creates a context with the next context id and makes it t's
// current context. It fails if t already has a current id, past max_id, or
// past the cap; a failure changes nothing (the native component sets the
// current id before its overflow assert, and then aborts).
func (c *Container) NewContext(t *Thread) (*Context, error) {
	if t.current != InvalidID {
		return nil, errAlreadyHasCtx
	}
	if err := c.reserve(); err != nil {
		return nil, err
	}
	id, err := c.ctxIDs.take()
	if err != nil {
		c.live.Add(-1)
		return nil, err
	}
	ctx := newContext(id)
	s := c.shard(id)
	s.mu.Lock()
	// A get-or-create naming an id of this worker not issued yet may have
	// stored it first: keep that context, as the native emplace does (and
	// count it once).
	if prev := s.m[id]; prev != nil {
		ctx = prev
		ctx.touch()
		c.live.Add(-1)
	} else {
		s.m[id] = ctx
	}
	s.mu.Unlock()
	t.current = id
	return ctx, nil
}

// GetOrCreateContext returns the context stored under id, or stores a new
// one under it (a message from another worker naming a pass this worker has
// not seen). It does not touch any thread's current id.
func (c *Container) GetOrCreateContext(id int64) (*Context, error) {
	s := c.shard(id)
	s.mu.RLock()
	ctx := s.m[id]
	s.mu.RUnlock()
	if ctx != nil {
		ctx.touch()
		return ctx, nil
	}
	if err := c.reserve(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if ctx = s.m[id]; ctx == nil {
		ctx = newContext(id)
		s.m[id] = ctx
		s.mu.Unlock()
		return ctx, nil
	}
	s.mu.Unlock()
	c.live.Add(-1) // another thread created it first
	ctx.touch()
	return ctx, nil
}

// RetrieveContextIfPresent returns the context stored under id, or nil.
func (c *Container) RetrieveContextIfPresent(id int64) *Context {
	s := c.shard(id)
	s.mu.RLock()
	ctx := s.m[id]
	s.mu.RUnlock()
	if ctx != nil {
		ctx.touch()
	}
	return ctx
}

// RetrieveContext returns the context stored under id, or ErrNotFound.
func (c *Container) RetrieveContext(id int64) (*Context, error) {
	if ctx := c.RetrieveContextIfPresent(id); ctx != nil {
		return ctx, nil
	}
	return nil, errNotFound(id)
}

// IsValidContext returns nil if a context is stored under id, else ErrNotFound.
func (c *Container) IsValidContext(id int64) error {
	s := c.shard(id)
	s.mu.RLock()
	_, ok := s.m[id]
	s.mu.RUnlock()
	if !ok {
		return errNotFound(id)
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
	return nil, errCurrentGone
}

// ReleaseContext removes the context stored under id (ErrNotFound if none),
// resets t's current id if it is id (t may be nil: no thread), and tells the
// Notifier about its known workers. Other threads keep their stale ids.
func (c *Container) ReleaseContext(t *Thread, id int64) error {
	if !c.ReleaseContextIfPresent(t, id) {
		return errNotFound(id)
	}
	return nil
}

// ReleaseContextIfPresent is ReleaseContext with a missing id a silent no-op
// (a cleanup message may arrive twice); it reports whether it released.
func (c *Container) ReleaseContextIfPresent(t *Thread, id int64) bool {
	s := c.shard(id)
	s.mu.Lock()
	ctx, ok := s.m[id]
	if ok {
		delete(s.m, id)
	}
	s.mu.Unlock()
	if !ok {
		return false
	}
	c.live.Add(-1)
	if t != nil && t.current == id {
		t.current = InvalidID
	}
	c.notify(ctx)
	ctx.leftContainer()
	return true
}

func (c *Container) notify(ctx *Context) {
	box := c.notifier.Load()
	if box == nil {
		return
	}
	if workers := ctx.KnownWorkerIDs(); len(workers) > 0 {
		box.n.NotifyRelease(ctx.id, workers)
	}
}

// releaseWhere releases every context for which keep returns false, fanning
// out as a release does, and returns how many it released.
func (c *Container) releaseWhere(drop func(*Context) bool) int {
	released := 0
	var batch []*Context
	for i := range c.shards {
		s := &c.shards[i]
		batch = batch[:0]
		s.mu.Lock()
		for id, ctx := range s.m {
			if drop(ctx) {
				delete(s.m, id)
				batch = append(batch, ctx)
			}
		}
		s.mu.Unlock()
		c.live.Add(-int64(len(batch)))
		for _, ctx := range batch {
			c.notify(ctx)
			ctx.leftContainer()
		}
		released += len(batch)
	}
	return released
}

// ReleaseContextsOfWorker releases every context created by originWorker
// (context_id >> 48): what a worker that died mid-pass left behind here,
// which no cleanup message will ever reach. It returns how many it released.
func (c *Container) ReleaseContextsOfWorker(originWorker int) (int, error) {
	if originWorker < 0 || originWorker > MaxWorkerID {
		return 0, errWorkerRange
	}
	return c.releaseWhere(func(ctx *Context) bool { return OriginWorker(ctx.id) == originWorker }), nil
}

// ReapIdleContexts releases every context not used (created, retrieved,
// changed) for at least idleMs milliseconds, with a resolution of clockTick,
// and returns how many it released.
func (c *Container) ReapIdleContexts(idleMs int64) (int, error) {
	if idleMs < 0 {
		return 0, Errorf(ErrInvalidArgument, "max_idle_ms must be >= 0, got %d", idleMs)
	}
	now := coarseNow()
	return c.releaseWhere(func(ctx *Context) bool { return now-ctx.lastUsed.Load() >= idleMs }), nil
}

// NewAutogradMessageID returns the next autograd message id, or ErrExhausted.
func (c *Container) NewAutogradMessageID() (int64, error) { return c.msgIDs.take() }

// NewAutogradMessageIDBlock reserves up to n consecutive message ids (n >= 1)
// and returns the first and how many; the C side hands them out per thread.
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
		s.mu.RLock()
		for id := range s.m {
			ids = append(ids, id)
		}
		s.mu.RUnlock()
	}
	return ids
}
