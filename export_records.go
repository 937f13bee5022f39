package main

/*
#include "capi_internal.h"
*/
import "C"

import "unsafe"

// capi.c reads the records, the index and the view that container/
// writes, as capi_layout.h declares them: cmd/dacgen generates it from
// container's types, and C's compiler checks each offset and size there.

//export dacgo_view
func dacgo_view(out *unsafe.Pointer, e *C.dacc_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	c, err := proc.Get()
	if err != nil {
		return fail(e, err)
	}
	*out = c.View()
	return 0
}
