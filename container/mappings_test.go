package container_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/container"
)

// A container's memory outside the Go heap (its records' reservation, view
// and bucket arrays) goes back to the system once the container is
// garbage, and not before: neither while the container is reachable nor
// while a context of it is (a *Context points into its records).
func TestContainersGiveTheirMemoryBack(t *testing.T) {
	const n = 32
	cs := make([]*container.Container, n)
	maps := make([]*container.Mappings, n)
	for i := range cs {
		c, err := container.New(3, container.WithShards(4))
		require.NoError(t, err)
		_, err = c.GetOrCreateContext(first3 + int64(i))
		require.NoError(t, err)
		cs[i], maps[i] = c, container.MappingsOf(c)
	}
	kept, err := cs[0].RetrieveContext(first3)
	require.NoError(t, err)

	runtime.GC()
	runtime.GC()
	for i := range maps {
		require.False(t, maps[i].Unmapped(), "container %d is reachable", i)
	}
	runtime.KeepAlive(cs)

	cs = nil
	deadline := time.Now().Add(30 * time.Second)
	for i := 1; i < n; {
		if maps[i].Unmapped() {
			i++
			continue
		}
		require.True(t, time.Now().Before(deadline), "container %d, unreachable, was not given back", i)
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	assert.False(t, maps[0].Unmapped(), "the container a context refers to stays mapped")
	// ... and works.
	kept.AddKnownWorkerID(7)
	assert.Equal(t, []uint16{7}, kept.KnownWorkerIDs())
	runtime.KeepAlive(kept)
}
