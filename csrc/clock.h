/* csrc/clock.h: the coarse clock behind the reaper, as C reads it
** (csrc/clock.c). Go sets its origin at load (export_hooks.go). */
#ifndef DISTAUTOGRAD_CSRC_CLOCK_H
#define DISTAUTOGRAD_CSRC_CLOCK_H

#include <stdint.h>

#include "dacc.h"

/* Sets the clock's origin, in CLOCK_MONOTONIC's nanoseconds (where Go's
** coarse clock reads 0), and picks the clock to read. Called once, before
** any container exists. */
DACC_HIDDEN void dacc_clock_start(int64_t origin_ns);

/* The process's coarse clock in milliseconds (never negative): within
** DACC_CLOCK_RESOLUTION_MS (capi_layout.h) of Go's for the same moment,
** and never ahead of it. */
DACC_HIDDEN int64_t dacc_clock_now(void);

/* CLOCK_MONOTONIC in nanoseconds, and in milliseconds. */
DACC_HIDDEN int64_t dacc_monotonic_ns(void);
DACC_HIDDEN int64_t dacc_monotonic_ms(void);

#endif
