package main

/*
#include "capi_internal.h"
*/
import "C"

import "distautograd/container"

// The references C threads hold uncounted (capi.c, "Uncounted
// references"): a release settles them before it decides a record's
// death, and the leak count includes them.
type pendingRefs struct{}

func (pendingRefs) Settle(h uint64) { C.dacc_pending_settle(C.uint64_t(h)) }

func (pendingRefs) Count() int64 { return int64(C.dacc_pending_count()) }

func init() { proc.SetUncountedRefs(pendingRefs{}) }

var _ container.UncountedRefs = pendingRefs{}
