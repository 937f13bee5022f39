package capi_test

import (
	"strings"
	"testing"

	"distautograd/container"
)

// The fan-out's options, through dac_cleanup_configure and the deprecated
// dac_set_cleanup_options: each refusal names the function called, the two
// Go makes (max_pending past its limit; grown past the queue once a message
// was queued) as those C makes, and DAC_CLEANUP_OPTIONS_INIT sets the size
// and leaves every option at its default; putting the defaults back moves
// a retry waiting out the longest backoff earlier. The limit and the default are the
// header's (c/options.c prints them), which must be container's.
func TestCleanupOptionsRefusalsNameTheirFunction(t *testing.T) {
	t.Parallel()
	r := run(t, buildC(t, "c/options.c"))
	limit, def := itoa(container.MaxCleanupPending), itoa(container.DefaultCleanupMaxPending)
	over := itoa(container.MaxCleanupPending + 1)
	past := func(fn string) string {
		return "DAC_ERR_INVALID_ARGUMENT: distautograd: " + fn + ": max_pending must be at most " + limit + " (its queue is allocated up front), got " + over
	}
	cannotGrow := func(fn string) string {
		return "DAC_ERR_INVALID_ARGUMENT: distautograd: " + fn + ": max_pending cannot grow past " + def + " once cleanup messages were sent; set it before the first release that notifies a worker"
	}
	assertTranscript(t, strings.NewReplacer("{limit}", limit, "{default}", def).Replace(`
		limit {limit}, default {default}
		DAC_CLEANUP_OPTIONS_INIT: size sizeof, every option 0: yes
		dac_cleanup_configure(&o) -> DAC_OK
		-- past the limit
		dac_cleanup_configure(&o) -> `+past("dac_cleanup_configure")+`
		dac_set_cleanup_options(0, 0, 0, DAC_CLEANUP_MAX_PENDING_LIMIT + 1) -> `+past("dac_set_cleanup_options")+`
		-- a message queued
		dac_context_release(id) -> DAC_OK
		dac_cleanup_flush(10000, &pending) -> DAC_OK
		delivered 1, pending 0
		-- grown past the queue made
		dac_cleanup_configure(&o) -> `+cannotGrow("dac_cleanup_configure")+`
		dac_set_cleanup_options(0, 0, 0, DAC_CLEANUP_DEFAULT_MAX_PENDING + 1) -> `+cannotGrow("dac_set_cleanup_options")+`
		-- shrunk, and back: no growth past the queue made
		dac_set_cleanup_options(0, 0, 0, 1000) -> DAC_OK
		dac_cleanup_configure(&o) -> DAC_OK
		-- a retry waiting out the longest backoff, then the defaults put back
		dac_cleanup_configure(&o) -> DAC_OK
		dac_context_release(id) -> DAC_OK
		dac_cleanup_flush(100, &pending) -> DAC_ERR_TIMEOUT: distautograd: dac_cleanup_flush: 1 cleanup messages still pending after 100 ms
		delivered 1, pending 1
		dac_cleanup_configure(&defaults) -> DAC_OK
		dac_cleanup_flush(10000, &pending) -> DAC_OK
		delivered 2, pending 0
	`), r)
}
