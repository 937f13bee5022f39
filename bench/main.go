// Command bench measures distautograd against the native component it
// replaces (PyTorch 1.13's DistAutogradContainer from Debian's libtorch-dev
// and python3-torch), on the same machine and in alternation, and prints a
// table per level; `make bench` runs it. It writes build/bench.json: the
// machine and date of the run, its flags, one row per operation {level, op,
// threads, label, distautograd_call, native_call, distautograd_ns,
// native_ns, ratio} (ratio = distautograd / native, from medians of several
// repetitions) and the memory figures. With -tables it rewrites the marked
// section of that file (docs/benchmarks.md) with every table, with
// -headline the marked section of that one (README.md) with the headline
// ratios, both from bench.json, so the docs show what the last run measured
// and nothing else; -from renders an existing bench.json without measuring.
//
// Levels:
//   - c: bench/cxx/harness.cpp, one program linked with both libraries; every
//     operation sampled on one side then the other, the order swapped each
//     repetition, with 1 and 2 threads here (1, 2, 4, ... up to the core count
//     where more exist; -threads).
//   - python: bench/pybench.py, each implementation in its own process, the
//     processes alternating; torch with a one-worker RPC agent running.
//   - memory: bytes per live context at -mem-live live contexts, and RSS over
//     -mem-cycles new/release cycles, each side in its own process.
//
// Absolute numbers depend on the machine and its load; the ratios, measured
// in alternation, are what to compare.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config is what one run measures.
type Config struct {
	Root       string // repository root
	Out        string // directory of the harness build and the JSON files
	Python     string // the Python with torch
	LibtorchLD string // folder of libtorch_cpu.so

	Threads  string // harness -threads ("" : its default)
	Reps     int    // repetitions per operation and side (C level)
	SampleMs int    // milliseconds per sample (C level)
	N        int    // fixed iterations per sample (0: calibrate; the smoke test sets it)
	Opt      string // the harness's optimization flag ("": -O2)
	Ops      string // harness -ops ("" : all)
	Clock    string // what samples are timed with: "cpu" (each thread's CPU time) or "wall"

	PyRounds   int      // processes per implementation (Python level)
	PySampleMs int      // milliseconds per sample (Python level)
	PyImpls    []string // "distautograd", "torch"

	MemLive   int // live contexts for bytes per context (0: skip)
	MemCycles int // new/release cycles for the flatness check (0: skip)

	BusyRounds  int     // runtime level: runs per build, alternating (0: skip)
	BusyThreads int     // runtime level: C threads
	BusySeconds float64 // runtime level: seconds per run

	SkipC, SkipPython bool
	Args              string    // the flags, recorded in the report
	Log               io.Writer // progress
}

// Row is one operation of build/bench.json.
type Row struct {
	Level          string   `json:"level"`
	Op             string   `json:"op"`
	Threads        int      `json:"threads"`
	Label          string   `json:"label"`
	DacCall        string   `json:"distautograd_call"`
	NativeCall     string   `json:"native_call"`
	DistautogradNs *float64 `json:"distautograd_ns"`
	NativeNs       *float64 `json:"native_ns"`
	Ratio          *float64 `json:"ratio"`
	// The samples each side's figure is the median of (per repetition at
	// the C level), for the ratio's interval (RatioInterval).
	DacSamples    []float64 `json:"distautograd_samples,omitempty"`
	NativeSamples []float64 `json:"native_samples,omitempty"`
	// Where the two sides ran in pairs (the torch level: a native and a
	// backend process, alternating chunks), each pair's ratio: Ratio is
	// their median, and the interval resamples them (PairedInterval).
	PairRatios []float64 `json:"pair_ratios,omitempty"`
	// The torch level's rows: the torch release they ran on ("1.13").
	Torch string `json:"torch,omitempty"`
}

// Interval is the 90 % interval of the row's ratio: over its pairs where
// it has them, else over each side's samples; ok is false where it has
// neither.
func (r Row) Interval() (lo, hi float64, ok bool) {
	if len(r.PairRatios) > 0 {
		return PairedInterval(r.PairRatios)
	}
	return RatioInterval(r.DacSamples, r.NativeSamples)
}

// Report is everything one run measured: build/bench.json.
type Report struct {
	Machine MachineInfo `json:"machine"`
	Date    string      `json:"date"` // when the run started, UTC, RFC 3339
	Clock   string      `json:"clock"`
	Args    string      `json:"args"` // the driver's flags
	Seconds float64     `json:"seconds"`
	Rows    []Row       `json:"rows"`
	Memory  Memory      `json:"memory"`
	// The runtime level: one object per run of bench/busythreads (Busy).
	Runtime []json.RawMessage `json:"runtime,omitempty"`
	// The training step by thread: an entry per torch (TorchThreads).
	TorchThreads []json.RawMessage `json:"torch_threads,omitempty"`
}

// Memory is the memory figures of a run.
type Memory struct {
	Live   []json.RawMessage `json:"live"`
	Cycles []json.RawMessage `json:"cycles"`
}

func main() {
	cfg := Config{Log: os.Stderr}
	flag.StringVar(&cfg.Root, "root", "", "repository root (default: found above the working directory)")
	flag.StringVar(&cfg.Out, "out", "", "output directory (default: ROOT/build)")
	flag.StringVar(&cfg.Python, "python", "/usr/bin/python3", "the Python that has torch")
	flag.StringVar(&cfg.LibtorchLD, "libtorch", "/usr/lib/x86_64-linux-gnu", "folder of libtorch_cpu.so")
	flag.StringVar(&cfg.Threads, "threads", "", "C level: comma-separated thread counts (default 1,2,4,... up to the core count)")
	flag.IntVar(&cfg.Reps, "reps", 7, "C level: repetitions of each operation on each side (the median is reported)")
	flag.IntVar(&cfg.SampleMs, "sample-ms", 20, "C level: milliseconds per sample")
	flag.StringVar(&cfg.Ops, "ops", "", "C level: comma-separated operation keys (default: all)")
	flag.StringVar(&cfg.Clock, "clock", "cpu", "what samples are timed with: cpu (each thread's CPU time: time descheduled by other load is left out) or wall")
	flag.IntVar(&cfg.PyRounds, "py-rounds", 5, "Python level: processes per implementation, alternating")
	flag.IntVar(&cfg.PySampleMs, "py-sample-ms", 50, "Python level: milliseconds per sample")
	flag.IntVar(&cfg.MemLive, "mem-live", 1000000, "memory: live contexts for bytes per context (0: skip)")
	flag.IntVar(&cfg.MemCycles, "mem-cycles", 10000000, "memory: new/release cycles for the RSS check (0: skip)")
	flag.IntVar(&cfg.BusyRounds, "busy-rounds", 3, "runtime level: runs of bench/busythreads per build of Go's runtime, alternating (0: skip)")
	flag.IntVar(&cfg.BusyThreads, "busy-threads", 64, "runtime level: C threads")
	flag.Float64Var(&cfg.BusySeconds, "busy-seconds", 8, "runtime level: seconds per run")
	skip := flag.String("skip", "", "comma-separated levels to skip: c, python")
	tables := flag.String("tables", "", "rewrite this file's section between "+beginMarker+" and "+endMarker+" with the run's tables, from its bench.json")
	headline := flag.String("headline", "", "rewrite this file's section between "+headlineBeginMarker+" and "+headlineEndMarker+" with the run's headline ratios, from its bench.json")
	from := flag.String("from", "", "measure nothing: print (and with -tables, -headline, render) this bench.json")
	byThreads := flag.String("by-threads", "", "measure nothing: print this file of the harness's own output (docs/perf-data/) as a table with a column per thread count")
	flag.Parse()
	if *byThreads != "" {
		var rows []Row
		b, err := os.ReadFile(*byThreads)
		if err == nil {
			err = json.Unmarshal(b, &rows)
		}
		if err != nil {
			fatal(fmt.Errorf("-by-threads %s: %v", *byThreads, err))
		}
		PrintByThreads(os.Stdout, rows)
		return
	}
	if *from != "" {
		rep, err := LoadReport(*from)
		if err != nil {
			fatal(err)
		}
		PrintTables(os.Stdout, rep)
		rewrite(*tables, *headline, rep, *from)
		return
	}
	for _, s := range strings.Split(*skip, ",") {
		switch s {
		case "":
		case "c":
			cfg.SkipC = true
		case "python":
			cfg.SkipPython = true
		default:
			fatal(fmt.Errorf("-skip: unknown level %q (c, python)", s))
		}
	}
	cfg.PyImpls = []string{"distautograd", "torch"}
	if cfg.Root == "" {
		root, err := findRoot()
		if err != nil {
			fatal(err)
		}
		cfg.Root = root
	}
	if cfg.Out == "" {
		cfg.Out = filepath.Join(cfg.Root, "build")
	}
	cfg.Args = strings.Join(os.Args[1:], " ")
	rep, err := Run(cfg)
	if err != nil {
		fatal(err)
	}
	PrintTables(os.Stdout, rep)
	out := filepath.Join(cfg.Out, "bench.json")
	fmt.Printf("\nwrote %s\n", out)
	if *tables != "" || *headline != "" {
		// Rendered from the file just written, as -from would: the docs
		// can only show what bench.json holds.
		saved, err := LoadReport(out)
		if err != nil {
			fatal(err)
		}
		rewrite(*tables, *headline, saved, out)
	}
}

// rewrite renders the report into the files -tables and -headline name.
func rewrite(tables, headline string, rep Report, from string) {
	if tables != "" {
		if err := RewriteSection(tables, rep); err != nil {
			fatal(err)
		}
		fmt.Printf("\nrewrote the tables in %s from %s\n", tables, from)
	}
	if headline != "" {
		if err := RewriteHeadline(headline, rep); err != nil {
			fatal(err)
		}
		fmt.Printf("rewrote the headline ratios in %s from %s\n", headline, from)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// findRoot returns the nearest directory at or above the working directory
// whose go.mod declares module distautograd.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module distautograd\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of module distautograd above the working directory")
		}
		dir = parent
	}
}

func (c *Config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "bench: "+format+"\n", args...)
	}
}

// HaveNative reports whether libtorch_cpu.so is where cfg says.
func (c *Config) HaveNative() bool {
	_, err := os.Stat(filepath.Join(c.LibtorchLD, "libtorch_cpu.so"))
	return err == nil
}

// BuildHarness compiles bench/cxx/harness.cpp into dir/harness, with the native
// side if native is set, and returns its path.
func BuildHarness(cfg Config, dir string, native bool) (string, error) {
	lib := filepath.Join(cfg.Root, "build")
	if _, err := os.Stat(filepath.Join(lib, "libdistautograd.so")); err != nil {
		return "", fmt.Errorf("build/libdistautograd.so is missing: run make first (%v)", err)
	}
	bin := filepath.Join(dir, "harness")
	opt := cfg.Opt
	if opt == "" {
		opt = "-O2"
	}
	args := []string{"-std=c++17", opt, "-Wall", "-Wextra", "-Werror", "-pthread",
		"-I", filepath.Join(cfg.Root, "include"), "-I", filepath.Join(cfg.Root, "bench", "cxx"),
		"-o", bin, filepath.Join(cfg.Root, "bench", "cxx", "harness.cpp"),
		"-L", lib, "-ldistautograd", "-Wl,--enable-new-dtags,-rpath," + lib}
	if native {
		args = append(args, "-DDAC_BENCH_NATIVE", "-I", filepath.Join(cfg.Root, "capi_test", "cpp"),
			"-L", cfg.LibtorchLD, "-ltorch_cpu", "-Wl,-rpath,"+cfg.LibtorchLD)
	}
	if out, err := exec.Command("g++", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("g++ %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// runJSON runs a command and decodes its standard output into v.
func runJSON(cfg Config, v any, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "GLOG_minloglevel=2",
		"PYTHONPATH="+filepath.Join(cfg.Root, "python_bindings"),
		"DISTAUTOGRAD_LIBRARY="+filepath.Join(cfg.Root, "build", "libdistautograd.so"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, tail(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		return fmt.Errorf("%s %s: its output is not the JSON expected: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, tail(stdout.String()))
	}
	return nil
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// pyOutput is what one pybench.py process prints.
type pyOutput struct {
	Impl     string               `json:"impl"`
	Labels   map[string]string    `json:"labels"`
	Results  map[string][]float64 `json:"results"`
	Leftover int                  `json:"leftover_contexts"`
}

// Run measures what cfg asks for and writes cfg.Out/bench.json and
// cfg.Out/bench_memory.json.
func Run(cfg Config) (Report, error) {
	var rep Report
	started := time.Now()
	rep.Date = started.UTC().Format(time.RFC3339)
	rep.Machine = Machine(cfg)
	rep.Clock = cfg.Clock
	rep.Args = cfg.Args
	dir := filepath.Join(cfg.Out, "bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return rep, err
	}
	native := cfg.HaveNative()
	if !native {
		cfg.logf("%s/libtorch_cpu.so is missing: measuring distautograd alone (apt-get install libtorch-dev)", cfg.LibtorchLD)
	}
	harness, err := BuildHarness(cfg, dir, native)
	if err != nil {
		return rep, err
	}
	if !cfg.SkipC {
		args := []string{"-reps", strconv.Itoa(cfg.Reps), "-sample-ms", strconv.Itoa(cfg.SampleMs)}
		if cfg.Threads != "" {
			args = append(args, "-threads", cfg.Threads)
		}
		if cfg.N > 0 {
			args = append(args, "-n", strconv.Itoa(cfg.N))
		}
		if cfg.Ops != "" {
			args = append(args, "-ops", cfg.Ops)
		}
		if cfg.Clock != "" {
			args = append(args, "-clock", cfg.Clock)
		}
		cfg.logf("C level: harness %s", strings.Join(args, " "))
		var rows []Row // the harness's objects carry a Row's keys, less the level and the ratio
		if err := runJSON(cfg, &rows, harness, args...); err != nil {
			return rep, err
		}
		for _, h := range rows {
			r := newRow("c", h.Op, h.Threads, h.DistautogradNs, h.NativeNs, h.Label, h.DacCall, h.NativeCall)
			r.DacSamples, r.NativeSamples = h.DacSamples, h.NativeSamples
			rep.Rows = append(rep.Rows, r)
		}
	}
	if !cfg.SkipPython {
		rows, err := runPython(cfg)
		if err != nil {
			return rep, err
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	impls := []string{"distautograd"}
	if native {
		impls = append(impls, "native")
	}
	// Each memory figure comes from its own process; they run at once, as
	// RSS is per process (only their "seconds" feel each other).
	var runs [][]string
	if cfg.MemLive > 0 {
		for _, impl := range impls {
			runs = append(runs, []string{"-mem-live", strconv.Itoa(cfg.MemLive), "-impl", impl})
		}
	}
	if cfg.MemCycles > 0 {
		for _, impl := range impls {
			args := []string{"-mem-cycles", strconv.Itoa(cfg.MemCycles), "-impl", impl}
			if impl == "native" {
				// Without an agent each native release takes about a
				// millisecond (it builds an exception): far too slow for
				// millions of cycles.
				args = append(args, "-agent")
			}
			runs = append(runs, args)
		}
	}
	results := make([]json.RawMessage, len(runs))
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, args := range runs {
		cfg.logf("memory: harness %s", strings.Join(args, " "))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runJSON(cfg, &results[i], harness, args...)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return rep, err
	}
	for i, args := range runs {
		if args[0] == "-mem-live" {
			rep.Memory.Live = append(rep.Memory.Live, results[i])
		} else {
			rep.Memory.Cycles = append(rep.Memory.Cycles, results[i])
		}
	}
	if cfg.BusyRounds > 0 {
		if rep.Runtime, err = runBusyThreads(cfg, dir); err != nil {
			return rep, err
		}
	}
	rep.Seconds = math.Round(time.Since(started).Seconds()*10) / 10
	return rep, writeJSON(cfg, rep)
}

func newRow(level, op string, threads int, dac, nat *float64, label, dacCall, nativeCall string) Row {
	r := Row{Level: level, Op: op, Threads: threads, DistautogradNs: round(dac), NativeNs: round(nat),
		Label: label, DacCall: dacCall, NativeCall: nativeCall}
	if dac != nil && nat != nil && *nat > 0 {
		// Four significant digits: a ratio of 0.0004 must not become 0.
		v, _ := strconv.ParseFloat(strconv.FormatFloat(*dac / *nat, 'g', 4, 64), 64)
		r.Ratio = &v
	}
	return r
}

func round(p *float64) *float64 {
	if p == nil {
		return nil
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(*p, 'f', 3, 64), 64)
	return &v
}

// runPython runs pybench.py cfg.PyRounds times per implementation, the
// implementations alternating (and which goes first alternating too), and
// returns one row per operation with the medians.
func runPython(cfg Config) ([]Row, error) {
	script := filepath.Join(cfg.Root, "bench", "pybench.py")
	samples := map[string]map[string][]float64{}
	labels := map[string]string{}
	var order []string
	for r := 0; r < max(1, cfg.PyRounds); r++ {
		impls := slices.Clone(cfg.PyImpls)
		if r%2 == 1 {
			slices.Reverse(impls)
		}
		for _, impl := range impls {
			cfg.logf("Python level: round %d/%d, %s", r+1, cfg.PyRounds, impl)
			args := []string{script, "--impl", impl, "--sample-ms", strconv.Itoa(cfg.PySampleMs)}
			if cfg.N > 0 {
				args = append(args, "--n", strconv.Itoa(cfg.N))
			}
			if cfg.Clock != "" {
				args = append(args, "--clock", cfg.Clock)
			}
			var out pyOutput
			if err := runJSON(cfg, &out, cfg.Python, args...); err != nil {
				return nil, err
			}
			if out.Leftover != 0 {
				return nil, fmt.Errorf("pybench %s left %d contexts behind: an operation does not release what it creates", impl, out.Leftover)
			}
			if samples[impl] == nil {
				samples[impl] = map[string][]float64{}
			}
			for op, v := range out.Results {
				samples[impl][op] = append(samples[impl][op], v...)
				if _, ok := labels[op]; !ok {
					labels[op] = out.Labels[op]
				}
			}
			if len(order) == 0 {
				for op := range out.Labels {
					order = append(order, op)
				}
			}
		}
	}
	// The table's order is pybench's OPS order, which its labels map loses:
	// sort by the fixed list.
	slices.SortFunc(order, func(a, b string) int { return pyOrder(a) - pyOrder(b) })
	var rows []Row
	for _, op := range order {
		var dac, nat *float64
		dv, nv := samples["distautograd"][op], samples["torch"][op]
		if len(dv) > 0 {
			m := Median(slices.Clone(dv))
			dac = &m
		}
		if len(nv) > 0 {
			m := Median(slices.Clone(nv))
			nat = &m
		}
		r := newRow("python", op, 1, dac, nat, labels[op], "distautograd", "torch.distributed.autograd, RPC agent running")
		r.DacSamples, r.NativeSamples = dv, nv
		rows = append(rows, r)
	}
	return rows, nil
}

var pyOps = []string{"with_context", "retrieve_context", "current_context", "new_release_context", "is_valid_context", "get_max_id", "empty_loop"}

func pyOrder(op string) int {
	if i := slices.Index(pyOps, op); i >= 0 {
		return i
	}
	return len(pyOps)
}

// Median returns the median of v (which it sorts).
func Median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func writeJSON(cfg Config, rep Report) error {
	if rep.Rows == nil {
		rep.Rows = []Row{}
	}
	if rep.Memory.Live == nil {
		rep.Memory.Live = []json.RawMessage{}
	}
	if rep.Memory.Cycles == nil {
		rep.Memory.Cycles = []json.RawMessage{}
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cfg.Out, "bench.json"), append(b, '\n'), 0o644)
}

// LoadReport reads a bench.json.
func LoadReport(path string) (Report, error) {
	var rep Report
	b, err := os.ReadFile(path)
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Errorf("%s: %v (written by an older make bench? run it again)", path, err)
	}
	return rep, nil
}
