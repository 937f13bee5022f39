/* ops: every operation of the container through the C ABI, one scenario per
** process, each on worker 3 (first id 844424930131968 = 3 << 48). Usage:
**   ops SCENARIO     container | current | workers | reap | reaped | limit | context |
**                    functions | handles | debug | fanout | list | library
** The scenarios of idle time (reap, list) run against the testing build
** (build/testing), whose clock moves only when told. */
#include "check.h"

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

/* The testing build's dactest_advance_clock, once use_manual_clock found it. */
static int (*advance_clock)(int64_t ms);

/* Has the container date its contexts' uses by the testing build's manual
** clock (dactest_use_manual_clock, before dac_init): what is idle is then
** what the scenario says, however long the machine stalls it. */
static void use_manual_clock(void) {
	/* A void* to function pointer cast, as POSIX specifies for dlsym. */
	int (*use)(void);
	void *self = dlopen(NULL, RTLD_NOW);
	REQUIRE(self != NULL);
	*(void **)&use = dlsym(self, "dactest_use_manual_clock");
	*(void **)&advance_clock = dlsym(self, "dactest_advance_clock");
	if (use == NULL || advance_clock == NULL) {
		fprintf(stderr, "dactest_use_manual_clock not found: run against build/testing\n");
		exit(2);
	}
	MUST(use());
}

static const int64_t remote = ((int64_t)5 << 48) + 42; /* a pass of worker 5 */

static void print_current(void) {
	int64_t cur = 0;
	int has = -1;
	MUST(dac_current_context_id(&cur));
	MUST(dac_has_valid_context(&has));
	printf("current_context_id = %" PRId64 ", has_valid_context = %d\n", cur, has);
}

static void print_num_contexts(void) { printf("num_contexts = %" PRId64 "\n", num_contexts()); }

/* Prints the id behind a handle, then drops the handle. */
static void print_and_unref(const char *what, dac_context *ctx) {
	int64_t id = 0;
	MUST(dac_context_id(ctx, &id));
	printf("%s: ", what);
	PRINT_ID(id);
	MUST(dac_context_unref(ctx));
}

static void scenario_container(void) {
	dac_context *ctx = NULL, *other = NULL, *got = NULL;
	int64_t id = 0, v = 0;
	int32_t w = 0;
	int released = -1;

	SHOW(dac_worker_id(&w));
	printf("worker_id = %" PRId32 "\n", w);
	SHOW(dac_max_id(&v));
	PRINT_ID(v);
	print_num_contexts();

	printf("-- new context: it becomes this thread's current context\n");
	SHOW(dac_context_new(&ctx));
	SHOW(dac_context_id(ctx, &id));
	PRINT_ID(id);
	print_current();
	print_num_contexts();
	SHOW(dac_context_new(&other));
	print_num_contexts();
	SHOW(dac_context_current(&got));
	print_and_unref("current", got);

	printf("-- retrieve\n");
	SHOW(dac_context_retrieve(id, &got));
	print_and_unref("retrieved", got);
	got = (dac_context *)(uintptr_t)0x77;
	SHOW(dac_context_retrieve(12345, &got));
	printf("out untouched: %s\n", got == (dac_context *)(uintptr_t)0x77 ? "yes" : "NO");
	SHOW(dac_context_retrieve_if_present(id, &got));
	print_and_unref("retrieved if present", got);
	SHOW(dac_context_retrieve_if_present(12345, &got));
	printf("retrieved if present: %s\n", got == NULL ? "NULL" : "a handle");
	SHOW(dac_context_is_valid(id));
	SHOW(dac_context_is_valid(12345));
	SHOW(dac_context_is_valid(-7187745005283311616));

	printf("-- get or create: a message of worker 5 names a pass this worker has not seen\n");
	SHOW(dac_context_get_or_create(remote, &got));
	print_and_unref("created", got);
	print_num_contexts();
	SHOW(dac_context_get_or_create(remote, &got));
	print_and_unref("got", got);
	SHOW(dac_context_get_or_create(id, &got));
	print_and_unref("got", got);
	print_num_contexts();
	print_current();

	printf("-- message ids\n");
	for (int i = 0; i < 3; i++) {
		SHOW(dac_new_autograd_message_id(&v));
		PRINT_ID(v);
	}

	printf("-- release\n");
	SHOW(dac_context_release(id));
	print_current();
	print_num_contexts();
	SHOW(dac_context_release(id));
	SHOW(dac_context_is_valid(id));
	SHOW(dac_context_current(&got));
	SHOW(dac_context_release_if_present(remote, &released));
	printf("released = %d\n", released);
	SHOW(dac_context_release_if_present(remote, &released));
	printf("released = %d\n", released);
	SHOW(dac_context_release_if_present(12345, NULL));
	print_num_contexts();

	printf("-- ids are never reused\n");
	MUST(dac_context_unref(ctx));
	SHOW(dac_context_new(&ctx));
	SHOW(dac_context_id(ctx, &id));
	PRINT_ID(id);
	SHOW(dac_context_release(id));
	MUST(dac_context_unref(ctx));
	print_num_contexts();
}

static void scenario_current(void) {
	dac_context *ctx = NULL, *got = NULL;
	int64_t id = 0;

	print_current();
	SHOW(dac_context_current(&got));
	printf("-- set_current_context_id does not look the id up\n");
	SHOW(dac_set_current_context_id(12345));
	print_current();
	SHOW(dac_context_current(&got));
	SHOW(dac_set_current_context_id(7));
	SHOW(dac_context_new(&ctx));
	print_current();
	SHOW(dac_force_current_context_id(7));
	print_current();
	SHOW(dac_clear_current_context());
	print_current();
	SHOW(dac_clear_current_context());
	printf("-- 0 is a valid id (worker 0's first); forcing -1 clears\n");
	SHOW(dac_set_current_context_id(0));
	print_current();
	SHOW(dac_force_current_context_id(DAC_INVALID_ID));
	print_current();

	printf("-- a current id set by hand names a context made elsewhere\n");
	MUST(dac_context_get_or_create(remote, &got));
	MUST(dac_context_unref(got));
	SHOW(dac_set_current_context_id(remote));
	SHOW(dac_context_current(&got));
	print_and_unref("current", got);
	printf("-- releasing it resets this thread's current id\n");
	SHOW(dac_context_release(remote));
	print_current();

	printf("-- releasing another context leaves the current id\n");
	SHOW(dac_context_new(&ctx));
	SHOW(dac_context_id(ctx, &id));
	MUST(dac_context_get_or_create(remote, &got));
	MUST(dac_context_unref(got));
	SHOW(dac_context_release(remote));
	print_current();
	SHOW(dac_context_release(id));
	MUST(dac_context_unref(ctx));
	print_current();
	print_num_contexts();
}

static void scenario_workers(void) {
	dac_context *got = NULL, *ctx = NULL;
	int64_t n = -1;
	for (int64_t i = 0; i < 3; i++) {
		MUST(dac_context_get_or_create(((int64_t)5 << 48) + i, &got));
		MUST(dac_context_unref(got));
	}
	MUST(dac_context_get_or_create((int64_t)6 << 48, &got));
	MUST(dac_context_unref(got));
	MUST(dac_context_get_or_create((int64_t)(UINT64_C(40000) << 48), &got));
	MUST(dac_context_unref(got));
	MUST(dac_context_new(&ctx));
	print_num_contexts();

	printf("-- worker 5 died mid-pass: release what it left here\n");
	SHOW(dac_release_contexts_of_worker(5, &n));
	PRINT_I64(n);
	SHOW(dac_release_contexts_of_worker(5, &n));
	PRINT_I64(n);
	SHOW(dac_release_contexts_of_worker(40000, &n));
	PRINT_I64(n);
	SHOW(dac_release_contexts_of_worker(6, NULL));
	print_num_contexts();
	printf("-- this worker's own contexts: the calling thread's current id is not reset\n");
	SHOW(dac_release_contexts_of_worker(3, &n));
	PRINT_I64(n);
	print_current();
	MUST(dac_clear_current_context());
	MUST(dac_context_unref(ctx));
	print_num_contexts();
	printf("-- out of range\n");
	n = 77;
	SHOW(dac_release_contexts_of_worker(-1, &n));
	SHOW(dac_release_contexts_of_worker(65536, &n));
	PRINT_I64(n);
}

static void scenario_reap(void) {
	dac_context *idle = NULL, *used = NULL;
	int64_t idle_id = 0, used_id = 0, n = -1;
	MUST(dac_context_new(&idle));
	MUST(dac_context_id(idle, &idle_id));
	MUST(dac_context_get_or_create(remote, &used));
	MUST(dac_context_id(used, &used_id));

	printf("-- fresh contexts are not idle for a minute\n");
	SHOW(dac_reap_idle_contexts(60000, &n));
	PRINT_I64(n);
	printf("-- 400 ms later, one used again: the other is idle for 200 ms\n");
	MUST(advance_clock(400));
	MUST(dac_context_add_known_worker_id(used, 4)); /* a change is a use */
	SHOW(dac_reap_idle_contexts(200, &n));
	PRINT_I64(n);
	SHOW(dac_context_is_valid(idle_id));
	SHOW(dac_context_is_valid(used_id));
	printf("-- the handle of a reaped context still reads\n");
	SHOW(dac_context_id(idle, &n));
	PRINT_ID(n);
	printf("-- 0: everything is idle\n");
	SHOW(dac_reap_idle_contexts(0, NULL));
	print_num_contexts();
	SHOW(dac_reap_idle_contexts(-1, &n));
	MUST(dac_context_unref(idle));
	MUST(dac_context_unref(used));
}

/* The view of what a worker holds: every stored context listed, each a
** reference; their ages and idle times; a listing touches none. */
static void scenario_list(void) {
	dac_context *own = NULL, *theirs = NULL, *listed[4] = {NULL, NULL, NULL, NULL};
	int64_t own_id = 0, id = 0, age = -1, idle = -1;
	size_t count = 99;
	printf("-- nothing stored: nothing listed\n");
	SHOW(dac_context_list(listed, 4, &count));
	PRINT_I64(count);
	MUST(dac_context_new_id(&own, &own_id));
	MUST(dac_context_get_or_create(remote, &theirs));
	MUST(dac_context_add_known_worker_id(theirs, 7));
	printf("-- two stored, both listed (each a new reference), in no particular order\n");
	SHOW(dac_context_list(listed, 4, &count));
	PRINT_I64(count);
	int seen_own = 0, seen_theirs = 0;
	for (size_t i = 0; i < count; i++) {
		MUST(dac_context_id(listed[i], &id));
		seen_own += id == own_id;
		seen_theirs += id == remote;
	}
	printf("listed: own %d, theirs %d, the same handles as the lookups: %s\n", seen_own, seen_theirs,
	       (listed[0] == own || listed[0] == theirs) && (listed[1] == own || listed[1] == theirs) ? "yes" : "no");
	SHOW(dac_context_unref_many(listed, count));
	printf("-- a short buffer: the first ones and the total; no room: the total only\n");
	SHOW(dac_context_list(listed, 1, &count));
	PRINT_I64(count);
	printf("listed[1] untouched: %s\n", listed[1] == NULL || listed[1] == own || listed[1] == theirs ? "yes" : "no");
	SHOW(dac_context_unref(listed[0]));
	SHOW(dac_context_list(NULL, 0, &count));
	PRINT_I64(count);
	printf("-- 600 ms later, one used again: its idle time starts over, its age does not\n");
	MUST(advance_clock(600));
	MUST(dac_context_add_known_worker_id(theirs, 8)); /* a change is a use */
	SHOW(dac_context_times(theirs, &age, &idle));
	printf("theirs: age >= 550 ms: %s, idle < age: %s\n", age >= 550 ? "yes" : "no", idle < age ? "yes" : "no");
	SHOW(dac_context_times(own, &age, &idle));
	printf("own: age >= 550 ms: %s, idle >= 550 ms: %s, idle <= age: %s\n", age >= 550 ? "yes" : "no",
	       idle >= 550 ? "yes" : "no", idle <= age ? "yes" : "no");
	int64_t idle_c = -1;
	SHOW(dac_context_times(own, NULL, &idle_c));
	printf("own, the idle time alone (read in C): at least the one read before: %s\n", idle_c >= idle ? "yes" : "no");
	printf("-- listing is not a use: the listed one is still idle for the reaper\n");
	SHOW(dac_context_list(listed, 4, &count));
	SHOW(dac_context_unref_many(listed, count));
	int64_t n = -1;
	SHOW(dac_reap_idle_contexts(300, &n));
	PRINT_I64(n);
	SHOW(dac_context_is_valid(own_id));
	printf("-- a released context's handle still tells its times\n");
	SHOW(dac_context_times(own, &age, NULL));
	MUST(dac_context_unref(own));
	MUST(dac_context_unref(theirs));
}

/* A second thread on the pass the main thread started (as torch's RPC
** threads set a pass's id current): it ends the pass, as a `with` block's
** exit does. */
static int64_t pass_id;

static void *second_thread(void *arg) {
	(void)arg;
	dac_context *ctx = NULL;
	MUST(dac_force_current_context_id(pass_id));
	printf("-- second thread: ending the reaped pass resets its current id\n");
	SHOW(dac_context_release(pass_id));
	print_current();
	int64_t id = 0;
	SHOW(dac_context_new_id(&ctx, &id));
	MUST(dac_context_unref(ctx));
	MUST(dac_context_release(id));
	print_current();
	return NULL;
}

static void *release_on_thread(void *arg) {
	MUST(dac_context_release(*(int64_t *)arg));
	return NULL;
}

/* A thread whose current context the clean-up reaped (dac_reap_idle_contexts,
** dac_release_contexts_of_worker) is told why and can start a new pass. */
static void scenario_reaped(void) {
	dac_context *ctx = NULL;
	int64_t n = -1;
	pthread_t th;
	for (int round = 0; round < 2; round++) {
		MUST(dac_context_new_id(&ctx, &pass_id));
		MUST(dac_context_unref(ctx));
		if (round == 0) {
			printf("-- worker 3, this one, presumed dead\n");
			SHOW(dac_release_contexts_of_worker(3, &n));
		} else {
			printf("-- the reaper\n");
			SHOW(dac_reap_idle_contexts(0, &n));
		}
		PRINT_I64(n);
		print_current();
		SHOW(dac_context_current(&ctx));
		SHOW(dac_context_retrieve(pass_id, &ctx));
		SHOW(dac_context_is_valid(pass_id));
		printf("-- a new pass on this thread\n");
		SHOW(dac_context_new(&ctx));
		print_current();
		REQUIRE(pthread_create(&th, NULL, second_thread, NULL) == 0);
		REQUIRE(pthread_join(th, NULL) == 0);
		MUST(dac_context_unref(ctx));
		SHOW(dac_context_release(pass_id + 1));
		print_current();
		print_num_contexts();
	}
	printf("-- released by another thread: the native stale id\n");
	MUST(dac_context_new_id(&ctx, &pass_id));
	MUST(dac_context_unref(ctx));
	REQUIRE(pthread_create(&th, NULL, release_on_thread, &pass_id) == 0);
	REQUIRE(pthread_join(th, NULL) == 0);
	SHOW(dac_context_new(&ctx));
	SHOW(dac_context_is_valid(pass_id));
}

static void print_debug_info(void) {
	printf("debug_info: num_autograd_contexts %" PRId64 ", max_contexts %" PRId64 ", refused_contexts %" PRId64 "\n",
	       debug_value("num_autograd_contexts"), debug_value("max_contexts"), debug_value("refused_contexts"));
}

static void scenario_limit(void) {
	dac_context *a = NULL, *b = NULL, *c = NULL;
	int64_t id = 0;
	SHOW(dac_set_max_contexts(2));
	SHOW(dac_context_new(&a));
	SHOW(dac_context_get_or_create(remote, &b));
	c = (dac_context *)(uintptr_t)0x77;
	SHOW(dac_context_get_or_create(remote + 1, &c));
	MUST(dac_clear_current_context());
	SHOW(dac_context_new(&c));
	printf("out untouched: %s\n", c == (dac_context *)(uintptr_t)0x77 ? "yes" : "NO");
	print_current();
	printf("-- at the cap, existing contexts are still found\n");
	SHOW(dac_context_get_or_create(remote, &c));
	print_and_unref("got", c);
	print_num_contexts();
	print_debug_info();
	printf("-- a refused context took no id\n");
	SHOW(dac_context_release(remote));
	SHOW(dac_context_new(&c));
	SHOW(dac_context_id(c, &id));
	PRINT_ID(id);
	printf("-- 0 lifts the cap\n");
	SHOW(dac_set_max_contexts(0));
	SHOW(dac_context_get_or_create(remote + 1, &b));
	print_num_contexts();
	SHOW(dac_set_max_contexts(-1));
	print_debug_info();
}

static void scenario_context(void) {
	dac_context *ctx = NULL;
	int32_t ids[8];
	size_t count = 99;
	int64_t id = 0;
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	SHOW(dac_context_known_worker_ids(ctx, NULL, 0, &count));
	printf("count = %zu\n", count);
	printf("-- known workers: deduplicated, in the order added\n");
	SHOW(dac_context_add_known_worker_id(ctx, 4));
	SHOW(dac_context_add_known_worker_id(ctx, 1));
	SHOW(dac_context_add_known_worker_id(ctx, 4));
	SHOW(dac_context_add_known_worker_id(ctx, 0));
	SHOW(dac_context_add_known_worker_id(ctx, 65535));
	SHOW(dac_context_add_known_worker_id(ctx, -1));
	SHOW(dac_context_add_known_worker_id(ctx, 65536));
	SHOW(dac_context_known_worker_ids(ctx, ids, 8, &count));
	printf("count = %zu:", count);
	for (size_t i = 0; i < count; i++)
		printf(" %" PRId32, ids[i]);
	printf("\n");
	printf("-- a short buffer gets the first ones and the total\n");
	ids[2] = -7;
	SHOW(dac_context_known_worker_ids(ctx, ids, 2, &count));
	printf("count = %zu: %" PRId32 " %" PRId32 ", ids[2] untouched: %s\n", count, ids[0], ids[1],
	       ids[2] == -7 ? "yes" : "NO");
	SHOW(dac_context_known_worker_ids(ctx, NULL, 0, &count));
	printf("count = %zu\n", count);

	printf("-- more than 32 workers\n");
	for (int32_t w = 1000; w < 1100; w++)
		MUST(dac_context_add_known_worker_id(ctx, w));
	for (int32_t w = 1000; w < 1100; w += 7)
		MUST(dac_context_add_known_worker_id(ctx, w));
	MUST(dac_context_add_known_worker_id(ctx, 4));
	int32_t many[200];
	SHOW(dac_context_known_worker_ids(ctx, many, 200, &count));
	int in_order = count == 104;
	for (size_t i = 4; in_order && i < count; i++)
		in_order = many[i] == (int32_t)(1000 + i - 4);
	printf("count = %zu, 1000..1099 after the first four in order: %s\n", count, in_order ? "yes" : "NO");

	printf("-- the handle outlives the release\n");
	SHOW(dac_context_release(id));
	SHOW(dac_context_id(ctx, &id));
	PRINT_ID(id);
	SHOW(dac_context_known_worker_ids(ctx, ids, 3, &count));
	printf("count = %zu: %" PRId32 " %" PRId32 " %" PRId32 "\n", count, ids[0], ids[1], ids[2]);
	SHOW(dac_context_add_known_worker_id(ctx, 9));
	SHOW(dac_context_retrieve(id, &ctx));
	SHOW(dac_context_unref(ctx));
}

static void print_functions(const char *kind, dac_context *ctx, size_t capacity) {
	int64_t msgs[8] = {0};
	uint64_t fns[8] = {0};
	size_t count = 99;
	int rc = kind[0] == 's' ? dac_context_send_functions(ctx, msgs, fns, capacity, &count)
	                        : dac_context_recv_functions(ctx, msgs, fns, capacity, &count);
	show_call(fmt("dac_context_%s_functions(ctx, msgs, fns, %zu, &count)", kind, capacity), rc);
	/* In no particular order: print them sorted by message id. */
	size_t n = count < capacity ? count : capacity;
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && msgs[j - 1] > msgs[j]; j--) {
			int64_t m = msgs[j];
			uint64_t f = fns[j];
			msgs[j] = msgs[j - 1], fns[j] = fns[j - 1];
			msgs[j - 1] = m, fns[j - 1] = f;
		}
	printf("count = %zu:", count);
	for (size_t i = 0; i < n; i++)
		printf(" %" PRId64 "=%#" PRIx64, msgs[i] - ((int64_t)3 << 48), fns[i]);
	printf("\n");
}

static void scenario_functions(void) {
	dac_context *ctx = NULL;
	int64_t m1 = 0, m2 = 0, id = 0;
	uint64_t fn = 0;
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	MUST(dac_new_autograd_message_id(&m1));
	MUST(dac_new_autograd_message_id(&m2));
	printf("(message ids printed as counters: m1 = 0, m2 = 1)\n");
	print_functions("send", ctx, 8);
	print_functions("recv", ctx, 8);
	printf("-- register: a send and a recv may share a message id\n");
	SHOW(dac_context_add_send_function(ctx, m1, 0xa1));
	SHOW(dac_context_add_send_function(ctx, m2, 0xa2));
	SHOW(dac_context_add_recv_function(ctx, m1, 0xb1));
	SHOW(dac_context_add_send_function(ctx, m1, 0xff));
	SHOW(dac_context_add_recv_function(ctx, m1, 0xff));
	SHOW(dac_context_send_function(ctx, m1, &fn));
	printf("fn = %#" PRIx64 "\n", fn);
	SHOW(dac_context_recv_function(ctx, m1, &fn));
	printf("fn = %#" PRIx64 "\n", fn);
	fn = 0x77;
	SHOW(dac_context_send_function(ctx, 7, &fn));
	SHOW(dac_context_recv_function(ctx, m2, &fn));
	printf("fn untouched: %s\n", fn == 0x77 ? "yes" : "NO");
	printf("-- list\n");
	print_functions("send", ctx, 8);
	print_functions("recv", ctx, 8);
	/* A short buffer gets some of the pairs (which ones is unspecified) and the total. */
	int64_t msgs[2] = {0, -7};
	uint64_t fns[2] = {0, 0x77};
	size_t count = 0;
	SHOW(dac_context_send_functions(ctx, msgs, fns, 1, &count));
	printf("count = %zu, a registered pair written: %s, msgs[1] and fns[1] untouched: %s\n", count,
	       (msgs[0] == m1 && fns[0] == 0xa1) || (msgs[0] == m2 && fns[0] == 0xa2) ? "yes" : "NO",
	       msgs[1] == -7 && fns[1] == 0x77 ? "yes" : "NO");
	SHOW(dac_context_send_functions(ctx, NULL, NULL, 0, &count));
	printf("count = %zu\n", count);
	printf("-- the opaque value is any 64-bit value\n");
	SHOW(dac_context_add_recv_function(ctx, m2, UINT64_MAX));
	SHOW(dac_context_recv_function(ctx, m2, &fn));
	printf("fn = %#" PRIx64 "\n", fn);
	printf("-- after release, through the handle\n");
	SHOW(dac_context_release(id));
	print_functions("send", ctx, 8);
	SHOW(dac_context_unref(ctx));
}

static void scenario_handles(void) {
	dac_context *ctx = NULL, *again = NULL;
	int64_t id = 0;
	char buf[512];
	size_t len;
	MUST(dac_context_new(&ctx));
	NAME(ctx);
	printf("-- a handle names its context: each call returns it with a new reference\n");
	SHOW(dac_context_current(&again));
	printf("same handle: %s\n", again == ctx ? "yes" : "no");
	MUST(dac_debug_info(buf, sizeof buf, &len));
	printf("live_handles: %s\n", strstr(buf, "\"live_handles\":2") ? "2" : buf);
	SHOW(dac_context_unref(again));
	printf("-- ref and unref count\n");
	SHOW(dac_context_ref(ctx));
	SHOW(dac_context_unref(ctx));
	SHOW(dac_context_id(ctx, &id));
	PRINT_ID(id);
	SHOW(dac_context_unref(ctx));
	printf("-- no reference left: every use fails, nothing crashes\n");
	int32_t ids[1];
	int64_t msgs[1];
	uint64_t fns[1], fn;
	size_t count;
	SHOW(dac_context_id(ctx, &id));
	SHOW(dac_context_unref(ctx));
	SHOW(dac_context_ref(ctx));
	SHOW(dac_context_add_known_worker_id(ctx, 4));
	SHOW(dac_context_known_worker_ids(ctx, ids, 1, &count));
	SHOW(dac_context_add_send_function(ctx, 1, 1));
	SHOW(dac_context_add_recv_function(ctx, 1, 1));
	SHOW(dac_context_send_function(ctx, 1, &fn));
	SHOW(dac_context_recv_function(ctx, 1, &fn));
	SHOW(dac_context_send_functions(ctx, msgs, fns, 1, &count));
	SHOW(dac_context_recv_functions(ctx, msgs, fns, 1, &count));
	printf("-- the context itself is still stored: the handle was only a reference\n");
	SHOW(dac_context_is_valid(id));

	printf("-- NULL\n");
	SHOW(dac_context_id(NULL, &id));
	SHOW(dac_context_unref(NULL));
	SHOW(dac_context_ref(NULL));
	printf("-- never issued\n");
	dac_context *bogus = (dac_context *)(uintptr_t)UINT64_C(0xdeadbeef00001234);
	NAME(bogus);
	SHOW(dac_context_id(bogus, &id));
	SHOW(dac_context_unref(bogus));

	printf("-- looked up again: the same handle, referenced again\n");
	dac_context *next = NULL;
	SHOW(dac_context_retrieve(id, &next));
	printf("same handle as ctx: %s\n", next == ctx ? "yes" : "no");
	SHOW(dac_context_id(next, &id));
	PRINT_ID(id);
	dac_context *forged = (dac_context *)((uintptr_t)next + (UINT64_C(1) << 32));
	NAME(forged);
	SHOW(dac_context_id(forged, &id));
	printf("-- released, it stays readable through its handle until the last reference goes\n");
	SHOW(dac_context_release(id));
	SHOW(dac_context_id(next, &id));
	SHOW(dac_context_unref(next));
	printf("-- then the handle is dead for good, whatever reuses its record\n");
	SHOW(dac_context_id(next, &id));
	SHOW(dac_context_ref(next));
	SHOW(dac_context_get_or_create(id, &again));
	printf("same handle as before: %s\n", again == next ? "yes" : "no");
	SHOW(dac_context_id(next, &id));
	SHOW(dac_context_release(id));
	SHOW(dac_context_unref(again));
	MUST(dac_debug_info(buf, sizeof buf, &len));
	printf("live_handles: %s\n", strstr(buf, "\"live_handles\":0") ? "0" : buf);
}

static void scenario_debug(void) {
	char buf[1024];
	size_t len = 0, full = 0;
	dac_context *ctx = NULL;
	SHOW(dac_debug_info(NULL, 0, &full));
	printf("length = %zu\n", full);
	SHOW(dac_debug_info(buf, sizeof buf, &len));
	printf("json: %s\n", buf);
	printf("strlen = length: %s\n", strlen(buf) == len && len == full ? "yes" : "NO");
	MUST(dac_context_new(&ctx));
	SHOW(dac_debug_info(buf, sizeof buf, &len));
	printf("json: %s\n", buf);
	char whole[1024];
	MUST(dac_debug_info(whole, sizeof whole, &full));
	printf("-- truncated, snprintf-like: capacity-1 bytes and a NUL\n");
	size_t caps[] = {1, 2, 10};
	for (size_t i = 0; i < 3; i++) {
		memset(buf, '#', sizeof buf);
		SHOWF(dac_debug_info(buf, caps[i], &len), "dac_debug_info(buf, %zu, &len)", caps[i]);
		printf("strlen = %zu, a prefix: %s, length is the full one: %s, byte after the NUL untouched: %s\n",
		       strlen(buf), strncmp(buf, whole, strlen(buf)) == 0 ? "yes" : "NO", len == full ? "yes" : "no",
		       buf[caps[i]] == '#' ? "yes" : "NO");
	}
	memset(buf, '#', sizeof buf);
	SHOWF(dac_debug_info(buf, full, &len), "dac_debug_info(buf, length, &len)");
	printf("last byte lost to the NUL: %s\n", strlen(buf) == full - 1 ? "yes" : "NO");
	SHOWF(dac_debug_info(buf, full + 1, &len), "dac_debug_info(buf, length + 1, &len)");
	printf("complete: %s\n", strlen(buf) == full ? "yes" : "NO");
	MUST(dac_context_unref(ctx));
}

/* The host's RPC layer, faked: it records each cleanup message it is asked
** to deliver. It runs on a library thread, so under a lock. */
static pthread_mutex_t sent_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int32_t worker;
	int64_t context_id;
} sent[16];
static int n_sent;

static int record_cleanup(void *user_data, int32_t worker_id, int64_t context_id) {
	REQUIRE(strcmp(user_data, "rpc") == 0);
	pthread_mutex_lock(&sent_mu);
	if (n_sent < 16)
		sent[n_sent].worker = worker_id, sent[n_sent].context_id = context_id, n_sent++;
	pthread_mutex_unlock(&sent_mu);
	return 0;
}

/* Prints the messages delivered since the last call, by worker id. */
static void print_sent(void) {
	int64_t pending = -1;
	SHOW(dac_cleanup_flush(10000, &pending));
	pthread_mutex_lock(&sent_mu);
	for (int i = 1; i < n_sent; i++)
		for (int j = i; j > 0 && sent[j - 1].worker > sent[j].worker; j--) {
			int32_t w = sent[j].worker;
			int64_t c = sent[j].context_id;
			sent[j] = sent[j - 1];
			sent[j - 1].worker = w, sent[j - 1].context_id = c;
		}
	printf("delivered %d:", n_sent);
	for (int i = 0; i < n_sent; i++)
		printf(" release %" PRId64 " to worker %" PRId32 ";", sent[i].context_id, sent[i].worker);
	printf("\n");
	n_sent = 0;
	pthread_mutex_unlock(&sent_mu);
}

static void scenario_fanout(void) {
	dac_context *ctx = NULL;
	int64_t id = 0;
	printf("-- no sender: releases tell nobody, and count it\n");
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	MUST(dac_context_add_known_worker_id(ctx, 4));
	SHOW(dac_context_release(id));
	MUST(dac_context_unref(ctx));
	printf("cleanup_skipped = %" PRId64 "\n", debug_value("cleanup_skipped"));

	static char rpc[] = "rpc";
	SHOW(dac_set_cleanup_sender(record_cleanup, rpc));
	printf("-- a release tells each known worker once\n");
	MUST(dac_context_new(&ctx));
	MUST(dac_context_id(ctx, &id));
	PRINT_ID(id);
	SHOW(dac_context_add_known_worker_id(ctx, 4));
	SHOW(dac_context_add_known_worker_id(ctx, 1));
	SHOW(dac_context_add_known_worker_id(ctx, 4));
	SHOW(dac_context_release(id));
	print_sent();
	printf("-- a cleanup arriving twice: the second is a no-op and tells nobody\n");
	SHOW(dac_context_release_if_present(id, NULL));
	print_sent();
	MUST(dac_context_unref(ctx));
	printf("-- the other releases tell them too, but not a dead worker itself; a context without known workers "
	       "tells nobody\n");
	MUST(dac_context_get_or_create(remote, &ctx));
	SHOW(dac_context_add_known_worker_id(ctx, 5));
	SHOW(dac_context_add_known_worker_id(ctx, 6));
	MUST(dac_context_unref(ctx));
	MUST(dac_context_get_or_create(remote + 1, &ctx));
	MUST(dac_context_unref(ctx));
	SHOW(dac_release_contexts_of_worker(5, NULL));
	print_sent();
	dac_cleanup_counters st = {sizeof st, -1, -1, -1, -1, -1, -1};
	SHOW(dac_cleanup_stats(&st));
	printf("sent %" PRId64 ", retried %" PRId64 ", failed %" PRId64 ", dropped %" PRId64 ", skipped %" PRId64
	       ", pending %" PRId64 "\n",
	       st.sent, st.retried, st.failed, st.dropped, st.skipped, st.pending);
	SHOW(dac_cleanup_stats(NULL));
	SHOW(dac_set_cleanup_sender(NULL, NULL));
}

/* A release may run the host's code on the releasing thread (the log hook
** when no sender is set, a non-blocking sender): a context that code makes
** there takes the thread's next id, which the thread's next context must
** not take again, and it sees the released context no longer current. */
static int64_t nested_ids[2];
static int n_nested;

static void make_one_nested(void) {
	if (n_nested >= 2)
		return;
	int64_t cur = 0, id = 0;
	dac_context *ctx = NULL;
	MUST(dac_current_context_id(&cur));
	printf("  inside the release: current_context_id = %" PRId64 "\n", cur);
	MUST(dac_context_new_id(&ctx, &id));
	MUST(dac_context_release(id));
	MUST(dac_context_unref(ctx));
	nested_ids[n_nested++] = id;
}

static void nested_hook(void *user_data, int level, const char *message) {
	(void)user_data, (void)level, (void)message;
	make_one_nested();
}

static int nested_sender(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)worker_id, (void)context_id;
	make_one_nested();
	return 0;
}

static void release_mine_with_a_worker(const char *what) {
	dac_context *ctx = NULL;
	int64_t id = 0, next = 0;
	MUST(dac_context_new_id(&ctx, &id));
	MUST(dac_context_add_known_worker_id(ctx, 5));
	printf("-- %s\n", what);
	SHOW(dac_context_release(id));
	MUST(dac_context_unref(ctx));
	print_current();
	MUST(dac_context_new_id(&ctx, &next));
	MUST(dac_context_release(next));
	MUST(dac_context_unref(ctx));
	int64_t made = nested_ids[n_nested - 1];
	printf("made inside: id + %" PRId64 "; the thread's next: id + %" PRId64 "; distinct: %s\n", made - id,
	       next - id, made != next && made != id ? "yes" : "NO");
}

static void scenario_reenter_release(void) {
	SHOW(dac_set_log_hook(nested_hook, NULL));
	release_mine_with_a_worker("no sender: the release logs on this thread, whose hook makes a context");
	SHOW(dac_set_log_hook(NULL, NULL));
	SHOW(dac_set_cleanup_sender_nonblocking(1));
	SHOW(dac_set_cleanup_sender(nested_sender, NULL));
	release_mine_with_a_worker("a non-blocking sender, run on this thread, makes a context");
	SHOW(dac_set_cleanup_sender(NULL, NULL));
}

static void scenario_library(void) {
	printf("dac_version() = %s\n", dac_version());
	printf("matches DAC_VERSION_STRING: %s\n", strcmp(dac_version(), DAC_VERSION_STRING) == 0 ? "yes" : "NO");
	printf("dac_version_number() = %d, DAC_VERSION_NUMBER = %d\n", dac_version_number(), DAC_VERSION_NUMBER);
	int codes[] = {DAC_OK,
	               DAC_ERR_NOT_INITIALIZED,
	               DAC_ERR_INVALID_ARGUMENT,
	               DAC_ERR_ALREADY_INITIALIZED,
	               DAC_ERR_NO_CURRENT_CONTEXT,
	               DAC_ERR_NOT_FOUND,
	               DAC_ERR_ALREADY_HAS_CONTEXT,
	               DAC_ERR_EXHAUSTED,
	               DAC_ERR_BAD_HANDLE,
	               DAC_ERR_LIMIT,
	               DAC_ERR_FORKED,
	               DAC_ERR_INTERNAL,
	               DAC_ERR_UNSUPPORTED,
	               DAC_ERR_TIMEOUT,
	               -1,
	               14,
	               1000,
	               INT32_MIN};
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
		printf("%d = %s\n", codes[i], dac_status_string(codes[i]));
	printf("static storage: %s\n", dac_status_string(5) == dac_status_string(5) ? "yes" : "NO");
}

int main(int argc, char **argv) {
	static const struct {
		const char *name;
		void (*fn)(void);
		int manual_clock;
	} scenarios[] = {
	    {"container", scenario_container, 0}, {"current", scenario_current, 0}, {"workers", scenario_workers, 0},
	    {"reap", scenario_reap, 1},           {"limit", scenario_limit, 0},     {"context", scenario_context, 0},
	    {"functions", scenario_functions, 0}, {"handles", scenario_handles, 0}, {"debug", scenario_debug, 0},
	    {"fanout", scenario_fanout, 0},       {"reaped", scenario_reaped, 0},   {"list", scenario_list, 1},
	    {"reenter_release", scenario_reenter_release, 0},
	};
	REQUIRE(argc == 2);
	if (strcmp(argv[1], "library") == 0) {
		scenario_library(); /* no init needed */
		return 0;
	}
	for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
		if (strcmp(argv[1], scenarios[i].name) == 0) {
			if (scenarios[i].manual_clock)
				use_manual_clock();
			MUST(dac_init(3));
			scenarios[i].fn();
			return 0;
		}
	}
	fprintf(stderr, "unknown scenario %s\n", argv[1]);
	return 2;
}
