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
		new thread: context 281474976710657 made and released; retrieve after: 5, "Could not find autograd context with id: 281474976710657"
	`, r.Stdout)
}
