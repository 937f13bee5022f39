// Package layout holds what the packages that lay out memory for several
// threads agree on.
package layout

// CacheLine is the size of the unit that cores trade on a write (64 bytes
// on x86-64, the only architecture the library builds for): data written
// by one thread and data read by others belong on different lines.
const CacheLine = 64
