package capi_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The reproducers of docs/go-runtime.md (scripts/go-runtime-repro: a Go
// c-shared library and a C driver, nothing of distautograd's) build with
// the Go that built the library, with the overlay of its runtime and
// without, and each of the driver's modes runs on both and reports its
// figures. How the figures compare is docs/go-runtime.md's (timing is not
// asserted here); that the reproducers build, run and report is.
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

	line := regexp.MustCompile(`^mode=(\w+) threads=(\d+) calls=(\d+) ns_per_call=[\d.]+ cpu_ns_per_call=[\d.]+ ` +
		`other_cpu_us_per_1000_calls=-?[\d.]+ csw_per_1000_calls=[\d.]+ over_1ms=\d+ max_us=\d+\n$`)
	for _, build := range []struct {
		name  string
		flags []string
	}{{"without the overlay", nil}, {"with the overlay", []string{"-overlay", overlay}}} {
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

			for _, m := range []struct{ mode, threads string }{{"loop", "2"}, {"sparse", "1"}, {"mixed", "4"}} {
				r := runEnv(t, []string{"GOMAXPROCS=2"}, driver, m.mode, m.threads, "200")
				require.Equal(t, 0, r.Code, "stdout:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
				f := line.FindStringSubmatch(r.Stdout)
				if assert.NotNil(t, f, "driver %s: %q", m.mode, r.Stdout) {
					assert.Equal(t, m.mode, f[1])
					assert.Equal(t, m.threads, f[2])
					calls, _ := strconv.Atoi(f[3])
					assert.Positive(t, calls, "driver %s made no call", m.mode)
				}
			}
			r := runEnv(t, nil, driver, "nosuchmode", "1", "1")
			assert.Equal(t, 2, r.Code, "a bad mode is refused: %s", r.Stderr)
		})
	}
}
