package main

/*
#include "capi_internal.h"
*/
import "C"

import (
	"unsafe"

	"distautograd/container"
)

// The handle slots are read and changed by C too (capi.c serves
// dac_context_id, ref and unref from them): these fail to compile unless
// capi_internal.h's structs have container's layout. An index out of range
// of [1]struct{} is a compile error for a non-zero constant.
var (
	_ = [1]struct{}{}[unsafe.Sizeof(container.HandleSlot{})-C.sizeof_dac_handle_slot]
	_ = [1]struct{}{}[unsafe.Offsetof(container.HandleSlot{}.State)-unsafe.Offsetof(C.dac_handle_slot{}.state)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.HandleSlot{}.ID)-unsafe.Offsetof(C.dac_handle_slot{}.id)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.HandleSlot{}.Next)-unsafe.Offsetof(C.dac_handle_slot{}.next)]
	_ = [1]struct{}{}[unsafe.Sizeof(container.TableShard{})-C.sizeof_dac_handle_shard]
	_ = [1]struct{}{}[unsafe.Offsetof(container.TableShard{}.Free)-unsafe.Offsetof(C.dac_handle_shard{}.free_top)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.TableShard{}.Freed)-unsafe.Offsetof(C.dac_handle_shard{}.freed)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.TableShard{}.Chunks)-unsafe.Offsetof(C.dac_handle_shard{}.chunks)]
	_ = [1]struct{}{}[container.HandleChunks-C.DAC_HANDLE_CHUNKS]
	_ = [1]struct{}{}[unsafe.Sizeof(container.Table{})-C.DAC_HANDLE_SHARDS*C.sizeof_dac_handle_shard]
)

//export dacgo_handle_table
func dacgo_handle_table(out *unsafe.Pointer, e *C.dac_error_slot) (rc C.int) {
	defer recoverTo(e, &rc)
	*out = unsafe.Pointer(handles.Table())
	return 0
}
