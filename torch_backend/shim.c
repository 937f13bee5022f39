/* shim.c: what libdistautograd_torch.so does on the first call of one of
** its entries (shim.S): find libtorch's own definitions, decide once whether
** to serve torch's container, and fill the jump table.
**
** The shim is preloaded into every process that inherits LD_PRELOAD
** (shells, compilers, data loader workers), so it is small C with no
** dependency but libc and loads nothing until torch calls a container
** function: the implementation (C++, linked against libtorch and
** libdistautograd, whose Go runtime starts with it) is dlopen'ed then:
** libdistautograd_torch_impl_<version>.so, the one built against the loaded
** torch's own headers, picked by libtorch_cpu's soname. If the loaded libtorch is not one the backend serves, or its
** implementation refuses it, the shim says why once on stderr and forwards
** every call to libtorch's own definitions: torch runs as if nothing was
** preloaded. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "say.h"
#include "symbols.h"

extern void *dat_fn[DAT_NSYMS];
extern void dat_noop(void);

#define X_NAME(i, name, sym) #sym,
static const char *const sym_names[DAT_NSYMS] = {DAT_SYMBOLS(X_NAME)};

#define X_DECL(i, name, sym) extern char sym[];
DAT_SYMBOLS(X_DECL)
#define X_ADDR(i, name, sym) (void *)sym,
/* Our own entries, to tell libtorch's definitions from ours. */
static void *const own[DAT_NSYMS] = {DAT_SYMBOLS(X_ADDR)};

#define X_STR(v) v,
/* The torch versions served, each with its implementation. */
static const char *const served[] = {DAT_TORCH_VERSIONS(X_STR)};
#define NSERVED (sizeof served / sizeof served[0])

static void *real[DAT_NSYMS];
#ifdef DAT_AB
static void *served_fn[DAT_NSYMS]; /* the backend's entries, for dat_ab_switch */
#endif
static pthread_once_t found_once = PTHREAD_ONCE_INIT, decided_once = PTHREAD_ONCE_INIT;
static int active; /* 1 when the backend serves, read by dat_torch_backend_state */

/* The object that defines the container, other than this shim. */
struct finder {
	const char *self;
	void *handle;
	char path[4096];
};

static int find_definer(struct dl_phdr_info *info, size_t size, void *arg) {
	(void)size;
	struct finder *f = arg;
	if (info->dlpi_name == NULL || info->dlpi_name[0] == 0 || strcmp(info->dlpi_name, f->self) == 0)
		return 0;
	void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
	if (h == NULL)
		return 0;
	void *p = dlsym(h, sym_names[0]);
	if (p != NULL && p != own[0]) {
		Dl_info di;
		/* dlsym on a handle searches its dependencies too: keep the one
		** that holds the definition itself. */
		if (dladdr(p, &di) && di.dli_fname && strcmp(di.dli_fname, info->dlpi_name) == 0) {
			f->handle = h;
			snprintf(f->path, sizeof f->path, "%s", info->dlpi_name);
			return 1;
		}
	}
	dlclose(h);
	return 0;
}

static char torch_path[4096];
static void *torch_handle;
static int missing_real = -1; /* index of a symbol libtorch lacks, -1: none */

/* Phase 1: libtorch's definitions. Its private container members (which
** only libtorch's own members call) point there from now on, so that the
** checks below can run libtorch's code without coming back here. */
static void find_real(void) {
	Dl_info self;
	struct finder f = {0};
	dladdr((void *)own[0], &self);
	f.self = self.dli_fname;
	dl_iterate_phdr(find_definer, &f);
	if (f.handle == NULL)
		return;
	torch_handle = f.handle;
	snprintf(torch_path, sizeof torch_path, "%s", f.path);
	for (int i = 0; i < DAT_NSYMS; i++) {
		real[i] = dlsym(f.handle, sym_names[i]);
		if (real[i] == NULL && missing_real < 0)
			missing_real = i;
	}
	for (int i = DAT_PRIVATE_FIRST; i < DAT_NSYMS; i++)
		if (real[i] != NULL)
			__atomic_store_n(&dat_fn[i], i == DAT_IDX_SEND_RELEASE ? (void *)dat_noop : real[i], __ATOMIC_RELEASE);
}

/* The soname of the object at path, from its dynamic section. */
static const char *soname_of(void *handle) {
	struct link_map *lm = NULL;
	if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL)
		return NULL;
	const char *strtab = NULL;
	ElfW(Xword) off = (ElfW(Xword))-1;
	for (ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
		if (d->d_tag == DT_STRTAB)
			strtab = (const char *)d->d_un.d_ptr;
		else if (d->d_tag == DT_SONAME)
			off = d->d_un.d_val;
	}
	return strtab && off != (ElfW(Xword))-1 ? strtab + off : NULL;
}

static void go_inert(const char *why) {
	for (int i = 0; i < DAT_NSYMS; i++)
		if (real[i] != NULL)
			__atomic_store_n(&dat_fn[i], real[i], __ATOMIC_RELEASE);
	dat_say("distautograd-torch: %s; torch keeps its own distributed autograd container (distautograd is NOT "
	        "in use in this process)\n",
	        why);
}

/* Tells the launcher that this process is served: one datagram, the torch
** version, to the abstract socket DAT_NOTIFY_ENV names, where the
** launcher's watcher (distautograd._launch: watch_served) prints one line
** for the job on the first and stops listening; the rest find no one. Not
** set (no launcher, or DISTAUTOGRAD_QUIET=1): nothing is sent. */
static void notify_served(const char *version) {
	const char *name = getenv(DAT_NOTIFY_ENV);
	struct sockaddr_un to = {.sun_family = AF_UNIX};
	size_t n = name != NULL ? strlen(name) : 0;
	if (n == 0 || n + 1 > sizeof to.sun_path)
		return;
	memcpy(to.sun_path + 1, name, n); /* sun_path[0] == 0: the abstract namespace */
	int saved = errno;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd >= 0) {
		(void)sendto(fd, version, strlen(version), MSG_NOSIGNAL, (struct sockaddr *)&to,
		             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));
		close(fd);
	}
	errno = saved;
}

static void decide(void) {
	char why[8192] = "";
	const char *sim = getenv("DISTAUTOGRAD_TORCH_SIMULATE_MISMATCH");
	if (sim != NULL && sim[0] == 0)
		sim = NULL;
	if (torch_handle == NULL) {
		/* Nothing else defines the container: no call can be forwarded. */
		dat_say("distautograd-torch: no loaded library defines torch's DistAutogradContainer; cannot "
		                "serve or forward %s\n", sym_names[0]);
		abort();
	}
	const char *so = soname_of(torch_handle);
	if (sim != NULL && strcmp(sim, "soname") == 0)
		so = DAT_TORCH_SONAME_PREFIX "0.0 (simulated)";
	/* "libtorch_cpu.so.<version>": the torch release it belongs to. */
	const char *version = NULL;
	size_t plen = strlen(DAT_TORCH_SONAME_PREFIX);
	for (size_t i = 0; so != NULL && i < NSERVED; i++)
		if (strncmp(so, DAT_TORCH_SONAME_PREFIX, plen) == 0 && strcmp(so + plen, served[i]) == 0)
			version = served[i];
	if (version == NULL) {
		char list[256] = "";
		for (size_t i = 0; i < NSERVED; i++)
			snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", served[i]);
		snprintf(why, sizeof why, "the loaded libtorch (%s, soname %s) is not a torch this backend serves (torch %s)",
		         torch_path, so ? so : "none", list);
		go_inert(why);
		return;
	}
	if (missing_real >= 0 || (sim != NULL && strcmp(sim, "symbol") == 0)) {
		snprintf(why, sizeof why, "%s does not define %s", torch_path,
		         missing_real >= 0 ? sym_names[missing_real] : "a needed symbol (simulated)");
		go_inert(why);
		return;
	}
	/* The implementation for this torch lives beside the shim. */
	Dl_info self;
	char path[4096];
	dladdr((void *)own[0], &self);
	snprintf(path, sizeof path, "%s", self.dli_fname);
	char *slash = strrchr(path, '/');
	snprintf(slash ? slash + 1 : path, sizeof path - (size_t)(slash ? slash + 1 - path : 0),
	         "libdistautograd_torch_impl_%s.so", version);
	void *impl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (impl == NULL) {
		snprintf(why, sizeof why, "cannot load %s, the implementation for torch %s: %s", path, version, dlerror());
		go_inert(why);
		return;
	}
	int (*start)(dat_start_args *) = (int (*)(dat_start_args *))dlsym(impl, "dat_impl_start");
	void *serve[DAT_NSYMS] = {0};
	/* The implementation checks that this is the torch it was built for
	** (simulated: another's, to see it refuse). */
	const char *told = sim != NULL && strcmp(sim, "impl") == 0 ? "0.0 (simulated)" : version;
	dat_start_args args = {DAT_ABI, real, serve, why, sizeof why, sim, told};
	if (start == NULL) {
		snprintf(why, sizeof why, "%s has no dat_impl_start", path);
		go_inert(why);
		return;
	}
	if (start(&args) != 0) {
		go_inert(why);
		return;
	}
	for (int i = 0; i < DAT_NSYMS; i++)
		if (i < DAT_PRIVATE_FIRST)
			__atomic_store_n(&dat_fn[i], serve[i], __ATOMIC_RELEASE);
#ifdef DAT_AB
	memcpy(served_fn, serve, sizeof served_fn);
#endif
	__atomic_store_n(&active, 1, __ATOMIC_RELEASE);
	notify_served(version);
}

/* Called by dat_lazy (shim.S) with the index of the entry called; returns
** it, once dat_fn[index] points where calls must go. */
__attribute__((visibility("hidden"))) unsigned dat_resolve(unsigned index) {
	pthread_once(&found_once, find_real);
	if (index >= DAT_PRIVATE_FIRST && real[index] != NULL)
		return index; /* set by find_real */
	pthread_once(&decided_once, decide);
	return index;
}

#ifdef DAT_AB
/* The A/B build (make torch-ab: build/libdistautograd_torch_ab.so), for
** bench/torchab.py and torchbench.py --aa, never a real job: one process
** alternates between libtorch's own container and the backend, so that
** the two are compared with everything else held fixed (the process, its
** threads' placement, its heap), and times every public member (ab.S).
** Switching is safe only while no context is live and no cleanup message
** is in flight: each side keeps its own map and ids. */
extern void *dat_ab_target[DAT_NSYMS];
extern unsigned long dat_ab_ticks[2 * DAT_NSYMS];
#define X_WDECL(i, name, sym) extern char dat_ab_wrap_##i[];
DAT_SYMBOLS(X_WDECL)
#define X_WADDR(i, name, sym) (void *)dat_ab_wrap_##i,
static void *const wraps[DAT_NSYMS] = {DAT_SYMBOLS(X_WADDR)};

/* Points the public members at the backend (backend != 0) or at libtorch,
** timed through ab.S's wrappers when timed != 0. libtorch's
** sendReleaseContextRpc and eraseContextIdAndReset are timed too, on both
** sides: on the backend's none may run (its sendReleaseContextRpc is the
** no-op), which shows that the switch took. -1: the backend does not
** serve this process. */
__attribute__((visibility("default"))) int dat_ab_switch(int backend, int timed) {
	if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE))
		return -1;
	for (int i = 0; i < DAT_NSYMS; i++) {
		if (i >= DAT_PRIVATE_FIRST && i < DAT_IDX_SEND_RELEASE)
			continue; /* libtorch's, as find_real set them */
		void *to = backend && i < DAT_PRIVATE_FIRST ? served_fn[i] : real[i];
		if (backend && i == DAT_IDX_SEND_RELEASE)
			to = (void *)dat_noop;
		__atomic_store_n(&dat_ab_target[i], to, __ATOMIC_RELEASE);
		__atomic_store_n(&dat_fn[i], timed ? wraps[i] : to, __ATOMIC_RELEASE);
	}
	return 0;
}

/* Each member's ticks per call since its last dat_ab_samples, the first
** DAT_AB_SAMPLES of them: what the medians are taken from, as a sum hides
** whether a member is slow every call or now and then. The wrappers
** (ab.S) keep them, the stack aligned for a call. */
#define DAT_AB_SAMPLES 4096
static unsigned long ab_samples[DAT_NSYMS][DAT_AB_SAMPLES];
static unsigned long ab_nsamples[DAT_NSYMS];

__attribute__((visibility("hidden"))) void dat_ab_sample(unsigned member, unsigned long ticks) {
	unsigned long n = __atomic_fetch_add(&ab_nsamples[member], 1, __ATOMIC_RELAXED);
	if (n < DAT_AB_SAMPLES)
		__atomic_store_n(&ab_samples[member][n], ticks, __ATOMIC_RELAXED);
}

/* Copies each member's time stamp counter ticks and calls since the last
** call into out (2 * DAT_NSYMS: ticks, calls), and starts them over;
** returns DAT_NSYMS (out NULL: that alone). */
__attribute__((visibility("default"))) int dat_ab_take(unsigned long *out) {
	for (int i = 0; out != NULL && i < 2 * DAT_NSYMS; i++)
		out[i] = __atomic_exchange_n(&dat_ab_ticks[i], 0, __ATOMIC_RELAXED);
	return DAT_NSYMS;
}

/* Copies member's samples since the last dat_ab_samples of it (at most
** cap) into out, starts them over, and returns how many it copied; -1 for
** a member that is not one. torchab calls it between chunks; a call that
** races it (a late cleanup message's) may have its sample counted in
** either chunk, or overwrite another's: the medians are a benchmark's. */
__attribute__((visibility("default"))) long dat_ab_samples(int member, unsigned long *out, long cap) {
	if (member < 0 || member >= DAT_NSYMS || (out == NULL && cap > 0))
		return -1;
	unsigned long n = __atomic_exchange_n(&ab_nsamples[member], 0, __ATOMIC_RELAXED);
	if (n > DAT_AB_SAMPLES)
		n = DAT_AB_SAMPLES;
	if ((long)n > cap)
		n = (unsigned long)cap;
	for (unsigned long i = 0; i < n; i++)
		out[i] = __atomic_load_n(&ab_samples[member][i], __ATOMIC_RELAXED);
	return (long)n;
}

static inline unsigned long long ab_ticks(void) {
	unsigned lo, hi;
	__asm__ volatile("lfence; rdtsc" : "=a"(lo), "=d"(hi));
	return ((unsigned long long)hi << 32) | lo;
}

/* The time stamp counter's ticks per ns, against CLOCK_MONOTONIC over 50 ms. */
__attribute__((visibility("default"))) double dat_ab_ticks_per_ns(void) {
	struct timespec a, b, nap = {0, 50000000};
	clock_gettime(CLOCK_MONOTONIC, &a);
	unsigned long long t0 = ab_ticks();
	nanosleep(&nap, NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	unsigned long long t1 = ab_ticks();
	return (double)(t1 - t0) / ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec));
}

/* The member names, in the order of dat_ab_take's pairs. */
#define X_NAME_SHORT(i, name, sym) #name,
__attribute__((visibility("default"))) const char *dat_ab_name(int i) {
	static const char *const names[DAT_NSYMS] = {DAT_SYMBOLS(X_NAME_SHORT)};
	return i >= 0 && i < DAT_NSYMS ? names[i] : NULL;
}
#endif
