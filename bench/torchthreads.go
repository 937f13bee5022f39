package main

import (
	"encoding/json"
	"fmt"
	"io"
)

// The training step by thread: bench/torchthreads.py reads every thread of
// the training job's processes from /proc around each chunk of steps, in
// the same pairs of a native and a backend job as the torch level, and
// puts an entry per torch into build/bench.json's "torch_threads".

// ThreadSide is one side's figures for a class of threads, per step,
// summed over the job's processes.
type ThreadSide struct {
	Count       int     `json:"count"`
	CPUUs       float64 `json:"cpu_us"`
	WaitUs      float64 `json:"wait_us"`
	Voluntary   float64 `json:"voluntary"`
	Involuntary float64 `json:"involuntary"`
}

// ThreadRow is a class of threads, natively and under the backend.
type ThreadRow struct {
	Threads string     `json:"threads"`
	Native  ThreadSide `json:"native"`
	Backend ThreadSide `json:"backend"`
}

// TorchThreads is one torch's entry.
type TorchThreads struct {
	Torch  string             `json:"torch"`
	StepNs map[string]float64 `json:"step_ns"`
	Pairs  int                `json:"pairs"`
	Rounds int                `json:"rounds"`
	Steps  int                `json:"steps"`
	Rows   []ThreadRow        `json:"rows"`
}

// printTorchThreads writes a table per torch: each class of threads' CPU
// time, time waiting for a CPU and context switches per step, native /
// backend, with the total.
func printTorchThreads(w io.Writer, entries []json.RawMessage) {
	for _, raw := range entries {
		var e TorchThreads
		if json.Unmarshal(raw, &e) != nil || len(e.Rows) == 0 {
			continue
		}
		nat, dac := e.StepNs["native"], e.StepNs["backend"]
		fmt.Fprintf(w, "\n#### The training step by thread, torch %s (bench/torchthreads.py, %d pairs of %d rounds of %d steps)\n\n", e.Torch, e.Pairs, e.Rounds, e.Steps)
		if nat > 0 {
			fmt.Fprintf(w, "Median step: torch as built %.2f ms, under the backend %.2f ms (%.2f). ", nat/1e6, dac/1e6, dac/nat)
		}
		fmt.Fprintln(w, "Per step, summed over the job's three processes, torch as built / under the backend; medians over chunks. \"go runtime\": the threads Go's runtime started in the library, which starts none of its own.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| threads | count | CPU us | waiting for a CPU us | voluntary switches | involuntary switches |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
		var tn, tb ThreadSide
		for _, r := range e.Rows {
			fmt.Fprintf(w, "| %s | %d / %d | %.0f / %.0f | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f |\n", r.Threads,
				r.Native.Count, r.Backend.Count, r.Native.CPUUs, r.Backend.CPUUs, r.Native.WaitUs, r.Backend.WaitUs,
				r.Native.Voluntary, r.Backend.Voluntary, r.Native.Involuntary, r.Backend.Involuntary)
			tn.add(r.Native)
			tb.add(r.Backend)
		}
		fmt.Fprintf(w, "| all | %d / %d | %.0f / %.0f | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f |\n",
			tn.Count, tb.Count, tn.CPUUs, tb.CPUUs, tn.WaitUs, tb.WaitUs, tn.Voluntary, tb.Voluntary, tn.Involuntary, tb.Involuntary)
	}
}

func (s *ThreadSide) add(o ThreadSide) {
	s.Count += o.Count
	s.CPUUs += o.CPUUs
	s.WaitUs += o.WaitUs
	s.Voluntary += o.Voluntary
	s.Involuntary += o.Involuntary
}
