package capi_test

import (
	"strings"
	"testing"
)

// TestCppFanOut runs capi_test/cpp/fanout_test.cpp, the tests of
// distautograd.hpp's release fan-out hooks, against the built library: one
// process per scenario, as the fan-out and its counters are process-wide.
func TestCppFanOut(t *testing.T) {
	bin := cppBuild(t, t.TempDir(), "fanout_test", "fanout_test.cpp", "c++14", cppAgainstLibrary(t)...)
	for _, sc := range []string{"before_init", "main", "exit"} {
		t.Run(sc, func(t *testing.T) {
			t.Parallel()
			r := runEnv(t, nil, bin, sc)
			if r.Code != 0 || !strings.HasPrefix(r.Stdout, "PASS ") {
				t.Fatalf("fanout_test %s: exit %d\nstdout:\n%s\nstderr:\n%s", sc, r.Code, r.Stdout, r.Stderr)
			}
			// The scenarios route every log line to their hooks or log
			// nothing: anything on stderr is unexpected.
			if r.Stderr != "" {
				t.Errorf("fanout_test %s wrote to stderr:\n%s", sc, r.Stderr)
			}
			t.Log(strings.TrimSpace(r.Stdout))
		})
	}
}
