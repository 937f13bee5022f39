package container

import "fmt"

// The ids the container's own clean-up released (ReapIdleContexts,
// ReleaseContextsOfWorker), kept so that what a thread still holds as its
// current id can be recognised as gone for that reason: such a thread may
// start a new pass (NewContext), releasing the id resets it, and a lookup of
// it says why it failed. Natively nothing releases a context behind its
// pass's back, so a stale current id keeps its native meaning ("Already have
// an autograd context id for this thread.") for every other release.
//
// Each shard keeps the ids of its own contexts, under its lock: a reap
// holds that lock already, and only a call that fails pays a lookup (a
// creation on a thread whose current id is set fails natively). Nothing
// that succeeds reads the record. An id stays reaped if a late message of
// its pass stores it again: while stored it is found as any other, and
// its thread cannot start a new pass over it; once released again, by any
// means, it counts as reaped again. The most recent reapedPerShard(shards)
// of each shard are kept: a thread whose current context was reaped long
// ago, after that many others of its shard, gets the native answers.

// ReapedIDsKept is how many reaped ids the container keeps in all, spread
// over its shards; each keeps at least ReapedIDsMinPerShard (the header's
// DAC_REAPED_IDS_KEPT and DAC_REAPED_IDS_MIN_PER_SHARD, cmd/dacgen).
const (
	ReapedIDsKept        = 1 << 16
	ReapedIDsMinPerShard = 256
)

func reapedPerShard(shardBits uint) int { return max(ReapedIDsMinPerShard, ReapedIDsKept>>shardBits) }

// reapReason says what released a context: >= 0, the reaper, with its
// max_idle_ms; < 0, the release of the contexts of worker -1-r.
type reapReason int64

func reasonOfWorker(w uint16) reapReason { return reapReason(-1 - int64(w)) }

func (r reapReason) String() string {
	if r >= 0 {
		return fmt.Sprintf("distautograd: it was reaped by dac_reap_idle_contexts, unused for %d ms or more", int64(r))
	}
	return fmt.Sprintf("distautograd: it was released by dac_release_contexts_of_worker(%d), which clears what a dead worker left", -1-int64(r))
}

type reapedEntry struct {
	why reapReason
	seq uint64 // its place in ring, so that an id reaped again is not evicted early
}

// reapedIDs is one shard's record (its lock held for every method).
type reapedIDs struct {
	ids  map[int64]reapedEntry
	ring []int64 // ids in the order reaped; the oldest is evicted past its length
	seq  uint64  // how many were added
}

func (r *reapedIDs) add(id int64, why reapReason, keep int) {
	if r.ring == nil {
		r.ids = map[int64]reapedEntry{}
		r.ring = make([]int64, 0, min(keep, 64))
	}
	if len(r.ring) < keep {
		r.ring = append(r.ring, id)
	} else {
		slot := int(r.seq % uint64(keep))
		if old := r.ring[slot]; r.ids[old].seq == r.seq-uint64(keep) {
			delete(r.ids, old)
		}
		r.ring[slot] = id
	}
	r.ids[id] = reapedEntry{why, r.seq}
	r.seq++
}

// reaped returns why the context of id was reaped, if it was (whether or
// not something stored it again since: callers know it is not stored).
func (c *Container) reaped(id int64) (reapReason, bool) {
	s := c.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reapedLocked(id)
}

// reapedAndGone reports whether id was reaped and is not stored now: a
// thread whose current id it is may start a new pass.
func (c *Container) reapedAndGone(id int64) bool {
	s := c.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, reaped := s.reapedLocked(id)
	if reaped {
		r, _ := c.find(s, id)
		return r == nil
	}
	return false
}

func (s *indexShard) reapedLocked(id int64) (reapReason, bool) {
	if s.reapedIDs == nil {
		return 0, false
	}
	e, ok := s.reapedIDs.ids[id]
	return e.why, ok
}

// notFound is the native "Could not find autograd context with id", with
// why when the container's own clean-up released it.
func (c *Container) notFound(id int64) error {
	if why, ok := c.reaped(id); ok {
		return &Error{ErrNotFound, fmt.Sprintf("Could not find autograd context with id: %d (%s)", id, why)}
	}
	return errNotFound(id)
}

// NotFoundError is the error of a lookup of id that found nothing: the
// native "Could not find autograd context with id", saying why when the
// container's own clean-up released it.
func (c *Container) NotFoundError(id int64) error { return c.notFound(id) }

// currentGone is the native error for a current id whose context is gone,
// with why when the container's own clean-up released it.
func (c *Container) currentGone(id int64) error {
	if why, ok := c.reaped(id); ok {
		return &Error{ErrNotFound, fmt.Sprintf("%s (context %d: %s)", MsgCurrentGone, id, why)}
	}
	return errCurrentGone
}
