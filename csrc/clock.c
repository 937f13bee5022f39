/* csrc/clock.c: the coarse clock behind the reaper (container/clock.go says why
** coarse): a word of milliseconds that a plain thread, dac-clock, advances
** every tick, and that lookups copy into the contexts they touch.
**
** A plain thread, not a goroutine, so that its ticks never wake Go's
** scheduler beside the host's calls. And it sleeps when nobody needs the
** time: DACC_CLOCK_AWAKE_MS after it was last woken it writes
** DACC_CLOCK_ASLEEP into the word and waits, so that a process whose
** contexts sit unused is not woken every tick for ever. A
** reader that finds the word asleep wakes it (dacc_clock_wake): it reads
** the monotonic clock itself, puts the time into the word by one
** compare-and-swap from DACC_CLOCK_ASLEEP, and signals the thread, which
** ticks again. So every time a reader records is current, asleep or not,
** and a reader busy all the time pays one wake per DACC_CLOCK_AWAKE_MS
** (once a second). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_setname_np (capi.c defines it for the whole unit) */
#endif
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "../capi_layout.h"
#include "clock.h"

/* How long the thread ticks after a wake before it sleeps. The tick is
** Go's (container/clock.go: clockTick), given to dacc_clock_start: this
** file assumes none. */
#define DACC_CLOCK_AWAKE_MS 1000

static int64_t *clock_word;   /* set once, before the thread starts */
static int64_t clock_base;    /* monotonic ms at which the word reads 0 */
static struct timespec clock_tick;
static int64_t clock_awake_ticks; /* DACC_CLOCK_AWAKE_MS in ticks, at least 1 */
/* Only the thread going to sleep and a reader waking it take these: a
** signal sent under the mutex cannot fall between the sleeper's check of
** the word and its wait. */
static pthread_mutex_t clock_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t clock_cv = PTHREAD_COND_INITIALIZER;

int64_t dacc_monotonic_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* What the word reads now. */
static int64_t clock_now(void) { return dacc_monotonic_ms() - clock_base; }

static void *clock_run(void *arg) {
	(void)arg;
	for (;;) {
		/* Nobody else writes while the word is not asleep. The first store
		** comes at once, not a tick later: a waker held up between reading
		** the time and its compare-and-swap may have put in a time that was
		** already old. */
		__atomic_store_n(clock_word, clock_now(), __ATOMIC_RELAXED);
		for (int64_t i = 0; i < clock_awake_ticks; i++) {
			nanosleep(&clock_tick, NULL);
			__atomic_store_n(clock_word, clock_now(), __ATOMIC_RELAXED);
		}
		pthread_mutex_lock(&clock_mu);
		__atomic_store_n(clock_word, DACC_CLOCK_ASLEEP, __ATOMIC_SEQ_CST);
		while (__atomic_load_n(clock_word, __ATOMIC_SEQ_CST) == DACC_CLOCK_ASLEEP)
			pthread_cond_wait(&clock_cv, &clock_mu);
		pthread_mutex_unlock(&clock_mu);
	}
	return NULL;
}

int dacc_clock_start(int64_t *word, int64_t start, int64_t tick_ms) {
	clock_word = word;
	clock_base = dacc_monotonic_ms() - start;
	clock_tick = (struct timespec){tick_ms / 1000, (tick_ms % 1000) * 1000000};
	clock_awake_ticks = tick_ms > 0 && tick_ms < DACC_CLOCK_AWAKE_MS ? DACC_CLOCK_AWAKE_MS / tick_ms : 1;
	/* Every blockable signal blocked in the thread: a process-directed
	** signal is never handled on the library's thread. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_t t;
	int rc = pthread_create(&t, &attr, clock_run, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return rc;
	pthread_setname_np(t, "dac-clock"); /* what ps and top show, from here on */
	return 0;
}

int64_t dacc_clock_wake(void) {
	int64_t now = clock_now();
	int64_t seen = DACC_CLOCK_ASLEEP;
	if (!__atomic_compare_exchange_n(clock_word, &seen, now, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		return seen; /* woken already: the waker's time, or a tick since */
	pthread_mutex_lock(&clock_mu);
	pthread_cond_signal(&clock_cv);
	pthread_mutex_unlock(&clock_mu);
	return now;
}
