package container_test

// Fuzz targets. `go test` (and so `make test`) runs each over its seed corpus
// in testdata/fuzz/; `make fuzz` explores further (FUZZTIME per target).
//
//   - FuzzOps decodes the input into operations of several threads on one
//     container, runs them one at a time in the interleaving the input
//     chooses, and checks every result against fuzzModel, a small reference
//     of the native component's behaviour (values, error codes and exact
//     messages, which context object a lookup returns).
//   - FuzzOpsConcurrent runs the same kind of operations with one goroutine
//     per thread, at once, and checks invariants only (ids unique and in
//     range, counts consistent, only the errors an operation may give).
//   - FuzzIDLayout checks FirstID, MaxIDOf, OriginWorker and exhaustion for
//     any worker id and counter offset.

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"testing"

	"distautograd/container"
)

const mask = container.AutoIncrementMask

// ---- decoding ----

// fuzzInput is a decoded FuzzOps input: the worker, where the id counters
// start, how many threads, and the operations.
//
// Layout: worker (2 bytes, little endian), threads (1 + b%4), context counter
// mode, message counter mode (b >= 128: start 127-or-fewer ids before max_id,
// so exhaustion is reachable; else at 0), then 3 bytes per operation: kind,
// thread (low 2 bits; the rest picks values), argument.
type fuzzInput struct {
	worker               int64
	threads              int
	ctxOffset, msgOffset int64
	ops                  []fuzzOp
}

type fuzzOp struct {
	kind   byte
	thread int
	sel    byte // the high bits of the thread byte
	arg    byte
}

func counterOffset(b byte) int64 {
	if b >= 128 {
		return mask - int64(b&0x7f) // b&0x7f ids left before max_id
	}
	return 0
}

func decodeFuzzInput(data []byte) (fuzzInput, bool) {
	if len(data) < 5 {
		return fuzzInput{}, false
	}
	in := fuzzInput{
		worker:    int64(data[0]) | int64(data[1])<<8,
		threads:   1 + int(data[2]%4),
		ctxOffset: counterOffset(data[3]),
		msgOffset: counterOffset(data[4]),
	}
	for rest := data[5:]; len(rest) >= 3 && len(in.ops) < 2000; rest = rest[3:] {
		in.ops = append(in.ops, fuzzOp{kind: rest[0] % opKinds, thread: int(rest[1]&3) % in.threads, sel: rest[1] >> 2, arg: rest[2]})
	}
	return in, true
}

// The operations.
const (
	opNew byte = iota
	opCurrent
	opRetrieve
	opRetrieveIfPresent
	opGetOrCreate
	opIsValid
	opRelease
	opReleaseIfPresent
	opMessageID
	opMessageIDBlock
	opSetCurrent
	opForceCurrent
	opClearCurrent
	opAddKnownWorker
	opAddFunction
	opFunction
	opReadContext
	opSetMaxContexts
	opReleaseOfWorker
	opReapIdle
	opKinds
)

// pickID chooses the id an operation is about: one issued earlier, one
// about to be, another worker's, the thread's current (perhaps stale), or
// an extreme value.
func pickID(worker int64, issued []int64, current int64, sel, arg byte) int64 {
	switch sel % 8 {
	case 0, 1, 2:
		if len(issued) > 0 {
			return issued[int(arg)%len(issued)]
		}
		return container.FirstID(worker)
	case 3:
		return container.FirstID(worker) + int64(arg%8) // issued or still to come
	case 4:
		return container.FirstID((worker+1+int64(arg%3))&0xffff) + int64(arg/3%4) // another worker's
	case 5:
		return current
	case 6:
		return []int64{-1, 0, math.MinInt64, math.MaxInt64, container.MaxIDOf(worker), container.MaxIDOf(worker) - 1}[arg%6]
	default:
		return int64(int8(arg)) + container.FirstID(worker)
	}
}

// ---- the reference model ----

// fuzzModel is what the native component would hold: the stored contexts,
// the counters, each thread's current id, the cap.
type fuzzModel struct {
	worker, maxID    int64
	nextCtx, nextMsg int64
	stored           map[int64]*modelContext
	current          []int64
	// Each thread's run of context ids, [runNext, runEnd); runsOver once
	// the counter reached its last run, which ends them all (ids.go).
	runNext, runEnd  []int64
	runsOver         bool
	maxLive, refused int64
	notified         []string // "id:workers", in order (sorted within one bulk release)
	// reaped: the ids the container's clean-up released (stored again
	// since or not), with the reason its messages add (container/reaped.go).
	reaped map[int64]string
}

type modelContext struct {
	id      int64
	workers []uint16
	sends   map[int64]uint64
	recvs   map[int64]uint64
}

func newFuzzModel(in fuzzInput) *fuzzModel {
	m := &fuzzModel{
		worker:  in.worker,
		maxID:   container.MaxIDOf(in.worker),
		nextCtx: container.FirstID(in.worker) + in.ctxOffset,
		nextMsg: container.FirstID(in.worker) + in.msgOffset,
		stored:  map[int64]*modelContext{},
		reaped:  map[int64]string{},
		current: slices.Repeat([]int64{container.InvalidID}, in.threads),
		runNext: make([]int64, in.threads),
		runEnd:  make([]int64, in.threads),
	}
	return m
}

// The messages, as errors.go and the native component spell them.
func msgNotFound(id int64) string {
	return fmt.Sprintf("Could not find autograd context with id: %d", id)
}

// notFound is a lookup's miss, saying why when the clean-up released id.
func (m *fuzzModel) notFound(id int64) string {
	if why, ok := m.reaped[id]; ok {
		return msgNotFound(id) + " (" + why + ")"
	}
	return msgNotFound(id)
}

func (m *fuzzModel) currentGone(id int64) string {
	if why, ok := m.reaped[id]; ok {
		return fmt.Sprintf("%s (context %d: %s)", container.MsgCurrentGone, id, why)
	}
	return container.MsgCurrentGone
}

func (m *fuzzModel) msgExhausted(kind string) string {
	return fmt.Sprintf("distautograd: %s ids are exhausted: the next id would reach max_id %d", kind, m.maxID)
}

func (m *fuzzModel) msgLimit() string {
	return fmt.Sprintf("distautograd: the container holds %d contexts, its limit (max_contexts); release some or raise the limit", m.maxLive)
}

// outcome is what an operation gave: an error (code and message) or a value.
type outcome struct {
	code container.Code
	msg  string
	val  string        // the value, printed, for comparison
	ctx  *modelContext // the context returned, if any
}

func ok(val string) outcome { return outcome{val: val} }

func failed(code container.Code, msg string) outcome { return outcome{code: code, msg: msg} }

func (m *fuzzModel) full() bool { return m.maxLive > 0 && int64(len(m.stored)) >= m.maxLive }

func (m *fuzzModel) create(id int64) *modelContext {
	mc := &modelContext{id: id}
	m.stored[id] = mc
	return mc
}

func (m *fuzzModel) release(t int, id int64) bool {
	mc, found := m.stored[id]
	if !found {
		if _, reaped := m.reaped[id]; reaped && t >= 0 && m.current[t] == id {
			m.current[t] = container.InvalidID // the thread is done with the reaped pass
		}
		return false
	}
	delete(m.stored, id)
	if t >= 0 && m.current[t] == id {
		m.current[t] = container.InvalidID
	}
	if len(mc.workers) > 0 {
		m.notified = append(m.notified, fmt.Sprint(id, ":", mc.workers))
	}
	return true
}

func (m *fuzzModel) newContext(t int) outcome {
	if _, reaped := m.reaped[m.current[t]]; m.current[t] != container.InvalidID && (!reaped || m.stored[m.current[t]] != nil) {
		return failed(container.ErrAlreadyHasContext, container.MsgAlreadyHasCtx)
	}
	if m.full() {
		m.refused++
		return failed(container.ErrLimit, m.msgLimit())
	}
	id, ok := m.nextContextID(t)
	if !ok {
		return failed(container.ErrExhausted, m.msgExhausted("context"))
	}
	m.current[t] = id
	// As the native emplace: a context stored under this id already (by a
	// get-or-create naming an id of this worker not issued yet) is kept.
	mc := m.stored[id]
	if mc == nil {
		mc = m.create(id)
	}
	return outcome{val: fmt.Sprint(id), ctx: mc}
}

// nextContextID is thread t's next context id: from its run, or the
// rest of the counter's run, or, from the counter's last run before max_id
// on, the counter's next; false once that reached max_id.
func (m *fuzzModel) nextContextID(t int) (int64, bool) {
	if !m.runsOver && m.runNext[t] < m.runEnd[t] {
		m.runNext[t]++
		return m.runNext[t] - 1, true
	}
	if m.nextCtx >= m.maxID-(container.ContextIDRun-1) {
		m.runsOver = true
	}
	if m.nextCtx >= m.maxID {
		return 0, false
	}
	id := m.nextCtx
	if m.runsOver {
		m.nextCtx++
		return id, true
	}
	m.nextCtx = (id | (container.ContextIDRun - 1)) + 1
	m.runNext[t], m.runEnd[t] = id+1, m.nextCtx
	return id, true
}

func (m *fuzzModel) getOrCreate(id int64) outcome {
	if mc := m.stored[id]; mc != nil {
		return outcome{val: fmt.Sprint(id), ctx: mc}
	}
	if m.full() {
		m.refused++
		return failed(container.ErrLimit, m.msgLimit())
	}
	return outcome{val: fmt.Sprint(id), ctx: m.create(id)}
}

func (m *fuzzModel) messageIDs(n int64) outcome {
	if n < 1 {
		return failed(container.ErrInvalidArgument, fmt.Sprintf("distautograd: block size must be >= 1, got %d", n))
	}
	if m.nextMsg >= m.maxID {
		return failed(container.ErrExhausted, m.msgExhausted("autograd message"))
	}
	first, k := m.nextMsg, min(n, m.maxID-m.nextMsg)
	m.nextMsg += k
	return ok(fmt.Sprint(first, "+", k))
}

// ---- running one operation on both ----

// fuzzRun holds the container under test, the model, and what the
// operations so far returned.
type fuzzRun struct {
	c       *container.Container
	threads []*container.Thread
	m       *fuzzModel
	issued  []int64 // ids of contexts created so far (for pickID)
	// held are contexts the test holds, paired with the model's; a context
	// stays usable after its release.
	held     []*container.Context
	heldM    []*modelContext
	same     map[*modelContext]*container.Context // which real context each model one is
	notified []string
}

func (r *fuzzRun) Release(id int64, workers []uint16) {
	r.notified = append(r.notified, fmt.Sprint(id, ":", workers))
}

func outcomeOf(err error) outcome {
	return failed(container.CodeOf(err), err.Error())
}

// hold records a context an operation returned and checks it is the one the
// model says (the same object for the same model context).
func (r *fuzzRun) hold(t *testing.T, step int, ctx *container.Context, mc *modelContext) {
	if mc == nil {
		return
	}
	if ctx == nil {
		t.Fatalf("step %d: got no context, the model has %d", step, mc.id)
	}
	if prev, seen := r.same[mc]; seen && prev != ctx {
		t.Fatalf("step %d: context %d is another object than the one returned before", step, mc.id)
	}
	for m, c := range r.same {
		if c == ctx && m != mc {
			t.Fatalf("step %d: one context object stands for two contexts (%d and %d)", step, m.id, mc.id)
		}
	}
	r.same[mc] = ctx
	if len(r.held) < 16 {
		r.held, r.heldM = append(r.held, ctx), append(r.heldM, mc)
	} else {
		i := int(mc.id&0xff) % 16
		r.held[i], r.heldM[i] = ctx, mc
	}
	if !slices.Contains(r.issued, mc.id) {
		r.issued = append(r.issued, mc.id)
	}
}

func ctxOutcome(ctx *container.Context, err error) (outcome, *container.Context) {
	if err != nil {
		return outcomeOf(err), nil
	}
	return ok(fmt.Sprint(ctx.ID())), ctx
}

// step runs op on the container and the model and compares the outcomes.
func (r *fuzzRun) step(t *testing.T, i int, op fuzzOp) {
	m, th, ti := r.m, r.threads[op.thread], op.thread
	id := pickID(m.worker, r.issued, th.CurrentID(), op.sel, op.arg)
	var got, want outcome
	var gotCtx *container.Context
	switch op.kind {
	case opNew:
		got, gotCtx = ctxOutcome(r.c.NewContext(th))
		want = m.newContext(ti)
	case opCurrent:
		got, gotCtx = ctxOutcome(r.c.CurrentContext(th))
		switch cur := m.current[ti]; {
		case cur == container.InvalidID:
			want = failed(container.ErrNoCurrentContext, container.MsgNoCurrentContext)
		case m.stored[cur] == nil:
			want = failed(container.ErrNotFound, m.currentGone(cur))
		default:
			want = outcome{val: fmt.Sprint(cur), ctx: m.stored[cur]}
		}
	case opRetrieve, opRetrieveIfPresent:
		if op.kind == opRetrieve {
			got, gotCtx = ctxOutcome(r.c.RetrieveContext(id))
		} else if gotCtx = r.c.RetrieveContextIfPresent(id); gotCtx != nil {
			got = ok(fmt.Sprint(gotCtx.ID()))
		} else {
			got = ok("nil")
		}
		switch mc := m.stored[id]; {
		case mc != nil:
			want = outcome{val: fmt.Sprint(id), ctx: mc}
		case op.kind == opRetrieve:
			want = failed(container.ErrNotFound, m.notFound(id))
		default:
			want = ok("nil")
		}
	case opGetOrCreate:
		got, gotCtx = ctxOutcome(r.c.GetOrCreateContext(id))
		want = m.getOrCreate(id)
	case opIsValid:
		if err := r.c.IsValidContext(id); err != nil {
			got = outcomeOf(err)
		}
		if m.stored[id] == nil {
			want = failed(container.ErrNotFound, m.notFound(id))
		}
	case opRelease:
		if err := r.c.ReleaseContext(th, id); err != nil {
			got = outcomeOf(err)
		}
		if msg := m.notFound(id); !m.release(ti, id) {
			want = failed(container.ErrNotFound, msg)
		}
	case opReleaseIfPresent:
		got = ok(fmt.Sprint(r.c.ReleaseContextIfPresent(th, id)))
		want = ok(fmt.Sprint(m.release(ti, id)))
	case opMessageID, opMessageIDBlock:
		n := int64(1)
		if op.kind == opMessageIDBlock {
			n = int64(int8(op.arg)) // sometimes < 1: an invalid block size
		}
		if n == 1 && op.kind == opMessageID {
			if v, err := r.c.NewAutogradMessageID(); err != nil {
				got = outcomeOf(err)
			} else {
				got = ok(fmt.Sprint(v, "+", 1))
			}
		} else if first, k, err := r.c.NewAutogradMessageIDBlock(n); err != nil {
			got = outcomeOf(err)
		} else {
			got = ok(fmt.Sprint(first, "+", k))
		}
		want = m.messageIDs(n)
	case opSetCurrent:
		if err := th.SetCurrentID(id); err != nil {
			got = outcomeOf(err)
		}
		if m.current[ti] != container.InvalidID {
			want = failed(container.ErrAlreadyHasContext, container.MsgAlreadyHasCtx)
		} else {
			m.current[ti] = id
		}
	case opForceCurrent:
		th.ForceCurrentID(id)
		m.current[ti] = id
	case opClearCurrent:
		th.Clear()
		m.current[ti] = container.InvalidID
	case opAddKnownWorker, opAddFunction, opFunction, opReadContext:
		if len(r.held) == 0 {
			return
		}
		k := int(op.sel) % len(r.held)
		got, want = r.contextStep(r.held[k], r.heldM[k], op)
	case opSetMaxContexts:
		n := int64(op.arg%8) - 1 // -1 (invalid) .. 6
		if err := r.c.SetMaxContexts(n); err != nil {
			got = outcomeOf(err)
		}
		if n < 0 {
			want = failed(container.ErrInvalidArgument, fmt.Sprintf("distautograd: max_contexts must be >= 0, got %d", n))
		} else {
			m.maxLive = n
		}
	case opReleaseOfWorker:
		w := int64(container.OriginWorker(id))
		if op.arg%16 == 0 {
			w = -1 - int64(op.sel) // out of range: refused at the edge, as the C ABI does
		}
		if err := container.CheckWorkerID(w); err != nil {
			got = outcomeOf(err)
			want = failed(container.ErrInvalidArgument, container.MsgWorkerRange)
			break
		}
		n := r.c.ReleaseContextsOfWorker(uint16(w))
		got = ok(fmt.Sprint(n))
		var ids []int64
		for sid := range m.stored {
			if int64(container.OriginWorker(sid)) == w {
				ids = append(ids, sid)
			}
		}
		// The container releases in its own order: compare this step's
		// notifications as a set.
		before := len(m.notified)
		for _, sid := range ids {
			m.release(-1, sid)
			m.reaped[sid] = fmt.Sprintf("distautograd: it was released by dac_release_contexts_of_worker(%d), which clears what a dead worker left", w)
		}
		want = ok(fmt.Sprint(len(ids)))
		if before < len(r.notified) {
			sort.Strings(r.notified[before:])
		}
		sort.Strings(m.notified[before:])
	case opReapIdle:
		// Nothing has been idle for 2^62 ms: deterministic, releases none.
		ms := int64(1) << 62
		if op.arg%4 == 0 {
			ms = -int64(op.arg) - 1
		}
		n, err := r.c.ReapIdleContexts(ms)
		got = ok(fmt.Sprint(n))
		if err != nil {
			got = outcomeOf(err)
		}
		want = ok("0")
		if ms < 0 {
			want = failed(container.ErrInvalidArgument, fmt.Sprintf("distautograd: max_idle_ms must be >= 0, got %d", ms))
		}
	}
	wantCtx := want.ctx
	want.ctx = nil
	if got != want {
		t.Fatalf("step %d, thread %d, op %d on id %d: got %+v, the model says %+v", i, ti, op.kind, id, got, want)
	}
	r.hold(t, i, gotCtx, wantCtx)
	if gotCtx == nil && wantCtx != nil {
		t.Fatalf("step %d: no context returned", i)
	}
	r.checkState(t, i)
}

// contextStep runs an operation on a held context: known workers, functions.
func (r *fuzzRun) contextStep(ctx *container.Context, mc *modelContext, op fuzzOp) (got, want outcome) {
	switch op.kind {
	case opAddKnownWorker:
		w := uint16(op.arg % 6)
		if op.arg >= 250 {
			w = 65535
		}
		ctx.AddKnownWorkerID(w)
		if !slices.Contains(mc.workers, w) {
			mc.workers = append(mc.workers, w)
		}
	case opAddFunction:
		msgID, fn, recv := int64(op.arg%8), uint64(op.arg)<<8|uint64(op.sel), op.sel&1 == 1
		add, m, kind := ctx.AddSendFunction, &mc.sends, "send"
		if recv {
			add, m, kind = ctx.AddRecvFunction, &mc.recvs, "recv"
		}
		if err := add(msgID, fn); err != nil {
			got = outcomeOf(err)
		}
		if _, dup := (*m)[msgID]; dup {
			want = failed(container.ErrInvalidArgument, fmt.Sprintf("distautograd: a %s function is already registered for autograd message id: %d", kind, msgID))
		} else {
			if *m == nil {
				*m = map[int64]uint64{}
			}
			(*m)[msgID] = fn
		}
	case opFunction:
		msgID := int64(op.arg % 8)
		get, m, kind := ctx.SendFunction, mc.sends, "send"
		if op.sel&1 == 1 {
			get, m, kind = ctx.RecvFunction, mc.recvs, "recv"
		}
		if fn, err := get(msgID); err != nil {
			got = outcomeOf(err)
		} else {
			got = ok(fmt.Sprint(fn))
		}
		if fn, found := m[msgID]; found {
			want = ok(fmt.Sprint(fn))
		} else {
			want = failed(container.ErrNotFound, fmt.Sprintf("Could not find %s function for autograd message id: %d", kind, msgID))
		}
	case opReadContext:
		sends, recvs := ctx.FunctionCounts()
		got = ok(fmt.Sprint(ctx.ID(), ctx.KnownWorkerIDs(), ctx.NumKnownWorkerIDs(), sortedMap(ctx.SendFunctions()), sortedMap(ctx.RecvFunctions()), sends, recvs))
		want = ok(fmt.Sprint(mc.id, mc.workers, len(mc.workers), sortedMap(mc.sends), sortedMap(mc.recvs), len(mc.sends), len(mc.recvs)))
	}
	return got, want
}

func sortedMap(m map[int64]uint64) string {
	keys := make([]int64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := "{"
	for _, k := range keys {
		s += fmt.Sprintf("%d:%d ", k, m[k])
	}
	return s + "}"
}

// checkState compares what the container reports with the model after
// every step.
func (r *fuzzRun) checkState(t *testing.T, i int) {
	m := r.m
	if got := r.c.NumContexts(); got != int64(len(m.stored)) {
		t.Fatalf("step %d: NumContexts %d, the model holds %d", i, got, len(m.stored))
	}
	if got := r.c.RefusedContexts(); got != m.refused {
		t.Fatalf("step %d: RefusedContexts %d, the model %d", i, got, m.refused)
	}
	for k, th := range r.threads {
		if th.CurrentID() != m.current[k] || th.HasValidContext() != (m.current[k] != container.InvalidID) {
			t.Fatalf("step %d: thread %d current id %d, the model %d", i, k, th.CurrentID(), m.current[k])
		}
	}
	if !slices.Equal(r.notified, m.notified) {
		t.Fatalf("step %d: notifications %v, the model %v", i, r.notified, m.notified)
	}
}

func (r *fuzzRun) checkFinal(t *testing.T) {
	ids := r.c.ContextIDs()
	slices.Sort(ids)
	var want []int64
	for id := range r.m.stored {
		want = append(want, id)
	}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("ContextIDs %v, the model %v", ids, want)
	}
	for _, id := range ids {
		if !r.c.ReleaseContextIfPresent(nil, id) {
			t.Fatalf("context %d listed but not released", id)
		}
	}
	if n := r.c.NumContexts(); n != 0 {
		t.Fatalf("NumContexts %d after releasing every listed context", n)
	}
}

func FuzzOps(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		in, valid := decodeFuzzInput(data)
		if !valid {
			return
		}
		r := &fuzzRun{m: newFuzzModel(in), same: map[*modelContext]*container.Context{}}
		c, err := container.New(in.worker, container.WithShards(1+int(in.worker%5)), container.WithCounterOffsets(in.ctxOffset, in.msgOffset))
		if err != nil {
			t.Fatal(err)
		}
		c.SetFanout(r)
		r.c = c
		for range in.threads {
			r.threads = append(r.threads, container.NewThread())
		}
		for i, op := range in.ops {
			r.step(t, i, op)
		}
		r.checkFinal(t)
	})
}

// ---- the concurrent variant ----

// allowed lists the error codes each operation may give, whatever the
// interleaving.
var allowed = map[byte][]container.Code{
	opNew:               {container.ErrAlreadyHasContext, container.ErrLimit, container.ErrExhausted},
	opCurrent:           {container.ErrNoCurrentContext, container.ErrNotFound},
	opRetrieve:          {container.ErrNotFound},
	opGetOrCreate:       {container.ErrLimit},
	opIsValid:           {container.ErrNotFound},
	opRelease:           {container.ErrNotFound},
	opMessageID:         {container.ErrExhausted},
	opMessageIDBlock:    {container.ErrExhausted, container.ErrInvalidArgument},
	opSetCurrent:        {container.ErrAlreadyHasContext},
	opAddFunction:       {container.ErrInvalidArgument},
	opFunction:          {container.ErrNotFound},
	opSetMaxContexts:    {container.ErrInvalidArgument},
	opReleaseOfWorker:   {container.ErrInvalidArgument},
	opReapIdle:          {container.ErrInvalidArgument},
	opRetrieveIfPresent: nil,
}

// concurrentThread is one goroutine's record.
type concurrentThread struct {
	newIDs, msgIDs []int64
	limits         int64 // ErrLimit errors seen (each is one refused context)
	ctxExhausted   bool
	msgExhausted   bool
	problems       []string
}

func (ct *concurrentThread) check(op fuzzOp, err error) {
	if err == nil {
		return
	}
	code := container.CodeOf(err)
	if !slices.Contains(allowed[op.kind], code) {
		ct.problems = append(ct.problems, fmt.Sprintf("op %d: unexpected %v: %v", op.kind, code, err))
	}
	if code == container.ErrLimit {
		ct.limits++
	}
}

func FuzzOpsConcurrent(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		in, valid := decodeFuzzInput(data)
		if !valid {
			return
		}
		c, err := container.New(in.worker, container.WithShards(1+int(in.worker%5)), container.WithCounterOffsets(in.ctxOffset, in.msgOffset))
		if err != nil {
			t.Fatal(err)
		}
		first, maxID := container.FirstID(in.worker), container.MaxIDOf(in.worker)
		// Ids a goroutine may name: issued ones are not shared between
		// goroutines (that would be a race in the test), so each picks from
		// its own.
		var wg sync.WaitGroup
		records := make([]*concurrentThread, in.threads)
		for g := range in.threads {
			ct := &concurrentThread{}
			records[g] = ct
			wg.Go(func() {
				th := container.NewThread()
				var held []*container.Context
				for _, op := range in.ops {
					if op.thread != g {
						continue
					}
					id := pickID(in.worker, ct.newIDs, th.CurrentID(), op.sel, op.arg)
					switch op.kind {
					case opNew:
						ctx, err := c.NewContext(th)
						ct.check(op, err)
						if err == nil {
							if ctx.ID() != th.CurrentID() {
								ct.problems = append(ct.problems, fmt.Sprintf("new context %d is not current (%d)", ctx.ID(), th.CurrentID()))
							}
							ct.newIDs = append(ct.newIDs, ctx.ID())
							held = append(held, ctx)
						} else if container.CodeOf(err) == container.ErrExhausted {
							ct.ctxExhausted = true
						}
					case opCurrent:
						_, err := c.CurrentContext(th)
						ct.check(op, err)
					case opRetrieve:
						ctx, err := c.RetrieveContext(id)
						ct.check(op, err)
						if err == nil && ctx.ID() != id {
							ct.problems = append(ct.problems, fmt.Sprintf("retrieve %d gave %d", id, ctx.ID()))
						}
					case opRetrieveIfPresent:
						if ctx := c.RetrieveContextIfPresent(id); ctx != nil && ctx.ID() != id {
							ct.problems = append(ct.problems, fmt.Sprintf("retrieve %d gave %d", id, ctx.ID()))
						}
					case opGetOrCreate:
						ctx, err := c.GetOrCreateContext(id)
						ct.check(op, err)
						if err == nil {
							held = append(held, ctx)
						}
					case opIsValid:
						ct.check(op, c.IsValidContext(id))
					case opRelease:
						ct.check(op, c.ReleaseContext(th, id))
					case opReleaseIfPresent:
						c.ReleaseContextIfPresent(th, id)
					case opMessageID, opMessageIDBlock:
						n := int64(1)
						if op.kind == opMessageIDBlock {
							n = int64(int8(op.arg))
						}
						f, k, err := c.NewAutogradMessageIDBlock(n)
						ct.check(op, err)
						for v := f; err == nil && v < f+k; v++ {
							ct.msgIDs = append(ct.msgIDs, v)
						}
						if container.CodeOf(err) == container.ErrExhausted {
							ct.msgExhausted = true
						}
					case opSetCurrent:
						ct.check(op, th.SetCurrentID(id))
					case opForceCurrent:
						th.ForceCurrentID(id)
					case opClearCurrent:
						th.Clear()
					case opAddKnownWorker, opAddFunction, opFunction, opReadContext:
						if len(held) == 0 {
							continue
						}
						ctx := held[int(op.sel)%len(held)]
						switch op.kind {
						case opAddKnownWorker:
							ctx.AddKnownWorkerID(uint16(op.arg % 6))
						case opAddFunction:
							ct.check(op, ctx.AddSendFunction(int64(op.arg%8), uint64(op.arg)))
						case opFunction:
							_, err := ctx.SendFunction(int64(op.arg % 8))
							ct.check(op, err)
						default:
							ids := ctx.KnownWorkerIDs()
							sorted := slices.Clone(ids)
							slices.Sort(sorted)
							if len(slices.Compact(sorted)) != len(ids) {
								ct.problems = append(ct.problems, fmt.Sprintf("known worker ids with duplicates: %v", ids))
							}
						}
					case opSetMaxContexts:
						ct.check(op, c.SetMaxContexts(int64(op.arg%8)-1))
					case opReleaseOfWorker:
						c.ReleaseContextsOfWorker(container.OriginWorker(id))
					case opReapIdle:
						_, err := c.ReapIdleContexts(1 << 62)
						ct.check(op, err)
					}
				}
			})
		}
		wg.Wait()

		var newIDs, msgIDs []int64
		var limits int64
		ctxExhausted, msgExhausted := false, false
		for g, ct := range records {
			for _, p := range ct.problems {
				t.Errorf("goroutine %d: %s", g, p)
			}
			newIDs, msgIDs = append(newIDs, ct.newIDs...), append(msgIDs, ct.msgIDs...)
			limits += ct.limits
			ctxExhausted = ctxExhausted || ct.ctxExhausted
			msgExhausted = msgExhausted || ct.msgExhausted
		}
		checkIssued(t, "context", newIDs, first+in.ctxOffset, maxID, ctxExhausted)
		checkIssued(t, "message", msgIDs, first+in.msgOffset, maxID, msgExhausted)
		if got := c.RefusedContexts(); got != limits {
			t.Errorf("RefusedContexts %d, but %d ErrLimit errors were returned", got, limits)
		}
		ids := c.ContextIDs()
		if int64(len(ids)) != c.NumContexts() {
			t.Errorf("NumContexts %d, but %d contexts are listed", c.NumContexts(), len(ids))
		}
		for _, id := range ids {
			c.ReleaseContextIfPresent(nil, id)
		}
		if n := c.NumContexts(); n != 0 {
			t.Errorf("NumContexts %d after releasing every listed context", n)
		}
	})
}

// checkIssued checks ids issued from one counter: unique, in [start, maxID),
// and, once a caller saw the counter exhausted, every id of the range.
func checkIssued(t *testing.T, kind string, ids []int64, start, maxID int64, exhausted bool) {
	t.Helper()
	slices.Sort(ids)
	for i, id := range ids {
		if id < start || id >= maxID {
			t.Errorf("%s id %d outside [%d, %d)", kind, id, start, maxID)
		}
		if i > 0 && ids[i-1] == id {
			t.Errorf("%s id %d issued twice", kind, id)
		}
	}
	if !exhausted {
		return
	}
	// Every id of the range, or for context ids of its last run (ids.go:
	// the runs threads held end there, unused), is issued before any
	// thread finds them exhausted.
	from := start
	if kind == "context" {
		from = max(start, maxID-(container.ContextIDRun-1))
	}
	k, _ := slices.BinarySearch(ids, from)
	n := len(ids) - k
	if int64(n) != maxID-from {
		t.Errorf("%s ids exhausted after %d ids from %d, but the range holds %d", kind, n, from, maxID-from)
	}
}

// ---- the id layout ----

func FuzzIDLayout(f *testing.F) {
	f.Fuzz(func(t *testing.T, worker int64, offset int64, block uint16) {
		if worker < 0 || worker > container.MaxWorkerID {
			c, err := container.New(worker)
			if c != nil || container.CodeOf(err) != container.ErrInvalidArgument || err.Error() != container.MsgWorkerRange {
				t.Fatalf("New(%d) = %v, %v; want the range error", worker, c, err)
			}
			if err := container.CheckWorkerID(worker); err == nil || err.Error() != container.MsgWorkerRange {
				t.Fatalf("CheckWorkerID(%d) = %v", worker, err)
			}
			return
		}
		// The layout, worked out in unsigned arithmetic and read back as
		// int64: what the native signed shifts and ors give.
		firstU := uint64(worker) << 48
		first, maxID := int64(firstU), int64(firstU|uint64(mask))
		if got := container.FirstID(worker); got != first {
			t.Fatalf("FirstID(%d) = %d, want %d", worker, got, first)
		}
		if got := container.MaxIDOf(worker); got != maxID {
			t.Fatalf("MaxIDOf(%d) = %d, want %d", worker, got, maxID)
		}
		if (maxID < 0) != (worker >= 32768) || maxID-first != mask {
			t.Fatalf("worker %d: max_id %d, first %d", worker, maxID, first)
		}
		// Offsets anywhere in the range; a negative input means "this many
		// ids before max_id" (the end, where exhaustion happens).
		off := int64(uint64(offset) % uint64(mask+1))
		if offset < 0 {
			off = mask - int64(uint64(-(offset+1))%600)
		}
		for _, id := range []int64{first, maxID, first + off, maxID - 1} {
			if got := container.OriginWorker(id); int64(got) != worker {
				t.Fatalf("OriginWorker(%d) = %d, want %d", id, got, worker)
			}
		}
		c, err := container.New(worker, container.WithCounterOffsets(off, off))
		if err != nil {
			t.Fatal(err)
		}
		if c.WorkerID() != worker || c.MaxID() != maxID {
			t.Fatalf("container of %d: worker %d, max_id %d", worker, c.WorkerID(), c.MaxID())
		}
		left := mask - off // ids before max_id
		want := first + off
		// Context ids of one thread: consecutive from first+off (its runs
		// follow each other); at most 600 taken, and when fewer are left,
		// all of them and then the exhaustion error.
		exhausted := func(th *container.Thread, ctx *container.Context, err error) bool {
			wantMsg := fmt.Sprintf("distautograd: context ids are exhausted: the next id would reach max_id %d", maxID)
			return ctx == nil && container.CodeOf(err) == container.ErrExhausted && err.Error() == wantMsg && !th.HasValidContext()
		}
		th := container.NewThread()
		for n := int64(0); n < min(left, 600)+1; n++ {
			ctx, err := c.NewContext(th)
			if n == left {
				if !exhausted(th, ctx, err) {
					t.Fatalf("worker %d offset %d: after %d ids got %v, %v", worker, off, n, ctx, err)
				}
				break
			}
			if err != nil || ctx.ID() != want+n || int64(container.OriginWorker(ctx.ID())) != worker {
				t.Fatalf("worker %d offset %d: context %d: %v, %v (want id %d)", worker, off, n, ctx, err, want+n)
			}
			if err := c.ReleaseContext(th, ctx.ID()); err != nil {
				t.Fatal(err)
			}
		}
		// A thread per context: each takes the rest of the run the counter
		// is in, but in the last run before max_id, where each gets the
		// next id, every id of which is issued before the ids run out, for
		// every thread at once: early's run ends with the last run's start.
		c2, err := container.New(worker, container.WithCounterOffsets(off, 0))
		if err != nil {
			t.Fatal(err)
		}
		lastRun := maxID - (container.ContextIDRun - 1)
		next := want
		early := container.NewThread()
		for n := range 601 {
			th := container.NewThread()
			if n == 0 {
				th = early
			}
			ctx, err := c2.NewContext(th)
			if n == 0 && err == nil {
				if err := c2.ReleaseContext(th, ctx.ID()); err != nil {
					t.Fatal(err)
				}
			}
			if next >= maxID {
				if !exhausted(th, ctx, err) {
					t.Fatalf("worker %d offset %d: past the end got %v, %v", worker, off, ctx, err)
				}
				if ctx, err := c2.NewContext(early); !exhausted(early, ctx, err) {
					t.Fatalf("worker %d offset %d: the first thread got %v, %v", worker, off, ctx, err)
				}
				break
			}
			if err != nil || ctx.ID() != next {
				t.Fatalf("worker %d offset %d: a new thread's context: %v, %v (want id %d)", worker, off, ctx, err, next)
			}
			if next < lastRun {
				next = (next | (container.ContextIDRun - 1)) + 1
			} else {
				next++
			}
		}
		// Message ids in blocks of 1..512, the last block cut at max_id.
		size := 1 + int64(block%512)
		next = want
		for range 601 {
			f, k, err := c.NewAutogradMessageIDBlock(size)
			if next >= maxID {
				wantMsg := fmt.Sprintf("distautograd: autograd message ids are exhausted: the next id would reach max_id %d", maxID)
				if err == nil || container.CodeOf(err) != container.ErrExhausted || err.Error() != wantMsg {
					t.Fatalf("worker %d offset %d: past the end got %d+%d, %v", worker, off, f, k, err)
				}
				if _, err := c.NewAutogradMessageID(); container.CodeOf(err) != container.ErrExhausted {
					t.Fatalf("single message id past the end: %v", err)
				}
				break
			}
			if err != nil || f != next || k != min(size, maxID-next) || f+k > maxID {
				t.Fatalf("worker %d offset %d: block of %d at %d: got %d+%d, %v", worker, off, size, next, f, k, err)
			}
			next += k
		}
		// Whatever the counters did, the rest works.
		other := container.FirstID((worker + 1) & 0xffff)
		if _, err := c.GetOrCreateContext(other); err != nil || c.IsValidContext(other) != nil {
			t.Fatalf("get-or-create of another worker's id: %v", err)
		}
	})
}
