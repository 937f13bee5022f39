package container

// Thread is one thread's current context id: what the native component keeps
// in a C++ thread_local. The C ABI points a Thread at C thread-local storage
// of the calling OS thread; Go tests give each goroutine its own. The zero
// Thread's current id is 0, a valid id of worker 0: make one with NewThread.
// A Thread is not safe for concurrent use (it belongs to one thread).
type Thread struct {
	current int64
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
