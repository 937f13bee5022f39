package sim

// The transport: each message's fate (lost, delayed, duplicated) drawn
// from the seed, and the senders and loggers that the workers' FanoutQueues
// use to carry cleanup messages between them.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"distautograd/container"
)

// rng returns the random stream of one message or pass.
func (s *sim) rng(kind int, a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(s.cfg.Seed^splitmix(uint64(kind)), splitmix(a)^b))
}

// splitmix is SplitMix64's finaliser: it spreads nearby keys apart.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// fate is what the transport does to one message.
type fate struct {
	delay      time.Duration
	deliveries int  // 0 (request lost), 1, or 2 (duplicated)
	ok         bool // the sender hears back
}

// decide draws a message's fate; it always draws the same numbers, so that
// what follows in the stream does not depend on the fate.
func (s *sim) decide(r *rand.Rand) fate {
	pDelay, d, pDrop, half, pDup := r.Float64(), r.Int64N(int64(s.cfg.MaxDelay)), r.Float64(), r.IntN(2), r.Float64()
	f := fate{deliveries: 1, ok: true}
	if pDelay < s.cfg.Delay {
		f.delay = time.Duration(d) + 1
	}
	if pDrop < s.cfg.Drop {
		f.ok = false
		if half == 0 {
			f.deliveries = 0 // the request was lost; else only the reply
		}
	}
	if f.deliveries > 0 && pDup < s.cfg.Dup {
		f.deliveries = 2
	}
	return f
}

var (
	errLost = errors.New("sim: message lost (timed out)")
	errDown = errors.New("sim: worker is down")
)

// sender returns w's cleanup SendFunc: the transport's side of the fan-out.
func (s *sim) sender(w *worker) container.SendFunc {
	return func(dstID uint16, id int64) error {
		s.attempts.Add(1)
		k := msgKey{w.id, dstID, id}
		w.mu.Lock()
		w.attempts[k]++
		attempt := w.attempts[k]
		w.mu.Unlock()

		n, _ := s.passOf.Load(id)
		num, _ := n.(int)
		f := s.decide(s.rng(kindCleanup, uint64(num), uint64(w.id)<<32|uint64(dstID)<<16|uint64(attempt)))
		err := s.deliverCleanup(f, dstID, id)

		final := err == nil || attempt >= w.cl.Options().MaxAttempts
		if final {
			w.mu.Lock()
			delete(w.attempts, k)
			w.mu.Unlock()
		}
		if err != nil && final && !w.dead.Load() && !s.workers[dstID].dead.Load() {
			s.loseMessage(k)
		}
		return err
	}
}

func (s *sim) deliverCleanup(f fate, dstID uint16, id int64) error {
	s.hold(f)
	dst := s.workers[dstID]
	if dst.dead.Load() {
		s.dead.Add(1)
		return errDown
	}
	for i := range f.deliveries {
		s.delivered.Add(1)
		if s.cfg.noRelay {
			continue
		}
		if !dst.c.ReleaseContextIfPresent(nil, id) {
			s.noops.Add(1)
		} else if i > 0 {
			s.problem("a duplicated cleanup of context %d released it again on worker %d", id, dstID)
		}
	}
	if f.deliveries == 2 {
		s.dups.Add(1)
	}
	if !f.ok {
		s.cleanLost.Add(1)
		return errLost
	}
	return nil
}

func (s *sim) loseMessage(k msgKey) {
	s.mu.Lock()
	s.lost[k] = struct{}{}
	s.mu.Unlock()
}

// dropFormat is how FanoutQueue logs a message it drops (queue full or closed).
const dropFormat = "cleanup queue full (%d pending) or closed: dropped the release of context %d on worker %d"

// logger returns w's log hook: it notes the messages w's FanoutQueue dropped, so
// that the checker knows which edges of a graph no cleanup crossed.
func (s *sim) logger(w *worker) container.LogFunc {
	return func(level container.LogLevel, msg string) {
		if level != container.LogWarning || !strings.Contains(msg, "dropped the release") {
			return
		}
		var pending, dst int
		var id int64
		if _, err := fmt.Sscanf(msg, dropFormat, &pending, &id, &dst); err != nil {
			s.problem("unparsable drop log line %q: %v", msg, err)
			return
		}
		if !w.dead.Load() && !s.workers[dst].dead.Load() {
			s.loseMessage(msgKey{w.id, uint16(dst), id})
		}
	}
}
