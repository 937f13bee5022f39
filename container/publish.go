//go:build !amd64

package container

import "sync/atomic"

// See publish_amd64.go: elsewhere a plain store could become visible after
// the atomic that publishes it, so these are sync/atomic's.

func storeU32(p *atomic.Uint32, v uint32) { p.Store(v) }

func storeI64(p *atomic.Int64, v int64) { p.Store(v) }
