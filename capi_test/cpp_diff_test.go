package capi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cppLibtorchDir is where Debian's libtorch-dev puts libtorch_cpu.so;
// DAC_LIBTORCH_DIR overrides it.
func cppLibtorchDir() string {
	if d := os.Getenv("DAC_LIBTORCH_DIR"); d != "" {
		return d
	}
	return "/usr/lib/x86_64-linux-gnu"
}

// TestCppDifferential compiles capi_test/cpp/scenario.cpp twice, against
// distautograd.hpp and against the native component (libtorch_cpu.so, with
// native_decls.hpp standing in for the header Debian does not ship), runs
// both on each scenario, each in a fresh process, and requires identical
// output, line for line.
func TestCppDifferential(t *testing.T) {
	torch := filepath.Join(cppLibtorchDir(), "libtorch_cpu.so")
	if _, err := os.Stat(torch); err != nil {
		cppSkipOrFail(t, "the native component is missing ("+err.Error()+"; apt-get install libtorch-dev)")
	}
	dir := t.TempDir()
	var ours, native string
	// The two builds run at once; ours in C++14, the oldest the header
	// supports, so a real program exercises it there too.
	t.Run("build", func(t *testing.T) {
		t.Run("distautograd", func(t *testing.T) {
			t.Parallel()
			ours = cppBuild(t, dir, "scenario_distautograd", "scenario.cpp", "c++14", cppAgainstLibrary(t)...)
		})
		t.Run("native", func(t *testing.T) {
			t.Parallel()
			native = cppBuild(t, dir, "scenario_native", "scenario.cpp", "c++17", "-DDAC_NATIVE",
				"-L", cppLibtorchDir(), "-ltorch_cpu", "-Wl,-rpath,"+cppLibtorchDir())
		})
	})
	if t.Failed() {
		t.FailNow()
	}
	scenarios := [][]string{{"main"}}
	for _, w := range []string{"0", "3", "32768", "40000", "65535"} {
		scenarios = append(scenarios, []string{"init", w})
	}
	for _, args := range scenarios {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			t.Parallel()
			want := runEnv(t, nil, native, args...)
			got := runEnv(t, nil, ours, args...)
			if want.Code != 0 || got.Code != 0 {
				t.Fatalf("exit codes: native %d, distautograd %d\nnative stderr:\n%s\ndistautograd stderr:\n%s", want.Code, got.Code, want.Stderr, got.Stderr)
			}
			wl, gl := strings.Split(want.Stdout, "\n"), strings.Split(got.Stdout, "\n")
			if len(wl) < 10 {
				t.Fatalf("the native run printed only %d lines:\n%s", len(wl), want.Stdout)
			}
			for i := 0; i < len(wl) || i < len(gl); i++ {
				var w, g string
				if i < len(wl) {
					w = wl[i]
				}
				if i < len(gl) {
					g = gl[i]
				}
				if w != g {
					t.Errorf("line %d:\n  native:       %s\n  distautograd: %s", i+1, w, g)
				}
			}
			if t.Failed() {
				t.Logf("native output:\n%s", want.Stdout)
			}
		})
	}
}
