// Package sim acts out the release fan-out of many workers in one process,
// to check that every pass is cleaned up everywhere it went, whatever the
// network does.
//
// Each simulated worker is its own container.Container with its own
// container.FanoutQueue as Fanout. An in-memory transport joins them; it
// loses, delays and duplicates messages, and workers get killed mid-run.
// A pass is a random tree of RPCs: an origin creates a context
// (NewContext), sends RPCs along chains and fans, and each receiver takes
// the pass up (GetOrCreateContext) and may forward it further. On every hop
// the sender's context learns the receiver (AddKnownWorkerID) and, because
// the reply carries autograd metadata as torch's responses do, the
// receiver's context learns the sender. When the tree is done the origin
// releases its context; the cleanup messages travel through the same
// transport and a receiving worker calls ReleaseContextIfPresent, which fans
// out to its own known workers.
//
// After the run settles (every FanoutQueue flushed, the transport quiet) Run
// checks, for every live worker:
//
//   - it holds no context of a pass that its (live) origin released, unless
//     every path of the pass's graph from the origin to it runs through a
//     dead worker or a cleanup message that was given up on or dropped
//     ("stranded": the native component leaks those too);
//   - a duplicated cleanup never released anything (release-if-present
//     twice is harmless);
//   - after ReleaseContextsOfWorker(dead) for every dead worker, only
//     stranded contexts are left, and after reaping those, nothing.
//
// What happens to a message depends only on the seed and on the message
// (pass, hop, or sender, receiver, context id and attempt), and the graph
// of a pass only on the seed and the pass's number, so without kills two
// runs with the same seed report the same figures; kills depend on timing
// (which messages are in flight when a worker dies).
//
// go test runs a modest simulation. To run it large:
//
//	go run ./cmd/dacsim -workers 1024 -passes 200000
//
// and see `go run ./cmd/dacsim -h` for the network's faults.
package sim

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"distautograd/container"
)

// Config describes a simulation; zero fields take the defaults noted.
type Config struct {
	Workers     int           // simulated workers, each its own container; default 64
	Passes      int           // passes to run; default 1000
	Duration    time.Duration // stop starting passes after this long; 0: no limit
	Drop        float64       // probability that a message is lost (the request, or only the reply)
	Dup         float64       // probability that a message is delivered twice
	Delay       float64       // probability that a message is held up
	MaxDelay    time.Duration // longest hold-up; default 1ms
	Kill        int           // workers killed during the run, at most Workers-2
	Seed        uint64        // seeds everything random
	Concurrency int           // passes in flight at once; default 4*GOMAXPROCS
	MaxFanout   int           // most RPCs one worker sends in one pass; default 3
	MaxDepth    int           // longest chain of forwarded RPCs; default 3
	// Cleanup tunes every worker's fan-out; zero fields take the sim's
	// defaults: the native 21 attempts, but backoffs of 50µs to 2ms so that
	// giving up on a dead worker takes tens of milliseconds, and 2 senders.
	Cleanup container.CleanupOptions
	// SettleTimeout bounds each wait for the fan-out to go quiet; default 2m.
	SettleTimeout time.Duration

	noRelay bool // tests: receivers ignore cleanup messages (a broken fan-out)
}

func (c Config) withDefaults() Config {
	if c.Workers <= 0 {
		c.Workers = 64
	}
	c.Workers = min(c.Workers, container.MaxWorkerID+1)
	if c.Passes <= 0 {
		c.Passes = 1000
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = time.Millisecond
	}
	c.Kill = max(0, min(c.Kill, c.Workers-2))
	if c.Concurrency <= 0 {
		c.Concurrency = 4 * runtime.GOMAXPROCS(0)
	}
	if c.MaxFanout <= 0 {
		c.MaxFanout = 3
	}
	if c.MaxDepth <= 0 {
		c.MaxDepth = 3
	}
	if c.Cleanup.InitialBackoff <= 0 {
		c.Cleanup.InitialBackoff = 50 * time.Microsecond
	}
	if c.Cleanup.MaxBackoff <= 0 {
		c.Cleanup.MaxBackoff = 2 * time.Millisecond
	}
	if c.Cleanup.Senders <= 0 {
		c.Cleanup.Senders = 2
	}
	if c.SettleTimeout <= 0 {
		c.SettleTimeout = 2 * time.Minute
	}
	return c
}

// Result is what a simulation did and found.
type Result struct {
	Config Config // with the defaults filled in

	Passes   int64 // passes run
	Released int64 // passes their origin released (the others' origin died)

	RPCs          int64 // RPC messages sent along the pass graphs
	Edges         int64 // distinct known-worker relations they made (a context knows a worker)
	RPCLost       int64 // of which lost: the request, or the reply only
	RPCDuplicated int64 // of which delivered twice
	RPCRefused    int64 // of which sent to a dead worker

	Cleanup          container.CleanupStats // every worker's fan-out, summed
	CleanupAttempts  int64                  // calls of the SendFuncs
	CleanupLost      int64                  // attempts the transport lost (then retried)
	CleanupDelivered int64                  // deliveries to live workers, duplicates included
	CleanupNoops     int64                  // deliveries that found nothing to release
	Duplicates       int64                  // cleanup messages delivered twice
	Delayed          int64                  // messages of either kind held up
	ToDead           int64                  // cleanup attempts sent to a dead worker

	Killed   []int // the workers killed, in order
	Lost     int64 // cleanup messages to live workers given up on or dropped
	Orphans  int64 // contexts of dead origins that ReleaseContextsOfWorker cleared
	Stranded int64 // contexts stranded behind a dead worker or a lost cleanup, then reaped

	Wall   time.Duration // the whole run, checks included
	Settle time.Duration // waiting for the fan-out to go quiet after the last pass
}

// Print writes the figures, one per line.
func (r *Result) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "workers %d, passes %d (released %d), concurrency %d, seed %d\n", c.Workers, r.Passes, r.Released, c.Concurrency, c.Seed)
	fmt.Fprintf(w, "network: drop %.3g, dup %.3g, delay %.3g (up to %v), kills %d %v\n", c.Drop, c.Dup, c.Delay, c.MaxDelay, len(r.Killed), r.Killed)
	fmt.Fprintf(w, "RPC messages: %d (lost %d, duplicated %d, to dead workers %d), known-worker relations %d\n", r.RPCs, r.RPCLost, r.RPCDuplicated, r.RPCRefused, r.Edges)
	s := r.Cleanup
	fmt.Fprintf(w, "cleanup messages: sent %d, retried %d, failed %d, dropped %d, skipped %d, pending %d\n", s.Sent, s.Retried, s.Failed, s.Dropped, s.Skipped, s.Pending)
	fmt.Fprintf(w, "cleanup transport: attempts %d, lost %d, to dead workers %d, delivered %d (no-ops %d), duplicates %d\n", r.CleanupAttempts, r.CleanupLost, r.ToDead, r.CleanupDelivered, r.CleanupNoops, r.Duplicates)
	fmt.Fprintf(w, "delayed messages: %d\n", r.Delayed)
	fmt.Fprintf(w, "cleanup messages to live workers given up on or dropped: %d\n", r.Lost)
	fmt.Fprintf(w, "left behind: %d contexts of dead origins (cleared by ReleaseContextsOfWorker), %d stranded (reaped)\n", r.Orphans, r.Stranded)
	fmt.Fprintf(w, "wall time %v (settling %v), %.0f passes/s\n", r.Wall.Round(time.Millisecond), r.Settle.Round(time.Millisecond), float64(r.Passes)/r.Wall.Seconds())
}

// worker is one simulated process.
type worker struct {
	id   uint16
	c    *container.Container
	cl   *container.FanoutQueue
	dead atomic.Bool

	mu       sync.Mutex
	attempts map[msgKey]int // cleanup messages in flight: attempts so far
}

// msgKey names one cleanup message: src tells dst to release context id.
type msgKey struct {
	src, dst uint16
	id       int64
}

// edge is a known-worker relation of a pass: from's context knows to.
type edge struct{ from, to uint16 }

// pass is what the checker needs to know of one pass.
type pass struct {
	id       int64
	origin   uint16
	ran      bool
	released bool
	edges    []edge
}

type sim struct {
	cfg     Config
	workers []*worker
	passes  []pass
	// passOf maps a context id to its pass's number. Ids depend on the order
	// in which concurrent passes of one origin start; numbers do not, so
	// the fates of cleanup messages are drawn by number.
	passOf sync.Map

	mu       sync.Mutex
	lost     map[msgKey]struct{} // cleanup messages between live workers given up on or dropped
	problems []string
	nprobs   int

	rpcs, rpcLost, rpcDup, rpcRefused                 atomic.Int64
	attempts, cleanLost, delivered, noops, dups, dead atomic.Int64
	delayed, released                                 atomic.Int64
}

// Message kinds, mixed into the per-message seed.
const (
	kindRPC = iota + 1
	kindCleanup
)

// Run runs a simulation. It returns an error if a property failed; the
// figures are filled in either way.
func Run(cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	start := time.Now()
	s := &sim{cfg: cfg, lost: map[msgKey]struct{}{}, passes: make([]pass, cfg.Passes)}
	res := &Result{Config: cfg}
	if err := s.makeWorkers(); err != nil {
		return res, err
	}
	defer func() {
		for _, w := range s.workers {
			w.cl.Close()
		}
	}()

	res.Passes, res.Killed = s.runPasses()
	settleStart := time.Now()
	err := s.settle()
	res.Settle = time.Since(settleStart)
	if err == nil {
		err = s.check(res)
	}
	s.figures(res)
	res.Wall = time.Since(start)
	if err != nil {
		return res, err
	}
	if len(s.problems) > 0 {
		return res, fmt.Errorf("%d problems, the first ones:\n%s", s.nprobs, strings.Join(s.problems, "\n"))
	}
	return res, nil
}

func (s *sim) makeWorkers() error {
	s.workers = make([]*worker, s.cfg.Workers)
	for i := range s.workers {
		c, err := container.New(int64(i))
		if err != nil {
			return err
		}
		w := &worker{id: uint16(i), c: c, attempts: map[msgKey]int{}}
		w.cl = container.NewFanoutQueue(s.sender(w), s.cfg.Cleanup)
		w.cl.SetLog(s.logger(w))
		c.SetFanout(w.cl)
		s.workers[i] = w
	}
	return nil
}

// problem records a broken property (the first few in full).
func (s *sim) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nprobs++
	if len(s.problems) < 10 {
		s.problems = append(s.problems, fmt.Sprintf(format, args...))
	}
}

// rng returns the random stream of one message or pass.
func (s *sim) rng(kind int, a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(s.cfg.Seed^splitmix(uint64(kind)), splitmix(a)^b))
}

// splitmix is SplitMix64's finaliser: it spreads nearby keys apart.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// fate is what the transport does to one message.
type fate struct {
	delay      time.Duration
	deliveries int  // 0 (request lost), 1, or 2 (duplicated)
	ok         bool // the sender hears back
}

// decide draws a message's fate; it always draws the same numbers, so that
// what follows in the stream does not depend on the fate.
func (s *sim) decide(r *rand.Rand) fate {
	pDelay, d, pDrop, half, pDup := r.Float64(), r.Int64N(int64(s.cfg.MaxDelay)), r.Float64(), r.IntN(2), r.Float64()
	f := fate{deliveries: 1, ok: true}
	if pDelay < s.cfg.Delay {
		f.delay = time.Duration(d) + 1
	}
	if pDrop < s.cfg.Drop {
		f.ok = false
		if half == 0 {
			f.deliveries = 0 // the request was lost; else only the reply
		}
	}
	if f.deliveries > 0 && pDup < s.cfg.Dup {
		f.deliveries = 2
	}
	return f
}

var (
	errLost = errors.New("sim: message lost (timed out)")
	errDown = errors.New("sim: worker is down")
)

// sender returns w's cleanup SendFunc: the transport's side of the fan-out.
func (s *sim) sender(w *worker) container.SendFunc {
	return func(dstID uint16, id int64) error {
		s.attempts.Add(1)
		k := msgKey{w.id, dstID, id}
		w.mu.Lock()
		w.attempts[k]++
		attempt := w.attempts[k]
		w.mu.Unlock()

		n, _ := s.passOf.Load(id)
		num, _ := n.(int)
		f := s.decide(s.rng(kindCleanup, uint64(num), uint64(w.id)<<32|uint64(dstID)<<16|uint64(attempt)))
		err := s.deliverCleanup(f, dstID, id)

		final := err == nil || attempt >= w.cl.Options().MaxAttempts
		if final {
			w.mu.Lock()
			delete(w.attempts, k)
			w.mu.Unlock()
		}
		if err != nil && final && !w.dead.Load() && !s.workers[dstID].dead.Load() {
			s.loseMessage(k)
		}
		return err
	}
}

func (s *sim) deliverCleanup(f fate, dstID uint16, id int64) error {
	s.hold(f)
	dst := s.workers[dstID]
	if dst.dead.Load() {
		s.dead.Add(1)
		return errDown
	}
	for i := range f.deliveries {
		s.delivered.Add(1)
		if s.cfg.noRelay {
			continue
		}
		if !dst.c.ReleaseContextIfPresent(nil, id) {
			s.noops.Add(1)
		} else if i > 0 {
			s.problem("a duplicated cleanup of context %d released it again on worker %d", id, dstID)
		}
	}
	if f.deliveries == 2 {
		s.dups.Add(1)
	}
	if !f.ok {
		s.cleanLost.Add(1)
		return errLost
	}
	return nil
}

func (s *sim) loseMessage(k msgKey) {
	s.mu.Lock()
	s.lost[k] = struct{}{}
	s.mu.Unlock()
}

// dropFormat is how FanoutQueue logs a message it drops (queue full or closed).
const dropFormat = "cleanup queue full (%d pending) or closed: dropped the release of context %d on worker %d"

// logger returns w's log hook: it notes the messages w's FanoutQueue dropped, so
// that the checker knows which edges of a graph no cleanup crossed.
func (s *sim) logger(w *worker) container.LogFunc {
	return func(level container.LogLevel, msg string) {
		if level != container.LogWarning || !strings.Contains(msg, "dropped the release") {
			return
		}
		var pending, dst int
		var id int64
		if _, err := fmt.Sscanf(msg, dropFormat, &pending, &id, &dst); err != nil {
			s.problem("unparsable drop log line %q: %v", msg, err)
			return
		}
		if !w.dead.Load() && !s.workers[dst].dead.Load() {
			s.loseMessage(msgKey{w.id, uint16(dst), id})
		}
	}
}

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
