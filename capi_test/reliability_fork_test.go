package capi_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"distautograd/abi"
)

// staticFunctions are the functions of the header that never enter Go and
// never fail (versions, status names, the last error): they work anywhere,
// in a forked child too.
var staticFunctions = []string{"dac_version", "dac_version_number", "dac_status_string", "dac_last_error", "dac_last_status"}

// headerFunctions returns the names of the functions include/distautograd.h
// declares, in order, as the C front end of package abi reads them.
func headerFunctions(t *testing.T) []string {
	t.Helper()
	funcs, err := abi.ParseFile(filepath.Join(repoRoot(t), "include", "distautograd.h"), abi.Options{Prefix: "dac_"})
	require.NoError(t, err)
	var names []string
	for _, f := range funcs {
		names = append(names, f.Name)
	}
	require.NotEmpty(t, names)
	return names
}

// Forks while cleanup senders are called all the time (one of them mid-call
// just before a third of the forks): fork() holds calls into the host back
// and waits for those in progress to end (up to 2 s, which no call of this
// sender comes near, however loaded the machine), so no child finds a
// sender mid-call in its copy of memory. (Without the gate, about a quarter
// did; for a Python host such a child can inherit CPython's thread-state
// lock and hang. With a 20 ms bound, 2 of 100 did on a loaded machine.)
//
// With the sender declared non-blocking (dac_set_cleanup_sender_nonblocking)
// the releasing threads make the calls themselves, and the gate holds them
// back alike.
func TestForkWaitsForCallsIntoTheHost(t *testing.T) {
	t.Parallel()
	for _, mode := range [][]string{{"gate", "100"}, {"gate", "100", "nonblocking"}} {
		r := runEnv(t, nil, buildC(t, "c/fork.c"), mode...)
		require.Equal(t, 0, r.Code, "%v\nstdout:\n%s\nstderr:\n%s", mode, r.Stdout, r.Stderr)
		t.Log(mode, strings.TrimSpace(r.Stderr))
		assertTranscript(t, `
			children that found a sender mid-call: 0 of 100
			children that did not exit cleanly: 0
			warnings logged: 0
		`, r.Stdout)
	}
}

// The gate's wait is bounded: a sender that does not return holds a fork
// up 2 s, no more, and the child then has it mid-call (documented); the
// parent's calls into the host go on after.
func TestForkGateWaitIsBounded(t *testing.T) {
	t.Parallel()
	r := runEnv(t, nil, buildC(t, "c/fork.c"), "gate-blocked")
	require.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	assertTranscript(t, `
		child: exit status 0 (it found the blocked sender mid-call)
		fork waited at least 2 s: yes
		fork waited less than 60 s: yes
		sent: 1
	`, r.Stdout)
}

const forkedMessage = "the library was loaded before fork() and cannot be used in the child process " +
	"(the Go runtime does not survive fork); load it after fork, or use the 'spawn' start method"

// A parent that loaded the library and keeps it busy from 4 threads
// (contexts with known workers, releases feeding a flaky cleanup sender so
// that retries are in flight, message ids, get-or-create; GOGC=5 so the
// garbage collector runs all along) forks 24 children, half from the main
// thread and half from busy threads that are in and out of Go. A child that
// uses the library gets DAC_ERR_FORKED from every function that can fail,
// with a message naming the cause and the fix, and writes nothing; the
// static functions work; every child exits cleanly (exit(), _exit(), or
// exec'ing a program that loads the library anew and uses it), none hangs
// (each runs under alarm() and a deadline in the parent). The parent keeps
// working, and every cleanup message of every release is delivered.
func TestForkChildFailsFastParentKeepsWorking(t *testing.T) {
	t.Parallel()
	r := runEnv(t, []string{"GOGC=5"}, buildC(t, "c/fork.c"), "busy", "4", "3")
	require.Equal(t, 0, r.Code, "exit status\nstdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	out := r.Stdout
	assert.NotContains(t, out, "BUG")

	var guarded []string
	for _, name := range headerFunctions(t) {
		if !slices.Contains(staticFunctions, name) {
			guarded = append(guarded, name)
		}
	}
	// The first child lists each call: exactly the header's functions that
	// can fail, each DAC_ERR_FORKED.
	var listed []string
	for _, m := range regexp.MustCompile(`(?m)^(dac_\w+) -> (\w+)$`).FindAllStringSubmatch(out, -1) {
		if m[2] == "DAC_ERR_FORKED" {
			listed = append(listed, m[1])
		}
	}
	assert.Equal(t, guarded, listed, "the functions the child called, in header order")
	assert.Contains(t, out, "\nmessage: distautograd: dac_fork_parent: "+forkedMessage+"\n")
	assert.Contains(t, out, "\nout-pointers untouched: yes\n")
	v := headerVersion(t)
	assert.Contains(t, out, fmt.Sprintf("\nstatic functions work: dac_version %s, dac_version_number %d, dac_status_string(10) DAC_ERR_FORKED\n", v, v.Number()))

	// Every child, however it was made and whatever it did, ended well.
	children := regexp.MustCompile(`(?m)^child (\d+): (.*)$`).FindAllStringSubmatch(out, -1)
	require.Len(t, children, 24, out)
	for _, c := range children {
		assert.Equal(t, "exit status 0", c[2], "child %s", c[1])
	}
	uses := fmt.Sprintf("child: %d calls failed fast with DAC_ERR_FORKED, 0 did not", len(guarded))
	assert.Equal(t, 6, strings.Count(out, uses+"\n"), "children that used the library")
	assert.Equal(t, 6, strings.Count(out, "fresh: the library loaded anew after exec: dac_init(5), context 1407374883553280, message id 1407374883553280\n"),
		"children that exec'd")

	_, parent, found := strings.Cut(out, "-- the parent\n")
	require.True(t, found, out)
	assertTranscript(t, `
		busy threads kept working through the forks: yes
		dac_context_release(parents_id) -> DAC_OK
		dac_context_unref(parents_ctx) -> DAC_OK
		dac_context_new(&ctx) -> DAC_OK
		dac_context_id(ctx, &id) -> DAC_OK
		dac_new_autograd_message_id(&msg) -> DAC_OK
		dac_context_release(id) -> DAC_OK
		dac_context_unref(ctx) -> DAC_OK
		dac_cleanup_flush(30000, &pending) -> DAC_OK
		cleanup: sent = 3 per busy round + 1: yes, retried some: yes, failed 0, dropped 0, pending 0, warnings logged 0
		num_contexts = 0, live_handles = 0
	`, parent)
	assert.True(t, strings.HasPrefix(out, "parent: worker 3, 4 busy threads, cleanup sender set\nthe Go garbage collector has run: yes\n"), out)
}
