/* init_race: one trial of threads already calling when dac_init runs on
** another thread. THREADS threads start before the container exists and
** call, over and over: dac_context_get_or_create and dac_context_new, and on
** every handle they return at once dac_context_id, dac_context_ref and
** dac_context_unref (twice), then release the context; and the functions
** of the current id that do not enter Go. The main thread waits until all
** are calling, spins a SEED-chosen moment, then calls dac_init(3), its
** first call into the library (so dac_init sets the thread up for Go too,
** and takes long enough to be preempted in many places).
**
** Promises checked (each broken one is a BUG line):
**   - a call gives DAC_ERR_NOT_INITIALIZED or succeeds, nothing else;
**   - a handle that a successful call returned is usable at once, on this
**     thread: dac_context_id, ref and unref never say NOT_INITIALIZED;
**   - a current-id function called after dac_init returned DAC_OK (on the
**     main thread) succeeds;
**   - nothing leaks: at the end no context and no live handle.
** It prints "handles issued before dac_init returned: N" (the window this
** aims at) and "bugs = N".
**
** Usage: init_race THREADS SEED */
#define _GNU_SOURCE /* SCHED_IDLE */
#include "check.h"

#include <pthread.h>
#include <sched.h>

static int init_returned, running, bugs;
static long early_handles;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

#define BUG(...)                            \
	do {                                    \
		pthread_mutex_lock(&out_mu);        \
		printf("BUG: " __VA_ARGS__);        \
		printf("\n");                       \
		bugs++;                             \
		pthread_mutex_unlock(&out_mu);      \
	} while (0)

/* A status a call may give while dac_init runs elsewhere. */
static int before_or_ok(int rc) { return rc == DAC_OK || rc == DAC_ERR_NOT_INITIALIZED; }

/* Uses a handle a call just returned: all of it must work. */
static void use_handle(int thread, const char *from, dac_context *h, int64_t want_id, int early) {
	int64_t id = -1;
	int rc;
	if (early)
		__atomic_add_fetch(&early_handles, 1, __ATOMIC_SEQ_CST);
	if ((rc = dac_context_id(h, &id)) != DAC_OK || id != want_id)
		BUG("thread %d: dac_context_id on the handle %s returned -> %s (id %" PRId64 "): %s", thread, from,
		    dac_status_string(rc), id, rc ? dac_last_error() : "");
	if ((rc = dac_context_ref(h)) != DAC_OK)
		BUG("thread %d: dac_context_ref on the handle %s returned -> %s: %s", thread, from, dac_status_string(rc),
		    dac_last_error());
	else if ((rc = dac_context_unref(h)) != DAC_OK)
		BUG("thread %d: dac_context_unref (of the ref) on the handle %s returned -> %s: %s", thread, from,
		    dac_status_string(rc), dac_last_error());
	if ((rc = dac_context_unref(h)) != DAC_OK)
		BUG("thread %d: dac_context_unref on the handle %s returned -> %s: %s", thread, from,
		    dac_status_string(rc), dac_last_error());
	if (want_id != -1 && (rc = dac_context_release(want_id)) != DAC_OK)
		BUG("thread %d: dac_context_release of the context %s made -> %s: %s", thread, from, dac_status_string(rc),
		    dac_last_error());
}

static void current_id_calls(int thread) {
	int after = __atomic_load_n(&init_returned, __ATOMIC_SEQ_CST);
	int64_t v = 0;
	int flag = 0, rc;
#define CURRENT_CALL(call)                                                                                  \
	do {                                                                                                    \
		rc = (call);                                                                                        \
		if (after ? rc != DAC_OK : !before_or_ok(rc))                                                       \
			BUG("thread %d: %s %s dac_init returned -> %s: %s", thread, #call, after ? "after" : "while", \
			    dac_status_string(rc), dac_last_error());                                               \
	} while (0)
	CURRENT_CALL(dac_force_current_context_id(DAC_INVALID_ID));
	CURRENT_CALL(dac_current_context_id(&v));
	CURRENT_CALL(dac_has_valid_context(&flag));
	CURRENT_CALL(dac_set_current_context_id(((int64_t)9 << 48) | (int64_t)thread));
	CURRENT_CALL(dac_clear_current_context());
#undef CURRENT_CALL
}

static void *thread_main(void *arg) {
	int thread = (int)(intptr_t)arg;
	int64_t next = ((int64_t)(16 + thread) << 48);
	__atomic_add_fetch(&running, 1, __ATOMIC_SEQ_CST);
	/* Until some rounds after dac_init returned. */
	for (int after = 0; after < 20;) {
		int early = !__atomic_load_n(&init_returned, __ATOMIC_SEQ_CST);
		if (!early)
			after++;
		dac_context *h = NULL;
		int64_t id = next++;
		int rc = dac_context_get_or_create(id, &h);
		if (rc == DAC_OK)
			use_handle(thread, "get_or_create", h, id, early);
		else if (!before_or_ok(rc))
			BUG("thread %d: dac_context_get_or_create -> %s: %s", thread, dac_status_string(rc), dac_last_error());

		early = !__atomic_load_n(&init_returned, __ATOMIC_SEQ_CST);
		rc = dac_context_new(&h);
		if (rc == DAC_OK) {
			int64_t nid = -1;
			/* Its id, through the handle: checked in use_handle as well. */
			if (dac_context_id(h, &nid) != DAC_OK)
				nid = -1;
			use_handle(thread, "new", h, nid, early);
		} else if (!before_or_ok(rc)) {
			BUG("thread %d: dac_context_new -> %s: %s", thread, dac_status_string(rc), dac_last_error());
		}
		current_id_calls(thread);
	}
	return NULL;
}

int main(int argc, char **argv) {
	REQUIRE(argc == 3);
	int n = atoi(argv[1]);
	unsigned long seed = strtoul(argv[2], NULL, 10);
	REQUIRE(n > 0 && n <= 64);
	pthread_t threads[64];
	for (int i = 0; i < n; i++)
		REQUIRE(pthread_create(&threads[i], NULL, thread_main, (void *)(intptr_t)i) == 0);
	while (__atomic_load_n(&running, __ATOMIC_SEQ_CST) < n)
		;
	/* A moment of the seed's choosing, so that trials hit the window at
	** different points of the threads' calls. */
	for (volatile unsigned long spin = 0; spin < (seed * 2654435761u) % 200000; spin++)
		;
	/* The main thread runs dac_init at the lowest priority there is, so
	** that the calling threads preempt it often: in the middle of dac_init
	** too, where the window is (a container that exists for Go but not yet
	** for everyone). Where that cannot be had, the trial is only less
	** likely to hit the window. */
	struct sched_param idle = {0};
	(void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
	MUST(dac_init(3));
	__atomic_store_n(&init_returned, 1, __ATOMIC_SEQ_CST);
	struct sched_param normal = {0};
	(void)pthread_setschedparam(pthread_self(), SCHED_OTHER, &normal);
	for (int i = 0; i < n; i++)
		REQUIRE(pthread_join(threads[i], NULL) == 0);
	int64_t contexts = num_contexts(), live = debug_value("live_handles");
	if (contexts != 0 || live != 0)
		BUG("left over: %" PRId64 " contexts, %" PRId64 " live handles", contexts, live);
	printf("handles issued before dac_init returned: %ld\n", early_handles);
	printf("bugs = %d\n", bugs);
	return 0;
}
