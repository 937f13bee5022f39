/* tls_load HOG LIB: dlopens HOG (a library holding initial-exec TLS, see
** tls_hog.c) and then LIB (libdistautograd.so), the way a Python process
** that imported other extensions first loads the library through ctypes,
** and uses it from the main thread and a new one. The library's own static
** TLS must fit in what is left. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef int (*init_fn)(int64_t);
typedef int (*new_fn)(void **);
typedef int (*id_fn)(void *, int64_t *);
typedef int (*unref_fn)(void *);
typedef int (*release_fn)(int64_t);
typedef int (*retrieve_fn)(int64_t, void **);
typedef const char *(*error_fn)(void);

static void *lib;

static int use(const char *who) {
	new_fn context_new = (new_fn)dlsym(lib, "dac_context_new");
	id_fn context_id = (id_fn)dlsym(lib, "dac_context_id");
	unref_fn context_unref = (unref_fn)dlsym(lib, "dac_context_unref");
	release_fn context_release = (release_fn)dlsym(lib, "dac_context_release");
	retrieve_fn context_retrieve = (retrieve_fn)dlsym(lib, "dac_context_retrieve");
	error_fn last_error = (error_fn)dlsym(lib, "dac_last_error");
	void *ctx = NULL;
	int64_t id = -1;
	if (context_new(&ctx) != 0 || context_id(ctx, &id) != 0 || context_release(id) != 0 || context_unref(ctx) != 0) {
		printf("%s: FAILED: %s\n", who, last_error());
		return 1;
	}
	/* A failure leaves its message in the thread's error slot. */
	int rc = context_retrieve(id, &ctx);
	printf("%s: context %" PRId64 " made and released; retrieve after: %d, \"%s\"\n", who, id, rc, last_error());
	return 0;
}

static void *thread_main(void *arg) {
	(void)arg;
	return (void *)(intptr_t)use("new thread");
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: tls_load HOG LIB\n");
		return 2;
	}
	void *hog = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (hog == NULL) {
		printf("hog: dlopen failed: %s\n", dlerror());
		return 1;
	}
	int (*touch)(int) = (int (*)(int))dlsym(hog, "tls_hog_touch");
	touch(1);
	printf("hog loaded\n");
	lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		printf("library: dlopen failed: %s\n", dlerror());
		return 1;
	}
	printf("library loaded\n");
	if (((init_fn)dlsym(lib, "dac_init"))(1) != 0) {
		printf("dac_init failed\n");
		return 1;
	}
	if (use("main thread"))
		return 1;
	pthread_t t;
	void *rc = NULL;
	if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, &rc) != 0 || rc != NULL)
		return 1;
	return 0;
}
