package main

/*
#include <stdlib.h>
#include "csrc/dacgo.h"
#include "csrc/host.h"
*/
import "C"

import (
	"fmt"
	"math"
	"os"
	"time"
	"unsafe"

	"distautograd/container"
)

// The release fan-out of the process-wide container: one container.FanoutQueue
// for the life of the process, whose SendFunc calls the host's C function
// pointer and whose log lines go to the host's log hook (or, without one,
// warnings and errors to stderr, as the native component logs through glog).
var cleanup = container.NewFanoutQueue(nil, container.CleanupOptions{})

func init() {
	cleanup.SetLog(stderrLog)
	proc.SetFanout(cleanup)
}

func stderrLog(level container.LogLevel, msg string) {
	if level >= container.LogWarning {
		fmt.Fprintf(os.Stderr, "distautograd: %s\n", msg)
	}
}

// senderKey identifies a host sender: the (function, user data) pair given
// to dac_set_cleanup_sender. Re-setting the pair in force is a no-op.
type senderKey struct{ fn, userData unsafe.Pointer }

// dacgo_set_cleanup_sender installs the host's sender; waitMs < 0 waits for
// the calls of the replaced sender without a bound, 0 not at all (from
// inside a sender, which would wait for itself), else up to waitMs.
//
//export dacgo_set_cleanup_sender
func dacgo_set_cleanup_sender(fn unsafe.Pointer, userData unsafe.Pointer, waitMs C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	var send container.SendFunc
	if fn != nil {
		send = func(worker uint16, contextID int64) error {
			if r := C.dacc_call_cleanup_sender(fn, userData, C.int32_t(worker), C.int64_t(contextID)); r != 0 {
				return fmt.Errorf("cleanup sender returned %d", int(r))
			}
			return nil
		}
	}
	wait := time.Duration(-1)
	if waitMs >= 0 {
		wait = saturating(int64(waitMs), time.Millisecond)
	}
	if !cleanup.InstallSender(senderKey{fn, userData}, send, wait) {
		return fail(e, container.Errorf(container.ErrTimeout, "dac_set_cleanup_sender_timeout: the replaced sender was still running after %d ms (it is no longer called; do not free its user_data yet)", int64(waitMs)))
	}
	return 0
}

//export dacgo_set_cleanup_nonblocking
func dacgo_set_cleanup_nonblocking(nonblocking C.int, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	cleanup.SetFirstAttemptInline(nonblocking != 0)
	return 0
}

//export dacgo_set_log_hook
func dacgo_set_log_hook(fn unsafe.Pointer, userData unsafe.Pointer, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	if fn == nil {
		cleanup.SetLog(stderrLog)
		return 0
	}
	cleanup.SetLog(func(level container.LogLevel, msg string) {
		cs := C.CString(msg)
		defer C.free(unsafe.Pointer(cs))
		C.dacc_call_log(fn, userData, C.int(level), cs)
	})
	return 0
}

// saturating returns n units (n >= 0) as a Duration, the longest one where
// n*unit would overflow int64 (a wrapped product would be negative, or short,
// and so wait less than asked).
func saturating(n int64, unit time.Duration) time.Duration {
	if n > math.MaxInt64/int64(unit) {
		return math.MaxInt64
	}
	return time.Duration(n) * unit
}

// dacgo_set_cleanup_options applies options checked as arguments already
// (csrc/cleanup.c); the fan-out checks what depends on its state, and its
// refusal names fn, the public function called (dac_cleanup_configure or
// dac_set_cleanup_options), as C's refusals name theirs.
//
//export dacgo_set_cleanup_options
func dacgo_set_cleanup_options(fn *C.char, o *C.dac_cleanup_options, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	err := cleanup.SetOptions(container.CleanupOptions{
		MaxAttempts:    int(o.max_attempts),
		InitialBackoff: saturating(int64(o.initial_backoff_us), time.Microsecond),
		MaxBackoff:     saturating(int64(o.max_backoff_us), time.Microsecond),
		MaxPending:     int(o.max_pending),
	})
	if err != nil {
		return failIn(e, C.GoString(fn), err)
	}
	return 0
}

//export dacgo_cleanup_stats
func dacgo_cleanup_stats(out *C.dac_cleanup_counters, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	s := cleanup.Stats()
	out.sent, out.retried, out.failed = C.int64_t(s.Sent), C.int64_t(s.Retried), C.int64_t(s.Failed)
	out.dropped, out.skipped, out.pending = C.int64_t(s.Dropped), C.int64_t(s.Skipped), C.int64_t(s.Pending)
	return 0
}

// dacgo_cleanup_flush waits for the fan-out, up to timeoutMs (>= 0:
// csrc/cleanup.c checks it); inCallback is set when the caller runs inside a
// sender or log hook, whose own message stays pending until it returns:
// waiting would only time out (or hang), so it does not.
//
//export dacgo_cleanup_flush
func dacgo_cleanup_flush(timeoutMs C.int64_t, inCallback C.int, pending *C.int64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	wait := saturating(int64(timeoutMs), time.Millisecond)
	if inCallback != 0 {
		wait = 0
	}
	left := cleanup.Flush(wait)
	if pending != nil {
		*pending = C.int64_t(left)
	}
	if left > 0 && inCallback != 0 {
		return fail(e, container.Errorf(container.ErrTimeout, "dac_cleanup_flush: %d cleanup messages pending; called from inside a cleanup sender or log hook, it cannot wait for them (its own is among them)", left))
	}
	if left > 0 {
		return fail(e, container.Errorf(container.ErrTimeout, "dac_cleanup_flush: %d cleanup messages still pending after %d ms", left, int64(timeoutMs)))
	}
	return 0
}

// cleanupDebugInfo adds the fan-out's counters to dac_debug_info.
func cleanupDebugInfo(m map[string]int64) {
	s := cleanup.Stats()
	m["cleanup_sent"] = s.Sent
	m["cleanup_retried"] = s.Retried
	m["cleanup_failed"] = s.Failed
	m["cleanup_dropped"] = s.Dropped
	m["cleanup_skipped"] = s.Skipped
	m["cleanup_pending"] = s.Pending
}
