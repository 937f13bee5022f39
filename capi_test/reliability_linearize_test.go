package capi_test

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

// Status codes of include/distautograd.h.
const (
	stOK                = 0
	stNotInitialized    = 1
	stInvalidArgument   = 2
	stAlreadyInit       = 3
	stNoCurrentContext  = 4
	stNotFound          = 5
	stAlreadyHasContext = 6
	stExhausted         = 7
	stBadHandle         = 8
	stLimit             = 9
	stForked            = 10
	stInternal          = 11
	stUnsupported       = 12
	stTimeout           = 13
)

var statusNames = []string{"DAC_OK", "DAC_ERR_NOT_INITIALIZED", "DAC_ERR_INVALID_ARGUMENT",
	"DAC_ERR_ALREADY_INITIALIZED", "DAC_ERR_NO_CURRENT_CONTEXT", "DAC_ERR_NOT_FOUND",
	"DAC_ERR_ALREADY_HAS_CONTEXT", "DAC_ERR_EXHAUSTED", "DAC_ERR_BAD_HANDLE", "DAC_ERR_LIMIT",
	"DAC_ERR_FORKED", "DAC_ERR_INTERNAL", "DAC_ERR_UNSUPPORTED", "DAC_ERR_TIMEOUT"}

func statusName(s int32) string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "status " + strconv.Itoa(int(s))
}

// headerAllows is what include/distautograd.h lets each function the race
// calls return for valid arguments, after dac_init, in the process that
// loaded the library (so never DAC_ERR_INVALID_ARGUMENT, _NOT_INITIALIZED or
// _FORKED), on handles the caller holds a reference to. DAC_ERR_INTERNAL is
// allowed nowhere.
var headerAllows = map[string][]int32{
	"dac_context_new":                 {stOK, stAlreadyHasContext, stExhausted, stLimit},
	"dac_context_current":             {stOK, stNoCurrentContext, stNotFound},
	"dac_context_retrieve":            {stOK, stNotFound},
	"dac_context_retrieve_if_present": {stOK},
	"dac_context_get_or_create":       {stOK, stLimit},
	"dac_context_is_valid":            {stOK, stNotFound},
	"dac_context_release":             {stOK, stNotFound},
	"dac_context_release_if_present":  {stOK},
	"dac_context_id":                  {stOK},
	"dac_context_ref":                 {stOK},
	"dac_context_unref":               {stOK},
	"dac_clear_current_context":       {stOK},
	"dac_current_context_id":          {stOK},
}

// Operation codes of c/linearize.c, in its order.
const (
	opNew uint8 = iota
	opCurrent
	opRetrieve
	opRetrieveIfPresent
	opGetOrCreate
	opIsValid
	opRelease
	opReleaseIfPresent
	opHandleID
	opHandleRef
	opHandleUnref
	opClearCurrent
	opCurrentID
)

var opFunctions = []string{"dac_context_new", "dac_context_current", "dac_context_retrieve",
	"dac_context_retrieve_if_present", "dac_context_get_or_create", "dac_context_is_valid",
	"dac_context_release", "dac_context_release_if_present", "dac_context_id", "dac_context_ref",
	"dac_context_unref", "dac_clear_current_context", "dac_current_context_id"}

// linRec is c/linearize.c's struct rec.
type linRec struct {
	Call, Ret       int64
	ID, Cur, Result int64
	Status          int32
	Op, Thread      uint8
	Epoch           uint16
	Handle          uint64 // the handle the call returned, 0 if none
}

func (r linRec) String() string {
	s := fmt.Sprintf("thread %d [%d, %d] %s(%d) -> %s", r.Thread, r.Call, r.Ret, opFunctions[r.Op], r.ID, statusName(r.Status))
	switch r.Op {
	case opRetrieveIfPresent:
		s += fmt.Sprintf(", found %d", r.Result)
	case opReleaseIfPresent:
		s += fmt.Sprintf(", released %d", r.Result)
	case opHandleID, opCurrentID:
		s += fmt.Sprintf(", wrote %d", r.Result)
	}
	if r.Cur != -1 && (r.Op == opNew || r.Op == opCurrent || r.Op == opRelease || r.Op == opReleaseIfPresent) {
		s += fmt.Sprintf(" (current id %d)", r.Cur)
	}
	if r.Handle != 0 { // which life of which record it got
		index, gen := container.SplitHandle(r.Handle)
		s += fmt.Sprintf(" [record %d, life %d]", index, gen)
	}
	return s
}

// containerModel is the container as one id sees it: is a context stored
// under it. The history is partitioned by epoch (each starts with an empty
// container, see c/linearize.c) and id; a thread's current id is its
// own (the program tracks it and records it with each call), so the calls
// that depend on it alone are checked without the model (localCheck).
var containerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		type key struct {
			epoch uint16
			id    int64
		}
		byKey := map[key][]porcupine.Operation{}
		for _, op := range history {
			r := op.Input.(linRec)
			k := key{r.Epoch, r.ID}
			byKey[k] = append(byKey[k], op)
		}
		// In a fixed order, so that describeIllegal finds the partitions
		// where porcupine's answer has them.
		keys := make([]key, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b key) int {
			if a.epoch != b.epoch {
				return int(a.epoch) - int(b.epoch)
			}
			return cmp.Compare(a.id, b.id)
		})
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return false },
	Step: func(state, input, output any) (bool, any) {
		present := state.(bool)
		r := input.(linRec)
		switch r.Op {
		case opNew: // a fresh id: never stored before
			return r.Status == stOK && !present, true
		case opCurrent, opRetrieve, opIsValid:
			return (r.Status == stOK) == present && (r.Status == stOK || r.Status == stNotFound), present
		case opRetrieveIfPresent:
			return r.Status == stOK && (r.Result == 1) == present && (r.Result == 0 || r.Result == 1), present
		case opGetOrCreate:
			return r.Status == stOK, true
		case opRelease:
			return (r.Status == stOK) == present && (r.Status == stOK || r.Status == stNotFound), false
		case opReleaseIfPresent:
			return r.Status == stOK && (r.Result == 1) == present && (r.Result == 0 || r.Result == 1), false
		}
		return false, present
	},
	DescribeOperation: func(input, output any) string { return input.(linRec).String() },
	DescribeState: func(state any) string {
		if state.(bool) {
			return "stored"
		}
		return "absent"
	},
}

// localCheck checks a call whose outcome the calling thread alone decides,
// and says whether the model must check it too.
func localCheck(r linRec) (problem string, forModel bool) {
	want := func(st int32) string {
		if r.Status != st {
			return "want " + statusName(st)
		}
		return ""
	}
	switch r.Op {
	case opNew:
		if r.Cur != -1 {
			return want(stAlreadyHasContext), false
		}
		return want(stOK), true
	case opCurrent:
		if r.Cur == -1 {
			return want(stNoCurrentContext), false
		}
		return "", true
	case opHandleID:
		if p := want(stOK); p != "" {
			return p, false
		}
		if r.Result != r.ID {
			return fmt.Sprintf("the handle of context %d read as %d", r.ID, r.Result), false
		}
		return "", false
	case opCurrentID:
		if p := want(stOK); p != "" {
			return p, false
		}
		if r.Result != r.Cur {
			return fmt.Sprintf("the thread's own calls left its current id at %d, the library says %d", r.Cur, r.Result), false
		}
		return "", false
	case opHandleRef, opHandleUnref, opClearCurrent:
		return want(stOK), false
	}
	return "", true
}

// linearizeRun is one run of c/linearize.c and what it recorded.
type linearizeRun struct {
	recs   []linRec
	stdout string
}

// checkHistoriesIn checks every history-* file in dir as checkLinearizeRun does.
func checkHistoriesIn(t *testing.T, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "history-*"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no history-* file in %s", dir)
	for _, name := range files {
		if strings.HasSuffix(name, ".out") {
			continue
		}
		out, err := os.ReadFile(name + ".out")
		require.NoError(t, err, "each history has its run's standard output beside it")
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		recs := make([]linRec, len(b)/binary.Size(linRec{}))
		require.NoError(t, binary.Read(bytes.NewReader(b), binary.LittleEndian, recs))
		threads := map[uint8]bool{}
		for _, r := range recs {
			threads[r.Thread] = true
		}
		t.Logf("%s: %d calls from %d threads", filepath.Base(name), len(recs), len(threads))
		checkLinearizeRun(t, linearizeRun{recs: recs, stdout: string(out)})
	}
}

func runLinearize(t *testing.T, bin string, threads, ops int, seed int64) linearizeRun {
	t.Helper()
	hist := filepath.Join(t.TempDir(), fmt.Sprintf("history-%d", seed))
	r := runEnv(t, nil, bin, strconv.Itoa(threads), strconv.Itoa(ops), strconv.FormatInt(seed, 10), hist)
	require.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	f, err := os.Open(hist)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	recs := make([]linRec, st.Size()/int64(binary.Size(linRec{})))
	require.NoError(t, binary.Read(f, binary.LittleEndian, recs))
	if dir := os.Getenv("DAC_LINEARIZE_KEEP"); dir != "" { // for a post-mortem
		if b, err := os.ReadFile(hist); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(hist)), b, 0o644)
		}
	}
	require.NoError(t, os.Remove(hist))
	return linearizeRun{recs: recs, stdout: r.Stdout}
}

// checkLinearizeRun checks one run: statuses against the header, the
// thread-local outcomes, linearizability, nothing left.
func checkLinearizeRun(t *testing.T, run linearizeRun) {
	t.Helper()
	// Every status one the header allows.
	bad := map[string]int{}
	allowed := func(r linRec) bool { return slices.Contains(headerAllows[opFunctions[r.Op]], r.Status) }
	for _, r := range run.recs {
		if !allowed(r) {
			bad[opFunctions[r.Op]+" returned "+statusName(r.Status)]++
		}
	}
	if len(bad) > 0 {
		var lines []string
		for k, n := range bad {
			lines = append(lines, fmt.Sprintf("%s (%d times), which its header doc does not allow", k, n))
		}
		sort.Strings(lines)
		t.Errorf("statuses the header does not allow:\n%s\nthe messages:\n%s", strings.Join(lines, "\n"), run.stdout)
	}
	// What each thread decides alone.
	var ops []porcupine.Operation
	problems := 0
	for _, r := range run.recs {
		p, forModel := localCheck(r)
		if p != "" {
			if problems++; problems <= 10 {
				t.Errorf("%s: %s", r, p)
			}
		}
		// A status the header does not allow was reported above.
		if forModel && p == "" && allowed(r) {
			ops = append(ops, porcupine.Operation{ClientId: int(r.Thread), Input: r, Call: r.Call, Output: nil, Return: r.Ret})
		}
	}
	// The rest: linearizable against the model.
	res, info := porcupine.CheckOperationsVerbose(containerModel, ops, 5*time.Minute)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		t.Errorf("the history of %d calls is not linearizable:\n%s", len(ops), describeIllegal(ops, info))
		if dir := os.Getenv("DAC_LINEARIZE_HTML"); dir != "" {
			path := filepath.Join(dir, fmt.Sprintf("%s-%d.html", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano()))
			if err := porcupine.VisualizePath(containerModel, info, path); err == nil {
				t.Logf("visualization: %s", path)
			}
		}
	default:
		t.Errorf("porcupine could not decide linearizability of %d calls in 5 minutes", len(ops))
	}
	assert.Contains(t, run.stdout, "\nnum_contexts = 0\nlive_handles = 0\n", "something was left:\n%s", run.stdout)
	assert.Contains(t, run.stdout, "references held uncounted at once, at most: some",
		"no lookup held its reference uncounted: the history does not cover them")
}

// How many calls of the partition describeIllegal shows before the first
// it could not place and from it on: few enough that a CI log, which keeps
// a failure's first and last lines, keeps them all.
const (
	linWindowBefore = 16
	linWindowAfter  = 8
)

// describeIllegal shows, for the first partition that is not linearizable,
// the longest prefix porcupine could linearize and the calls overlapping the
// first one it could not place.
func describeIllegal(ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	parts := containerModel.Partition(ops)
	lin := info.PartialLinearizationsOperations()
	for p, part := range parts {
		if p >= len(lin) || len(lin[p]) == 0 {
			continue
		}
		best := lin[p][0]
		for _, l := range lin[p] {
			if len(l) > len(best) {
				best = l
			}
		}
		if len(best) == len(part) {
			continue
		}
		placed := map[linRec]bool{}
		for _, op := range best {
			placed[op.Input.(linRec)] = true
		}
		sorted := slices.Clone(part)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
		var first *porcupine.Operation
		for i := range sorted {
			if !placed[sorted[i].Input.(linRec)] {
				first = &sorted[i]
				break
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "epoch %d, id %d: %d of its %d calls linearize; the first that cannot be placed:\n  %s\n", first.Input.(linRec).Epoch, first.Input.(linRec).ID, len(best), len(part), first.Input.(linRec))
		// The calls before it (by call time), and those that overlap it.
		b.WriteString("calls of that id around it (by call time; * = in the linearized prefix):\n")
		at := slices.IndexFunc(sorted, func(op porcupine.Operation) bool { return op.Input.(linRec) == first.Input.(linRec) })
		for i := max(0, at-linWindowBefore); i < len(sorted) && i < at+linWindowAfter; i++ {
			r := sorted[i].Input.(linRec)
			mark := " "
			if placed[r] {
				mark = "*"
			}
			fmt.Fprintf(&b, " %s %s\n", mark, r)
		}
		// A call that ran long (preempted, or retrying inside the library)
		// can take effect anywhere in its interval: those that ended
		// shortly before are suspects the window above may not reach.
		b.WriteString("calls of that id that took over 100 µs and ended in the 5 ms before it:\n")
		for _, op := range sorted {
			if op.Return-op.Call > 100_000 && op.Return <= first.Call && op.Return > first.Call-5_000_000 {
				fmt.Fprintf(&b, "   %s\n", op.Input.(linRec))
			}
		}
		return b.String()
	}
	return "(no partition to show)"
}

// longRun reports whether DAC_LONG=1 asks for the long version of the
// reliability tests (make fuzz).
func longRun() bool { return os.Getenv("DAC_LONG") == "1" }

// 6 threads race every operation of the container over 4 ids (two of
// another worker, two replaced by contexts the threads make) and ref, unref
// and read handles that several of them hold: every status is one the
// header allows its function (never DAC_ERR_INTERNAL), what a thread decides
// alone (its current id, its handles) is right, and the history is
// linearizable against a model of the container (porcupine). `make test`
// runs 3 rounds of 50,000 calls per thread; DAC_LONG=1 (make fuzz) runs
// DAC_LONG_ROUNDS rounds (default 40) of 200,000.
//
// DAC_LINEARIZE_FROM=DIR checks the histories that c/linearize.c wrote
// into DIR (as `linearize THREADS OPS SEED DIR/history-N >DIR/history-N.out`,
// on a machine with more cores, say) instead of making new ones.
func TestLinearizableContainer(t *testing.T) {
	t.Parallel()
	if dir := os.Getenv("DAC_LINEARIZE_FROM"); dir != "" {
		checkHistoriesIn(t, dir)
		return
	}
	bin := buildC(t, "c/linearize.c")
	rounds, ops := 3, 50000
	if longRun() {
		rounds, ops = 40, 200000
		if n, err := strconv.Atoi(os.Getenv("DAC_LONG_ROUNDS")); err == nil && n > 0 {
			rounds = n
		}
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d (rounds use seed, seed+1, ...)", seed)
	total, done := 0, 0
	for ; done < rounds && !t.Failed(); done++ {
		run := runLinearize(t, bin, 6, ops, seed+int64(done))
		checkLinearizeRun(t, run)
		total += len(run.recs)
	}
	t.Logf("%d rounds, %d calls checked", done, total)
}

// The checker itself: histories that no container could give are caught
// (a lookup that sees a context released before it began, a release that
// finds one that two releases before it already took), and described; one
// where the calls overlap is accepted whichever way they went.
func TestContainerModelCatchesViolations(t *testing.T) {
	const id = 5<<48 | 1
	op := func(thread uint8, call, ret int64, o uint8, status int32, result int64) porcupine.Operation {
		r := linRec{Call: call, Ret: ret, ID: id, Cur: -1, Result: result, Status: status, Op: o, Thread: thread}
		return porcupine.Operation{ClientId: int(thread), Input: r, Call: call, Return: ret}
	}
	// The lookup that cannot be placed names the life it got.
	found := op(1, 40, 50, opRetrieve, stOK, 0)
	rec := found.Input.(linRec)
	rec.Handle = container.Handle(3, 2)
	found.Input = rec
	for name, h := range map[string][]porcupine.Operation{
		"found after its release": {
			op(0, 0, 10, opGetOrCreate, stOK, 0),
			op(0, 20, 30, opRelease, stOK, 0),
			found,
		},
		"released twice": {
			op(0, 0, 10, opGetOrCreate, stOK, 0),
			op(1, 20, 30, opReleaseIfPresent, stOK, 1),
			op(0, 40, 50, opReleaseIfPresent, stOK, 1),
		},
		"not found while stored": {
			op(0, 0, 10, opGetOrCreate, stOK, 0),
			op(1, 20, 30, opIsValid, stNotFound, 0),
		},
	} {
		res, info := porcupine.CheckOperationsVerbose(containerModel, h, time.Minute)
		assert.Equal(t, porcupine.Illegal, res, name)
		d := describeIllegal(h, info)
		assert.Contains(t, d, "the first that cannot be placed", name)
		if slices.Contains(h, found) {
			assert.Contains(t, d, "dac_context_retrieve(1407374883553281) -> DAC_OK [record 3, life 2]", name)
		}
	}
	overlapping := []porcupine.Operation{
		op(0, 0, 10, opGetOrCreate, stOK, 0),
		op(0, 20, 40, opRelease, stOK, 0),
		op(1, 30, 50, opRetrieve, stOK, 0), // began before the release returned
		op(1, 60, 70, opRetrieveIfPresent, stOK, 0),
	}
	assert.Equal(t, porcupine.Ok, porcupine.CheckOperationsTimeout(containerModel, overlapping, time.Minute))
}
