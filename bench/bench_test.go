package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the whole benchmark for a handful of iterations: it builds
// the harness, runs every C-level operation with 1 and 2 threads, the Python
// level for distautograd, and both memory modes, and checks that
// bench.json holds what docs/benchmarks.md and the README's headline are
// rendered from. It asserts
// nothing about times. The native side needs libtorch_cpu.so: outside CI
// its absence is reported and only distautograd is run; in CI it is a
// failure. torch's Python side is left out (starting an RPC agent takes
// seconds); `make bench` runs it.
func TestSmoke(t *testing.T) {
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "build", "libdistautograd.so")); err != nil {
		t.Fatalf("build/libdistautograd.so is missing: run make first (%v)", err)
	}
	if _, err := exec.LookPath("g++"); err != nil {
		t.Fatalf("g++ is needed to build the harness: %v", err)
	}
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			t.Fatalf("python3 is needed for the Python level: %v", err)
		}
	}
	var log bytes.Buffer
	cfg := Config{
		Root: root, Out: t.TempDir(), Python: python, LibtorchLD: "/usr/lib/x86_64-linux-gnu",
		Threads: "1,2", Reps: 1, SampleMs: 1, N: 20, Opt: "-O0", // -O0: it compiles in half the time
		PyRounds: 1, PyImpls: []string{"distautograd"},
		MemLive: 2000, MemCycles: 3000,
		BusyRounds: 1, BusyThreads: 8, BusySeconds: 0.3,
		Log: &log,
	}
	if d := os.Getenv("DAC_LIBTORCH_DIR"); d != "" {
		cfg.LibtorchLD = d
	}
	native := cfg.HaveNative()
	if !native {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s/libtorch_cpu.so is missing (apt-get install libtorch-dev)", cfg.LibtorchLD)
		}
		os.Stderr.WriteString("SKIP part of " + t.Name() + ": libtorch_cpu.so is missing, the native side is not run (CI runs it)\n")
	}
	rep, err := Run(cfg)
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}

	b, err := os.ReadFile(filepath.Join(cfg.Out, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Machine map[string]any   `json:"machine"`
		Date    string           `json:"date"`
		Rows    []map[string]any `json:"rows"`
		Memory  json.RawMessage  `json:"memory"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("bench.json is not the JSON object expected: %v\n%s", err, b)
	}
	if _, err := time.Parse(time.RFC3339, doc.Date); err != nil {
		t.Errorf("bench.json's date %q: %v", doc.Date, err)
	}
	if cpu, _ := doc.Machine["cpu"].(string); cpu == "" || doc.Machine["cores"] == nil || doc.Machine["go"] == nil {
		t.Errorf("bench.json's machine %v: want its cpu, cores and go", doc.Machine)
	}
	rows := doc.Rows
	if len(rows) != len(rep.Rows) {
		t.Errorf("bench.json has %d rows, the run measured %d", len(rows), len(rep.Rows))
	}
	seen := map[string]bool{}
	for i, r := range rows {
		var keys []string
		for k := range r {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		// Each measured side keeps the samples its figure is the median of.
		wantKeys := []string{"distautograd_call", "distautograd_ns", "distautograd_samples", "label", "level", "native_call", "native_ns", "op", "ratio", "threads"}
		if r["native_ns"] != nil {
			wantKeys = append(wantKeys, "native_samples")
			slices.Sort(wantKeys)
		}
		if !slices.Equal(keys, wantKeys) {
			t.Errorf("row %d: keys %v, want %v", i, keys, wantKeys)
			continue
		}
		level, _ := r["level"].(string)
		op, _ := r["op"].(string)
		threads, _ := r["threads"].(float64)
		seen[level+"/"+op] = true
		if label, _ := r["label"].(string); label == "" {
			t.Errorf("row %d (%s/%s): no label", i, level, op)
		}
		if level != "c" && level != "python" {
			t.Errorf("row %d: level %q", i, level)
		}
		if threads < 1 || (level == "python" && threads != 1) {
			t.Errorf("row %d (%s/%s): threads %v", i, level, op, threads)
		}
		dac, ok := r["distautograd_ns"].(float64)
		if !ok || !(dac > 0) {
			t.Errorf("row %d (%s/%s): distautograd_ns %v, want a positive number", i, level, op, r["distautograd_ns"])
		}
		if v := samplesOf(r["distautograd_samples"]); len(v) == 0 || math.Abs(Median(v)-dac) > 0.001+1e-6*dac {
			t.Errorf("row %d (%s/%s): distautograd_ns %v is not the median of its samples %v", i, level, op, dac, r["distautograd_samples"])
		}
		nat, hasNat := r["native_ns"].(float64)
		if hasNat {
			if v := samplesOf(r["native_samples"]); len(v) == 0 || math.Abs(Median(v)-nat) > 0.001+1e-6*nat {
				t.Errorf("row %d (%s/%s): native_ns %v is not the median of its samples %v", i, level, op, nat, r["native_samples"])
			}
		}
		ratio, hasRatio := r["ratio"].(float64)
		if native && level == "c" {
			if !hasNat || !(nat > 0) {
				t.Errorf("row %d (%s/%s): native_ns %v, want a positive number", i, level, op, r["native_ns"])
			} else if !hasRatio || math.Abs(ratio-dac/nat) > 0.0011+1e-3*ratio {
				t.Errorf("row %d (%s/%s): ratio %v, want distautograd_ns/native_ns = %v", i, level, op, r["ratio"], dac/nat)
			}
		}
		if level == "python" && (r["native_ns"] != nil || r["ratio"] != nil) {
			t.Errorf("row %d (%s/%s): torch was not run, yet native_ns %v, ratio %v", i, level, op, r["native_ns"], r["ratio"])
		}
	}
	for _, op := range []string{"c/floor_c", "c/floor_go", "c/new_release", "c/new_release_no_agent", "c/retrieve",
		"c/is_valid", "c/current_context", "c/current_id", "c/new_message_id", "c/get_or_create",
		"c/add_known_worker", "c/paused_new_release", "python/with_context", "python/retrieve_context", "python/current_context",
		"python/new_release_context"} {
		if !seen[op] {
			t.Errorf("bench.json has no row for %s", op)
		}
	}

	b = doc.Memory
	var mem struct {
		Live []struct {
			Impl   string   `json:"impl"`
			N      int      `json:"live_contexts"`
			PerCtx *float64 `json:"bytes_per_context"`
		} `json:"live"`
		Cycles []struct {
			Impl   string `json:"impl"`
			Cycles int    `json:"cycles"`
			Points []struct {
				Cycles int   `json:"cycles"`
				RSS    int64 `json:"rss_bytes"`
			} `json:"points"`
		} `json:"cycles"`
	}
	if err := json.Unmarshal(b, &mem); err != nil {
		t.Fatalf("bench.json's memory: %v\n%s", err, b)
	}
	impls := 1
	if native {
		impls = 2
	}
	if len(mem.Live) != impls || len(mem.Cycles) != impls {
		t.Fatalf("bench.json's memory has %d live and %d cycles entries, want %d each:\n%s", len(mem.Live), len(mem.Cycles), impls, b)
	}
	for _, l := range mem.Live {
		if l.N != cfg.MemLive || l.PerCtx == nil {
			t.Errorf("live entry %+v: want %d live contexts and a bytes_per_context", l, cfg.MemLive)
		}
	}
	for _, c := range mem.Cycles {
		if c.Cycles != cfg.MemCycles || len(c.Points) == 0 || c.Points[len(c.Points)-1].Cycles != cfg.MemCycles {
			t.Errorf("cycles entry of %s: %d cycles, points %+v; want %d cycles, the last point at the end", c.Impl, c.Cycles, c.Points, cfg.MemCycles)
		}
		for _, p := range c.Points {
			if p.RSS <= 0 {
				t.Errorf("cycles entry of %s: RSS %d at %d cycles", c.Impl, p.RSS, p.Cycles)
			}
		}
	}

	// The README section is rendered from the file, not from memory.
	saved, err := LoadReport(filepath.Join(cfg.Out, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The runtime level: a run on each build of Go's runtime, each made passes.
	if len(saved.Runtime) != 2 {
		t.Errorf("bench.json's runtime has %d runs, want 2 (the overlay, Go's runtime as shipped)", len(saved.Runtime))
	}
	for _, raw := range saved.Runtime {
		var b Busy
		if err := json.Unmarshal(raw, &b); err != nil || b.Passes <= 0 || b.Threads != cfg.BusyThreads {
			t.Errorf("bench.json's runtime run %s: want passes on %d threads (%v)", raw, cfg.BusyThreads, err)
		}
	}
	var out bytes.Buffer
	PrintTables(&out, saved)
	for _, want := range []string{"Machine: ", "#### C level", "#### Python level", "| operation | threads | distautograd ns/op | native ns/op | ratio |",
		"bytes per live context", "What one iteration calls", "#### Go's runtime: 8 busy C threads", "| overlay |", "| as shipped |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the printed report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRatioKeepsTwoSignificantDigits(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{0.00045, "0.00045"}, {0.0004, "0.00040"}, {0.0123, "0.012"}, {0.21, "0.21"}, {1.013, "1.01"},
		{9.94, "9.94"}, {33.44, "33.4"}, {250.2, "250"}, {0, "0.00"},
	} {
		if got := ratio(&c.in); got != c.want {
			t.Errorf("ratio(%v) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := ratio(nil); got != "-" {
		t.Errorf("ratio(nil) = %q", got)
	}
}

func TestRewriteSection(t *testing.T) {
	v := 1.5
	rep := Report{Date: "2026-01-02T03:04:05Z", Clock: "cpu", Args: "-threads 1",
		Machine: MachineInfo{CPU: "Test CPU", Cores: 2, Go: "go1.26"},
		Rows:    []Row{{Level: "c", Op: "x", Threads: 1, Label: "an op", DacCall: "a", NativeCall: "b", DistautogradNs: &v, NativeNs: &v, Ratio: &v}}}
	path := filepath.Join(t.TempDir(), "README.md")
	before := "# title\n\nprose\n\n" + beginMarker + "\nold figures\n" + endMarker + "\n\nafter\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // rewriting twice gives the same file
		if err := RewriteSection(path, rep); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if strings.Contains(got, "old figures") || !strings.HasPrefix(got, "# title\n\nprose\n\n"+beginMarker+"\n\nRun of 2026-01-02 03:04 UTC") ||
		!strings.HasSuffix(got, "\n"+endMarker+"\n\nafter\n") || !strings.Contains(got, "| an op | 1 | 1.5 | 1.5 | 1.50 |") ||
		!strings.Contains(got, "Machine: Test CPU, 2 cores; go1.26.") || strings.Count(got, beginMarker) != 1 {
		t.Errorf("rewritten file:\n%s", got)
	}
	if err := os.WriteFile(path, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RewriteSection(path, rep); err == nil {
		t.Error("RewriteSection of a file without the markers: no error")
	}
}

// A row with samples on both sides gets the ratio's interval in a column
// of its own, with what it means under the table; a row without them a dash.
func TestIntervalColumn(t *testing.T) {
	d, n, r := 110.0, 100.0, 1.1
	rep := Report{Date: "2026-01-02T03:04:05Z", Rows: []Row{
		{Level: "c", Op: "x", Threads: 1, Label: "a C op", DistautogradNs: &d, NativeNs: &n, Ratio: &r},
		{Level: "torch", Op: "y", Threads: 1, Label: "a torch op", DistautogradNs: &d, NativeNs: &n, Ratio: &r,
			PairRatios: []float64{1.1, 1.1, 1.1}},
		{Level: "torch", Op: "z", Threads: 1, Label: "another", DistautogradNs: &d, NativeNs: &n, Ratio: &r},
	}}
	var b bytes.Buffer
	PrintTables(&b, rep)
	got := b.String()
	for _, want := range []string{
		"| operation | threads | distautograd ns/op | native ns/op | ratio |\n",
		"| a C op | 1 | 110.0 | 100.0 | 1.10 |\n",
		"| operation | threads | distautograd ns/op | torch as built ns/op | ratio | 90 % interval |\n",
		"| a torch op | 1 | 110.0 | 100.0 | 1.10 | 1.10-1.10 |\n",
		"| another | 1 | 110.0 | 100.0 | 1.10 | - |\n",
		"resamplings of this run's pairs of processes",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	var back Row
	if err := json.Unmarshal([]byte(`{"level":"c","distautograd_samples":[1,2],"native_samples":[3]}`), &back); err != nil ||
		!slices.Equal(back.DacSamples, []float64{1, 2}) || !slices.Equal(back.NativeSamples, []float64{3}) {
		t.Errorf("samples not read from bench.json: %v %v %v", back.DacSamples, back.NativeSamples, err)
	}
	// bench/torchbench.py writes pair_ratios: they, not the sides' samples,
	// give a torch row its interval.
	back = Row{}
	if err := json.Unmarshal([]byte(`{"level":"torch","pair_ratios":[1.5,1.5],"distautograd_samples":[1,1],"native_samples":[1,1]}`), &back); err != nil ||
		!slices.Equal(back.PairRatios, []float64{1.5, 1.5}) {
		t.Errorf("pair ratios not read from bench.json: %v %v", back.PairRatios, err)
	}
	if lo, hi, ok := back.Interval(); !ok || lo != 1.5 || hi != 1.5 {
		t.Errorf("interval of a row with pair ratios: %v-%v %v, want 1.5-1.5 from its pairs", lo, hi, ok)
	}
}

func TestPairedInterval(t *testing.T) {
	if _, _, ok := PairedInterval([]float64{1.1}); ok {
		t.Error("an interval from one pair")
	}
	if _, _, ok := PairedInterval([]float64{1.1, 0}); ok {
		t.Error("an interval over a ratio of 0")
	}
	// Pairs spread around 1.05: the interval holds their median and lies
	// within their range, and renders the same every time.
	ratios := []float64{0.98, 1.01, 1.03, 1.05, 1.05, 1.07, 1.09, 1.12}
	lo, hi, ok := PairedInterval(ratios)
	if !ok || lo > 1.05 || hi < 1.05 || lo < 0.98 || hi > 1.12 || lo == hi {
		t.Errorf("spread pairs: %v-%v %v, want an interval around 1.05 within 0.98-1.12", lo, hi, ok)
	}
	if lo2, hi2, _ := PairedInterval(slices.Clone(ratios)); lo2 != lo || hi2 != hi {
		t.Errorf("not reproducible: %v-%v then %v-%v", lo, hi, lo2, hi2)
	}
}

func TestRatioInterval(t *testing.T) {
	if _, _, ok := RatioInterval([]float64{1}, []float64{1, 2}); ok {
		t.Error("an interval from one sample")
	}
	if _, _, ok := RatioInterval([]float64{1, 2}, []float64{0, 2}); ok {
		t.Error("an interval over a native sample of 0")
	}
	// Separated sides: every resample gives the same ratio.
	if lo, hi, ok := RatioInterval([]float64{50, 50, 50, 50}, []float64{100, 100, 100}); !ok || lo != 0.5 || hi != 0.5 {
		t.Errorf("constant sides: %v-%v %v, want 0.5-0.5", lo, hi, ok)
	}
	// Both sides drawn from one spread of values: the interval holds 1 and
	// is wide; a run twice as slow on one side moves it by two.
	same := []float64{80, 95, 100, 110, 130, 160, 210}
	lo, hi, ok := RatioInterval(same, same)
	if !ok || lo >= 1 || hi <= 1 || hi/lo < 1.5 {
		t.Errorf("one spread on both sides: %v-%v %v, want a wide interval around 1", lo, hi, ok)
	}
	double := make([]float64, len(same))
	for i, v := range same {
		double[i] = 2 * v
	}
	lo2, hi2, _ := RatioInterval(double, same)
	if math.Abs(lo2-2*lo) > 1e-9 || math.Abs(hi2-2*hi) > 1e-9 {
		t.Errorf("twice as slow: %v-%v, want %v-%v", lo2, hi2, 2*lo, 2*hi)
	}
	// The same samples render the same interval every time.
	if lo3, hi3, _ := RatioInterval(same, same); lo3 != lo || hi3 != hi {
		t.Errorf("not reproducible: %v-%v then %v-%v", lo, hi, lo3, hi3)
	}
}

// samplesOf reads a JSON array of numbers (nil if v is not one).
func samplesOf(v any) []float64 {
	a, _ := v.([]any)
	var out []float64
	for _, x := range a {
		f, ok := x.(float64)
		if !ok {
			return nil
		}
		out = append(out, f)
	}
	return out
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{9, 9, 1, 9, 1}, 9},
	} {
		if got := Median(slices.Clone(c.in)); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// A harness's own output prints as one row per operation, a column per
// thread count in increasing order, and "-" where a count lacks the row.
func TestPrintByThreads(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rows := []Row{
		{Op: "retrieve", Threads: 2, DistautogradNs: f(25.7), NativeNs: f(39.7)},
		{Op: "retrieve", Threads: 1, DistautogradNs: f(28.2), NativeNs: f(37.2)},
		{Op: "new_release", Threads: 1, DistautogradNs: f(479), NativeNs: f(419)},
	}
	var out strings.Builder
	PrintByThreads(&out, rows)
	want := "| row, ns: distautograd / native = ratio, at threads | 1 | 2 |\n" +
		"|---|---:|---:|\n" +
		"| `retrieve` | 28.2 / 37.2 = 0.76 | 25.7 / 39.7 = 0.65 |\n" +
		"| `new_release` | 479 / 419 = 1.14 | - |\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

// The README's headline: per way of use, at one thread, the count, median
// and range of the ratios (floors and other thread counts left out), the
// training step with its interval; rewritten between its own markers,
// leaving the rest of the file alone.
func TestRewriteHeadline(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rep := Report{Date: "2026-01-02T03:04:05Z", Machine: MachineInfo{CPU: "Test CPU", Cores: 2, Go: "go1.26"}, Rows: []Row{
		{Level: "c", Threads: 1, Label: "floor: a call (C ABI)", Ratio: f(20)},
		{Level: "c", Op: "new_release_no_agent", Threads: 1, Label: "new+release, native without RPC agent (C ABI)", Ratio: f(0.0001)},
		{Level: "c", Threads: 1, Label: "retrieve (C ABI)", Ratio: f(0.6)},
		{Level: "c", Threads: 1, Label: "new+release of a context (C ABI)", Ratio: f(0.8)},
		{Level: "c", Threads: 1, Label: "is-valid (C ABI)", Ratio: f(0.2)},
		{Level: "c", Threads: 2, Label: "is-valid (C ABI)", Ratio: f(9)},
		{Level: "c", Threads: 1, Label: "retrieve (C++ API)", Ratio: f(0.62)},
		{Level: "python", Threads: 1, Label: "`with context()` cycle", Ratio: f(0.97)},
		{Level: "torch", Op: "training step, 3 workers", Torch: "1.13", Threads: 1, Label: "training step, 3 workers", Ratio: f(1.03),
			PairRatios: []float64{1.03, 1.03}},
		{Level: "torch", Op: "training step, 3 workers", Torch: "2.6", Threads: 1, Label: "training step, 3 workers (torch 2.6)", Ratio: f(1.1),
			PairRatios: []float64{1.1, 1.1}},
		{Level: "torch", Op: "cycle", Torch: "1.13", Threads: 1, Label: "cycle", Ratio: f(1.21)},
	}}
	path := filepath.Join(t.TempDir(), "README.md")
	before := "# title\n\n" + headlineBeginMarker + "\nold\n" + headlineEndMarker + "\n\nafter " + beginMarker + "\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RewriteHeadline(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		"From the `make bench` run of 2026-01-02 on 2 cores (Test CPU) with go1.26;",
		"| C ABI (`dac_*`), 1 thread | 3 | 0.60 | 0.20 - 0.80 |\n",
		"| C++ API (`distautograd.hpp`), 1 thread | 1 | 0.62 | 0.62 - 0.62 |\n",
		"| Python package, against torch's binding | 1 | 0.97 | 0.97 - 0.97 |\n",
		"| torch backend, against torch as built | 3 | 1.10 | 1.03 - 1.21 |\n",
		// Every torch row, by torch version: a row run on one torch only
		// has a dash for the other, and one without pairs no interval.
		"| torch operation | torch 1.13 | torch 2.6 |\n",
		"| training step, 3 workers | 1.03 (1.03-1.03) | 1.10 (1.10-1.10) |\n",
		"| cycle | 1.21 | - |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old") || !strings.HasPrefix(got, "# title\n\n"+headlineBeginMarker+"\n\n") ||
		!strings.HasSuffix(got, "\n"+headlineEndMarker+"\n\nafter "+beginMarker+"\n") {
		t.Errorf("rewritten file:\n%s", got)
	}
}

// The machine line says which changes of Go's runtime the measured library
// was built with, from the build's record (docs/go-runtime.md).
func TestGoRuntimeChanges(t *testing.T) {
	root := t.TempDir()
	if got := goRuntimeChanges(root); got != "" {
		t.Errorf("no record: %q, want nothing", got)
	}
	dir := filepath.Join(root, "build", "go-runtime")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ status, want string }{
		{"a-b: applied\nc: not applied: its line 0 times\nd: applied\n", " (runtime changes: a-b, d)"},
		{"a-b: not applied: switched off (GO_RUNTIME_OVERLAY=0)\nc: not applied: switched off (GO_RUNTIME_OVERLAY=0)\n", " (runtime as Go ships it)"},
	} {
		if err := os.WriteFile(filepath.Join(dir, "STATUS"), []byte(tc.status), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := goRuntimeChanges(root); got != tc.want {
			t.Errorf("STATUS %q: %q, want %q", tc.status, got, tc.want)
		}
	}
}

// The training step by thread: a table per torch entry, the step's medians
// and ratio above it, a total row under it; an entry without rows or not
// of the shape expected writes nothing.
func TestPrintTorchThreads(t *testing.T) {
	entry := `{"torch": "1.13", "step_ns": {"native": 10000000, "backend": 10500000}, "pairs": 2, "rounds": 3, "steps": 20,
	  "rows": [{"threads": "main thread", "native": {"count": 3, "cpu_us": 100, "wait_us": 10, "voluntary": 6, "involuntary": 1},
	                                      "backend": {"count": 3, "cpu_us": 110, "wait_us": 12, "voluntary": 6.5, "involuntary": 1}},
	           {"threads": "go runtime", "native": {"count": 0}, "backend": {"count": 15, "cpu_us": 270, "wait_us": 2000, "voluntary": 23, "involuntary": 3}}]}`
	var out strings.Builder
	printTorchThreads(&out, []json.RawMessage{json.RawMessage(entry), json.RawMessage(`{"torch": "2.6"}`), json.RawMessage(`[1]`)})
	got := out.String()
	for _, want := range []string{
		"#### The training step by thread, torch 1.13 (bench/torchthreads.py, 2 pairs of 3 rounds of 20 steps)\n",
		"Median step: torch as built 10.00 ms, under the backend 10.50 ms (1.05). ",
		"| main thread | 3 / 3 | 100 / 110 | 10 / 12 | 6.0 / 6.5 | 1.0 / 1.0 |\n",
		"| go runtime | 0 / 15 | 0 / 270 | 0 / 2000 | 0.0 / 23.0 | 0.0 / 3.0 |\n",
		"| all | 3 / 18 | 100 / 380 | 10 / 2012 | 6.0 / 29.5 | 1.0 / 4.0 |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if strings.Count(got, "####") != 1 {
		t.Errorf("want one table, got\n%s", got)
	}
}

// The README's headline says how many changes to Go's runtime the measured
// library made, never the changes' names (docs/go-runtime.md has those).
func TestHeadlineGoNamesNoChange(t *testing.T) {
	for _, tc := range []struct{ machine, want string }{
		{"go1.27.3 (runtime changes: take-a-p-from-c)", "go1.27.3, one change to its runtime ([docs/go-runtime.md](docs/go-runtime.md))"},
		{"go1.27.3 (runtime changes: a-b, d)", "go1.27.3, 2 changes to its runtime ([docs/go-runtime.md](docs/go-runtime.md))"},
		{"go1.27.3 (runtime as Go ships it)", "go1.27.3, its runtime as shipped"},
		{"go1.26", "go1.26"},
	} {
		if got := headlineGo(tc.machine); got != tc.want {
			t.Errorf("headlineGo(%q) = %q, want %q", tc.machine, got, tc.want)
		}
	}
	// The README's own headline, as make bench last wrote it.
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(readme), strings.TrimPrefix(runtimeChangesPrefix, " ")) {
		t.Errorf("README.md names the runtime changes (%q): make bench writes the headline without them", runtimeChangesPrefix)
	}
}
