package container

// Handles: what the C ABI and the host ask of a record through a handle
// (its context, its references, its host value), and the references held
// uncounted.

import "sync/atomic"

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
	if st&^stateUncounted != genState(gen)|1 {
		return false, PendingDrop{}, nil
	}
	// Under the shard's lock: the free list is the shard's.
	s := c.shard(r.ID.Load())
	s.mu.Lock()
	if !r.State.CompareAndSwap(st, genState(nextGen(gen))) {
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
// into h's count, state (its record's state word), each as one
// compare-and-swap that requires h's life (a reference whose holder drops
// it meanwhile is taken out again, without killing the record: Go, which
// calls it under the record's shard lock, decides after), and must not
// call into the container. Count says how many uncounted references there
// are now.
type UncountedRefs interface {
	Settle(h uint64, state *atomic.Uint64)
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
	r.State.Store(genState(gen))
	return nil
}
