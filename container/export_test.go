package container

import "unsafe"

// SetHostValueAsC gives h's context a host value and its drop function as
// C's dac_context_set_host_value (csrc/handles.c) does (C owns setting
// them; the container only takes them when the record dies): false if h is
// not live or the context has a value already.
func SetHostValueAsC(c *Container, h uint64, value uint64, drop uintptr) bool {
	r, _, gen := c.record(h)
	if r == nil || !referenced(r.State.Load(), gen) || !r.HostValue.CompareAndSwap(0, value) {
		return false
	}
	r.HostDrop.Store(drop)
	return true
}

// HasGoContext reports whether h's context has its *Context yet.
func HasGoContext(c *Container, h uint64) bool {
	idx, _ := SplitHandle(h)
	return c.recs.ctxSlot(idx).Load() != nil
}

// DropRefAsC drops one of h's references as C's dac_context_unref
// (csrc/handles.c) does when it is not the last of a released context: one
// decrement of the state word.
func DropRefAsC(c *Container, h uint64) {
	r, _, _ := c.record(h)
	r.State.Add(^uint64(0))
}

// ViewReadsClock reports whether c publishes m's word to C as its clock
// (View.Clock): what C's lookups date their uses by.
func ViewReadsClock(c *Container, m *ManualClock) bool {
	return c.view.Clock == uintptr(unsafe.Pointer(m.word))
}

// RecordOf returns the record h names (whatever its state).
func RecordOf(c *Container, h uint64) *Record {
	idx, _ := SplitHandle(h)
	return c.recs.at(idx)
}

// Mappings is a container's memory outside the Go heap; holding it does not
// keep the container reachable.
type Mappings = mappings

// MappingsOf returns c's mappings.
func MappingsOf(c *Container) *Mappings { return c.maps }

// Unmapped reports whether the mappings were given back.
func (m *mappings) Unmapped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.regions == nil
}

// CountedLive is the count a cap is enforced against (meaningful while a
// cap is set): NumContexts, unless the accounting drifted.
func CountedLive(c *Container) int64 { return int64(c.live.w.Load() & liveCountMask) }
