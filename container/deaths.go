package container

// Deaths: a record's release out of the index, its death once no reference
// is left, its recycling into its shard's free list, and the host's drop
// of its value.

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
			next = genState(nextGen(stateGen(st)))
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
		(*u).Settle(Handle(idx, gen), &r.State)
	}
	for {
		st := r.State.Load()
		if stateGen(st) != gen || stateRefs(st) != 0 {
			return PendingDrop{}, false // referenced: its last reference goes through Go (UnrefLast)
		}
		if r.State.CompareAndSwap(st, genState(nextGen(gen))) {
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
