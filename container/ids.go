package container

import (
	"fmt"
	"sync/atomic"
)

// Id layout, as in the native component: an id is a signed 64-bit integer
// whose top 16 bits are the worker id and whose low 48 bits are a counter
// that starts at 0 for each worker. max_id = (worker << 48) | (2^48 - 1).
// All arithmetic is int64, shifts and ors included, so for worker ids of
// 32768 and up the ids and max_id are negative (worker 65535 has max_id -1),
// exactly as the native code computes them. The native component asserts
// id < max_id before handing an id out, so max_id itself is never issued:
// each worker has 2^48 - 1 context ids and as many message ids.
const (
	AutoIncrementBits = 48
	AutoIncrementMask = int64(1)<<AutoIncrementBits - 1
	MaxWorkerID       = 65535
	// InvalidID is the current context id of a thread that has none.
	InvalidID int64 = -1
)

// FirstID returns the first id of workerID's range: workerID << 48.
func FirstID(workerID int64) int64 { return workerID << AutoIncrementBits }

// MaxIDOf returns max_id for workerID: (workerID << 48) | (2^48 - 1).
func MaxIDOf(workerID int64) int64 { return AutoIncrementMask | workerID<<AutoIncrementBits }

// OriginWorker returns the worker id that created id: the top 16 bits,
// read as the unsigned worker id in [0, 65535].
func OriginWorker(id int64) uint16 { return uint16(uint64(id) >> AutoIncrementBits) }

// counter hands out the ids first, first+1, ..., max-1 and then fails; the
// ids it hands out never wrap, and none is handed out twice.
type counter struct {
	next  atomic.Int64
	first int64
	max   int64
	kind  string // "context" or "autograd message", for the exhaustion error
}

func (c *counter) reset(workerID int64, kind string) {
	c.first = FirstID(workerID)
	c.next.Store(c.first)
	c.max = MaxIDOf(workerID)
	c.kind = kind
}

// take returns the next id, or ErrExhausted once max_id is reached. One
// atomic add, not a load and a compare-and-swap: threads creating at once
// move the counter's line between their cores once a take instead of
// twice. Once exhausted, each take still adds one: next runs on past
// max_id, and past the int64 range into ids below first (worker 32767's
// max_id is the largest int64), which are refused too; it would take
// some 2^64 refused takes to come round to first again.
func (c *counter) take() (int64, error) {
	v := c.next.Add(1) - 1
	if v >= c.max || v < c.first {
		return 0, c.exhausted()
	}
	return v, nil
}

// takeBlock reserves up to n consecutive ids and returns the first and how
// many; callers hand them out one by one (the C side's per-thread blocks).
func (c *counter) takeBlock(n int64) (first, count int64, err error) {
	for {
		v := c.next.Load()
		if v >= c.max || v < c.first { // exhausted, as take tells it
			return 0, 0, c.exhausted()
		}
		k := min(n, c.max-v)
		if c.next.CompareAndSwap(v, v+k) {
			return v, k, nil
		}
	}
}

// Context ids come to each thread in runs: a run is ContextIDRun
// consecutive ids aligned on a multiple of ContextIDRun (an id's low
// ContextIDRunBits bits count through its run). A thread takes the rest of
// the run the counter is in and creates from it alone, and all of a run's
// ids index into one shard (Container.shard), so threads creating at once
// trade neither the counter's line nor a shard's. The counter's last run
// before max_id is handed out one id at a time, as the native counter
// hands out every id: exhaustion comes to all threads at once, after every
// id of that run (takeRun, Container.nextContextID).
const (
	ContextIDRunBits = 6
	ContextIDRun     = 1 << ContextIDRunBits
)

// takeRun reserves the rest of the run the counter is in, up to the next
// multiple of ContextIDRun, and returns its first id; last is true, and
// nothing is reserved, once the counter is in its last run before max_id
// (or past it), where ids are taken one at a time.
func (c *counter) takeRun() (first int64, last bool) {
	for {
		v := c.next.Load()
		if v >= c.max-(ContextIDRun-1) || v < c.first {
			return 0, true
		}
		end := (v | (ContextIDRun - 1)) + 1 // below max-(ContextIDRun-1): no overflow
		if c.next.CompareAndSwap(v, end) {
			return v, false
		}
	}
}

func (c *counter) exhausted() error {
	return Errorf(ErrExhausted, "%s ids are exhausted: the next id would reach max_id %d", c.kind, c.max)
}

// String describes the counter's position, for debugging.
func (c *counter) String() string {
	return fmt.Sprintf("%s ids: next %d, max_id %d", c.kind, c.next.Load(), c.max)
}

// CheckWorkerID returns the native range error unless 0 <= w <= 65535.
func CheckWorkerID(w int64) error {
	if w < 0 || w > MaxWorkerID {
		return errWorkerRange
	}
	return nil
}
