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
	"fmt"
	"io"
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
	// defaults: container.DefaultCleanupAttempts, but backoffs of 50µs to 2ms so that
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
