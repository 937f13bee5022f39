/* csrc/cleanup.c: the release fan-out's settings and the log hook. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dacgo.h"
#include "error.h"
#include "fork.h"
#include "host.h"

/* ---- Release fan-out ---- */

int dac_set_cleanup_sender(dac_cleanup_sender sender, void *user_data) {
	GUARD_FORK();
	/* From inside a sender it would wait for itself: it does not wait. */
	return dacgo_set_cleanup_sender((void *)sender, user_data, dacc_tls_in_sender ? 0 : -1, dacc_err());
}

int dac_set_cleanup_sender_timeout(dac_cleanup_sender sender, void *user_data, int64_t timeout_ms) {
	GUARD_FORK();
	if (timeout_ms < 0)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, "timeout_ms must be >= 0");
	return dacgo_set_cleanup_sender((void *)sender, user_data, dacc_tls_in_sender ? 0 : timeout_ms, dacc_err());
}

int dac_set_cleanup_sender_nonblocking(int nonblocking) {
	GUARD_FORK();
	if (nonblocking != 0 && nonblocking != 1)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, "nonblocking must be 0 or 1");
	return dacgo_set_cleanup_nonblocking(nonblocking, dacc_err());
}

/* The check of a sized struct's size field: at least its first version's
** size (a newer header's struct may be larger). */
static int check_size(const char *fn, size_t size, size_t first, const char *arg, const char *type) {
	if (size >= first)
		return DAC_OK;
	char what[96];
	snprintf(what, sizeof what, "%s->size must be set to sizeof(%s) (at least %zu)", arg, type, first);
	return dacc_reject(DAC_ERR_INVALID_ARGUMENT, fn, what);
}

/* The size of dac_cleanup_options' first version: size and four options. */
#define DACC_CLEANUP_OPTIONS_V1 (offsetof(dac_cleanup_options, max_pending) + sizeof(int64_t))
_Static_assert(sizeof(dac_cleanup_options) >= DACC_CLEANUP_OPTIONS_V1, "fields are only added");

/* The one check of the options as arguments; Go checks what depends on the
** fan-out (max_pending's bound, and its growth once messages were queued),
** and names fn in its refusals too. */
static int configure(const char *fn, dac_cleanup_options *o) {
	if (o->max_attempts < 0 || o->initial_backoff_us < 0 || o->max_backoff_us < 0 || o->max_pending < 0)
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, fn, "values must be >= 0 (0 selects the default)");
	return dacgo_set_cleanup_options((char *)fn, o, dacc_err());
}

int dac_cleanup_configure(const dac_cleanup_options *options) {
	GUARD_FORK();
	CHECK_OUT(options);
	size_t size = options->size;
	int rc = check_size(__func__, size, DACC_CLEANUP_OPTIONS_V1, "options", "dac_cleanup_options");
	if (rc != DAC_OK)
		return rc;
	/* What this library knows (the defaults for what an older header
	** lacks); a newer header's options it does not know must be 0. */
	dac_cleanup_options o = {0};
	size_t known = size < sizeof o ? size : sizeof o;
	memcpy(&o, options, known);
	for (size_t i = known; i < size; i++)
		if (((const unsigned char *)options)[i] != 0)
			return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__,
			              "options sets an option this library does not know (past its sizeof(dac_cleanup_options))");
	o.size = sizeof o;
	return configure(__func__, &o);
}

int dac_set_cleanup_options(int32_t max_attempts, int64_t initial_backoff_us, int64_t max_backoff_us,
                            int64_t max_pending) {
	GUARD_FORK();
	dac_cleanup_options o = {sizeof o, max_attempts, initial_backoff_us, max_backoff_us, max_pending};
	return configure(__func__, &o);
}

/* The size of dac_cleanup_counters' first version: size and six counters.
** A caller's struct may be larger (a newer header) or as large as this
** library's, never smaller. */
#define DACC_CLEANUP_COUNTERS_V1 (sizeof(size_t) + 6 * sizeof(int64_t))
_Static_assert(sizeof(dac_cleanup_counters) >= DACC_CLEANUP_COUNTERS_V1, "fields are only added");

int dac_cleanup_stats(dac_cleanup_counters *counters) {
	GUARD_FORK();
	CHECK_OUT(counters);
	size_t size = counters->size;
	int rc = check_size(__func__, size, DACC_CLEANUP_COUNTERS_V1, "counters", "dac_cleanup_counters");
	if (rc != DAC_OK)
		return rc;
	dac_cleanup_counters c = {0};
	rc = dacgo_cleanup_stats(&c, dacc_err());
	if (rc != DAC_OK)
		return rc;
	c.size = size;
	/* What this library knows, then 0 for the fields of a newer header. */
	size_t known = size < sizeof c ? size : sizeof c;
	memcpy(counters, &c, known);
	if (size > known)
		memset((char *)counters + known, 0, size - known);
	return DAC_OK;
}

int dac_cleanup_flush(int64_t timeout_ms, int64_t *pending) {
	GUARD_FORK();
	if (timeout_ms < 0) {
		char what[64];
		snprintf(what, sizeof what, "timeout_ms must be >= 0, got %lld", (long long)timeout_ms);
		return dacc_reject(DAC_ERR_INVALID_ARGUMENT, __func__, what);
	}
	return dacgo_cleanup_flush(timeout_ms, dacc_tls_in_callback > 0, pending, dacc_err());
}

int dac_set_log_hook(dac_log_hook hook, void *user_data) {
	GUARD_FORK();
	return dacgo_set_log_hook((void *)hook, user_data, dacc_err());
}
