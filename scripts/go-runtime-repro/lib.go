// Command lib is the Go side of the reproducers of docs/go-runtime.md: a
// c-shared library (go build -buildmode=c-shared) whose exported functions
// a C program (driver.c) calls from its own threads. Nothing in it is
// distautograd's: it shows what Go's runtime does with C threads that call
// into Go, with and without the changes of scripts/go-runtime-overlay.
package main

import "C"

import "time"

// ReproNoop does nothing: its cost is the runtime's cost of a call from C.
//
//export ReproNoop
func ReproNoop() {}

// ReproSpin runs Go for about us microseconds (a callback that does work).
//
//export ReproSpin
func ReproSpin(us C.int) {
	deadline := time.Now().Add(time.Duration(us) * time.Microsecond)
	for time.Now().Before(deadline) {
	}
}

// ReproSleep waits ms milliseconds on a Go timer (time.Sleep): the timer
// lives on the P the call runs on, and runs when a thread schedules there.
//
//export ReproSleep
func ReproSleep(ms C.int) {
	time.Sleep(time.Duration(ms) * time.Millisecond)
}

func main() {}
