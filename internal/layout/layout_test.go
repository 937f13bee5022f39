package layout

import "testing"

func TestApart(t *testing.T) {
	for _, c := range []struct {
		end, start uintptr
		want       bool
	}{
		{1, CacheLine, true},               // a byte, and what follows a line later
		{16, CacheLine, false},             // 16 bytes 56 into a line reach the next one
		{32, 2 * CacheLine, true},          // a slot's counters, and the next slot
		{56, 72, false},                    // a 56-byte state in 72-byte elements
		{CacheLine, CacheLine + 56, true},  // a gap of 56 bytes: apart at any multiple of 8
		{CacheLine, CacheLine + 48, false}, // a gap of 48: not at 8 into a line
	} {
		if got := Apart(c.end, c.start); got != c.want {
			t.Errorf("Apart(%d, %d) = %v, want %v", c.end, c.start, got, c.want)
		}
	}
}
