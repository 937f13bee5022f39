//go:build dac_testing

package main

/*
#cgo CFLAGS: -DDACC_TESTING
#include "csrc/dacgo.h"
*/
import "C"

import (
	"runtime"
	"sync"

	"distautograd/container"
)

// countCalls: the testing build counts the calls from C into Go (every
// dacgo_* function but the testing counters' own), so that tests can check
// which calls C serves without one.
const countCalls = true

// dacgo_testing_go_calls is the Go side of dactest_go_calls: how many calls
// into Go there have been so far.
//
//export dacgo_testing_go_calls
func dacgo_testing_go_calls(out *C.int64_t) {
	*out = C.int64_t(goCalls.Load())
}

// dacgo_testing_go_mallocs is the Go side of dactest_go_mallocs: how many
// heap objects Go has allocated so far (runtime.MemStats.Mallocs, exact:
// reading it flushes every P's cache).
//
//export dacgo_testing_go_mallocs
func dacgo_testing_go_mallocs(out *C.int64_t) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	*out = C.int64_t(m.Mallocs)
}

// dacgo_testing_set_counter_offsets is the Go side of csrc/testing.c's
// dactest_set_counter_offsets, which exists only in the testing build (make
// testing-lib, -tags dac_testing: the CFLAGS above compile it in), never in
// the release .so: it starts the context and message id counters at the
// given offsets into this worker's range, so tests reach max_id without 2^48
// calls. Call it before dac_init.
//
//export dacgo_testing_set_counter_offsets
func dacgo_testing_set_counter_offsets(ctxOffset, msgOffset C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	if ctxOffset < 0 || msgOffset < 0 || int64(ctxOffset) > container.AutoIncrementMask || int64(msgOffset) > container.AutoIncrementMask {
		return fail(e, container.Errorf(container.ErrInvalidArgument, "dactest_set_counter_offsets: offsets must be in [0, %d], got %d and %d", container.AutoIncrementMask, int64(ctxOffset), int64(msgOffset)))
	}
	setTestingOption(&testingOptions.offsets, container.WithCounterOffsets(int64(ctxOffset), int64(msgOffset)))
	return 0
}

// testingOptions are the options the dactest_* hooks give the container
// that dac_init makes, each hook its own.
var testingOptions struct {
	sync.Mutex
	offsets, clock container.Option
	manual         *container.ManualClock // the clock of dactest_use_manual_clock
}

// setTestingOption sets one hook's option (at *slot) and passes them all to
// the container dac_init makes.
func setTestingOption(slot *container.Option, o container.Option) {
	testingOptions.Lock()
	defer testingOptions.Unlock()
	*slot = o
	var opts []container.Option
	for _, o := range []container.Option{testingOptions.offsets, testingOptions.clock} {
		if o != nil {
			opts = append(opts, o)
		}
	}
	proc.SetOptions(opts...)
}

// dacgo_testing_use_manual_clock is the Go side of csrc/testing.c's
// dactest_use_manual_clock (the testing build only): the container that
// dac_init makes dates its contexts' uses by a clock that moves only by
// dactest_advance_clock (container.WithClock). Before dac_init only.
//
//export dacgo_testing_use_manual_clock
func dacgo_testing_use_manual_clock(e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	if _, err := proc.Get(); err == nil {
		return fail(e, container.Errorf(container.ErrInvalidArgument, "dactest_use_manual_clock: the container exists already: call it before dac_init"))
	}
	clock, err := container.NewManualClock()
	if err != nil {
		return fail(e, err)
	}
	setTestingOption(&testingOptions.clock, container.WithClock(clock))
	testingOptions.Lock()
	testingOptions.manual = clock
	testingOptions.Unlock()
	return 0
}

// dacgo_testing_advance_clock is the Go side of csrc/testing.c's
// dactest_advance_clock: dactest_use_manual_clock's clock moves on by ms.
//
//export dacgo_testing_advance_clock
func dacgo_testing_advance_clock(ms C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	testingOptions.Lock()
	clock := testingOptions.manual
	testingOptions.Unlock()
	if clock == nil {
		return fail(e, container.Errorf(container.ErrInvalidArgument, "dactest_advance_clock: no manual clock: call dactest_use_manual_clock before dac_init"))
	}
	if err := clock.Advance(int64(ms)); err != nil {
		return fail(e, err)
	}
	return 0
}

// dacgo_testing_age_record is the Go side of csrc/testing.c's dactest_age_record
// (the testing build only): the dead record of handle h moves on to
// generation, as if it had lived that many more lives.
//
//export dacgo_testing_age_record
func dacgo_testing_age_record(h C.uint64_t, generation C.uint32_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	if err := c.AgeRecord(uint64(h), uint32(generation)); err != nil {
		return fail(e, err)
	}
	return 0
}
