/*
** demo.c: a training runtime's worker, acted out against libdistautograd.
**
** This process is worker 3 of a distributed job. It runs a few distributed
** autograd passes, each on a thread of its own as a trainer would: it opens a
** context, sends RPCs to other workers (taking a message id per send and
** recording the send function under it), receives a reply on an RPC thread
** (which finds the pass by id, as a real RPC agent does), and releases the
** context, which tells every worker the pass touched to release its copy.
** A pass started by another worker arrives too. The output narrates it all.
**
** Build and run: make demo
*/
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <distautograd.h>

/* Every call is checked: on failure, say what and why, and stop. */
#define CHECK(call)                                                                                    \
	do {                                                                                               \
		int rc_ = (call);                                                                              \
		if (rc_ != DAC_OK) {                                                                           \
			fprintf(stderr, "demo: %s failed: %s: %s\n", #call, dac_status_string(rc_), dac_last_error()); \
			exit(1);                                                                                   \
		}                                                                                              \
	} while (0)

/* An id as its parts: the worker that made it (top 16 bits) and its counter. */
static const char *show_id(int64_t id, char buf[64]) {
	snprintf(buf, 64, "%" PRId64 " [worker %" PRIu64 " #%" PRIu64 "]", id, (uint64_t)id >> 48,
	         (uint64_t)id & ((UINT64_C(1) << 48) - 1));
	return buf;
}

/* The autograd functions of the host: distautograd stores them as opaque
** 64-bit values; here, pointers to these. */
struct autograd_fn {
	const char *name;
	int peer;
};

/* ---- The RPC layer, faked ---- */

/* The cleanup messages the library asked us to deliver, so that they are
** printed in order once the pass is done (the library sends them from its own
** threads). A real runtime would send an RPC to worker_id here. */
static pthread_mutex_t outbox_mu = PTHREAD_MUTEX_INITIALIZER;
static int32_t outbox[16];
static int outbox_len;

static int deliver_cleanup(void *user_data, int32_t worker_id, int64_t context_id) {
	(void)user_data, (void)context_id;
	pthread_mutex_lock(&outbox_mu);
	if (outbox_len < 16)
		outbox[outbox_len++] = worker_id;
	pthread_mutex_unlock(&outbox_mu);
	return 0; /* delivered */
}

static void print_outbox(void) {
	int64_t pending = 0;
	CHECK(dac_cleanup_flush(5000, &pending));
	pthread_mutex_lock(&outbox_mu);
	for (int i = 1; i < outbox_len; i++) /* by worker id */
		for (int j = i; j > 0 && outbox[j - 1] > outbox[j]; j--) {
			int32_t w = outbox[j];
			outbox[j] = outbox[j - 1], outbox[j - 1] = w;
		}
	printf("    cleanup sent to %d worker%s:", outbox_len, outbox_len == 1 ? "" : "s");
	for (int i = 0; i < outbox_len; i++)
		printf(" %" PRId32, outbox[i]);
	printf("\n");
	outbox_len = 0;
	pthread_mutex_unlock(&outbox_mu);
}

/* ---- A pass ---- */

struct reply {
	int64_t context_id, message_id;
	int from;
	struct autograd_fn *recv;
};

/* An RPC thread: a reply names the pass by its context id. The thread has no
** current context; it finds the pass with get_or_create, as the RPC agent
** does for every incoming message, and records the recv function. */
static void *rpc_thread(void *arg) {
	struct reply *r = arg;
	char a[64], b[64];
	dac_context *ctx = NULL;
	int has = -1;
	CHECK(dac_has_valid_context(&has));
	CHECK(dac_context_get_or_create(r->context_id, &ctx));
	CHECK(dac_context_add_recv_function(ctx, r->message_id, (uint64_t)(uintptr_t)r->recv));
	printf("    [rpc thread] reply from worker %d for context %s (this thread's current context: %s);\n"
	       "                 %s recorded under its message %s\n",
	       r->from, show_id(r->context_id, a), has ? "set" : "none", r->recv->name, show_id(r->message_id, b));
	CHECK(dac_context_unref(ctx));
	return NULL;
}

struct pass {
	int number;
	int peers[3];
	int npeers;
};

/* A trainer thread: one forward and backward across the peers. */
static void *trainer_thread(void *arg) {
	struct pass *p = arg;
	char a[64];
	dac_context *ctx = NULL;
	int64_t id = 0, current = 0;
	struct autograd_fn sends[3], recv = {"RecvRpcBackward", 0};

	CHECK(dac_context_new(&ctx));
	CHECK(dac_context_id(ctx, &id));
	CHECK(dac_current_context_id(&current));
	printf("pass %d, on its own thread: new context %s, now this thread's current (%s)\n", p->number,
	       show_id(id, a), current == id ? "yes" : "no");

	/* Forward: an RPC to each peer, each send recorded under a fresh message id. */
	int64_t first_msg = 0;
	for (int i = 0; i < p->npeers; i++) {
		int64_t msg = 0;
		CHECK(dac_new_autograd_message_id(&msg));
		if (i == 0)
			first_msg = msg;
		sends[i].name = "SendRpcBackward", sends[i].peer = p->peers[i];
		CHECK(dac_context_add_known_worker_id(ctx, p->peers[i]));
		CHECK(dac_context_add_send_function(ctx, msg, (uint64_t)(uintptr_t)&sends[i]));
		printf("    forward: RPC to worker %d, message %s\n", p->peers[i], show_id(msg, a));
	}

	/* The first peer replies. The reply's message id is the peer's own (the
	** sender of a message makes its id), so it carries the peer's worker id. */
	struct reply r = {id, ((int64_t)p->peers[0] << 48) + 100 + p->number, p->peers[0], &recv};
	pthread_t t;
	if (pthread_create(&t, NULL, rpc_thread, &r) != 0 || pthread_join(t, NULL) != 0)
		exit(1);

	/* What the pass recorded. */
	int32_t workers[8];
	size_t nworkers = 0, nsends = 0, nrecvs = 0;
	CHECK(dac_context_known_worker_ids(ctx, workers, 8, &nworkers));
	CHECK(dac_context_send_functions(ctx, NULL, NULL, 0, &nsends));
	CHECK(dac_context_recv_functions(ctx, NULL, NULL, 0, &nrecvs));
	uint64_t fn = 0;
	CHECK(dac_context_send_function(ctx, first_msg, &fn));
	printf("    backward: %zu send and %zu recv functions; message %s is the %s to worker %d\n", nsends, nrecvs,
	       show_id(first_msg, a), ((struct autograd_fn *)(uintptr_t)fn)->name,
	       ((struct autograd_fn *)(uintptr_t)fn)->peer);
	printf("    known workers:");
	for (size_t i = 0; i < nworkers; i++)
		printf(" %" PRId32, workers[i]);
	printf("\n");

	/* Done: release, which resets this thread's current context and tells the peers. */
	CHECK(dac_context_release(id));
	CHECK(dac_current_context_id(&current));
	printf("    released; this thread's current context id is now %" PRId64 "\n", current);
	print_outbox();
	CHECK(dac_context_unref(ctx));
	return NULL;
}

static void run_pass(struct pass *p) {
	pthread_t t;
	if (pthread_create(&t, NULL, trainer_thread, p) != 0 || pthread_join(t, NULL) != 0)
		exit(1);
}

static int64_t num_contexts(void) {
	int64_t n = -1;
	CHECK(dac_num_contexts(&n));
	return n;
}

int main(void) {
	char a[64];
	int64_t max_id = 0;

	printf("distautograd %s: a training runtime on worker 3\n\n", dac_version());
	CHECK(dac_set_cleanup_sender(deliver_cleanup, NULL));
	CHECK(dac_init(3));
	CHECK(dac_max_id(&max_id));
	printf("init(3): ids are [worker | 48-bit counter]; max_id = %s\n", show_id(max_id, a));
	printf("(context and message ids come to each thread in runs and blocks of consecutive ids,\n"
	       " so each pass, on a thread of its own, starts a new run and a new block)\n");

	dac_context *none = NULL;
	if (dac_context_current(&none) != DAC_OK)
		printf("the main thread has no current context:\n    \"%s\"\n\n", dac_last_error());

	struct pass passes[] = {{1, {4, 5}, 2}, {2, {4, 6, 7}, 3}, {3, {5}, 1}};
	for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++) {
		run_pass(&passes[i]);
		printf("    contexts held: %" PRId64 "\n\n", num_contexts());
	}

	/* A pass that worker 6 started: its message creates the context here,
	** and its cleanup, which may arrive twice, removes it. */
	int64_t remote = ((int64_t)6 << 48) + 41;
	dac_context *ctx = NULL;
	int released = 0;
	CHECK(dac_context_get_or_create(remote, &ctx));
	CHECK(dac_context_unref(ctx));
	printf("worker 6's pass %s arrived: contexts held: %" PRId64 "\n", show_id(remote, a), num_contexts());
	CHECK(dac_context_release_if_present(remote, &released));
	printf("    its cleanup: released %d\n", released);
	CHECK(dac_context_release_if_present(remote, &released));
	printf("    its cleanup again: released %d (a no-op)\n\n", released);

	char info[512];
	size_t len = 0;
	CHECK(dac_debug_info(info, sizeof info, &len));
	printf("debug info: %s\n", info);
	printf("num_contexts %" PRId64 "\n", num_contexts());
	return 0;
}
