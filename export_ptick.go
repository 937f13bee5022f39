package main

import (
	"runtime"
	_ "unsafe" // go:linkname

	"distautograd/internal/ptick"
)

// procPin and procUnpin give the id of the P the caller runs on, and
// nanotime the runtime's monotonic clock: both are linkname targets the
// runtime keeps for outside packages (go.dev/issue/67401).
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

//go:linkname nanotime runtime.nanotime
func nanotime() int64

var keeper ptick.Keeper

// keepP yields once per ptick.Interval on each P that C threads keep busy
// with calls into Go, so that sysmon does not take the P back at every
// call (see package ptick). Every call into Go runs it, on its way out.
func keepP() {
	due := keeper.Due(procPin(), nanotime) // pinned: p's slot is this call's alone
	procUnpin()
	if due {
		runtime.Gosched()
	}
}
