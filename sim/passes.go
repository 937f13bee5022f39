package sim

// The passes: the random RPC trees that origins start on the workers,
// run concurrently, with workers killed along the way.

import (
	"math/rand/v2"
	"sync"
	"time"

	"distautograd/container"
)

// job is one pass to run; victim, if not -1, is the worker that starts it
// and dies before releasing it (a crash in the backward pass).
type job struct{ pass, victim int }

// runPasses runs the passes on Concurrency goroutines, killing workers at
// evenly spaced passes, and returns how many ran and who was killed.
func (s *sim) runPasses() (int64, []int) {
	cfg := s.cfg
	victims := rand.New(rand.NewPCG(cfg.Seed, 0x6b696c6c)).Perm(cfg.Workers)[:cfg.Kill]
	var killed []int
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for j := range jobs {
				s.runPass(j)
			}
		})
	}
	deadline := time.Now().Add(cfg.Duration)
	n := 0
	for ; n < cfg.Passes; n++ {
		if cfg.Duration > 0 && n%64 == 0 && time.Now().After(deadline) {
			break
		}
		j := job{n, -1}
		if k := len(killed); k < len(victims) && n == (k+1)*cfg.Passes/(len(victims)+1) {
			j.victim = victims[k]
			killed = append(killed, victims[k])
		}
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	return int64(n), killed
}

// kill stops w: it answers nothing more, and what its FanoutQueue still had to
// send is lost with the process.
func (s *sim) kill(id int) {
	w := s.workers[id]
	w.dead.Store(true)
	w.cl.Close()
}

// hop is one planned RPC of a pass's tree.
type hop struct {
	dst      uint16
	f        fate
	children []hop
}

// plan draws the tree of RPCs below a worker at depth; it draws the same
// numbers whatever happens when the tree runs, so a pass's graph depends
// only on the seed and its number.
func (s *sim) plan(r *rand.Rand, from uint16, depth int) []hop {
	if depth >= s.cfg.MaxDepth {
		return nil
	}
	n := r.IntN(s.cfg.MaxFanout + 1)
	if depth == 0 {
		n = 1 + r.IntN(s.cfg.MaxFanout)
	}
	hops := make([]hop, n)
	for i := range hops {
		dst := uint16(r.IntN(s.cfg.Workers - 1))
		if dst >= from {
			dst++ // anyone but the sender
		}
		hops[i] = hop{dst: dst, f: s.decide(r)}
		hops[i].children = s.plan(r, dst, depth+1)
	}
	return hops
}

func (s *sim) runPass(j job) {
	i := j.pass
	r := s.rng(kindRPC, uint64(i), 0)
	o := uint16(r.IntN(s.cfg.Workers))
	if j.victim >= 0 {
		o = uint16(j.victim)
	}
	tree := s.plan(r, o, 0)
	if s.workers[o].dead.Load() {
		for s.workers[o].dead.Load() {
			o = uint16((int(o) + 1) % s.cfg.Workers) // a live one starts it instead
		}
		tree = s.plan(r, o, 0)
	}
	origin := s.workers[o]
	th := container.NewThread()
	ctx, err := origin.c.NewContext(th)
	if err != nil {
		s.problem("pass %d: NewContext on worker %d: %v", i, o, err)
		return
	}
	p := &s.passes[i]
	p.id, p.origin, p.ran = ctx.ID(), o, true
	s.passOf.Store(p.id, i)
	s.send(p, origin, ctx, tree)
	if j.victim >= 0 {
		s.kill(j.victim)
	}

	// The backward pass would run here; then the origin leaves its
	// `with context()` block, unless it died meanwhile.
	if origin.dead.Load() {
		return
	}
	if err := origin.c.ReleaseContext(th, p.id); err != nil {
		s.problem("pass %d: the origin's release failed: %v", i, err)
		return
	}
	p.released = true
	s.released.Add(1)
}

// hold delays a message as its fate says.
func (s *sim) hold(f fate) {
	if f.delay > 0 {
		s.delayed.Add(1)
		time.Sleep(f.delay)
	}
}

// send runs the hops from worker w, whose context of the pass is ctx.
func (s *sim) send(p *pass, w *worker, ctx *container.Context, hops []hop) {
	for _, h := range hops {
		if w.dead.Load() {
			return // a dead worker forwards nothing
		}
		s.rpcs.Add(1)
		ctx.AddKnownWorkerID(h.dst)
		p.edges = append(p.edges, edge{w.id, h.dst})
		s.hold(h.f)
		dst := s.workers[h.dst]
		if dst.dead.Load() {
			s.rpcRefused.Add(1)
			continue
		}
		if !h.f.ok {
			s.rpcLost.Add(1)
		}
		if h.f.deliveries == 0 {
			continue
		}
		if h.f.deliveries == 2 {
			s.rpcDup.Add(1)
		}
		var dctx *container.Context
		for range h.f.deliveries {
			c, err := dst.c.GetOrCreateContext(p.id)
			if err != nil {
				s.problem("GetOrCreateContext(%d) on worker %d: %v", p.id, h.dst, err)
				return
			}
			if dctx != nil && c != dctx {
				s.problem("a duplicated RPC made a second context %d on worker %d", p.id, h.dst)
			}
			dctx = c
			// The reply carries autograd metadata: the receiver knows the sender.
			dctx.AddKnownWorkerID(w.id)
		}
		p.edges = append(p.edges, edge{h.dst, w.id})
		// The receiver runs the RPC's function, which may forward the pass.
		s.send(p, dst, dctx, h.children)
	}
}
