package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MachineInfo is what the run ran on: enough to tell whether two runs can be
// compared.
type MachineInfo struct {
	CPU      string `json:"cpu"`                      // lscpu's model name, family and model
	Cores    int    `json:"cores"`                    // runtime.NumCPU
	Virtual  string `json:"virtualization,omitempty"` // hypervisor, threads per core
	MemTotal string `json:"memory"`
	OS       string `json:"os"`
	Libc     string `json:"libc"`
	CXX      string `json:"cxx"`
	Go       string `json:"go"`
	Torch    string `json:"torch"`
	LoadAvg  string `json:"load_at_start"` // /proc/loadavg's 1, 5 and 15 minute figures
}

// Machine describes this machine, with the torch of cfg.Python.
func Machine(cfg Config) MachineInfo {
	m := MachineInfo{CPU: "unknown CPU", Cores: runtime.NumCPU(), Go: runtime.Version() + goRuntimeChanges(cfg.Root)}
	if out, err := exec.Command("lscpu").Output(); err == nil {
		fields := map[string]string{}
		for _, line := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		if v := fields["Model name"]; v != "" {
			m.CPU = v
			if f, mo := fields["CPU family"], fields["Model"]; f != "" && mo != "" {
				m.CPU += fmt.Sprintf(" (family %s, model %s)", f, mo)
			}
		}
		if v := fields["Hypervisor vendor"]; v != "" {
			m.Virtual = v
		}
		if tpc := fields["Thread(s) per core"]; tpc != "" {
			per := tpc + " threads per core"
			if tpc == "1" {
				per = "1 thread per core"
			}
			m.Virtual = strings.TrimPrefix(m.Virtual+", "+per, ", ")
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64); err == nil {
					m.MemTotal = fmt.Sprintf("%.0f GiB", kb/(1<<20))
				}
			}
		}
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	m.Libc = firstLine("getconf", "GNU_LIBC_VERSION")
	if v := firstLine("g++", "-dumpfullversion"); v != "" {
		m.CXX = "g++ " + v
	}
	if v := firstLine(cfg.Python, "-c", "import torch; print(torch.__version__)"); v != "" {
		m.Torch = "torch " + v + " (" + cfg.Python + ")"
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

func firstLine(name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "GLOG_minloglevel=2")
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// How the machine line (MachineInfo.Go) says which changes of Go's runtime
// the measured library took: goRuntimeChanges writes it, headlineGo reads it.
const (
	runtimeChangesPrefix = " (runtime changes: "
	runtimeAsShipped     = " (runtime as Go ships it)"
)

// goRuntimeChanges says which changes of Go's runtime the library under
// measure was built with (docs/go-runtime.md), from the build's record
// (build/go-runtime/STATUS): " (runtime changes: a, b)", " (runtime as
// Go ships it)", or nothing where there is no record.
func goRuntimeChanges(root string) string {
	b, err := os.ReadFile(filepath.Join(root, "build", "go-runtime", "STATUS"))
	if err != nil {
		return ""
	}
	var applied []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if name, ok := strings.CutSuffix(line, ": applied"); ok {
			applied = append(applied, name)
		}
	}
	if len(applied) == 0 {
		return runtimeAsShipped
	}
	return runtimeChangesPrefix + strings.Join(applied, ", ") + ")"
}

// headlineGo is the machine line's Go as the README says it: the version,
// and how many changes to its runtime the library's builds made, with a
// link to the page that names them (the README names none).
func headlineGo(goLine string) string {
	if version, ok := strings.CutSuffix(goLine, runtimeAsShipped); ok {
		return version + ", its runtime as shipped"
	}
	version, names, ok := strings.Cut(goLine, runtimeChangesPrefix)
	if !ok {
		return goLine
	}
	changes := "one change"
	if n := len(strings.Split(strings.TrimSuffix(names, ")"), ", ")); n > 1 {
		changes = fmt.Sprintf("%d changes", n)
	}
	return version + ", " + changes + " to its runtime ([docs/go-runtime.md](docs/go-runtime.md))"
}

func (m MachineInfo) String() string {
	parts := []string{fmt.Sprintf("%s, %d cores", m.CPU, m.Cores)}
	if m.Virtual != "" {
		parts = append(parts, m.Virtual)
	}
	for _, p := range []string{m.MemTotal, m.OS, m.Libc, m.CXX, m.Go, m.Torch} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	s := strings.Join(parts, "; ")
	if m.LoadAvg != "" {
		s += "; load average at the start " + m.LoadAvg
	}
	return s
}

// PrintTables writes the report as Markdown: the machine and date, a table
// per level, and the memory figures.
func PrintTables(w io.Writer, rep Report) {
	date := rep.Date
	if t, err := time.Parse(time.RFC3339, rep.Date); err == nil {
		date = t.Format("2006-01-02 15:04 UTC")
	}
	fmt.Fprintf(w, "Run of %s (`go run ./bench %s`, %.0f s).\n\n", date, rep.Args, rep.Seconds)
	fmt.Fprintf(w, "Machine: %s.\n\n", rep.Machine)
	switch rep.Clock {
	case "cpu", "":
		fmt.Fprintln(w, "Samples timed by each thread's CPU time (`-clock cpu`); medians of alternated samples; ratio = distautograd / native (below 1: distautograd is faster).")
	default:
		fmt.Fprintln(w, "Samples timed by the wall clock (`-clock wall`); medians of alternated samples; ratio = distautograd / native (below 1: distautograd is faster).")
	}
	for _, level := range []string{"c", "python", "torch"} {
		var rows []Row
		for _, r := range rep.Rows {
			if r.Level == level {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		title := map[string]string{
			"c":      "C level (bench/cxx/harness.cpp)",
			"python": "Python level (bench/pybench.py, one process per implementation)",
			"torch":  "torch level (bench/torchbench.py: torch's own distributed autograd under the backend against torch as built, in pairs of processes taking turns; wall time)",
		}[level]
		native := map[string]string{"c": "native", "python": "torch", "torch": "torch as built"}[level]
		fmt.Fprintf(w, "\n#### %s\n\n", title)
		// Each row's interval cell, "-" where its samples give none.
		cells := make([]string, len(rows))
		intervals := false
		for i, r := range rows {
			cells[i] = "-"
			if lo, hi, ok := r.Interval(); ok {
				cells[i], intervals = ratio(&lo)+"-"+ratio(&hi), true
			}
		}
		head, rule := fmt.Sprintf("| operation | threads | distautograd ns/op | %s ns/op | ratio |", native), "|---|---:|---:|---:|---:|"
		if intervals {
			head += " 90 % interval |"
			rule += "---:|"
		}
		fmt.Fprintf(w, "%s\n%s\n", head, rule)
		for i, r := range rows {
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s |", r.Label, r.Threads, num(r.DistautogradNs, 1), num(r.NativeNs, 1), ratio(r.Ratio))
			if intervals {
				fmt.Fprintf(w, " %s |", cells[i])
			}
			fmt.Fprintln(w)
		}
		if intervals {
			fmt.Fprintf(w, "\nThe interval: where the ratio of the two medians falls in 90 %% of %d resamplings of this run's %s. %s\n",
				intervalResamples, resampled[level], "A row whose interval holds 1.0 is not settled by the run.")
		}
		if level == "c" {
			fmt.Fprintln(w, "\nWhat one iteration calls (distautograd / native):")
			fmt.Fprintln(w)
			seen := map[string]bool{}
			for _, r := range rows {
				if !seen[r.Op] {
					seen[r.Op] = true
					fmt.Fprintf(w, "- %s: %s / %s\n", r.Label, r.DacCall, r.NativeCall)
				}
			}
		}
	}
	printTorchThreads(w, rep.TorchThreads)
	if len(rep.Memory.Live)+len(rep.Memory.Cycles) > 0 {
		fmt.Fprintln(w, "\n#### Memory (one process per measurement)")
		fmt.Fprintln(w)
		for _, m := range rep.Memory.Live {
			var v struct {
				Impl     string  `json:"impl"`
				N        int     `json:"live_contexts"`
				Before   int64   `json:"rss_before_bytes"`
				After    int64   `json:"rss_after_bytes"`
				PerCtx   float64 `json:"bytes_per_context"`
				Duration float64 `json:"seconds"`
			}
			if json.Unmarshal(m, &v) == nil {
				fmt.Fprintf(w, "- %s: %.0f bytes per live context at %d live contexts (RSS %s -> %s)\n", v.Impl, v.PerCtx, v.N, mib(v.Before), mib(v.After))
			}
		}
		for _, m := range rep.Memory.Cycles {
			var v struct {
				Impl   string  `json:"impl"`
				Cycles int     `json:"cycles"`
				Agent  bool    `json:"agent"`
				Secs   float64 `json:"seconds"`
				Points []struct {
					Cycles int   `json:"cycles"`
					RSS    int64 `json:"rss_bytes"`
				} `json:"points"`
			}
			if json.Unmarshal(m, &v) == nil {
				var pts []string
				for _, p := range v.Points {
					pts = append(pts, mib(p.RSS))
				}
				note := ""
				if v.Agent {
					note = ", a stand-in RPC agent set"
				}
				fmt.Fprintf(w, "- %s: RSS over %d new/release cycles (%.1f s%s), every %d: %s\n", v.Impl, v.Cycles, v.Secs, note, v.Cycles/max(1, len(v.Points)), strings.Join(pts, " "))
			}
		}
	}
	if len(rep.Runtime) > 0 {
		printBusy(w, rep.Runtime)
	}
}

// What the interval resamples, per level, for the note under its table.
var resampled = map[string]string{
	"c":      "samples (each side's repetitions drawn again, with replacement)",
	"python": "samples (each side's samples, from all its processes, drawn again with replacement)",
	"torch":  "pairs of processes (each pair's ratio, the median of its rounds' distautograd chunk / native chunk, drawn again with replacement; the ratio is the median of the pairs')",
}

// intervalResamples is how many resamplings an interval draws.
const intervalResamples = 4000

// PairedInterval returns the 5th and 95th percentiles of the median of
// intervalResamples bootstrap resamples of ratios (drawn with replacement,
// from a fixed seed): how far a median of pair ratios could move on a run
// like it. ok is false for fewer than two ratios or a non-positive one.
func PairedInterval(ratios []float64) (lo, hi float64, ok bool) {
	if len(ratios) < 2 || slices.ContainsFunc(ratios, func(v float64) bool { return v <= 0 }) {
		return 0, 0, false
	}
	b := make([]float64, len(ratios))
	lo, hi = bootstrap(func(rng *rand.Rand) float64 { return Median(redraw(rng, b, ratios)) })
	return lo, hi, true
}

// RatioInterval returns the 5th and 95th percentiles of median(d')/median(n')
// over intervalResamples bootstrap resamples d' of d and n' of n (each drawn with
// replacement, from a fixed seed, so a report renders the same every time):
// how far the run's ratio of medians could move on a run like it. ok is
// false when a side has fewer than two samples or a non-positive one.
func RatioInterval(d, n []float64) (lo, hi float64, ok bool) {
	if len(d) < 2 || len(n) < 2 || slices.ContainsFunc(n, func(v float64) bool { return v <= 0 }) {
		return 0, 0, false
	}
	bd, bn := make([]float64, len(d)), make([]float64, len(n))
	lo, hi = bootstrap(func(rng *rand.Rand) float64 {
		return Median(redraw(rng, bd, d)) / Median(redraw(rng, bn, n))
	})
	return lo, hi, true
}

// bootstrap returns the 5th and 95th percentiles of stat over
// intervalResamples draws, from one fixed seed, so that a report renders
// the same every time.
func bootstrap(stat func(rng *rand.Rand) float64) (lo, hi float64) {
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([]float64, intervalResamples)
	for i := range vals {
		vals[i] = stat(rng)
	}
	slices.Sort(vals)
	return vals[intervalResamples*5/100], vals[intervalResamples*95/100-1]
}

// redraw fills dst with len(dst) values drawn from src with replacement.
func redraw(rng *rand.Rand, dst, src []float64) []float64 {
	for j := range dst {
		dst[j] = src[rng.IntN(len(src))]
	}
	return dst
}

func num(p *float64, prec int) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(*p, 'f', prec, 64)
}

// ratio prints a ratio with two significant digits at least (0.00045, 0.21,
// 1.4, 33): a small one must not print as 0.00.
func ratio(p *float64) string {
	if p == nil {
		return "-"
	}
	r := *p
	switch {
	case r <= 0:
		return strconv.FormatFloat(r, 'f', 2, 64)
	case r >= 100:
		return strconv.FormatFloat(r, 'f', 0, 64)
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	case r >= 0.1:
		return strconv.FormatFloat(r, 'f', 2, 64)
	}
	digits := 1 - int(math.Floor(math.Log10(r)))
	return strconv.FormatFloat(r, 'f', digits, 64)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// The sections make bench rewrites lie between these lines: the tables
// (docs/benchmarks.md, -tables) and the headline ratios (README.md, -headline).
const (
	beginMarker         = "<!-- bench:begin (make bench writes this section from build/bench.json; edits are lost) -->"
	endMarker           = "<!-- bench:end -->"
	headlineBeginMarker = "<!-- bench:headline:begin (make bench writes this section from build/bench.json; edits are lost) -->"
	headlineEndMarker   = "<!-- bench:headline:end -->"
)

// RewriteSection replaces what lies between the tables' markers in path
// with the report's tables.
func RewriteSection(path string, rep Report) error {
	return rewriteBetween(path, beginMarker, endMarker, func(w io.Writer) { PrintTables(w, rep) })
}

// RewriteHeadline replaces what lies between the headline's markers in
// path with the report's headline ratios.
func RewriteHeadline(path string, rep Report) error {
	return rewriteBetween(path, headlineBeginMarker, headlineEndMarker, func(w io.Writer) { PrintHeadline(w, rep) })
}

func rewriteBetween(path, beginAt, endAt string, render func(io.Writer)) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin := bytes.Index(b, []byte(beginAt))
	end := bytes.Index(b, []byte(endAt))
	if begin < 0 || end < begin {
		return fmt.Errorf("%s has no section between %q and %q to rewrite", path, beginAt, endAt)
	}
	var out bytes.Buffer
	out.Write(b[:begin+len(beginAt)])
	out.WriteString("\n\n")
	render(&out)
	out.WriteString("\n")
	out.Write(b[end:])
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// PrintHeadline writes what a reader of the README needs of a run: for
// each way the library is used, at one thread, how many operations were
// timed, their median ratio and the range (left out: the floors, which
// time the call itself, and native's release without an RPC agent, an
// exception path no job takes); and the torch level's training step with
// its interval.
func PrintHeadline(w io.Writer, rep Report) {
	date := rep.Date
	if t, err := time.Parse(time.RFC3339, rep.Date); err == nil {
		date = t.Format("2006-01-02")
	}
	fmt.Fprintf(w, "From the `make bench` run of %s on %d cores (%s) with %s; every row, the machine and how it measures: [docs/benchmarks.md](docs/benchmarks.md).\n\n",
		date, rep.Machine.Cores, rep.Machine.CPU, headlineGo(rep.Machine.Go))
	fmt.Fprintln(w, "| used through | operations timed | median ratio | lowest - highest |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	groups := []struct {
		name  string
		match func(Row) bool
	}{
		{"C ABI (`dac_*`), 1 thread", func(r Row) bool { return r.Level == "c" && strings.HasSuffix(r.Label, "(C ABI)") }},
		{"C++ API (`distautograd.hpp`), 1 thread", func(r Row) bool { return r.Level == "c" && strings.HasSuffix(r.Label, "(C++ API)") }},
		{"Python package, against torch's binding", func(r Row) bool { return r.Level == "python" }},
		{"torch backend, against torch as built", func(r Row) bool { return r.Level == "torch" }},
	}
	for _, g := range groups {
		var ratios []float64
		for _, r := range rep.Rows {
			if g.match(r) && r.Threads == 1 && r.Ratio != nil && !strings.HasPrefix(r.Label, "floor") && !strings.HasSuffix(r.Op, "_no_agent") {
				ratios = append(ratios, *r.Ratio)
			}
		}
		if len(ratios) == 0 {
			continue
		}
		slices.Sort(ratios)
		med := Median(ratios)
		fmt.Fprintf(w, "| %s | %d | %s | %s - %s |\n", g.name, len(ratios), ratio(&med), ratio(&ratios[0]), ratio(&ratios[len(ratios)-1]))
	}
	printTorchByVersion(w, rep.Rows)
	fmt.Fprintln(w, "\nRatio = distautograd's time / the native component's time for the same operation, measured in alternation on one machine: below 1.0, distautograd is faster.")
}

// printTorchByVersion writes the torch level's rows as one table, an
// operation per row and a torch version per column, each cell the ratio
// and its interval: the torch backend's figures, whole, for every torch run.
func printTorchByVersion(w io.Writer, rows []Row) {
	var ops, versions []string
	cell := map[string]map[string]Row{}
	for _, r := range rows {
		if r.Level != "torch" || r.Ratio == nil {
			continue
		}
		v := r.Torch
		if v == "" {
			v = "?"
		}
		if cell[r.Op] == nil {
			ops = append(ops, r.Op)
			cell[r.Op] = map[string]Row{}
		}
		if !slices.Contains(versions, v) {
			versions = append(versions, v)
		}
		cell[r.Op][v] = r
	}
	if len(ops) == 0 {
		return
	}
	fmt.Fprintln(w, "\nThe torch backend against torch as built, each row (ratio, and its 90 % interval over the run's pairs of processes):")
	fmt.Fprintln(w)
	head, rule := "| torch operation |", "|---|"
	for _, v := range versions {
		head += " torch " + v + " |"
		rule += "---:|"
	}
	fmt.Fprintf(w, "%s\n%s\n", head, rule)
	for _, op := range ops {
		fmt.Fprintf(w, "| %s |", op)
		for _, v := range versions {
			r, ok := cell[op][v]
			if !ok {
				fmt.Fprint(w, " - |")
				continue
			}
			fmt.Fprintf(w, " %s", ratio(r.Ratio))
			if lo, hi, ok := r.Interval(); ok {
				fmt.Fprintf(w, " (%s-%s)", ratio(&lo), ratio(&hi))
			}
			fmt.Fprint(w, " |")
		}
		fmt.Fprintln(w)
	}
}

// PrintByThreads writes a harness's own output (its JSON rows, as kept in
// docs/perf-data/ from machines make bench did not run on) as one Markdown
// table: an operation per row, a thread count per column, each cell
// "distautograd ns / native ns = ratio".
func PrintByThreads(w io.Writer, rows []Row) {
	var ops []string
	var threads []int
	cell := map[string]map[int]Row{}
	for _, r := range rows {
		if cell[r.Op] == nil {
			cell[r.Op] = map[int]Row{}
			ops = append(ops, r.Op)
		}
		cell[r.Op][r.Threads] = r
		if !slices.Contains(threads, r.Threads) {
			threads = append(threads, r.Threads)
		}
	}
	slices.Sort(threads)
	fmt.Fprint(w, "| row, ns: distautograd / native = ratio, at threads |")
	for _, t := range threads {
		fmt.Fprintf(w, " %d |", t)
	}
	fmt.Fprint(w, "\n|---|")
	for range threads {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, op := range ops {
		fmt.Fprintf(w, "| `%s` |", op)
		for _, t := range threads {
			r, ok := cell[op][t]
			if !ok || r.DistautogradNs == nil || r.NativeNs == nil || *r.NativeNs <= 0 {
				fmt.Fprint(w, " - |")
				continue
			}
			q := *r.DistautogradNs / *r.NativeNs
			fmt.Fprintf(w, " %s / %s = %s |", short(*r.DistautogradNs), short(*r.NativeNs), ratio(&q))
		}
		fmt.Fprintln(w)
	}
}

// short prints a time in ns with three significant digits at most, one
// decimal below 100 (3.6, 28.4, 479, 7027).
func short(ns float64) string {
	if ns >= 100 {
		return strconv.FormatFloat(math.Round(ns), 'f', 0, 64)
	}
	return strconv.FormatFloat(ns, 'f', 1, 64)
}
