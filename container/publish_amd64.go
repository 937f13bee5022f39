//go:build amd64

package container

import (
	"sync/atomic"
	"unsafe"
)

// Stores of a record's fields and index links, made under the shard's
// lock, that C (or a lock-free Go reader) reaches only through a later
// atomic operation of the same writer: the state word's store that lists
// a record, or the change count's increment around a chain rewrite. On
// amd64 a plain store of an aligned word is enough for that: the
// processor makes stores visible in program order, and Go's compiler keeps
// a store before the atomic operations that follow it. sync/atomic's Store
// is an XCHG, a locked instruction, every time: up to six of them per context
// created and released. Other architectures keep sync/atomic (publish.go).
//
// Only for a location written by one thread at a time, and never twice in
// a row before the atomic that publishes it (the compiler could drop the
// first of two plain stores to one address).

func storeU32(p *atomic.Uint32, v uint32) { *(*uint32)(unsafe.Pointer(p)) = v }

func storeI64(p *atomic.Int64, v int64) { *(*int64)(unsafe.Pointer(p)) = v }
