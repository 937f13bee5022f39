// Command dacsim runs the release fan-out simulation of package sim and
// prints its figures; it exits 1 if a property failed.
//
//	go run ./cmd/dacsim -workers 1024 -passes 200000 -drop 0.05 -dup 0.05 -kill 8
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"distautograd/container"
	"distautograd/sim"
)

func main() {
	var cfg sim.Config
	flag.IntVar(&cfg.Workers, "workers", 64, "simulated workers, each its own container")
	flag.IntVar(&cfg.Passes, "passes", 10000, "passes to run")
	flag.DurationVar(&cfg.Duration, "duration", 0, "stop starting passes after this long (0: no limit)")
	flag.Float64Var(&cfg.Drop, "drop", 0.05, "probability that a message is lost (the request, or only its reply)")
	flag.Float64Var(&cfg.Dup, "dup", 0.05, "probability that a message is delivered twice")
	flag.Float64Var(&cfg.Delay, "delay", 0.01, "probability that a message is held up")
	flag.DurationVar(&cfg.MaxDelay, "maxdelay", time.Millisecond, "longest hold-up of a delayed message")
	flag.IntVar(&cfg.Kill, "kill", 2, "workers killed during the run")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of everything random")
	flag.IntVar(&cfg.Concurrency, "concurrency", 0, "passes in flight at once (0: 4*GOMAXPROCS)")
	flag.IntVar(&cfg.MaxFanout, "fanout", 3, "most RPCs one worker sends in one pass")
	flag.IntVar(&cfg.MaxDepth, "depth", 3, "longest chain of forwarded RPCs")
	flag.IntVar(&cfg.Cleanup.MaxAttempts, "attempts", container.DefaultCleanupAttempts, "attempts per cleanup message")
	flag.DurationVar(&cfg.Cleanup.InitialBackoff, "backoff", 50*time.Microsecond, "wait before a cleanup message's first retry (doubling)")
	flag.DurationVar(&cfg.Cleanup.MaxBackoff, "maxbackoff", 2*time.Millisecond, "longest wait between attempts")
	flag.IntVar(&cfg.Cleanup.MaxPending, "maxpending", 0, "cleanup messages pending per worker before drops (0: the default)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "dacsim: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}

	res, err := sim.Run(cfg)
	res.Print(os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dacsim: FAILED: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("ok: every live worker was cleaned up")
}
