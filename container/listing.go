package container

// Listings: every context stored, for a host that wants to see what its
// worker holds (and for what looks after contexts whose pass went quiet),
// without touching any of them: a listing is not a use, so it never keeps
// a context from the reaper.

// ListHandles takes a reference to each context stored, up to max of
// them, and returns their handles and how many contexts it found stored in
// all (more than max: the caller asks again with more room). Each shard is
// read at one moment, under its lock; the shards one after another. A
// context whose references are at MaxRefs is left out, neither listed nor
// counted.
func (c *Container) ListHandles(max int) ([]uint64, int) {
	var hs []uint64
	total := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		c.each(s, func(r *Record, idx uint32) {
			if len(hs) >= max {
				total++
				return
			}
			if h, err := retain(r, idx); err == nil {
				hs = append(hs, h)
				total++
			}
		})
		s.mu.Unlock()
	}
	return hs, total
}

// HandleTimes returns, for a live handle, the coarse clock's milliseconds
// when its context was stored and when it was last used (created,
// retrieved or changed), and the clock now.
func (c *Container) HandleTimes(h uint64) (born, lastUsed, now int64, err error) {
	r, idx, gen := c.record(h)
	if r == nil || !referenced(r.State.Load(), gen) {
		return 0, 0, 0, errBadHandle(h)
	}
	born, lastUsed = c.recs.bornSlot(idx).Load(), r.LastUsed.Load()
	// Still the same life: a record that died and was reused in between
	// has another generation now, and what was read may be the next one's.
	if !referenced(r.State.Load(), gen) {
		return 0, 0, 0, errBadHandle(h)
	}
	return born, lastUsed, c.clock.now(), nil
}
