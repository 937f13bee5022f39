package container

// Thread is one thread's state in a container: its current context id,
// what the native component keeps in a C++ thread_local, and the run of
// context ids it creates from (ids.go). Go tests give each goroutine its
// own; the C ABI keeps a host thread's in C thread-local storage and makes
// it a Thread for each call that needs one (HostThread, HostState). The
// zero Thread's current id is 0, a valid id of worker 0: make one with
// NewThread. A Thread is not safe for concurrent use (it belongs to one
// thread).
type Thread struct {
	current  int64
	runNext  int64  // the run's next id; the run ends at a multiple of ContextIDRun
	runEpoch uint64 // the run's container (Container.epoch); 0: none
}

// NewThread returns a Thread with no current context.
func NewThread() *Thread { return &Thread{current: InvalidID} }

// CurrentID returns the current context id, or InvalidID (-1).
func (t *Thread) CurrentID() int64 { return t.current }

// HasValidContext reports whether a current id is set; it does not look the
// context up (a context released by another thread still counts).
func (t *Thread) HasValidContext() bool { return t.current != InvalidID }

// SetCurrentID sets the current id if none is set; it does not look id up.
func (t *Thread) SetCurrentID(id int64) error {
	if t.current != InvalidID {
		return errAlreadyHasCtx
	}
	t.current = id
	return nil
}

// ForceCurrentID sets the current id unconditionally.
func (t *Thread) ForceCurrentID(id int64) { t.current = id }

// Clear sets the current id back to InvalidID.
func (t *Thread) Clear() { t.current = InvalidID }

// HostThread returns the Thread of a host thread that keeps its state
// itself, as HostState gives it: its current id, and the next id of its
// run, which c, the one container the host serves, reserved.
func (c *Container) HostThread(current, runNext int64) Thread {
	return Thread{current: current, runNext: runNext, runEpoch: c.epoch}
}

// HostState returns what a host thread keeps of t (HostThread).
func (t *Thread) HostState() (current, runNext int64) { return t.current, t.runNext }
