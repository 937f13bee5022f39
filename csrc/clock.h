/* csrc/clock.h: the coarse clock behind the reaper (csrc/clock.c). Go
** starts it (export_hooks.go: clockDriver); readers that find its word
** asleep wake it. */
#ifndef DISTAUTOGRAD_CSRC_CLOCK_H
#define DISTAUTOGRAD_CSRC_CLOCK_H

#include <stdint.h>

#include "dacc.h"

/* Starts the thread that advances *word every tick_ms from start; 0 if it
** started. A reader that finds the word DACC_CLOCK_ASLEEP (capi_layout.h)
** calls dacc_clock_wake, which returns the current time and has the thread
** tick again. Times are never negative. */
DACC_HIDDEN int dacc_clock_start(int64_t *word, int64_t start, int64_t tick_ms);
DACC_HIDDEN int64_t dacc_clock_wake(void);

/* CLOCK_MONOTONIC in milliseconds. */
DACC_HIDDEN int64_t dacc_monotonic_ms(void);

#endif
