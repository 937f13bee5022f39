package capi_test

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxStaticTLS is what the header promises the library's initial-exec TLS
// stays within (its PT_TLS segment, the Go runtime's 8 bytes included).
const maxStaticTLS = 64

// The library's TLS segment is a few words: the thread's error message is
// allocated on first use, not kept in TLS (it was 1,084 bytes).
func TestStaticTLSIsSmall(t *testing.T) {
	f, err := elf.Open(requireLibrary(t, "build/libdistautograd.so", ""))
	require.NoError(t, err)
	defer f.Close()
	found := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_TLS {
			found = true
			assert.LessOrEqual(t, p.Memsz, uint64(maxStaticTLS), "PT_TLS MemSiz")
		}
	}
	require.True(t, found, "no PT_TLS segment: the thread-local current id is gone?")
}

// A process that already loaded a library with 1 KiB of initial-exec TLS
// (most of glibc's static-TLS surplus for libraries loaded late) can still
// dlopen the library and use it from every thread, errors included. Before
// the error message left TLS, dlopen failed with "cannot allocate memory in
// static TLS block".
func TestLoadsAfterAStaticTLSHog(t *testing.T) {
	t.Parallel()
	lib := requireLibrary(t, "build/libdistautograd.so", "")
	dir := t.TempDir()
	hog := filepath.Join(dir, "libtlshog.so")
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-DTLS_HOG_BYTES=1024", "-o", hog,
		filepath.Join(repoRoot(t), "capi_test", "c", "tls_hog.c")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	loader := filepath.Join(dir, "tls_load")
	out, err = exec.Command("gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pthread", "-o", loader,
		filepath.Join(repoRoot(t), "capi_test", "c", "tls_load.c"), "-ldl").CombinedOutput()
	require.NoError(t, err, "%s", out)
	r := runEnv(t, nil, loader, hog, lib)
	require.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	assertTranscript(t, `
		hog loaded
		library loaded
		main thread: context 281474976710656 made and released; retrieve after: 5, "Could not find autograd context with id: 281474976710656"
		new thread: context 281474976710720 made and released; retrieve after: 5, "Could not find autograd context with id: 281474976710720"
	`, r.Stdout)
}

// A thread whose error slot cannot be allocated (c/nomem.c fails that
// calloc) shares the library's out-of-memory slot: its failed calls return
// their own status while the last error says out of memory, whether C or Go
// refused the call. Nobody writes the shared slot: Go's setError wrote it
// once, and a second such thread then read the first one's last failure.
func TestSharedOutOfMemorySlotIsNeverWritten(t *testing.T) {
	t.Parallel()
	assertTranscript(t, `
		dac_context_retrieve(1, &ctx) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 1
		a thread without a slot:
		dac_context_retrieve(424242, &ctx) [Go refuses] -> DAC_ERR_NOT_FOUND; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_context_release(424242) [Go refuses] -> DAC_ERR_NOT_FOUND; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_worker_id(NULL) [C refuses] -> DAC_ERR_INVALID_ARGUMENT; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_set_cleanup_options(-1, 0, 0, 0) [C refuses] -> DAC_ERR_INVALID_ARGUMENT; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_set_current_context_id(1) [works] -> DAC_OK; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_set_current_context_id(2) [C refuses, Go's message] -> DAC_ERR_ALREADY_HAS_CONTEXT; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_clear_current_context() [works] -> DAC_OK; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_context_new_id(&ctx, &id) [works] -> DAC_OK; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_context_release(id) [works] -> DAC_OK; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_context_unref(ctx) [works] -> DAC_OK; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		another:
		dac_context_retrieve(424242, &ctx) [Go refuses] -> DAC_ERR_NOT_FOUND; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_context_release(424242) [Go refuses] -> DAC_ERR_NOT_FOUND; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_worker_id(NULL) [C refuses] -> DAC_ERR_INVALID_ARGUMENT; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_set_cleanup_options(-1, 0, 0, 0) [C refuses] -> DAC_ERR_INVALID_ARGUMENT; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_set_current_context_id(1) [works] -> DAC_OK; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_set_current_context_id(2) [C refuses, Go's message] -> DAC_ERR_ALREADY_HAS_CONTEXT; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_clear_current_context() [works] -> DAC_OK; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_context_new_id(&ctx, &id) [works] -> DAC_OK; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_context_release(id) [works] -> DAC_OK; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		dac_context_unref(ctx) [works] -> DAC_OK; last: DAC_ERR_INTERNAL, "distautograd: out of memory for this thread's error message"
		the main thread's own slot:
		last: DAC_ERR_NOT_FOUND, "Could not find autograd context with id: 1"
		dac_context_retrieve(2, &ctx) -> DAC_ERR_NOT_FOUND: Could not find autograd context with id: 2
	`, run(t, buildC(t, "c/nomem.c")))
}
