/* tls_hog: a shared library that takes TLS_HOG_BYTES of initial-exec
** thread-local storage, as some libraries a process loads before this one
** do (a library loaded with dlopen must fit its initial-exec TLS in glibc's
** small static-TLS surplus, which all of them share). */
#ifndef TLS_HOG_BYTES
#define TLS_HOG_BYTES 1024
#endif

static __thread __attribute__((tls_model("initial-exec"))) char hog[TLS_HOG_BYTES];

/* Touches the block, so that it is really used. */
int tls_hog_touch(int i) {
	hog[i % TLS_HOG_BYTES]++;
	return hog[i % TLS_HOG_BYTES];
}
