// Package layout holds what the packages that lay out memory for several
// threads agree on.
package layout

// CacheLine is the size of the unit that cores trade on a write (64 bytes
// on x86-64, the only architecture the library builds for): data written
// by one thread and data read by others belong on different lines.
const CacheLine = 64

// Apart reports whether an object's bytes before offset end and its bytes
// from offset start never share a cache line, wherever Go puts the object
// (at 8 bytes into a line or any other multiple of 8: Go aligns no object
// to a line).
func Apart(end, start uintptr) bool {
	for align := uintptr(0); align < CacheLine; align += 8 {
		if (align+end-1)/CacheLine >= (align+start)/CacheLine {
			return false
		}
	}
	return true
}
