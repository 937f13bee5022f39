package main

/*
#include "capi_internal.h"
*/
import "C"

import "distautograd/container"

// The references C threads hold uncounted (uncounted.c): a release
// settles them before it decides a record's death, and the leak count
// includes them.
type uncountedRefs struct{}

func (uncountedRefs) Settle(h uint64) { C.dacc_uncounted_settle_raw(C.uint64_t(h)) }

func (uncountedRefs) Count() int64 { return int64(C.dacc_uncounted_count()) }

func init() { proc.SetUncountedRefs(uncountedRefs{}) }

var _ container.UncountedRefs = uncountedRefs{}
