package capi_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// exitBound is how long a C host may take to end once it decided to: the
// library must not hold a process up (a hang bound, generous for a loaded
// machine; each of these ends in well under a second).
const exitBound = 20 * time.Second

// A C host ends while its cleanup sender is blocked for good, failing
// (retries pending) or slow (a queue behind it): by returning from main, by
// exit(0) from another thread while main waits in dac_cleanup_flush with no
// bound, or after dac_set_cleanup_sender_timeout(NULL, NULL, 200), which
// returns within the bound (DAC_ERR_TIMEOUT for the blocked sender, which is
// still in its call), leaves releases telling nobody, and never calls the
// replaced sender again. Every process ends, status 0, within exitBound.
func TestExitWithMisbehavingSender(t *testing.T) {
	t.Parallel()
	bin := buildC(t, "c/exit_windows.c")
	for _, sender := range []string{"blocked", "failing", "slow"} {
		for _, mode := range []string{"return", "exit-thread", "timeout"} {
			t.Run(sender+"/"+mode, func(t *testing.T) {
				t.Parallel()
				start := time.Now()
				r := runEnv(t, nil, bin, sender, mode)
				took := time.Since(start)
				assert.Less(t, took, exitBound, "the process took %v to end", took)
				assert.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
				want := "the sender was called: yes\n"
				switch mode {
				case "return":
					want += "main returns\n"
				case "exit-thread":
					want += "exit(0) from another thread\n"
				case "timeout":
					status := "DAC_OK or DAC_ERR_TIMEOUT"
					if sender == "blocked" {
						status = "DAC_ERR_TIMEOUT"
					}
					want += fmt.Sprintf(`dac_set_cleanup_sender_timeout(NULL, NULL, 200) -> %s
						returned within the bound: yes
						releases after it told nobody: yes
						the replaced sender was called again: no
						main returns`, status)
				}
				assertTranscript(t, want, r.Stdout)
			})
		}
	}
}
