package main

/*
#include "capi_internal.h"
*/
import "C"

// Drop functions are C function pointers; Go calls them through the
// trampoline, which holds fork() back as the other calls into the host do.
func init() {
	proc.SetHostDrop(func(drop uintptr, value uint64) {
		C.dacc_call_host_drop(C.uintptr_t(drop), C.uint64_t(value))
	})
}

//export dacgo_context_host_value
func dacgo_context_host_value(h C.uint64_t, out *C.uint64_t, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	v, err := c.HostValue(uint64(h))
	if err != nil {
		return fail(e, err)
	}
	*out = C.uint64_t(v)
	return 0
}
