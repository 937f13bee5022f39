package container

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The lines that creations and releases write are not lines that every
// operation reads, wherever Go puts the Container (8-byte aligned at
// least): the counters sit between two lines of padding.
func TestContainerCountersShareNoReadLine(t *testing.T) {
	var c Container
	readEnd := unsafe.Offsetof(c.msgIDs) + unsafe.Sizeof(c.msgIDs) // every field read on the way
	hotFrom := unsafe.Offsetof(c.ctxIDs)
	hotEnd := unsafe.Offsetof(c.live) + unsafe.Sizeof(c.live)
	for align := uintptr(0); align < cacheLine; align += 8 {
		require.Greater(t, (align+hotFrom)/cacheLine, (align+readEnd-1)/cacheLine, "offset %d: a counter in a line read by every operation", align)
		require.Less(t, (align+hotEnd-1)/cacheLine, (align+unsafe.Sizeof(c))/cacheLine, "offset %d: the next object in the counters' line", align)
	}
}

// No two shards' states share a line, wherever Go puts the slice (8-byte
// aligned at least; with its pointers, and past 512 bytes, Go puts a
// header first). Checked where Go put it, too.
func TestShardsShareNoLine(t *testing.T) {
	size, state := unsafe.Sizeof(indexShard{}), unsafe.Sizeof(shardState{})
	for align := uintptr(0); align < cacheLine; align += 8 {
		require.Less(t, (align+state-1)/cacheLine, (align+size)/cacheLine, "offset %d: shards 0 and 1 share a line", align)
	}
	for _, n := range []int{1, 2, 4, 8, 64, MaxShards} {
		c, err := New(1, WithShards(n))
		require.NoError(t, err)
		require.Len(t, c.shards, n)
		for i := 0; i+1 < n; i++ {
			end := uintptr(unsafe.Pointer(&c.shards[i])) + state - 1
			require.Less(t, end/cacheLine, uintptr(unsafe.Pointer(&c.shards[i+1]))/cacheLine, "%d shards: %d and %d", n, i, i+1)
		}
	}
}
