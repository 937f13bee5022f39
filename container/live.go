package container

import "sync/atomic"

// liveCount counts the contexts stored, while a cap is set (without one,
// the shards' counts say how many there are, and no creation or release
// writes a line that every thread shares). The count is in the low 48
// bits; the high 16 number the recounts (SetMaxContexts counts again from
// the shards when it sets a cap where there was none), so that a creation
// that counted itself before it took its id can tell, under its shard's
// lock, whether a recount has replaced what it added since. (A creation
// would have to sleep through 65,536 recounts to be fooled.)
type liveCount struct{ w atomic.Uint64 }

const (
	liveCountBits = 48
	liveCountMask = 1<<liveCountBits - 1
)

// reservation is a creation's place in the count: counted, in that epoch.
type reservation struct {
	counted bool
	epoch   uint64
}

// add counts one more, unless the count has reached limit.
func (l *liveCount) add(limit int64) (reservation, bool) {
	for {
		w := l.w.Load()
		if int64(w&liveCountMask) >= limit {
			return reservation{}, false
		}
		if l.w.CompareAndSwap(w, w+1) {
			return reservation{true, w >> liveCountBits}, true
		}
	}
}

// force counts one more, whatever the count.
func (l *liveCount) force() reservation {
	return reservation{true, l.w.Add(1) >> liveCountBits}
}

// holds reports whether r's count is still in the count: no recount since.
func (l *liveCount) holds(r reservation) bool { return l.w.Load()>>liveCountBits == r.epoch }

// cancel takes r's count out again, if it is still in.
func (l *liveCount) cancel(r reservation) {
	if !r.counted {
		return
	}
	for {
		w := l.w.Load()
		if w>>liveCountBits != r.epoch || w&liveCountMask == 0 {
			return
		}
		if l.w.CompareAndSwap(w, w-1) {
			return
		}
	}
}

// sub takes n released contexts out of the count (never below 0, so never
// out of the epoch).
func (l *liveCount) sub(n uint64) {
	for {
		w := l.w.Load()
		k := min(n, w&liveCountMask)
		if l.w.CompareAndSwap(w, w-k) {
			return
		}
	}
}

// recount starts a new epoch at n; every shard lock is held.
func (l *liveCount) recount(n uint64) {
	l.w.Store((l.w.Load()>>liveCountBits+1)<<liveCountBits | n&liveCountMask)
}
