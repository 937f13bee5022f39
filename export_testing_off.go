//go:build !dac_testing

package main

// countCalls: only the testing build (export_testing.go) counts the calls
// from C into Go; here countCall compiles to nothing.
const countCalls = false
