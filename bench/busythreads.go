package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The runtime level: bench/busythreads/busythreads.c (many C threads that
// create, look up and release contexts in bursts) against the library and
// against the same library built with Go's runtime as shipped
// (build/nooverlay, make nooverlay-lib), one process per run, the two
// alternating. It holds the overlay's promise for C hosts with many busy
// threads: never fewer passes, never more calls that wait over 100 ms.

// Busy is one run of busythreads.
type Busy struct {
	Runtime string  `json:"runtime"` // "overlay" or "as shipped"
	Threads int     `json:"threads"`
	Seconds float64 `json:"seconds"`
	Passes  int64   `json:"passes"`
	Slow    int64   `json:"calls_over_100ms"`
	WorstMs float64 `json:"worst_ms"`
}

// busyRuntimes are the two builds, as each run names them, and the folder
// each loads the library from ("" : the program's own RUNPATH, build/).
var busyRuntimes = []struct{ name, dir string }{{"overlay", ""}, {"as shipped", "nooverlay"}}

func runBusyThreads(cfg Config, dir string) ([]json.RawMessage, error) {
	build := filepath.Join(cfg.Root, "build")
	unpatched := filepath.Join(build, "nooverlay", "libdistautograd.so")
	if _, err := os.Stat(unpatched); err != nil {
		return nil, fmt.Errorf("build/nooverlay/libdistautograd.so is missing: run make nooverlay-lib first (%v)", err)
	}
	bin := filepath.Join(dir, "busythreads")
	args := []string{"-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread",
		"-I", filepath.Join(cfg.Root, "include"), "-o", bin, filepath.Join(cfg.Root, "bench", "busythreads", "busythreads.c"),
		"-L", build, "-ldistautograd", "-Wl,--enable-new-dtags,-rpath," + build}
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var runs []json.RawMessage
	for round := 0; round < cfg.BusyRounds; round++ {
		for i := range busyRuntimes {
			// Alternate which goes first, as the C level does.
			rt := busyRuntimes[(i+round)%len(busyRuntimes)]
			cmd := exec.Command(bin, strconv.Itoa(cfg.BusyThreads), strconv.FormatFloat(cfg.BusySeconds, 'g', -1, 64))
			cmd.Env = os.Environ()
			if rt.dir != "" {
				cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+filepath.Join(build, rt.dir))
			}
			cfg.logf("runtime: busythreads %d threads %g s, Go's runtime %s", cfg.BusyThreads, cfg.BusySeconds, rt.name)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("busythreads (%s): %v\n%s%s", rt.name, err, stdout.String(), tail(stderr.String()))
			}
			var b Busy
			if err := json.Unmarshal(stdout.Bytes(), &b); err != nil {
				return nil, fmt.Errorf("busythreads (%s): its output is not the JSON expected: %v\n%s", rt.name, err, stdout.String())
			}
			b.Runtime = rt.name
			raw, err := json.Marshal(b)
			if err != nil {
				return nil, err
			}
			runs = append(runs, raw)
		}
	}
	return runs, nil
}

// printBusy writes the runtime level's table: per build, the median of its
// runs' passes and each run's slow calls and slowest call.
func printBusy(w io.Writer, runs []json.RawMessage) {
	by := map[string][]Busy{}
	var threads int
	var seconds float64
	for _, raw := range runs {
		var b Busy
		if json.Unmarshal(raw, &b) == nil {
			by[b.Runtime] = append(by[b.Runtime], b)
			threads, seconds = b.Threads, b.Seconds
		}
	}
	fmt.Fprintf(w, "\n#### Go's runtime: %d busy C threads, %g s a run (one process per run, the builds alternating)\n\n", threads, seconds)
	fmt.Fprintln(w, "| Go's runtime | passes (median) | passes, each run | calls over 100 ms, each run | slowest call ms, each run |")
	fmt.Fprintln(w, "|---|---:|---|---|---|")
	for _, rt := range busyRuntimes {
		bs := by[rt.name]
		if len(bs) == 0 {
			continue
		}
		var passes []float64
		var p, s, worst []string
		for _, b := range bs {
			passes = append(passes, float64(b.Passes))
			p = append(p, fmt.Sprintf("%.2f M", float64(b.Passes)/1e6))
			s = append(s, strconv.FormatInt(b.Slow, 10))
			worst = append(worst, fmt.Sprintf("%.0f", b.WorstMs))
		}
		fmt.Fprintf(w, "| %s | %.2f M | %s | %s | %s |\n", rt.name, Median(slices.Clone(passes))/1e6, strings.Join(p, ", "), strings.Join(s, ", "), strings.Join(worst, ", "))
	}
	fmt.Fprintln(w, "\nA pass: dac_context_new_id, dac_context_retrieve, dac_context_release, two unrefs, dac_clear_current_context; each thread pauses 0-20 ms every 256 passes (bench/busythreads/busythreads.c).")
}
