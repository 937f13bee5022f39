package container

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"distautograd/internal/layout"
)

// The lines that creations and releases write are not lines that every
// operation reads, wherever Go puts the Container (8-byte aligned at
// least): the counters sit between two lines of padding.
func TestContainerCountersShareNoReadLine(t *testing.T) {
	var c Container
	readEnd := unsafe.Offsetof(c.msgIDs) + unsafe.Sizeof(c.msgIDs) // every field read on the way
	hotEnd := unsafe.Offsetof(c.live) + unsafe.Sizeof(c.live)
	require.True(t, layout.Apart(readEnd, unsafe.Offsetof(c.ctxIDs)), "a counter in a line read by every operation")
	require.True(t, layout.Apart(hotEnd, unsafe.Sizeof(c)), "the next object in the counters' line")
}

// No two shards' states share a line, wherever Go puts the slice (8-byte
// aligned at least; with its pointers, and past 512 bytes, Go puts a
// header first). Checked where Go put it, too.
func TestShardsShareNoLine(t *testing.T) {
	state := unsafe.Sizeof(shardState{})
	require.True(t, layout.Apart(state, unsafe.Sizeof(indexShard{})), "shards 0 and 1 share a line")
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

// A chunk's slots are a permutation of its records, and records made one
// after the other (as threads creating at once mostly hold) keep their
// slots, which each creation writes, in different lines.
func TestChunkSlotsOfNeighboursShareNoLine(t *testing.T) {
	seen := make([]bool, recordChunk)
	for i := uint32(0); i < 2*recordChunk; i++ {
		k := chunkSlot(i)
		require.Less(t, k, uint32(recordChunk))
		if i < recordChunk {
			require.False(t, seen[k], "record %d's slot %d taken twice", i, k)
			seen[k] = true
		}
		if i%recordChunk+1 < recordChunk {
			require.NotEqual(t, k/slotsPerLine, chunkSlot(i+1)/slotsPerLine, "records %d and %d", i, i+1)
		}
	}
	var ch ctxChunk
	require.Zero(t, unsafe.Offsetof(ch.borns)%cacheLine, "the born slots start a line into the chunk")
}
