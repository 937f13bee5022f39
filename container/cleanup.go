package container

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// SendFunc delivers one cleanup message: "release context contextID" to
// workerID, through the host's RPC layer. A non-nil error is a failed attempt.
type SendFunc func(workerID uint16, contextID int64) error

// LogFunc receives the cleanup's log lines (failures, drops).
type LogFunc func(level LogLevel, msg string)

// LogLevel orders log lines; the values are the C ABI's DAC_LOG_*.
type LogLevel int

// Log levels.
const (
	LogDebug   LogLevel = 0
	LogInfo    LogLevel = 1
	LogWarning LogLevel = 2
	LogError   LogLevel = 3
)

// CleanupOptions tune a FanoutQueue; a zero field takes its default.
type CleanupOptions struct {
	MaxAttempts    int           // attempts per message, the first included; default DefaultCleanupAttempts
	InitialBackoff time.Duration // wait before the first retry, doubling; default DefaultCleanupInitialBackoff
	MaxBackoff     time.Duration // longest wait between attempts; default DefaultCleanupMaxBackoff
	MaxPending     int           // messages queued or awaiting retry; default DefaultCleanupMaxPending, at most MaxCleanupPending
	Senders        int           // goroutines calling SendFunc; default DefaultCleanupSenders
}

// The fan-out's defaults and its bound: the one place each is written.
// cmd/dacgen writes those the C ABI states into include/distautograd.h
// (DAC_CLEANUP_*, which distautograd.hpp uses) and the Python package
// (_abi.py), and docs link to the header's.
const (
	// DefaultCleanupAttempts is the native component's
	// kNumCleanupContextRetries (20) retries plus the first attempt.
	DefaultCleanupAttempts = 21
	// DefaultCleanupInitialBackoff is the wait before a message's first
	// retry; each retry doubles it, up to DefaultCleanupMaxBackoff.
	DefaultCleanupInitialBackoff = 10 * time.Millisecond
	// DefaultCleanupMaxBackoff is the longest wait between two attempts.
	DefaultCleanupMaxBackoff = 2 * time.Second
	// DefaultCleanupMaxPending is how many messages may be queued or await
	// a retry before one more is dropped (counted and logged).
	DefaultCleanupMaxPending = 65536
	// MaxCleanupPending bounds CleanupOptions.MaxPending: the queue is a
	// channel of that capacity, allocated at once, and a size from a typo
	// (or an int64 passed through) must be an error, not a crash on
	// allocation.
	MaxCleanupPending = 1 << 22
	// DefaultCleanupSenders is how many goroutines call the SendFunc (not
	// an option of the C ABI).
	DefaultCleanupSenders = 4
)

func (o CleanupOptions) withDefaults() CleanupOptions {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultCleanupAttempts
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = DefaultCleanupInitialBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultCleanupMaxBackoff
	}
	o.MaxBackoff = max(o.MaxBackoff, o.InitialBackoff)
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultCleanupMaxPending
	}
	if o.Senders <= 0 {
		o.Senders = DefaultCleanupSenders
	}
	return o
}

// CleanupStats counts cleanup messages (one per known worker of a released
// context).
type CleanupStats struct {
	Sent    int64 // delivered
	Retried int64 // attempts after a failed one
	Failed  int64 // given up on after MaxAttempts
	Dropped int64 // refused: the queue was full, or the FanoutQueue closed
	Skipped int64 // not sent: no SendFunc was set
	Pending int64 // queued, being sent, or waiting to be retried
}

// FanoutQueue is the release fan-out: a Fanout that delivers one message per
// known worker through a SendFunc, on its own goroutines, so that a releasing
// caller never waits for the network (unless its host declared the
// SendFunc non-blocking: see SetFirstAttemptInline). Failed sends are retried with
// exponential backoff; a bounded queue caps what is pending, and whatever
// overflows or finally fails is counted and logged, never returned to the
// releasing caller (it has nothing to do about it: the best effort of the
// native component, made observable). Safe for concurrent use.
type FanoutQueue struct {
	opts atomic.Pointer[CleanupOptions]
	send atomic.Pointer[senderBox]
	// sendMu orders "take the sender and count the call" before a swap, so
	// an installation that waits sees every call of the sender it replaced;
	// it also makes the key check and the swap one step.
	sendMu sync.RWMutex
	// lastInstall is closed when the latest waiting InstallSender returns
	// (under sendMu); the next one waits for it, so they return in order.
	lastInstall chan struct{}
	log         atomic.Pointer[LogFunc]
	queue       chan cleanupJob
	done        chan struct{}
	once        sync.Once // starts the senders on first use
	wg          sync.WaitGroup
	mu          sync.Mutex // guards the retry timers; taken before closeMu
	timers      map[*time.Timer]retryWait
	timing      sync.WaitGroup // retry timers set and not yet stopped or finished

	// closeMu orders queueing before Close: whoever puts a message on the
	// queue holds it shared, Close sets closed holding it (and mu)
	// exclusively, so after that nothing enters the queue and Close's drain
	// finds everything.
	closeMu sync.RWMutex
	closed  bool
	started atomic.Bool // senders running; set under closeMu

	// inline: first attempts run on the releasing goroutine (see
	// SetFirstAttemptInline); inlineCalls counts those running, added under
	// closeMu while open, so that Close can wait for them.
	inline      atomic.Bool
	inlineCalls sync.WaitGroup

	sent, retried, failed, dropped, skipped, pending atomic.Int64
}

type cleanupJob struct {
	worker  uint16
	context int64
	attempt int // attempts made so far
}

// NewFanoutQueue returns a FanoutQueue that sends through send (nil: none yet, see
// SetSender).
func NewFanoutQueue(send SendFunc, opts CleanupOptions) *FanoutQueue {
	opts = opts.withDefaults()
	c := &FanoutQueue{
		queue:  make(chan cleanupJob, opts.MaxPending),
		done:   make(chan struct{}),
		timers: make(map[*time.Timer]retryWait),
	}
	c.opts.Store(&opts)
	c.SetSender(send)
	return c
}

// Options returns the options in force, defaults filled in.
func (c *FanoutQueue) Options() CleanupOptions { return *c.opts.Load() }

// SetOptions changes the options for attempts from now on (zero fields take
// their defaults; Senders cannot change once set). A retry already waiting
// is moved earlier where the new backoffs give its attempt a shorter wait,
// never later: options put back from a long backoff take effect at once,
// not after the long one. MaxPending may grow past the size the
// FanoutQueue was made with only while no message was ever queued, as the
// queue cannot grow under running senders.
func (c *FanoutQueue) SetOptions(o CleanupOptions) error {
	if err := c.storeOptions(o); err != nil {
		return err
	}
	c.shortenRetries()
	return nil
}

func (c *FanoutQueue) storeOptions(o CleanupOptions) error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	o = o.withDefaults()
	o.Senders = c.Options().Senders
	if o.MaxPending > MaxCleanupPending {
		return Errorf(ErrInvalidArgument, "max_pending must be at most %d (its queue is allocated up front), got %d", MaxCleanupPending, o.MaxPending)
	}
	if o.MaxPending > cap(c.queue) {
		if c.started.Load() {
			return Errorf(ErrInvalidArgument, "max_pending cannot grow past %d once cleanup messages were sent; set it before the first release that notifies a worker", cap(c.queue))
		}
		c.queue = make(chan cleanupJob, o.MaxPending)
	}
	c.opts.Store(&o)
	return nil
}

// retryWait is what a retry timer waits for: the wait it was armed with,
// when, and the attempt it follows (which the backoff doubles by).
type retryWait struct {
	armed   time.Time
	wait    time.Duration
	attempt int
}

// shortenRetries re-arms each waiting retry whose wait the options in
// force make shorter. It runs after the options are stored, under mu, as
// retryLater arms under mu: a retry armed before it is re-armed here, one
// armed after reads the new options.
func (c *FanoutQueue) shortenRetries() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for t, w := range c.timers {
		d := c.backoff(w.attempt)
		// Stop fails once the timer has fired: its message is on its way
		// back to the queue, so there is nothing to move.
		if d >= w.wait || !t.Stop() {
			continue
		}
		t.Reset(max(d-now.Sub(w.armed), 0))
		w.wait = d
		c.timers[t] = w
	}
}

// SetSender sets the function that delivers messages (nil: none; releases
// then send nothing and count Skipped, as the native component does without
// an RPC agent). It does not wait for calls of the sender it replaces.
func (c *FanoutQueue) SetSender(send SendFunc) { c.InstallSender(nil, send, 0) }

// SetSenderAndWait is SetSender, returning only once every call of the
// previous sender has returned, so the host may free what that sender uses.
// Called from inside a sender it would wait for itself: use SetSender there.
func (c *FanoutQueue) SetSenderAndWait(send SendFunc) { c.InstallSender(nil, send, -1) }

// InstallSender installs send, identified by key, and waits up to wait
// (negative: without a bound; 0: not at all) for the calls of the sender it
// replaced. If the sender in force already has key (a non-nil key equal to
// the one it was installed with), it does nothing and returns true at once:
// the C++ and Python wrappers keep one trampoline for the life of the
// process and swap what is behind it, and re-setting it must neither wait
// for nor drop its calls.
//
// Installations are linearizable: the swap and the check of the key happen
// under one lock, so the sender in force is always the one its record
// says. Those that wait also return in the order they swapped: one does not
// return before every earlier waiting installation has, so when all have
// returned, the last to return is the one in force, and no sender replaced
// by any of them is running or called again. It returns false if the wait
// ran out (the new sender is installed; the old one may still be running).
func (c *FanoutQueue) InstallSender(key any, send SendFunc, wait time.Duration) bool {
	var b *senderBox
	if send != nil {
		b = &senderBox{fn: send, key: key}
	}
	var prev, mine chan struct{}
	c.sendMu.Lock()
	cur := c.send.Load()
	if key != nil && cur != nil && cur.key == key {
		c.sendMu.Unlock()
		return true
	}
	if key != nil && send == nil && cur == nil {
		c.sendMu.Unlock()
		return true
	}
	c.send.Store(b)
	if wait != 0 {
		prev, mine = c.lastInstall, make(chan struct{})
		c.lastInstall = mine
	}
	c.sendMu.Unlock()
	if wait == 0 {
		return true
	}
	defer close(mine)
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	for cur != nil && cur.calls.Load() > 0 {
		if wait > 0 && !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
	if prev == nil {
		return true
	}
	if wait < 0 {
		<-prev
		return true
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-prev:
		return true
	case <-t.C:
		return false
	}
}

// senderBox is a sender, the key it was installed with, and how many calls
// of it are running.
type senderBox struct {
	fn    SendFunc
	key   any
	calls atomic.Int64
}

// SetLog sets where log lines go (nil: dropped).
func (c *FanoutQueue) SetLog(log LogFunc) {
	if log == nil {
		c.log.Store(nil)
		return
	}
	c.log.Store(&log)
}

func (c *FanoutQueue) logf(level LogLevel, format string, args ...any) {
	if l := c.log.Load(); l != nil {
		(*l)(level, fmt.Sprintf(format, args...))
	}
}

// SetFirstAttemptInline says whether the SendFunc never blocks (it hands the
// message to an asynchronous RPC layer and returns, as torch's agent does).
// Then Release makes each message's first attempt itself, on the
// releasing goroutine, and only a failed one goes to the queue, whose
// goroutines make the retries; else every attempt is theirs. Waking a
// sender goroutine for each release costs a thread wake-up on the
// releasing path; a sender that returns at once costs less than that. The
// counters, the queue bound (a first attempt counts pending while it runs),
// InstallSender's waits, Flush and Close cover first attempts alike.
func (c *FanoutQueue) SetFirstAttemptInline(on bool) { c.inline.Store(on) }

// FirstAttemptInline reports what SetFirstAttemptInline set.
func (c *FanoutQueue) FirstAttemptInline() bool { return c.inline.Load() }

// Release queues one message per worker; it never blocks, but for
// the first attempts it makes itself when they are inline (see
// SetFirstAttemptInline), which take what the SendFunc takes. It keeps no
// reference to workers once it returns (the container hands it a
// caller's slice, on the caller's stack).
func (c *FanoutQueue) Release(contextID int64, workers []uint16) {
	if c.send.Load() == nil {
		c.skipped.Add(int64(len(workers)))
		c.logf(LogDebug, "no cleanup sender set: %d known workers of context %d are not told to release it", len(workers), contextID)
		return
	}
	var refused []uint16
	var inline [8]cleanupJob
	now := inline[:0]
	c.closeMu.RLock()
	first := c.inline.Load()
	if !first {
		c.once.Do(c.start)
	}
	for _, w := range workers {
		j := cleanupJob{worker: w, context: contextID}
		switch {
		case first && c.reserve():
			now = append(now, j)
		case first || !c.admit(j):
			refused = append(refused, w)
		}
	}
	if len(now) > 0 {
		c.inlineCalls.Add(1)
	}
	c.closeMu.RUnlock()
	// Outside closeMu, as the senders do: the SendFunc may release contexts,
	// and Close waits for these calls after it has closed.
	for _, j := range now {
		c.deliver(j)
	}
	if len(now) > 0 {
		c.inlineCalls.Done()
	}
	for _, w := range refused { // logged outside closeMu: the hook may release contexts
		c.logDropped(contextID, w)
	}
}

// reserve counts one message pending for an inline first attempt, or counts
// it dropped, as admit does for the queue. The caller holds closeMu shared.
func (c *FanoutQueue) reserve() bool {
	if c.pending.Add(1) <= int64(c.Options().MaxPending) && !c.closed {
		return true
	}
	c.pending.Add(-1)
	c.dropped.Add(1)
	return false
}

// admit counts j as pending and queues it, or counts it as dropped if
// MaxPending messages are pending already (queued, being sent or awaiting a
// retry) or the FanoutQueue is closed. The caller holds closeMu shared.
func (c *FanoutQueue) admit(j cleanupJob) bool {
	if c.pending.Add(1) <= int64(c.Options().MaxPending) && !c.closed && c.put(j) {
		return true
	}
	c.pending.Add(-1)
	c.dropped.Add(1)
	return false
}

// put queues j without blocking. Every queued message is counted pending and
// admit keeps pending at most MaxPending, the queue's capacity, so put fails
// only if that reasoning is wrong; a failure is then a drop, never a stall.
func (c *FanoutQueue) put(j cleanupJob) bool {
	select {
	case c.queue <- j:
		return true
	default:
		return false
	}
}

func (c *FanoutQueue) logDropped(contextID int64, worker uint16) {
	c.logf(LogWarning, "cleanup queue full (%d pending) or closed: dropped the release of context %d on worker %d", c.Options().MaxPending, contextID, worker)
}

func (c *FanoutQueue) start() {
	c.started.Store(true)
	n := c.Options().Senders
	c.wg.Add(n)
	for range n {
		go c.run()
	}
}

func (c *FanoutQueue) run() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done: // Close wins over a queue that is not empty
			return
		default:
		}
		select {
		case <-c.done:
			return
		case j := <-c.queue:
			c.deliver(j)
		}
	}
}

// errNoSender is an attempt's error when no sender is set: one value, so
// that every attempt (on the releasing thread, when inline) does not
// allocate one.
var errNoSender = errors.New("no cleanup sender set")

func (c *FanoutQueue) deliver(j cleanupJob) {
	j.attempt++
	err := errNoSender
	c.sendMu.RLock()
	b := c.send.Load()
	if b != nil {
		b.calls.Add(1)
	}
	c.sendMu.RUnlock()
	if b != nil {
		err = callSend(b.fn, j.worker, j.context)
		b.calls.Add(-1)
	}
	if err == nil {
		c.sent.Add(1)
		c.pending.Add(-1)
		return
	}
	if j.attempt >= c.Options().MaxAttempts {
		// Logged before it stops being pending: once Flush has returned, the
		// log hook has seen every line of what it waited for.
		c.logf(LogError, "Could not release Dist Autograd Context on node %d: %v (context %d, gave up after %d attempts)", j.worker, err, j.context, j.attempt)
		c.failed.Add(1)
		c.pending.Add(-1)
		return
	}
	c.retried.Add(1)
	c.logf(LogDebug, "cleanup of context %d on worker %d failed (attempt %d): %v; retrying", j.context, j.worker, j.attempt, err)
	c.retryLater(j)
}

// callSend calls send, turning a panic into a failed attempt.
func callSend(send SendFunc, w uint16, id int64) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cleanup sender panicked: %v", r)
		}
	}()
	return send(w, id)
}

// backoff is the wait before the retry that follows attempt: the initial
// backoff doubled per earlier retry, up to the longest, which a doubling
// past int64 nanoseconds also gives.
func (c *FanoutQueue) backoff(attempt int) time.Duration {
	o := c.Options()
	d := o.InitialBackoff
	for i := 1; i < attempt && d < o.MaxBackoff; i++ {
		if d > o.MaxBackoff/2 {
			return o.MaxBackoff
		}
		d *= 2
	}
	return min(d, o.MaxBackoff)
}

// retryLater puts j back on the queue after its backoff; it stays pending
// meanwhile, so the queue bound covers it too.
func (c *FanoutQueue) retryLater(j cleanupJob) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		c.pending.Add(-1)
		c.dropped.Add(1)
		return
	}
	c.timing.Add(1)
	armed, wait := time.Now(), c.backoff(j.attempt)
	var t *time.Timer
	// The func runs only once retryLater has let go of mu, t set.
	t = time.AfterFunc(wait, func() {
		defer c.timing.Done()
		c.mu.Lock()
		delete(c.timers, t)
		c.mu.Unlock()
		c.closeMu.RLock()
		if !c.closed {
			c.once.Do(c.start) // the first retry of inline first attempts
		}
		ok := !c.closed && c.put(j)
		c.closeMu.RUnlock()
		if !ok {
			c.logDropped(j.context, j.worker) // before it stops being pending, as above
			c.dropped.Add(1)
			c.pending.Add(-1)
		}
	})
	c.timers[t] = retryWait{armed: armed, wait: wait, attempt: j.attempt}
}

// Stats returns the counters.
func (c *FanoutQueue) Stats() CleanupStats {
	return CleanupStats{
		Sent:    c.sent.Load(),
		Retried: c.retried.Load(),
		Failed:  c.failed.Load(),
		Dropped: c.dropped.Load(),
		Skipped: c.skipped.Load(),
		Pending: c.pending.Load(),
	}
}

// Flush waits until nothing is pending or timeout passes, and returns what is
// still pending. A message stops being pending once it is counted and its
// log line, if any, was handed to the log hook.
func (c *FanoutQueue) Flush(timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	for {
		p := c.pending.Load()
		if p == 0 || !time.Now().Before(deadline) {
			return p
		}
		time.Sleep(time.Millisecond)
	}
}

// Close stops the senders and retry timers; what is still pending counts as
// dropped. Releases after Close count as dropped too. Close is for tests and
// simulations; the C ABI's FanoutQueue lives as long as the process.
func (c *FanoutQueue) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closeMu.Lock()
	c.closed = true
	c.closeMu.Unlock()
	for t := range c.timers {
		if t.Stop() {
			c.pending.Add(-1)
			c.dropped.Add(1)
			c.timing.Done()
		}
	}
	c.timers = nil
	close(c.done)
	c.mu.Unlock()
	c.once.Do(func() {}) // no senders may start after this
	c.wg.Wait()
	c.inlineCalls.Wait() // a failed one sets a timer or, closed, drops
	c.timing.Wait()      // timers that fired before Close drop or queue their message
	for {
		select {
		case <-c.queue:
			c.pending.Add(-1)
			c.dropped.Add(1)
		default:
			return
		}
	}
}
