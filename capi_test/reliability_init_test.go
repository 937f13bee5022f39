package capi_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

var earlyHandlesLine = regexp.MustCompile(`(?m)^handles issued before dac_init returned: (\d+)$`)

// Threads already calling (get-or-create, new, the current-id functions,
// id, ref and unref on every handle they get) when dac_init runs on another
// thread (see c/init_race.c), in fresh processes, one trial each: a call
// succeeds or says DAC_ERR_NOT_INITIALIZED, nothing else; a handle a call
// returned is usable at once (id, ref, unref never say NOT_INITIALIZED); a
// current-id function succeeds once dac_init has returned; nothing leaks
// (no context, no live handle at the end). The window the fix closed is
// the last microsecond or so of dac_init; the main thread runs dac_init at
// SCHED_IDLE so that the 8 calling threads preempt it anywhere, and about 2
// trials in 100 hit the window on the library before the fix (so `make
// test`'s 40 trials, two at a time, about 7 s, catch that only now and then;
// DAC_LONG=1, make fuzz, runs 1,500).
func TestInitWindow(t *testing.T) {
	t.Parallel()
	bin := buildC(t, "c/init_race.c")
	trials := 40
	if longRun() {
		trials = 1500
	}
	var (
		mu           sync.Mutex
		failed       []string
		early, clean int
	)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := runEnv(t, nil, bin, "8", strconv.Itoa(i))
				mu.Lock()
				if m := earlyHandlesLine.FindStringSubmatch(r.Stdout); m != nil {
					n, _ := strconv.Atoi(m[1])
					early += n
				}
				if r.Code != 0 || !strings.Contains(r.Stdout, "\nbugs = 0\n") || strings.TrimSpace(r.Stderr) != "" {
					failed = append(failed, fmt.Sprintf("trial %d (exit status %d):\n%s%s", i, r.Code, r.Stdout, r.Stderr))
				} else {
					clean++
				}
				mu.Unlock()
			}
		}()
	}
	for i := range trials {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("%d trials, %d clean; handles issued before dac_init returned: %d in all", trials, clean, early)
	if len(failed) > 3 {
		failed = append(failed[:3], fmt.Sprintf("... and %d more", len(failed)-3))
	}
	assert.Empty(t, failed)
}
