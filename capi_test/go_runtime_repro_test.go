package capi_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The reproducers of docs/go-runtime.md (scripts/go-runtime-repro: a Go
// c-shared library and a C driver, nothing of distautograd's) build with
// the Go that built the library: without the overlay of its runtime, with
// it, and with it less take-a-p-from-c (scripts/go-runtime-overlay
// --without=take-a-p-from-c: what make without-lib builds to measure the
// change). Each of the driver's modes
// runs on each and reports its figures. How the figures compare is
// docs/go-runtime.md's (timing is not asserted here); that the reproducers
// build, run and report is, and that the timer mode's waits were made: all
// of them, or fewer where the last ended only when the loop stopped at its
// bound (the loop is bounded, so a runtime that starves the timer costs
// the test that bound, not a hang).
func TestGoRuntimeReproducers(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	goTool := libraryGo(t)
	src := filepath.Join(root, "scripts", "go-runtime-repro")
	overlay := filepath.Join(root, "build", "go-runtime", "overlay.json")
	b, err := os.ReadFile(overlay)
	require.NoError(t, err, "make writes %s", overlay)
	var o struct{ Replace map[string]string }
	require.NoError(t, json.Unmarshal(b, &o), "%s", b)

	// The overlay less the change, made as the library's was (the switch is
	// the first field of build/go-runtime/setting).
	const change = "take-a-p-from-c"
	setting, err := os.ReadFile(filepath.Join(root, "build", "go-runtime", "setting"))
	require.NoError(t, err)
	without := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "scripts", "go-runtime-overlay"), goTool, without, "--without="+change)
	cmd.Env = append(os.Environ(), strings.Fields(string(setting))[0])
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go-runtime-overlay --without=%s: %s", change, out)
	libraryStatus, err := os.ReadFile(filepath.Join(root, "build", "go-runtime", "STATUS"))
	require.NoError(t, err)
	withoutStatus, err := os.ReadFile(filepath.Join(without, "STATUS"))
	require.NoError(t, err)
	for _, l := range strings.Split(strings.TrimSpace(string(libraryStatus)), "\n") {
		if strings.HasPrefix(l, change+": ") {
			assert.Contains(t, string(withoutStatus), change+": not applied: ")
			assert.NotContains(t, string(withoutStatus), change+": applied\n")
		} else {
			assert.Contains(t, string(withoutStatus), l+"\n", "the overlay less %s has every other change as the library's", change)
		}
	}

	line := regexp.MustCompile(`^mode=(\w+) threads=(\d+) calls=(\d+) ns_per_call=[\d.]+ cpu_ns_per_call=[\d.]+ ` +
		`other_cpu_us_per_1000_calls=-?[\d.]+ csw_per_1000_calls=[\d.]+ over_1ms=\d+ max_us=\d+` +
		`(?: waits=(\d+) wait_max_ms=[\d.]+ wait_median_ms=[\d.]+ ended_after_loop=([01]))?\n$`)
	for _, build := range []struct {
		name  string
		flags []string
	}{
		{"without the overlay", nil},
		{"with the overlay", []string{"-overlay", overlay}},
		{"with the overlay less " + change, []string{"-overlay", filepath.Join(without, "overlay.json")}},
	} {
		t.Run(build.name, func(t *testing.T) {
			t.Parallel()
			if build.flags != nil && len(o.Replace) == 0 {
				t.Logf("this build's overlay is empty (build/go-runtime/STATUS): the same runtime as without")
			}
			dir := t.TempDir()
			args := append([]string{"build", "-buildmode=c-shared"}, build.flags...)
			args = append(args, "-o", filepath.Join(dir, "librepro.so"), ".")
			cmd := exec.Command(goTool, args...)
			cmd.Dir = src
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "go %v: %s", args, out)
			driver := filepath.Join(dir, "driver")
			cc := exec.Command("gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-I", dir,
				filepath.Join(src, "c", "driver.c"), "-o", driver, "-L", dir, "-lrepro", "-Wl,-rpath,"+dir)
			out, err = cc.CombinedOutput()
			require.NoError(t, err, "gcc: %s", out)

			// timer: one looping thread on GOMAXPROCS=1, the shape where a
			// runtime that moves a P's scheduler tick on every call from C
			// starves the timer; the loop stops after 2 s at most.
			for _, m := range []struct{ mode, threads, procs, ms string }{
				{"loop", "2", "2", "200"}, {"sparse", "1", "2", "200"}, {"turns", "16", "2", "200"}, {"mixed", "4", "2", "200"}, {"timer", "1", "1", "2000"}} {
				r := runEnv(t, []string{"GOMAXPROCS=" + m.procs}, driver, m.mode, m.threads, m.ms)
				require.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
				f := line.FindStringSubmatch(r.Stdout)
				if !assert.NotNil(t, f, "driver %s: %q", m.mode, r.Stdout) {
					continue
				}
				assert.Equal(t, m.mode, f[1])
				assert.Equal(t, m.threads, f[2])
				calls, _ := strconv.Atoi(f[3])
				assert.Positive(t, calls, "driver %s made no call", m.mode)
				if m.mode != "timer" {
					assert.Empty(t, f[4], "only the timer mode reports waits: %q", r.Stdout)
					continue
				}
				t.Logf("%s", r.Stdout)
				waits, _ := strconv.Atoi(f[4])
				assert.True(t, waits == 5 || (waits >= 1 && f[5] == "1"),
					"the 5 waits, or fewer where the last ended after the loop stopped: %q", r.Stdout)
			}
			r := runEnv(t, nil, driver, "nosuchmode", "1", "1")
			assert.Equal(t, 2, r.Code, "a bad mode is refused: %s", r.Stderr)
		})
	}
}
