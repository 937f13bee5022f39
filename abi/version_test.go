package abi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The version is stated once, by the header's DAC_VERSION_MAJOR, _MINOR and
// _PATCH; this is the one test that names what derives it and checks each
// agrees: the header's own DAC_VERSION_STRING and DAC_VERSION_NUMBER as a
// compiler expands them, the library's file name (the Makefile's REALNAME)
// and soname, and the wheel's version (wheel_backend.py). The library's
// dac_version() and dac_version_number() are checked against the header by
// capi_test (TestOpsLibrary), pkg-config and CMake by packaging, and the
// Python package's __version__ against dac_version() by its tests.
func TestVersionHasOneOwner(t *testing.T) {
	v, err := HeaderVersion(headerPath)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("header macros", func(t *testing.T) {
		cc := need(t, "gcc")
		dir := t.TempDir()
		src, bin := filepath.Join(dir, "version.c"), filepath.Join(dir, "version")
		// Only the header: what a caller tests for at compile time.
		const text = "#include <stdio.h>\n#include \"distautograd.h\"\n" +
			"int main(void) { printf(\"%s %d\\n\", DAC_VERSION_STRING, DAC_VERSION_NUMBER); return 0; }\n"
		if err := os.WriteFile(src, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(cc, "-std=c99", "-Wall", "-Werror", "-I", filepath.Join(root, "include"), "-o", bin, src).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cc, err, out)
		}
		out, err := exec.Command(bin).Output()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%s %d\n", v, v.Number()); string(out) != want {
			t.Errorf("DAC_VERSION_STRING DAC_VERSION_NUMBER = %q, want %q (from DAC_VERSION_MAJOR, _MINOR, _PATCH)", out, want)
		}
	})

	t.Run("library file", func(t *testing.T) {
		built(t)
		real, err := filepath.EvalSymlinks(libPath)
		if err != nil {
			t.Fatal(err)
		}
		if want := "libdistautograd.so." + v.String(); filepath.Base(real) != want {
			t.Errorf("%s is %s, want %s", libPath, filepath.Base(real), want)
		}
		soname, err := os.Readlink(libPath)
		if err != nil || soname != v.Soname() {
			t.Errorf("%s links to %q (%v), want the soname %s", libPath, soname, err, v.Soname())
		}
	})

	t.Run("wheel", func(t *testing.T) {
		python := need(t, "python3")
		cmd := exec.Command(python, "-c", "import wheel_backend; print(wheel_backend.version())")
		cmd.Dir = filepath.Join(root, "python_bindings")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("wheel_backend.version(): %v", err)
		}
		if got := strings.TrimSpace(string(out)); got != v.String() {
			t.Errorf("wheel_backend.version() = %q, want %q", got, v.String())
		}
	})
}
