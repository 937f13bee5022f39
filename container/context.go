package container

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Context is the state of one distributed autograd pass on this worker.
// Every method is safe for concurrent use: the context has its own lock,
// which is never held while the container's shard locks are taken.
// A Context stays readable after it was released from its container, for
// whoever still holds it (the native API hands out shared pointers).
type Context struct {
	id int64
	// owner keeps the container, and so the memory rec points into,
	// mapped while the context is reachable (mappings).
	owner *Container
	// rec is the context's record (records.go) while it has one: from its
	// creation until it is out of the container and unreferenced. Cleared,
	// under mu, before the record is recycled, so that nothing written
	// through a context that outlived its record lands in another's.
	rec atomic.Pointer[Record]

	mu      sync.Mutex
	workers []uint16            // known worker ids, in insertion order; small, so a slice
	sends   map[int64]uint64    // autograd message id -> host's send function
	recvs   map[int64]uint64    // autograd message id -> host's recv function
	workSet map[uint16]struct{} // index over workers once there are many
}

// manyWorkers is where looking a worker id up in the slice stops being cheaper
// than a map.
const manyWorkers = 32

func newContext(owner *Container, id int64) *Context { return &Context{id: id, owner: owner} }

// ID returns the context id.
func (c *Context) ID() int64 { return c.id }

// touch records a use for the reaper. (A store racing the record's
// recycling can only date its next context by a few milliseconds, to a
// moment it was being created: harmless.)
func (c *Context) touch() {
	if r := c.rec.Load(); r != nil {
		c.owner.touch(r)
	}
}

// touch records a use of r for the reaper. Only a later time is stored:
// C's lookups read a coarser clock, which may lag Go's by up to its
// resolution (csrc/clock.c).
func (c *Container) touch(r *Record) {
	if now := c.clock.now(); now > r.LastUsed.Load() {
		r.LastUsed.Store(now)
	}
}

// AddKnownWorkerID records that this pass sent an RPC to workerID, so that a
// release tells that worker to release its copy. Adding one twice is a no-op.
func (c *Context) AddKnownWorkerID(workerID uint16) {
	c.touch()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.workSet != nil {
		if _, ok := c.workSet[workerID]; ok {
			return
		}
		c.workSet[workerID] = struct{}{}
	} else if slices.Contains(c.workers, workerID) {
		return
	}
	c.workers = append(c.workers, workerID)
	if r := c.rec.Load(); r != nil { // for C's lookups: the worker, then the count
		if n := len(c.workers); n <= InlineWorkers {
			r.Workers[n-1] = workerID
		}
		r.NWorkers.Store(uint32(len(c.workers)))
	}
	if c.workSet == nil && len(c.workers) > manyWorkers {
		c.workSet = make(map[uint16]struct{}, 2*len(c.workers))
		for _, w := range c.workers {
			c.workSet[w] = struct{}{}
		}
	}
}

// KnownWorkerIDs returns a copy of the known worker ids, in the order added.
func (c *Context) KnownWorkerIDs() []uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.workers)
}

// NumKnownWorkerIDs returns how many known worker ids the context has.
func (c *Context) NumKnownWorkerIDs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.workers)
}

// AddSendFunction registers the host's send function fn (an opaque value)
// under autograd message id msgID; a second one under the same id is an error,
// as in the native component (which asserts).
func (c *Context) AddSendFunction(msgID int64, fn uint64) error {
	return c.addFunction(&c.sends, "send", msgID, fn)
}

// AddRecvFunction is AddSendFunction for receive functions.
func (c *Context) AddRecvFunction(msgID int64, fn uint64) error {
	return c.addFunction(&c.recvs, "recv", msgID, fn)
}

func (c *Context) addFunction(m *map[int64]uint64, kind string, msgID int64, fn uint64) error {
	c.touch()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := (*m)[msgID]; dup {
		return Errorf(ErrInvalidArgument, "a %s function is already registered for autograd message id: %d", kind, msgID)
	}
	if *m == nil {
		*m = make(map[int64]uint64)
	}
	(*m)[msgID] = fn
	return nil
}

// SendFunction returns the send function registered under msgID.
func (c *Context) SendFunction(msgID int64) (uint64, error) {
	return c.function(&c.sends, "send", msgID)
}

// RecvFunction returns the recv function registered under msgID.
func (c *Context) RecvFunction(msgID int64) (uint64, error) {
	return c.function(&c.recvs, "recv", msgID)
}

// The maps are passed by address and read under the lock: addFunction
// replaces a nil map, so the field itself is written under it.
func (c *Context) function(m *map[int64]uint64, kind string, msgID int64) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn, ok := (*m)[msgID]
	if !ok {
		// The native message for send; recv has no lookup there.
		return 0, &Error{ErrNotFound, fmt.Sprintf("Could not find %s function for autograd message id: %d", kind, msgID)}
	}
	return fn, nil
}

// SendFunctions returns a copy of the send functions, keyed by message id.
func (c *Context) SendFunctions() map[int64]uint64 { return c.copyFunctions(&c.sends) }

// RecvFunctions returns a copy of the recv functions, keyed by message id.
func (c *Context) RecvFunctions() map[int64]uint64 { return c.copyFunctions(&c.recvs) }

func (c *Context) copyFunctions(m *map[int64]uint64) map[int64]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int64]uint64, len(*m))
	for k, v := range *m {
		out[k] = v
	}
	return out
}

// FunctionCounts returns how many send and recv functions are registered.
func (c *Context) FunctionCounts() (sends, recvs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sends), len(c.recvs)
}
