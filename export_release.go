//go:build !dac_testing

package main

import "sync/atomic"

// countCalls: only the testing build (export_testing.go) counts the calls
// from C into Go; here the count compiles away.
const countCalls = false

var goCalls atomic.Int64
