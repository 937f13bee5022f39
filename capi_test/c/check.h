/*
** check.h: what the C test programs of capi_test share. A program prints a
** transcript, one line per call, and the Go test compares it with the
** transcript it expects:
**
**   SHOW(dac_context_retrieve(12345, &ctx));
**   -> "dac_context_retrieve(12345, &ctx) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 12345"
**
** Handles are not deterministic: NAME(ctx) prints "handle ctx = 0x...", and
** the Go side replaces that value with {ctx} everywhere in the transcript.
** MUST(call) is for set-up steps: a failure ends the program with status 1.
** Include it first: it sets _POSIX_C_SOURCE for the system headers.
*/
#ifndef CAPI_TEST_CHECK_H
#define CAPI_TEST_CHECK_H

#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include <distautograd.h>

/* Line-buffered stdout, set before main: a program killed because it hung
** has printed every line up to where it hung (to a pipe, stdout is
** otherwise written a block at a time, and the kill loses the last one). */
__attribute__((constructor)) static void check_stdout_by_line(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

/* CLOCK_MONOTONIC, in milliseconds and in nanoseconds. */
static inline int64_t now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sleeps ms milliseconds, all of them (a signal does not cut it short). */
static inline void sleep_ms(long ms) {
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0) {
	}
}

/* Prints the line of one call. It also checks the promises every failing
** call makes (dac_last_status is its status, dac_last_error is non-empty) and
** that a success leaves both as they were; a broken promise adds a BUG line. */
static inline int show_call(const char *label, int rc) {
	static __thread int last_status;
	static __thread char last_msg[1024];
	if (rc == DAC_OK) {
		printf("%s -> DAC_OK\n", label);
		if (dac_last_status() != last_status || strcmp(dac_last_error(), last_msg) != 0)
			printf("BUG: %s succeeded but changed the last error\n", label);
	} else {
		printf("%s -> %s: %s\n", label, dac_status_string(rc), dac_last_error());
		if (dac_last_status() != rc)
			printf("BUG: %s returned %d but dac_last_status() is %d\n", label, rc, dac_last_status());
		if (dac_last_error()[0] == '\0')
			printf("BUG: %s failed without a message\n", label);
	}
	last_status = dac_last_status();
	snprintf(last_msg, sizeof last_msg, "%s", dac_last_error());
	fflush(stdout);
	return rc;
}

#define SHOW(call) show_call(#call, (call))

#include <stdarg.h>

/* Formats a label into one of a few rotating thread-local buffers. */
static inline const char *fmt(const char *format, ...) {
	static __thread char bufs[4][256];
	static __thread int next;
	char *b = bufs[next++ % 4];
	va_list ap;
	va_start(ap, format);
	vsnprintf(b, sizeof bufs[0], format, ap);
	va_end(ap);
	return b;
}

/* SHOWF(call, format, ...): SHOW with a label of printf's making, for calls
** whose arguments are variables ("dac_init(40000)", not "dac_init(w)"). */
#define SHOWF(call, ...) show_call(fmt(__VA_ARGS__), (call))

static inline void must_fail(const char *label, int rc, const char *file, int line) {
	fprintf(stderr, "%s:%d: %s -> %s: %s\n", file, line, label, dac_status_string(rc), dac_last_error());
	fflush(stdout);
	exit(1);
}

#define MUST(call)                                       \
	do {                                                 \
		int must_rc_ = (call);                           \
		if (must_rc_ != DAC_OK)                          \
			must_fail(#call, must_rc_, __FILE__, __LINE__); \
	} while (0)

/* Ends the program with status 1 unless cond holds. */
#define REQUIRE(cond)                                                              \
	do {                                                                           \
		if (!(cond)) {                                                             \
			fprintf(stderr, "%s:%d: REQUIRE(%s) failed\n", __FILE__, __LINE__, #cond); \
			fflush(stdout);                                                        \
			exit(1);                                                               \
		}                                                                          \
	} while (0)

#define NAME(h) printf("handle %s = %#" PRIx64 "\n", #h, (uint64_t)(uintptr_t)(h))

#define PRINT_I64(v) printf("%s = %" PRId64 "\n", #v, (int64_t)(v))

/* The id split the way the layout defines it: worker in the top 16 bits,
** counter in the low 48. */
#define PRINT_ID(v)                                                                       \
	printf("%s = %" PRId64 " (worker %" PRIu64 ", counter %" PRIu64 ")\n", #v, (int64_t)(v), \
	       (uint64_t)(v) >> 48, (uint64_t)(v) & ((UINT64_C(1) << 48) - 1))

static inline int64_t num_contexts(void) {
	int64_t n = -1;
	MUST(dac_num_contexts(&n));
	return n;
}

/* Returns one integer of dac_debug_info's JSON object, or -1 if it has no such key. */
static inline int64_t debug_value(const char *key) {
	char buf[1024], quoted[64];
	size_t len = 0;
	MUST(dac_debug_info(buf, sizeof buf, &len));
	REQUIRE(len < sizeof buf);
	snprintf(quoted, sizeof quoted, "\"%s\":", key);
	const char *at = strstr(buf, quoted);
	return at ? strtoll(at + strlen(quoted), NULL, 10) : -1;
}

#endif
