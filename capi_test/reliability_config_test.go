package capi_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every setter of the configuration (cleanup sender, log hook, cleanup
// options, max contexts) called from three threads at once while two others
// release contexts with known workers, round after round (see
// c/config_race.c): what is in force afterwards is what some linearization
// of the calls leaves, a value the main thread then sets is in force
// (re-setting the pair in force included), and a sender is never called, or
// still running, once a dac_set_cleanup_sender that replaced it returned.
// Three rounds in four are sender duels (two threads set one sender each,
// then the main thread sets the one not in force). `make test` runs 1,000
// rounds (about 4 s), DAC_LONG=1 (make fuzz) 10 runs of 2,000.
func TestConfigurationRaces(t *testing.T) {
	t.Parallel()
	bin := buildC(t, "c/config_race.c")
	// A run is one process, under runEnv's bound: the long version is
	// several of them.
	rounds, runs := 1000, 1
	if longRun() {
		rounds, runs = 2000, 10
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d (runs use seed, seed+1, ...)", seed)
	for i := 0; i < runs && !t.Failed(); i++ {
		checkConfigRace(t, runEnv(t, nil, bin, strconv.Itoa(rounds), strconv.FormatInt(seed+int64(i), 10)), rounds)
	}
}

func checkConfigRace(t *testing.T, r result, rounds int) {
	t.Helper()
	require.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
	var bugs []string
	for _, line := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(line, "BUG") {
			bugs = append(bugs, line)
		}
	}
	if len(bugs) > 20 {
		bugs = append(bugs[:20], "...")
	}
	assert.Empty(t, bugs)
	assertTranscript(t, `
		num_contexts = 0
		live_handles = 0
		rounds where the main thread re-set the pair in force: some
		rounds = `+strconv.Itoa(rounds)+`, bugs = 0
	`, strings.Join(slicesWithout(strings.Split(r.Stdout, "\n"), "BUG"), "\n"))
	assert.Empty(t, strings.TrimSpace(r.Stderr))
}

// slicesWithout returns the lines that do not start with prefix.
func slicesWithout(lines []string, prefix string) []string {
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}
