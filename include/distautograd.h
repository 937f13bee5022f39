/*
** distautograd.h: the C interface of libdistautograd, the container of
** distributed autograd contexts that PyTorch's RPC framework keeps on every
** worker, implemented in Go and served through this plain C ABI.
**
** This header is the whole contract: each function, constant and rule is
** documented where it is declared. Where torch's container has the same
** operation, it behaves the same, messages included; docs/contract.md maps
** the names across C, C++, Python and torch, and docs/torch-compat.md lists
** every difference from torch. Every function:
**   - returns an int status: DAC_OK (0) on success, a DAC_ERR_* code on failure;
**   - on failure leaves a message for the calling thread in dac_last_error(),
**     byte for byte the message the native PyTorch component raises where it
**     raises one (users match on those), else one starting "distautograd: ";
**   - writes its results through out-pointers only on success (the one
**     exception, dac_cleanup_flush's *pending, says so where it is declared);
**   - checks its arguments: a NULL out-pointer, an out-of-range value or a dead
**     handle is DAC_ERR_INVALID_ARGUMENT or DAC_ERR_BAD_HANDLE, never a crash;
**   - is safe to call from any number of threads at once.
**
** Id layout: a context id and an autograd message id are int64_t values whose
** top 16 bits are the worker id and low 48 bits a per-worker counter starting
** at 0 (context ids and message ids are two counters of that layout);
** max_id = (worker_id << 48) | (2^48 - 1), in signed 64-bit arithmetic, as
** the native component computes it from its int16_t worker id (so negative
** for worker ids >= 32768). Worker 3's first id is 844424930131968 and its
** max_id 1125899906842623; worker 32768's first id is INT64_MIN, worker
** 40000's -7187745005283311616; worker 65535's max_id is -1, the value that
** also means "no current context". An id is the previous one plus one; ids
** are never reused; max_id itself is never issued: a counter that reaches
** it fails with DAC_ERR_EXHAUSTED and changes nothing else.
**
** Current context: each OS thread has its own current context id (-1: none),
** exactly as the native C++ thread_local. A new thread has none; a thread that
** exits loses its own (its context stays stored); releasing a context resets
** only the releasing thread's current id, so other threads may hold a stale
** one: dac_context_current then fails with DAC_ERR_NOT_FOUND and
** dac_context_new with DAC_ERR_ALREADY_HAS_CONTEXT until the thread clears
** or forces its id (dac_clear_current_context).
**
** Fork: the Go runtime does not survive fork(). In a child process forked
** after this library was loaded, every function fails at once with
** DAC_ERR_FORKED without entering Go. Load the library after fork, or use
** the "spawn" start method of Python's multiprocessing. While a process
** forks, the library holds back new calls into the cleanup sender and the
** log hook and waits for those in progress to return, so that a child
** never inherits a lock a sender held mid-call (a forked Python child could
** hang in CPython's own after-fork code). The wait is bounded,
** DAC_FORK_WAIT_MS from the library's pthread_atfork handler (below, with
** dac_fork_prepare): a call still running then (a sender
** blocked on the network, or waiting for a lock the forking thread holds)
** is left running and the fork goes on. A host whose forking thread holds a
** lock its callbacks take calls dac_fork_prepare itself first, without that
** lock (the Python package does, from an os.register_at_fork hook, with
** the GIL released).
**
** Static TLS: the library uses 64 bytes of initial-exec thread-local
** storage (the Go runtime's own 8 included), so it loads with dlopen after
** other libraries have taken most of glibc's static-TLS surplus. A
** thread's error message is allocated on its first call that enters Go
** and freed when the thread exits.
*/
#ifndef DISTAUTOGRAD_H
#define DISTAUTOGRAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this header; dac_version() gives the library's. The three
** numbers state it once: the string, the number and the build's versioned
** names (the library file; the soname has MAJOR) are derived from them. A
** release that adds to the ABI raises MINOR; test for an addition with
** DAC_VERSION_NUMBER (0.6.0 is 6000). */
#define DAC_VERSION_MAJOR 0
#define DAC_VERSION_MINOR 6
#define DAC_VERSION_PATCH 0
#define DAC_VERSION_STR_(x) #x
#define DAC_VERSION_XSTR_(x) DAC_VERSION_STR_(x)
#define DAC_VERSION_STRING \
	DAC_VERSION_XSTR_(DAC_VERSION_MAJOR) "." DAC_VERSION_XSTR_(DAC_VERSION_MINOR) "." DAC_VERSION_XSTR_(DAC_VERSION_PATCH)
#define DAC_VERSION_NUMBER (DAC_VERSION_MAJOR * 1000000 + DAC_VERSION_MINOR * 1000 + DAC_VERSION_PATCH)

/* Status codes. Values are ABI: they never change. */
#define DAC_OK 0
#define DAC_ERR_NOT_INITIALIZED 1     /* dac_init has not succeeded yet */
#define DAC_ERR_INVALID_ARGUMENT 2    /* NULL pointer, value out of range */
#define DAC_ERR_ALREADY_INITIALIZED 3 /* dac_init with a different worker id */
#define DAC_ERR_NO_CURRENT_CONTEXT 4  /* this thread has no current context */
#define DAC_ERR_NOT_FOUND 5           /* no context (or function) with that id */
#define DAC_ERR_ALREADY_HAS_CONTEXT 6 /* this thread already has a current context */
#define DAC_ERR_EXHAUSTED 7           /* an id counter reached max_id */
#define DAC_ERR_BAD_HANDLE 8          /* a dead or never-issued context handle */
#define DAC_ERR_LIMIT 9               /* a configured limit was reached, or memory refused */
#define DAC_ERR_FORKED 10             /* called in a child after fork() */
#define DAC_ERR_INTERNAL 11           /* a bug in distautograd, caught at the boundary */
#define DAC_ERR_UNSUPPORTED 12        /* not available in this build */
#define DAC_ERR_TIMEOUT 13            /* a wait ran out of time */

/* The sentinel current context id of a thread that has none. */
#define DAC_INVALID_ID ((int64_t)-1)

/* Defaults and limits, each named once (in the library's Go source) and
** stated here; the functions that take or follow them say what each means. */
/* dacgen:constants:begin: written by cmd/dacgen from container/ (make generate) */
/* max_attempts' default: the native component's 20 retries and the first
** attempt (container.DefaultCleanupAttempts) */
#define DAC_CLEANUP_DEFAULT_MAX_ATTEMPTS 21
/* initial_backoff_us' default: the wait before a message's first retry,
** doubling per retry (container.DefaultCleanupInitialBackoff) */
#define DAC_CLEANUP_DEFAULT_INITIAL_BACKOFF_US 10000
/* max_backoff_us' default: the longest wait between two attempts
** (container.DefaultCleanupMaxBackoff) */
#define DAC_CLEANUP_DEFAULT_MAX_BACKOFF_US 2000000
/* max_pending's default: messages queued or awaiting a retry before one
** more is dropped (container.DefaultCleanupMaxPending) */
#define DAC_CLEANUP_DEFAULT_MAX_PENDING 65536
/* the most max_pending may be: its queue is allocated up front
** (container.MaxCleanupPending) */
#define DAC_CLEANUP_MAX_PENDING_LIMIT 4194304
/* how many consecutive context ids make a run, which a thread creates from
** alone (container.ContextIDRun) */
#define DAC_CONTEXT_ID_RUN 64
/* how many autograd message ids a thread takes from the one counter at
** once (container.MessageIDBlock) */
#define DAC_MESSAGE_ID_BLOCK 4096
/* how many reaped ids the container remembers, spread over its shards
** (dac_reap_idle_contexts) (container.ReapedIDsKept) */
#define DAC_REAPED_IDS_KEPT 65536
/* the fewest reaped ids a shard remembers (container.ReapedIDsMinPerShard) */
#define DAC_REAPED_IDS_MIN_PER_SHARD 256
/* dacgen:constants:end */

/* Marks a declaration kept for the programs written against it: a call
** warns, naming what replaces it (the declaration says since when). A
** program that must call it under -Werror silences the warning where it
** calls (#pragma GCC diagnostic ignored "-Wdeprecated-declarations"), or
** defines DAC_DEPRECATED(msg) as nothing before it includes this header. */
#ifndef DAC_DEPRECATED
#if defined(__GNUC__) || defined(__clang__)
#define DAC_DEPRECATED(msg) __attribute__((deprecated(msg)))
#elif defined(_MSC_VER)
#define DAC_DEPRECATED(msg) __declspec(deprecated(msg))
#else
#define DAC_DEPRECATED(msg)
#endif
#endif

/* A handle to a context: it names the context, and every function that
** returns one returns a new reference to it, which the caller must drop
** with dac_context_unref (two lookups of one context give the same handle
** value, holding two references). References keep the context readable (id,
** known workers, functions) after it was released from the container, until
** the last one is dropped. A handle with no reference held is
** DAC_ERR_BAD_HANDLE, never undefined behaviour and never another context:
** once its context is released and its last reference dropped it is dead
** for good (a record whose generation would wrap is retired, never reused:
** no handle value ever names two lives); while its context is still
** stored, a lookup that returns it again makes it usable again. */
typedef struct dac_context dac_context;

/* ---- Library ------------------------------------------------------------ */

/* Returns the library's DAC_VERSION_STRING ("MAJOR.MINOR.PATCH"). Never
** fails; static. */
const char *dac_version(void);

/* Returns the library's DAC_VERSION_NUMBER. Never fails. */
int dac_version_number(void);

/* Returns the name of a status code ("DAC_ERR_NOT_FOUND"), or "DAC_UNKNOWN"
** for a value that is none. Never fails; static storage. */
const char *dac_status_string(int status);

/* Returns the message of the calling thread's most recent failing call, or ""
** if none failed yet. Successful calls leave it as it was, so read it right
** after a failure. Valid until this thread's next failing call. */
const char *dac_last_error(void);

/* Returns the status of the calling thread's most recent failing call, or
** DAC_OK if none failed yet. */
int dac_last_status(void);

/* ---- Container ---------------------------------------------------------- */

/* Initializes the process-wide container for worker_id, in [0, 65535]
** (else DAC_ERR_INVALID_ARGUMENT, "worker_id needs to be in the range
** [0, 65535]"). A second call with the same id succeeds and does nothing; with
** a different id it fails with DAC_ERR_ALREADY_INITIALIZED, "Container is
** already initialized with worker_id: 3, cannot initialize with different
** worker_id: 4". As the native component stores the id as int16_t, a second
** call for a worker id >= 32768 fails that way even with the same id (the
** message shows the int16_t value, e.g. -25536 for 40000). Every function
** below fails with DAC_ERR_NOT_INITIALIZED ("Need to initialize distributed
** autograd using torch.distributed.autograd.init()") until this succeeds. */
int dac_init(int64_t worker_id);

/* Writes the worker id given to dac_init, in [0, 65535]. */
int dac_worker_id(int32_t *out);

/* Writes max_id of this worker: (worker_id << 48) | (2^48 - 1). */
int dac_max_id(int64_t *out);

/* Writes how many contexts the container holds. */
int dac_num_contexts(int64_t *out);

/* Writes a new autograd message id, unique in this process and never reused;
** DAC_ERR_EXHAUSTED ("distautograd: autograd message ids are exhausted: the
** next id would reach max_id N") once the counter reaches max_id, on every
** thread once its block is used up. Each thread takes ids in blocks of
** DAC_MESSAGE_ID_BLOCK from the one counter, so a thread's successive ids
** are consecutive but ids of different threads interleave by block, not one
** by one as in the native component (which only promises uniqueness too).
** Ids a thread reserved and did not use before it exited are never
** issued. */
int dac_new_autograd_message_id(int64_t *out);

/* Writes debug information as a JSON object of integer values, NUL-terminated,
** into buf (snprintf-like: at most capacity bytes, truncated if too small; buf
** may be NULL when capacity is 0) and its full length without the NUL into
** *length. Keys: num_autograd_contexts, num_current_backward_passes (always 0:
** distautograd runs no backward passes), max_contexts, refused_contexts,
** live_handles (references held through handles, over all contexts),
** uncounted_handles (how many of those threads hold uncounted: each thread
** keeps its lookup of a context many threads look up off the context's
** shared count, see docs/architecture.md),
** go_heap_bytes (the Go heap's live bytes as of the last
** garbage collection: what the library's own memory keeps, for leak checks),
** the fan-out's counters cleanup_sent, cleanup_retried, cleanup_failed,
** cleanup_dropped, cleanup_skipped and cleanup_pending, and a key
** go_runtime_NAME per change of Go's runtime the library can be built with
** (docs/go-runtime.md): 1 if this build took it, 0 if not (switched off with
** GO_RUNTIME_OVERLAY=0, a Go the changes were not tested with, or a Go that
** does not need it). */
int dac_debug_info(char *buf, size_t capacity, size_t *length);

/* Caps the number of live contexts (0, the default: no cap). Past the cap,
** dac_context_new and dac_context_get_or_create fail with DAC_ERR_LIMIT
** ("distautograd: the container holds N contexts, its limit
** (max_contexts); ..."), each refusal counted (dac_debug_info's
** refused_contexts), so a flood of messages naming unknown passes cannot
** exhaust memory; a release makes room again. The cap holds exactly for
** every creation that starts after this returns; one under way while it
** runs is counted, never refused. Without a cap, as natively, the
** container has no limit but memory: contexts (listed, or released and
** still referenced by handles) take a 64-byte record each and their share
** of the index (docs/benchmarks.md, "Memory", has the figure measured), in
** records that grow as needed; a creation that the system refuses memory
** (or address space) for fails with DAC_ERR_LIMIT. The handle format's
** bound, 4294967295 contexts at once, lies past any machine's memory for
** them. */
int dac_set_max_contexts(int64_t max_contexts);

/* ---- Contexts ----------------------------------------------------------- */

/* Creates a context with the thread's next context id, stores it, makes it
** the calling thread's current context and writes a new reference to *out;
** if dac_context_get_or_create already stored a context under that id, that
** one is the context (as the native emplace keeps it). Fails with
** DAC_ERR_ALREADY_HAS_CONTEXT ("Already have an autograd context id for this
** thread.") if the thread has a current context id (unless its context was
** reaped: see dac_reap_idle_contexts), DAC_ERR_EXHAUSTED ("distautograd:
** context ids are exhausted: the next id would reach max_id N") at max_id,
** DAC_ERR_LIMIT past dac_set_max_contexts; a failure changes nothing.
**
** Ids are unique in the process and never reused. Each thread takes them
** from a run of its own: the rest of the run of DAC_CONTEXT_ID_RUN
** consecutive ids (aligned on a multiple of it) that the one counter is
** in, so that threads creating at once share no counter and no index
** shard. A thread's successive ids are consecutive within a run, and ids
** of different threads interleave by run, not one by one as in the native
** component (which only promises uniqueness too); a run's ids a thread did
** not use before it exited are never issued. The last run before max_id
** goes one id at a time to whichever thread asks, as natively, and ends the
** runs threads still hold: every thread finds the ids exhausted at once,
** after every id of that run. */
int dac_context_new(dac_context **out);

/* As dac_context_new, and also writes the new context's id to *context_id:
** one call where a binding pays for each (Python's ctypes). */
int dac_context_new_id(dac_context **out, int64_t *context_id);

/* Writes a new reference to the calling thread's current context. Fails with
** DAC_ERR_NO_CURRENT_CONTEXT ("Current thread doesn't have a valid autograd
** context. Please wrap your code using: `with
** torch.distributed.autograd.context() as context_id` to generate a valid
** context") if the thread has none, and DAC_ERR_NOT_FOUND ("Couldn't find
** autograd context data for current autograd context id") if its current id
** names a context that was released (by another thread, say). */
int dac_context_current(dac_context **out);

/* As dac_context_current, and also writes the context's id (the calling
** thread's current id) to *context_id: one call where a binding pays for
** each (Python's ctypes). */
int dac_context_current_id(dac_context **out, int64_t *context_id);

/* Writes a new reference to the context with id context_id, or fails with
** DAC_ERR_NOT_FOUND ("Could not find autograd context with id: 12345"). */
int dac_context_retrieve(int64_t context_id, dac_context **out);

/* Writes a new reference to the context with id context_id, or NULL if there
** is none (which is not an error: DAC_OK either way). */
int dac_context_retrieve_if_present(int64_t context_id, dac_context **out);

/* Writes a new reference to the context with id context_id, creating and
** storing it if there is none (a message from another worker naming a pass
** this worker has not seen); any id is taken, max_id and other workers'
** ids included. Does not change any thread's current context. */
int dac_context_get_or_create(int64_t context_id, dac_context **out);

/* Succeeds if a context with id context_id is stored, else DAC_ERR_NOT_FOUND
** ("Could not find autograd context with id: 12345"). */
int dac_context_is_valid(int64_t context_id);

/* Removes the context with id context_id (DAC_ERR_NOT_FOUND, "Could not find
** autograd context with id: 12345", if none), resets the calling thread's
** current id if it equals context_id, and has the cleanup sender tell every
** known worker of the context to release its copy. Handles to it stay valid. */
int dac_context_release(int64_t context_id);

/* As dac_context_release, but a missing id is a silent success (a cleanup
** message may arrive twice). *released (may be NULL) is set to 1 if a context
** was released, 0 if none was there. */
int dac_context_release_if_present(int64_t context_id, int *released);

/* As dac_context_release_if_present, after adding the count worker ids in
** worker_ids (may be NULL when count is 0) to the context's known workers,
** so that its release tells them too: one call where a host that records
** the workers of a pass itself (the torch backend: libtorch's context does)
** would otherwise add each and then release. A worker id outside [0, 65535]
** fails with DAC_ERR_INVALID_ARGUMENT, and nothing is released. */
int dac_context_release_with_workers(int64_t context_id, const int32_t *worker_ids, size_t count, int *released);

/* Releases every context whose id was created by worker_id (context_id >> 48),
** fanning out as dac_context_release does but for worker_id itself (gone: a
** message to it could only fail, after every retry), and writes how many to
** *released (may be NULL): the way to clear what a worker that died
** mid-pass left behind here. It changes no thread's current id, the
** caller's included, but the contexts it released count as reaped (see
** dac_reap_idle_contexts). Since 0.6.0 it does not tell worker_id. */
int dac_release_contexts_of_worker(int32_t worker_id, int64_t *released);

/* Releases every context not created, retrieved or changed during the last
** max_idle_ms milliseconds (resolution about 10 ms), fanning out as
** dac_context_release does, and writes how many to *released (may be NULL).
** Like dac_release_contexts_of_worker, it changes no thread's current id,
** but a thread whose current context was reaped is not stuck with it:
** dac_context_new makes it a new one; a release of the reaped id (the end
** of its pass, on a thread whose current id it is) resets that thread's
** current id, and still fails with DAC_ERR_NOT_FOUND; and every lookup of
** the id that fails (retrieve, is-valid, current, release) says why, after
** the native message: "Could not find autograd context with id: 12345
** (distautograd: it was reaped by dac_reap_idle_contexts, unused for 200 ms
** or more)". A release by any other means keeps the native stale id. A
** reaped id that a late message of its pass stores again is a context as
** any other while stored, and counts as reaped again once it is gone. The
** container remembers the last DAC_REAPED_IDS_KEPT reaped ids or so (each of
** its shards its last DAC_REAPED_IDS_KEPT/shards, at least
** DAC_REAPED_IDS_MIN_PER_SHARD). */
int dac_reap_idle_contexts(int64_t max_idle_ms, int64_t *released);

/* ---- The calling thread's current context id ---------------------------- */

/* Writes the calling thread's current context id, or DAC_INVALID_ID (-1). */
int dac_current_context_id(int64_t *out);

/* Writes 1 if the calling thread has a current context id, else 0. It does not
** look the context up: a stale id (its context released) still counts. */
int dac_has_valid_context(int *out);

/* Sets the calling thread's current context id; fails with
** DAC_ERR_ALREADY_HAS_CONTEXT ("Already have an autograd context id for this
** thread.") if one is set. Does not look the context up. */
int dac_set_current_context_id(int64_t context_id);

/* Sets the calling thread's current context id unconditionally. */
int dac_force_current_context_id(int64_t context_id);

/* Sets the calling thread's current context id back to DAC_INVALID_ID. */
int dac_clear_current_context(void);

/* ---- A context, through its handle -------------------------------------- */

/* Adds a reference to ctx; drop it with dac_context_unref. */
int dac_context_ref(dac_context *ctx);

/* Drops a reference to ctx. With none left, any use of ctx, a second unref
** included, is DAC_ERR_BAD_HANDLE (see dac_context). NULL is
** DAC_ERR_BAD_HANDLE. */
int dac_context_unref(dac_context *ctx);

/* Drops one reference from each of the count handles in ctxs (may be NULL
** when count is 0), as dac_context_unref does each: one call for a binding
** that batches what its garbage collector dropped. DAC_OK if every drop
** succeeded, else the status of the last that failed (its message left);
** the others are dropped all the same. */
int dac_context_unref_many(dac_context *const *ctxs, size_t count);

/* Writes the context's id. */
int dac_context_id(dac_context *ctx, int64_t *out);

/* Records that this pass sent an RPC to worker_id, in [0, 65535], so that
** releasing the context notifies that worker. Adding an id twice is a no-op. */
int dac_context_add_known_worker_id(dac_context *ctx, int32_t worker_id);

/* Writes up to capacity known worker ids, in the order added, into ids (may be
** NULL when capacity is 0), and their total number into *count. */
int dac_context_known_worker_ids(dac_context *ctx, int32_t *ids, size_t capacity, size_t *count);

/* Writes handles to the contexts stored now, up to capacity of them, into
** out (may be NULL when capacity is 0), each a new reference the caller
** drops (dac_context_unref_many), and into *count how many are stored: more
** than capacity, and only capacity were written; call again with more room.
** In no particular order; the container is read a part at a time, so a
** context created or released meanwhile may or may not be listed. Listing
** is not a use: it changes no context's idle time. With dac_context_id,
** dac_context_known_worker_ids and dac_context_times, the view of what a
** worker holds (the Python package's contexts()). Since 0.6.0. */
int dac_context_list(dac_context **out, size_t capacity, size_t *count);

/* Writes how many milliseconds ago the context was stored in this
** container (created, or first stored by dac_context_get_or_create) into
** *age_ms, and how many since it was last created, retrieved or changed
** (what dac_reap_idle_contexts measures) into *idle_ms; either may be NULL.
** Resolution about 10 ms. With age_ms NULL it does not enter Go. Since
** 0.6.0. */
int dac_context_times(dac_context *ctx, int64_t *age_ms, int64_t *idle_ms);

/* Registers the host's send function fn (an opaque value that distautograd
** never interprets: in torch, an autograd graph node) under autograd message
** id message_id. A second one under the same id is DAC_ERR_INVALID_ARGUMENT
** ("distautograd: a send function is already registered for autograd
** message id: 7"), and the first stays. */
int dac_context_add_send_function(dac_context *ctx, int64_t message_id, uint64_t fn);

/* Registers the host's recv function fn under message_id, as above. */
int dac_context_add_recv_function(dac_context *ctx, int64_t message_id, uint64_t fn);

/* Writes the send function registered under message_id, or fails with
** DAC_ERR_NOT_FOUND ("Could not find send function for autograd message id: 7"). */
int dac_context_send_function(dac_context *ctx, int64_t message_id, uint64_t *out);

/* Writes the recv function registered under message_id, or DAC_ERR_NOT_FOUND. */
int dac_context_recv_function(dac_context *ctx, int64_t message_id, uint64_t *out);

/* Writes up to capacity (message id, send function) pairs into message_ids and
** fns (both may be NULL when capacity is 0) and their total number into
** *count, in no particular order. */
int dac_context_send_functions(dac_context *ctx, int64_t *message_ids, uint64_t *fns, size_t capacity, size_t *count);

/* As dac_context_send_functions, for recv functions. */
int dac_context_recv_functions(dac_context *ctx, int64_t *message_ids, uint64_t *fns, size_t capacity, size_t *count);

/* ---- Host values: the host's own object for a context ------------------- */

/* A host that keeps an object of its own per context (the torch backend
** keeps libtorch's DistAutogradContext, with the pass's autograd functions
** and gradients) hangs it on the context as a host value: an opaque nonzero
** uint64_t, typically a pointer, set once per context. Its drop function
** runs exactly once, when the context's last reference goes: the context is
** out of the container (released, reaped, released by worker) and no handle
** to it is live. So a host that reads the value through a handle may use
** what it points to until it drops that handle, whatever other threads
** release meanwhile. The drop runs on the thread that dropped the last
** reference (dac_context_unref, a release, a reap), outside every lock of
** the container; it may call any dac_* function but must not throw or
** longjmp out. */
typedef void (*dac_host_value_drop)(uint64_t value);

/* Sets ctx's host value to value (nonzero, else DAC_ERR_INVALID_ARGUMENT)
** with its drop function (may be NULL: none) if the context has none yet,
** and writes the host value now set to *current: value if it was stored,
** else the value set before, and then neither value nor drop is kept (the
** caller frees its candidate). Threads setting at once agree on one value. */
int dac_context_set_host_value(dac_context *ctx, uint64_t value, dac_host_value_drop drop, uint64_t *current);

/* Writes ctx's host value, or 0 if none is set. */
int dac_context_host_value(dac_context *ctx, uint64_t *out);

/* ---- Release fan-out: telling the known workers ------------------------- */

/* Delivers one cleanup message: "release context context_id" to worker_id,
** through the host's RPC layer (the receiving worker calls
** dac_context_release_if_present). Returns 0 if delivered, anything else if
** not (then the message is retried). Called on a library thread, outside
** every lock of the container, never on the thread that released (unless
** the host declared it non-blocking: dac_set_cleanup_sender_nonblocking);
** it may call any dac_* function. It should not block for long: the
** library runs a few senders, and a slow one delays the messages queued
** behind it. */
typedef int (*dac_cleanup_sender)(void *user_data, int32_t worker_id, int64_t context_id);

/* Sets the cleanup sender (NULL: none; then releases tell nobody and count
** cleanup_skipped, as the native component does without an RPC agent). May be
** called before dac_init. Each release of a context with known workers queues
** one message per worker and returns at once (but see
** dac_set_cleanup_sender_nonblocking); a failed message is retried with
** exponential backoff up to max_attempts, then counted as failed and logged.
** It returns once every call of the previous sender has returned, so the host
** may then free that sender's user_data (called from inside a sender, it
** cannot wait for itself and returns at once). Setting the (sender,
** user_data) pair in force again does nothing and does not wait. Calls from
** several threads at once take effect one at a time, and those that wait
** return in the order they took effect: when all have returned, the sender
** in force is the one of the call that returned last. */
int dac_set_cleanup_sender(dac_cleanup_sender sender, void *user_data);

/* As dac_set_cleanup_sender, but waits at most timeout_ms (>= 0, else
** DAC_ERR_INVALID_ARGUMENT) for the calls of the previous sender in
** progress: DAC_ERR_TIMEOUT if some were still running then. The new sender
** is installed either way, and the previous one is never called again, but
** on DAC_ERR_TIMEOUT its user_data may still be in use. For shutting down
** with a deadline (a sender blocked on a dead peer would hold up
** dac_set_cleanup_sender without a bound). Called from inside a sender, it
** does not wait (its own call is still running) and returns DAC_OK. */
int dac_set_cleanup_sender_timeout(dac_cleanup_sender sender, void *user_data, int64_t timeout_ms);

/* Declares (nonblocking 1) that the cleanup sender never blocks: it hands
** the message to an asynchronous RPC layer and returns (as torch's agent
** does, and as the native component sends from the releasing thread). Then
** each release makes the first attempt of each of its messages itself, on
** the releasing thread, after the release has taken effect and outside
** every lock of the container, before it returns; only a failed attempt is
** queued, and its retries run on library threads as before. This replaces
** "never on the thread that released": the sender, and the log hook for a
** failed first attempt, then run inside the host's call to a release
** (dac_context_release, dac_context_release_if_present,
** dac_context_release_with_workers, dac_release_contexts_of_worker,
** dac_reap_idle_contexts), so they must not take a lock that the releasing
** caller may hold. It saves waking a library thread per message.
** nonblocking 0 (the default) restores library threads for every attempt;
** anything else is DAC_ERR_INVALID_ARGUMENT. Applies to releases
** from now on, whatever sender is in force; counters, max_pending,
** dac_cleanup_flush, the waits of dac_set_cleanup_sender and the fork gate
** cover these attempts alike. May be called before dac_init. */
int dac_set_cleanup_sender_nonblocking(int nonblocking);

/* The fan-out's options, for dac_cleanup_configure; a field 0 selects its
** default (DAC_CLEANUP_DEFAULT_*, above, in this version). The caller sets
** size to sizeof(dac_cleanup_options), as DAC_CLEANUP_OPTIONS_INIT does:
** fields are only ever added at the end, so a program built against an
** older header leaves the options it does not know at their defaults, and
** one built against a newer header may set only the options this library
** knows (the bytes past them must be 0, else DAC_ERR_INVALID_ARGUMENT). */
typedef struct dac_cleanup_options {
	size_t size;                /* set by the caller: sizeof(dac_cleanup_options) */
	int32_t max_attempts;       /* per message, the first included;
	                            ** 0: DAC_CLEANUP_DEFAULT_MAX_ATTEMPTS */
	int64_t initial_backoff_us; /* before the first retry, doubling per retry;
	                            ** 0: DAC_CLEANUP_DEFAULT_INITIAL_BACKOFF_US */
	int64_t max_backoff_us;     /* the longest wait between attempts;
	                            ** 0: DAC_CLEANUP_DEFAULT_MAX_BACKOFF_US */
	int64_t max_pending;        /* messages queued or awaiting a retry, past which one is
	                            ** dropped, counted and logged;
	                            ** 0: DAC_CLEANUP_DEFAULT_MAX_PENDING; at most
	                            ** DAC_CLEANUP_MAX_PENDING_LIMIT */
} dac_cleanup_options;

/* A dac_cleanup_options with its size set and every option at its default,
** to start from (libgit2's way): dac_cleanup_options o =
** DAC_CLEANUP_OPTIONS_INIT; o.max_attempts = 5; dac_cleanup_configure(&o);
** Since 0.6.0. */
#define DAC_CLEANUP_OPTIONS_INIT {sizeof(dac_cleanup_options), 0, 0, 0, 0}

/* Tunes the fan-out, for attempts from now on: every option at once, each
** 0 taking its default. A retry already waiting moves earlier where the
** new backoffs give it a shorter wait, never later: options put back from
** a long backoff take effect at once. DAC_ERR_INVALID_ARGUMENT if options is NULL, its
** size is smaller than this struct's first version (40 bytes) or sets an
** option this library does not know, a value is negative, max_pending is
** above DAC_CLEANUP_MAX_PENDING_LIMIT ("distautograd:
** dac_cleanup_configure: max_pending must be at most N (its queue is
** allocated up front), got M"), or max_pending grows past its current value
** once a cleanup message was queued, as the queue cannot grow under running
** senders ("distautograd: dac_cleanup_configure: max_pending cannot grow
** past N once cleanup messages were sent; ..."). A backoff too long for
** int64_t nanoseconds is taken as the longest one. May be called before
** dac_init. Since 0.5.0, as dac_cleanup_options. */
int dac_cleanup_configure(const dac_cleanup_options *options);

/* Deprecated since 0.6.0: dac_cleanup_configure with the first version's
** four options, positional, kept for the programs written against it. It
** refuses as dac_cleanup_configure does, its messages naming it
** ("distautograd: dac_set_cleanup_options: ..."). */
DAC_DEPRECATED("use dac_cleanup_configure with DAC_CLEANUP_OPTIONS_INIT")
int dac_set_cleanup_options(int32_t max_attempts, int64_t initial_backoff_us, int64_t max_backoff_us,
                            int64_t max_pending);

/* The fan-out's counters of cleanup messages (one per known worker of a
** released context) since the process started. The caller sets size to
** sizeof(dac_cleanup_counters) before each call: fields are only ever added
** at the end, so a program built against an older header gets the fields
** it knows, and one built against a newer header gets 0 in the fields this
** library does not know. */
typedef struct dac_cleanup_counters {
	size_t size;     /* set by the caller: sizeof(dac_cleanup_counters) */
	int64_t sent;    /* delivered */
	int64_t retried; /* attempts after a failed one */
	int64_t failed;  /* given up on after max_attempts */
	int64_t dropped; /* refused: the queue was full */
	int64_t skipped; /* not sent: no cleanup sender was set */
	int64_t pending; /* queued, being sent or awaiting a retry, now */
} dac_cleanup_counters;

/* Writes the fan-out's counters into *counters, up to counters->size bytes
** (each counter read once, not all at one instant). DAC_ERR_INVALID_ARGUMENT
** if counters is NULL or its size is smaller than this struct's first
** version (56 bytes). Works before dac_init. dac_debug_info has them too. */
int dac_cleanup_stats(dac_cleanup_counters *counters);

/* Waits up to timeout_ms for every pending cleanup message to be delivered or
** given up on: every message of the releases that returned before the call
** (a release counts its messages pending before it returns; a message stays
** pending until its log line, if it has one, was handed to the log hook, so
** after a flush that found nothing pending no line of those messages is still
** to come). DAC_ERR_TIMEOUT if some are still pending, whose number is
** written to *pending (may be NULL) on success and on DAC_ERR_TIMEOUT alike.
** A timeout_ms too long for int64_t nanoseconds (about 292 years) waits as
** long as that. Called from inside a cleanup sender or the log hook it does
** not wait (the caller's own message stays pending until it returns): it
** answers at once, as with timeout_ms 0. */
int dac_cleanup_flush(int64_t timeout_ms, int64_t *pending);

/* Log levels of the log hook. */
#define DAC_LOG_DEBUG 0
#define DAC_LOG_INFO 1
#define DAC_LOG_WARNING 2
#define DAC_LOG_ERROR 3

/* Receives the library's log lines (a failed or dropped cleanup message...);
** message is valid during the call only. Called on library threads, and on
** a thread releasing a context (a line the release itself logs, as one with
** no cleanup sender set), whose calls from the hook see that thread's state
** as the release left it. */
typedef void (*dac_log_hook)(void *user_data, int level, const char *message);

/* Sets the log hook (NULL, the default: warnings and errors go to stderr).
** Unlike dac_set_cleanup_sender it does not wait for calls of the previous
** hook in progress: keep a hook's user_data alive for the life of the process
** or until dac_cleanup_flush has returned DAC_OK with no release since. */
int dac_set_log_hook(dac_log_hook hook, void *user_data);

/* ---- Fork ------------------------------------------------------------- */

/* Holds back new calls into the cleanup sender and the log hook (their
** library threads wait) and waits up to timeout_ms (>= 0) for those in
** progress on other threads to return: DAC_ERR_TIMEOUT if some still run
** (they are held back all the same). Call it right before fork(), on the
** forking thread, when that thread holds a lock the callbacks need; then
** dac_fork_parent in the parent after fork() returns (the child cannot use
** the library). The library's own pthread_atfork handler waits up to
** DAC_FORK_WAIT_MS when no dac_fork_prepare is in effect, and not at all
** when one is (the host chose its bound). Calls of both nest. */
int dac_fork_prepare(int64_t timeout_ms);

/* How long the library's pthread_atfork handler waits, in milliseconds, for
** calls into the host in progress to return (csrc/fork.c's, stated here). */
#define DAC_FORK_WAIT_MS 2000

/* Undoes one dac_fork_prepare (with none in effect, does nothing): calls
** into the host go on. Never fails (but with DAC_ERR_FORKED in a child). */
int dac_fork_parent(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DISTAUTOGRAD_H */
