package main

/*
#define _GNU_SOURCE // pthread_setname_np
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

// The clock's thread: a plain thread, not a goroutine, so that its ticks
// never wake Go's scheduler. Signals are blocked in it: a process-directed
// signal is never handled on the library's thread.
typedef struct dacc_clock {
	int64_t *word;
	int64_t start, tick_ms;
} dacc_clock;

static int64_t dacc_monotonic_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *dacc_clock_run(void *p) {
	dacc_clock c = *(dacc_clock *)p;
	free(p);
	int64_t base = dacc_monotonic_ms() - c.start;
	struct timespec tick = {c.tick_ms / 1000, (c.tick_ms % 1000) * 1000000};
	for (;;) {
		nanosleep(&tick, NULL);
		__atomic_store_n(c.word, dacc_monotonic_ms() - base, __ATOMIC_RELAXED);
	}
	return NULL;
}

// Stores start plus the milliseconds elapsed since the call into *word every
// tick_ms, for the life of the process; 0 if the thread started.
static int dacc_clock_start(int64_t *word, int64_t start, int64_t tick_ms) {
	dacc_clock *c = malloc(sizeof *c);
	if (c == NULL)
		return -1;
	*c = (dacc_clock){word, start, tick_ms};
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_t t;
	int rc = pthread_create(&t, &attr, dacc_clock_run, c);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		free(c);
		return rc;
	}
	pthread_setname_np(t, "dac-clock"); // what ps and top show, from here on
	return 0;
}
*/
import "C"

import (
	"sync/atomic"
	"time"
	"unsafe"

	"distautograd/container"
)

// The coarse clock is advanced by a C thread (above), not a goroutine: Go
// then has nothing to run between the host's calls, and its scheduler stays
// asleep instead of waking a hundred times a second beside them.
func init() {
	container.SetClockDriver(func(word *atomic.Int64, start int64, tick time.Duration) bool {
		return C.dacc_clock_start((*C.int64_t)(unsafe.Pointer(word)), C.int64_t(start), C.int64_t(tick/time.Millisecond)) == 0
	})
}
