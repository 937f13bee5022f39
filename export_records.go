package main

/*
#include "capi_internal.h"
*/
import "C"

import (
	"unsafe"

	"distautograd/container"
)

// capi.c reads the records, the index and the view that container/ writes:
// these fail to compile unless capi_internal.h's structs have container's
// layout, field by field. An index out of range of [1]struct{} is a compile
// error for a non-zero constant.
var (
	_ = [1]struct{}{}[unsafe.Sizeof(container.Record{})-C.sizeof_dacc_record]
	_ = [1]struct{}{}[unsafe.Offsetof(container.Record{}.State)-unsafe.Offsetof(C.dacc_record{}.state)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.Record{}.ID)-unsafe.Offsetof(C.dacc_record{}.id)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.Record{}.Next)-unsafe.Offsetof(C.dacc_record{}.next)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.Record{}.NWorkers)-unsafe.Offsetof(C.dacc_record{}.nworkers)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.Record{}.Workers)-unsafe.Offsetof(C.dacc_record{}.workers)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.Record{}.LastUsed)-unsafe.Offsetof(C.dacc_record{}.last_used)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.Record{}.HostValue)-unsafe.Offsetof(C.dacc_record{}.host_value)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.Record{}.HostDrop)-unsafe.Offsetof(C.dacc_record{}.host_drop)]
	_ = [1]struct{}{}[container.InlineWorkers-C.DACC_INLINE_WORKERS]
	_ = [1]struct{}{}[container.SlabBits-C.DACC_SLAB_BITS]
	_ = [1]struct{}{}[container.MaxSlabs-C.DACC_MAX_SLABS]
	_ = [1]struct{}{}[container.MaxRefs-C.DACC_STATE_REFS]
	_ = [1]struct{}{}[container.UncountedBit-C.DACC_STATE_UNCOUNTED]
	_ = [1]struct{}{}[container.MaxShards-C.DACC_MAX_SHARDS]
	_ = [1]struct{}{}[container.ClockAsleep-C.DACC_CLOCK_ASLEEP]
	_ = [1]struct{}{}[unsafe.Offsetof(container.Buckets{}.Mask)-unsafe.Offsetof(C.dacc_buckets{}.mask)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.Buckets{}.Changes)-unsafe.Offsetof(C.dacc_buckets{}.changes)]
	_ = [1]struct{}{}[container.BucketsHeadsOffset-C.sizeof_dacc_buckets] // the heads (a flexible array) start at the end
	_ = [1]struct{}{}[unsafe.Sizeof(container.View{})-C.sizeof_dacc_view]
	_ = [1]struct{}{}[unsafe.Offsetof(container.View{}.Records)-unsafe.Offsetof(C.dacc_view{}.records)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.View{}.ShardMask)-unsafe.Offsetof(C.dacc_view{}.shard_mask)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.View{}.ShardBits)-unsafe.Offsetof(C.dacc_view{}.shard_bits)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.View{}.Clock)-unsafe.Offsetof(C.dacc_view{}.clock)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.View{}.Buckets)-unsafe.Offsetof(C.dacc_view{}.buckets)]
	_ = [1]struct{}{}[unsafe.Offsetof(container.View{}.Slabs)-unsafe.Offsetof(C.dacc_view{}.slabs)]
)

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
