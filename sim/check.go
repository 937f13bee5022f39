package sim

// After the run: settling the network, checking the properties the
// package comment lists, and the figures the report prints.

import (
	"fmt"
	"time"
)

// settle waits until no FanoutQueue has anything pending and none made progress
// between two looks (a delivery in flight queues more on its receiver).
func (s *sim) settle() error {
	deadline := time.Now().Add(s.cfg.SettleTimeout)
	last := int64(-1)
	for {
		var pending, progress int64
		for _, w := range s.workers {
			st := w.cl.Stats()
			pending += st.Pending
			progress += st.Sent + st.Retried + st.Failed + st.Dropped
		}
		progress += s.attempts.Load()
		if pending == 0 && progress == last {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the fan-out did not settle within %v: %d cleanup messages pending", s.cfg.SettleTimeout, pending)
		}
		last = progress
		time.Sleep(time.Millisecond)
	}
}

// check verifies the properties on every live worker (see the package
// comment), clearing what dead workers left behind on the way.
func (s *sim) check(res *Result) error {
	byID := make(map[int64]*pass, len(s.passes))
	distinct := map[edge]bool{}
	for i := range s.passes {
		if p := &s.passes[i]; p.ran {
			byID[p.id] = p
			clear(distinct)
			for _, e := range p.edges {
				distinct[e] = true
			}
			res.Edges += int64(len(distinct))
		}
	}
	reach := map[int64]map[uint16]bool{} // computed for passes with leftovers only
	reachable := func(p *pass, w uint16) bool {
		r, ok := reach[p.id]
		if !ok {
			r = s.reach(p)
			reach[p.id] = r
		}
		return r[w]
	}

	// 1. No live worker holds a released pass that the fan-out could reach.
	stranded := map[int64]map[uint16]bool{}
	for _, w := range s.live() {
		for _, id := range w.c.ContextIDs() {
			p := byID[id]
			switch {
			case p == nil:
				s.problem("worker %d holds context %d of no pass", w.id, id)
			case s.workers[p.origin].dead.Load():
				// Its origin died: ReleaseContextsOfWorker clears it below.
			case !p.released:
				s.problem("worker %d holds context %d whose live origin %d never released it", w.id, id, p.origin)
			case reachable(p, w.id):
				s.problem("worker %d still holds context %d, released by worker %d, reachable through live workers (edges %v)", w.id, id, p.origin, p.edges)
			default:
				if stranded[id] == nil {
					stranded[id] = map[uint16]bool{}
				}
				stranded[id][w.id] = true
				res.Stranded++
			}
		}
	}

	// 2. What dead origins left behind, ReleaseContextsOfWorker clears.
	for _, w := range s.live() {
		for _, d := range s.workers {
			if !d.dead.Load() {
				continue
			}
			n := w.c.ReleaseContextsOfWorker(uint16(d.id))
			res.Orphans += int64(n)
		}
	}
	if err := s.settle(); err != nil {
		return err
	}
	for _, w := range s.live() {
		for _, id := range w.c.ContextIDs() {
			if !stranded[id][w.id] {
				s.problem("worker %d holds context %d after ReleaseContextsOfWorker of the dead", w.id, id)
			}
		}
	}

	// 3. The stranded ones are what a host's reaper is for (releasing one
	// copy may clean others, through the fan-out).
	for _, w := range s.live() {
		if _, err := w.c.ReapIdleContexts(0); err != nil {
			return err
		}
	}
	if err := s.settle(); err != nil {
		return err
	}
	for _, w := range s.live() {
		if n := w.c.NumContexts(); n != 0 {
			s.problem("worker %d holds %d contexts at the end", w.id, n)
		}
	}
	return nil
}

// reach returns the live workers that a release by p's origin reaches: the
// origin, and whoever a reached live worker knows, through cleanup messages
// that were not lost.
func (s *sim) reach(p *pass) map[uint16]bool {
	next := map[uint16][]uint16{}
	for _, e := range p.edges {
		next[e.from] = append(next[e.from], e.to)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[uint16]bool{p.origin: true}
	queue := []uint16{p.origin}
	for len(queue) > 0 {
		w := queue[0]
		queue = queue[1:]
		if s.workers[w].dead.Load() {
			continue // it may have died before passing the cleanup on
		}
		for _, to := range next[w] {
			if _, lost := s.lost[msgKey{w, to, p.id}]; lost || seen[to] {
				continue
			}
			seen[to] = true
			queue = append(queue, to)
		}
	}
	for w := range seen {
		if s.workers[w].dead.Load() {
			delete(seen, w)
		}
	}
	return seen
}

func (s *sim) live() []*worker {
	var out []*worker
	for _, w := range s.workers {
		if !w.dead.Load() {
			out = append(out, w)
		}
	}
	return out
}

func (s *sim) figures(res *Result) {
	for _, w := range s.workers {
		st := w.cl.Stats()
		res.Cleanup.Sent += st.Sent
		res.Cleanup.Retried += st.Retried
		res.Cleanup.Failed += st.Failed
		res.Cleanup.Dropped += st.Dropped
		res.Cleanup.Skipped += st.Skipped
		res.Cleanup.Pending += st.Pending
	}
	res.Released = s.released.Load()
	res.RPCs = s.rpcs.Load()
	res.RPCLost = s.rpcLost.Load()
	res.RPCDuplicated = s.rpcDup.Load()
	res.RPCRefused = s.rpcRefused.Load()
	res.CleanupAttempts = s.attempts.Load()
	res.CleanupLost = s.cleanLost.Load()
	res.CleanupDelivered = s.delivered.Load()
	res.CleanupNoops = s.noops.Load()
	res.Duplicates = s.dups.Load()
	res.Delayed = s.delayed.Load()
	res.ToDead = s.dead.Load()
	s.mu.Lock()
	res.Lost = int64(len(s.lost))
	s.mu.Unlock()
}
