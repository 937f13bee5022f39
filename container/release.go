package container

// Releases: a context's removal from the container by id (with the
// Fanout told of its known workers), and the bulk releases, by origin
// worker and by idle time.

import "slices"

// ReleaseContext removes the context stored under id (ErrNotFound if none),
// resets t's current id if it is id (t may be nil: no thread), and tells the
// Fanout about its known workers. Other threads keep their stale ids. A
// context the container's clean-up reaped (reaped.go) is not found, and
// t's current id is reset if it is id: the thread is done with that pass.
func (c *Container) ReleaseContext(t *Thread, id int64) error {
	if !c.ReleaseContextIfPresent(t, id) {
		return c.notFound(id)
	}
	return nil
}

// ReleaseContextIfPresent is ReleaseContext with a missing id a silent no-op
// (a cleanup message may arrive twice); it reports whether it released.
func (c *Container) ReleaseContextIfPresent(t *Thread, id int64) bool {
	return c.ReleaseContextWithWorkers(t, id, nil)
}

// ReleaseContextWithWorkers is ReleaseContextIfPresent that first adds
// workers to the context's known workers, so that the fan-out tells them
// too: for a host that records the workers of a pass itself.
func (c *Container) ReleaseContextWithWorkers(t *Thread, id int64, workers []uint16) bool {
	released, d, n := c.ReleaseContextWithWorkersDeferred(t, id, workers)
	c.RunNotice(n, workers)
	c.RunDrop(d)
	return released
}

// ReleaseContextWithWorkersDeferred is ReleaseContextWithWorkers that
// leaves two things to the caller, to run in this order: telling the
// Fanout (RunNotice), which may run the host's code on this thread, so
// that a host that keeps t's state itself stores it first; and the host
// drop of a context that died (RunDrop), which the C ABI runs after its
// call into Go has returned, sparing a call from Go back into C on every
// release.
func (c *Container) ReleaseContextWithWorkersDeferred(t *Thread, id int64, workers []uint16) (released bool, d PendingDrop, n PendingNotice) {
	s := c.shard(id)
	s.mu.Lock()
	r, idx := c.find(s, id)
	var ctx *Context
	if r != nil {
		ctx = c.recs.ctxSlot(idx).Load()
		var died bool
		d, died = c.unlist(s, r, idx)
		c.unstore(1)
		if ctx == nil && !died && len(workers) > 0 {
			// Handles still refer to it: the workers go into its known
			// workers, where they read them.
			ctx = c.contextOf(r, idx)
		}
	}
	reapedCurrent := false
	if r == nil && t != nil && t.current == id {
		_, reapedCurrent = s.reapedLocked(id)
	}
	s.mu.Unlock()
	if r == nil {
		if reapedCurrent {
			t.current = InvalidID
		}
		return false, PendingDrop{}, PendingNotice{}
	}
	if t != nil && t.current == id {
		t.current = InvalidID
	}
	if ctx != nil {
		for _, w := range workers {
			ctx.AddKnownWorkerID(w)
		}
	}
	return true, d, PendingNotice{id: id, ctx: ctx, tell: true}
}

// PendingNotice is what a release leaves the Fanout to be told
// (ReleaseContextWithWorkersDeferred); the zero PendingNotice tells nothing.
// It holds no workers: a slice in it would make Go's escape analysis move
// the C ABI's stack buffer of them to the heap (the analysis follows a
// struct as a whole, and ctx escapes).
type PendingNotice struct {
	id   int64
	ctx  *Context // the workers are its known workers, workers added
	tell bool
}

// RunNotice tells the Fanout what n holds, on the calling thread: the known
// workers of n's context, or if it had no *Context, workers, the release's.
func (c *Container) RunNotice(n PendingNotice, workers []uint16) {
	switch {
	case !n.tell:
	case n.ctx != nil:
		c.notify(n.id, n.ctx, nil, noWorker)
	default:
		c.notify(n.id, nil, workers, noWorker)
	}
}

// noWorker is notify's skip when it skips no worker: no worker id is
// negative.
const noWorker = -1

// notify hands a released context's known workers, and extra ones (for a
// context with no *Context: it had none), to the fan-out, but for worker
// skip (a dead one: no message can reach it). ctx may be nil.
func (c *Container) notify(id int64, ctx *Context, extra []uint16, skip int) {
	box := c.fanout.Load()
	if box == nil {
		return
	}
	var workers []uint16
	if ctx != nil {
		workers = ctx.KnownWorkerIDs()
	}
	if ctx == nil && skip == noWorker && distinct(extra) {
		// A release's usual case (torch's: the workers come with the
		// call): extra as it is, not copied.
		workers = extra
	} else {
		for _, w := range extra {
			if !slices.Contains(workers, w) {
				workers = append(workers, w)
			}
		}
	}
	if skip != noWorker {
		workers = slices.DeleteFunc(workers, func(w uint16) bool { return int(w) == skip })
	}
	if len(workers) == 0 {
		return
	}
	if q, ok := box.n.(*FanoutQueue); ok {
		q.Release(id, workers) // which keeps none of workers: it may be the caller's, on its stack
	} else {
		box.n.Release(id, slices.Clone(workers))
	}
}

// distinct reports whether ws holds no worker twice.
func distinct(ws []uint16) bool {
	for i, w := range ws {
		if slices.Contains(ws[:i], w) {
			return false
		}
	}
	return true
}

// releaseWhere releases every context for which match returns true, fanning
// out as a release does but to worker skip (noWorker: none), records their
// ids as reaped for why (reaped.go), and returns how many it released.
func (c *Container) releaseWhere(why reapReason, skip int, match func(*Record) bool) int {
	type released1 struct {
		id  int64
		ctx *Context // nil: it had none, so no known workers either
	}
	released := 0
	var batch []released1
	var dead []PendingDrop
	for i := range c.shards {
		s := &c.shards[i]
		batch, dead = batch[:0], dead[:0]
		s.mu.Lock()
		c.each(s, func(r *Record, idx uint32) {
			if match(r) {
				id := r.ID.Load()
				batch = append(batch, released1{id, c.recs.ctxSlot(idx).Load()})
				d, _ := c.unlist(s, r, idx)
				dead = append(dead, d)
				if s.reapedIDs == nil {
					s.reapedIDs = &reapedIDs{}
				}
				s.reapedIDs.add(id, why, reapedPerShard(c.shardBits))
			}
		})
		c.unstore(len(batch))
		s.mu.Unlock()
		for _, b := range batch {
			c.notify(b.id, b.ctx, nil, skip)
		}
		for _, d := range dead {
			c.RunDrop(d)
		}
		released += len(batch)
	}
	return released
}

// ReleaseContextsOfWorker releases every context created by originWorker
// (context_id >> 48): what a worker that died mid-pass left behind here,
// which no cleanup message will ever reach. It tells their other known
// workers, as a release does, but not originWorker itself: it is gone, and
// a message to it could only fail, after every retry. It returns how many
// it released.
func (c *Container) ReleaseContextsOfWorker(originWorker uint16) int {
	return c.releaseWhere(reasonOfWorker(originWorker), int(originWorker), func(r *Record) bool { return OriginWorker(r.ID.Load()) == originWorker })
}

// ReapIdleContexts releases every context not used (created, retrieved,
// changed) for at least idleMs milliseconds, with a resolution of clockResolution,
// and returns how many it released.
func (c *Container) ReapIdleContexts(idleMs int64) (int, error) {
	if idleMs < 0 {
		return 0, Errorf(ErrInvalidArgument, "max_idle_ms must be >= 0, got %d", idleMs)
	}
	now := c.clock.now()
	return c.releaseWhere(reapReason(idleMs), noWorker, func(r *Record) bool { return max(now-r.LastUsed.Load(), 0) >= idleMs }), nil
}
