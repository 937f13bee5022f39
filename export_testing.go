//go:build dac_testing

package main

// #include <stdint.h>
import "C"

import "distautograd/container"

// dac_testing_set_counter_offsets starts the context and message id counters
// at the given offsets into this worker's range, so tests reach max_id
// without 2^48 calls. Call it before dac_init; it exists only in the testing
// build (make testing-lib, -tags dac_testing), never in the release .so.
//
//export dac_testing_set_counter_offsets
func dac_testing_set_counter_offsets(ctxOffset, msgOffset C.int64_t) C.int {
	if ctxOffset < 0 || msgOffset < 0 || int64(ctxOffset) > container.AutoIncrementMask || int64(msgOffset) > container.AutoIncrementMask {
		return C.int(container.ErrInvalidArgument)
	}
	proc.SetOptions(container.WithCounterOffsets(int64(ctxOffset), int64(msgOffset)))
	return 0
}
