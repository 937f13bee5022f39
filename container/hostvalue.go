package container

import (
	"errors"
	"sync/atomic"
	"unsafe"
)

// A host that keeps its own object per context (the torch backend keeps
// libtorch's DistAutogradContext) hangs it on the context as a host value
// and needs to know when nobody can reach the context any more, to free it.
// That moment is the context's last reference going: it is out of the
// container (released, reaped, released by worker) and no handle to it is
// live. Handles and the container count themselves in hostState.life.

// hostState is the part of a Context that serves host values. Its zero
// value is a context in its container with no handle.
type hostState struct {
	// life is (live handles) << 1 | (1 once out of the container). It is
	// exactly 1 when the context is dead: out, and no handle left. Once
	// dead it never changes again: no handle can be made to a dead context.
	life atomic.Int64
	host atomic.Pointer[hostValue]
}

type hostValue struct {
	value uint64
	drop  unsafe.Pointer // the host's drop function (C), nil: none
}

// HostDropper runs a host's drop function fn on value. The C ABI sets it
// (to a trampoline into C); a drop function is opaque to this package.
type HostDropper func(fn unsafe.Pointer, value uint64)

var hostDropper atomic.Pointer[HostDropper]

// SetHostDropper sets what runs the drop functions of host values (nil:
// drops are skipped). The process-wide setting: drop functions are C
// function pointers, one kind per process.
func SetHostDropper(d HostDropper) {
	if d == nil {
		hostDropper.Store(nil)
		return
	}
	hostDropper.Store(&d)
}

var errHostValueZero = Errorf(ErrInvalidArgument, "a host value must not be 0 (0 means none)")

// errGone is what Handles.New returns for a context that died between its
// lookup and the handle: its release came first.
var errGone = Errorf(ErrNotFound, "the context was released")

// IsGone reports whether err says the context died before its handle was made.
func IsGone(err error) bool { return errors.Is(err, errGone) }

// SetHostValue stores value and its drop function on the context if it has
// no host value yet, and returns the host value now set: value if it was
// stored, else the one set before (the caller then frees its candidate).
// Two threads setting at once agree on one value.
func (c *Context) SetHostValue(value uint64, drop unsafe.Pointer) (uint64, error) {
	if value == 0 {
		return 0, errHostValueZero
	}
	if hv := c.hs.host.Load(); hv != nil {
		return hv.value, nil
	}
	hv := &hostValue{value: value, drop: drop}
	if c.hs.host.CompareAndSwap(nil, hv) {
		return value, nil
	}
	return c.hs.host.Load().value, nil
}

// HostValue returns the context's host value, 0 if none is set.
func (c *Context) HostValue() uint64 {
	if hv := c.hs.host.Load(); hv != nil {
		return hv.value
	}
	return 0
}

// acquire counts a new handle to c, unless c is dead.
func (c *Context) acquire() bool {
	for {
		n := c.hs.life.Load()
		if n == 1 {
			return false
		}
		if c.hs.life.CompareAndSwap(n, n+2) {
			return true
		}
	}
}

// handleGone is the last reference of one of c's handles going.
func (c *Context) handleGone() { c.lifeDown(2) }

// leftContainer is c leaving its container, once.
func (c *Context) leftContainer() { c.lifeDown(-1) }

func (c *Context) lifeDown(d int64) {
	if c.hs.life.Add(-d) != 1 {
		return
	}
	hv := c.hs.host.Load()
	if hv == nil || hv.drop == nil {
		return
	}
	if d := hostDropper.Load(); d != nil {
		(*d)(hv.drop, hv.value)
	}
}

// Dead reports whether c's last reference went (for tests).
func (c *Context) Dead() bool { return c.hs.life.Load() == 1 }

// NotFoundError is the native "Could not find autograd context with id"
// error, for a lookup that found a context which died before its handle.
func NotFoundError(id int64) error { return errNotFound(id) }
