package abi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The public headers compile alone (each includes what it uses), twice in a
// row (include guards), in the language versions users build with, under
// warnings a careful user turns on, as errors.
func TestHeadersCompileAlone(t *testing.T) {
	strict := []string{"-Wall", "-Wextra", "-Werror", "-pedantic", "-Wshadow", "-Wconversion", "-Wsign-conversion"}
	cStrict := append([]string{"-Wstrict-prototypes", "-Wmissing-prototypes", "-Wold-style-definition"}, strict...)
	cxxStrict := append([]string{"-Wold-style-cast", "-Wnon-virtual-dtor", "-Wzero-as-null-pointer-constant"}, strict...)
	const cMain = "int main(void) { return dac_version_number() == DAC_VERSION_NUMBER ? 0 : 1; }\n"
	const cxxMain = "int main() { return distautograd::DistAutogradContainer::currentContextId() == -1 ? 0 : 1; }\n"
	cases := []struct {
		name, compiler, ext, header, main string
		flags                             []string
	}{
		{"distautograd.h/c99", "gcc", ".c", "distautograd.h", cMain, append([]string{"-std=c99"}, cStrict...)},
		{"distautograd.h/c11", "gcc", ".c", "distautograd.h", cMain, append([]string{"-std=c11"}, cStrict...)},
		{"distautograd.h/c++17", "g++", ".cpp", "distautograd.h", "int main() { return dac_version_number() == DAC_VERSION_NUMBER ? 0 : 1; }\n", append([]string{"-std=c++17"}, strict...)},
		{"distautograd.hpp/c++14", "g++", ".cpp", "distautograd.hpp", cxxMain, append([]string{"-std=c++14"}, cxxStrict...)},
		{"distautograd.hpp/c++17", "g++", ".cpp", "distautograd.hpp", cxxMain, append([]string{"-std=c++17"}, cxxStrict...)},
	}
	dir := t.TempDir()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cc := need(t, c.compiler)
			src := filepath.Join(dir, "alone"+string(rune('0'+i))+c.ext)
			text := "#include \"" + c.header + "\"\n#include \"" + c.header + "\"\n" + c.main
			if err := os.WriteFile(src, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append(append([]string{}, c.flags...), "-I", filepath.Join(root, "include"), "-fsyntax-only", src)
			if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
				t.Fatalf("%s %v: %v\n%s", c.compiler, args, err, out)
			}
		})
	}
}

// A program that calls a deprecated declaration (dac_set_cleanup_options)
// gets a warning naming what replaces it, an error under -Werror, in C and
// C++; silenced where it calls (a pragma) or for the whole header
// (DAC_DEPRECATED defined as nothing first), it builds. Its replacement
// with DAC_CLEANUP_OPTIONS_INIT builds under the strict warnings of
// TestHeadersCompileAlone (no field left out of the initializer).
func TestDeprecatedDeclarationsWarn(t *testing.T) {
	strict := []string{"-Wall", "-Wextra", "-Werror", "-pedantic", "-Wconversion", "-Wsign-conversion"}
	const call = "int main(void) { return dac_set_cleanup_options(0, 0, 0, 0); }\n"
	const pragma = "#pragma GCC diagnostic ignored \"-Wdeprecated-declarations\"\n"
	const init = "int main(void) { dac_cleanup_options o = DAC_CLEANUP_OPTIONS_INIT; o.max_attempts = 5; return dac_cleanup_configure(&o); }\n"
	cases := []struct {
		name, compiler, ext, src string
		warns                    bool
	}{
		{"C call", "gcc", ".c", "#include \"distautograd.h\"\n" + call, true},
		{"C++ call", "g++", ".cpp", "#include \"distautograd.hpp\"\n" + call, true},
		{"C call, pragma", "gcc", ".c", "#include \"distautograd.h\"\n" + pragma + call, false},
		{"C++ call, pragma", "g++", ".cpp", "#include \"distautograd.hpp\"\n" + pragma + call, false},
		{"C call, DAC_DEPRECATED empty", "gcc", ".c", "#define DAC_DEPRECATED(msg)\n#include \"distautograd.h\"\n" + call, false},
		{"C init", "gcc", ".c", "#include \"distautograd.h\"\n" + init, false},
		{"C++ init", "g++", ".cpp", "#include \"distautograd.hpp\"\n" + init, false},
	}
	dir := t.TempDir()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cc := need(t, c.compiler)
			src := filepath.Join(dir, "deprecated"+string(rune('0'+i))+c.ext)
			if err := os.WriteFile(src, []byte(c.src), 0o644); err != nil {
				t.Fatal(err)
			}
			std := "-std=c99"
			if c.ext == ".cpp" {
				std = "-std=c++14"
			}
			args := append(append([]string{std}, strict...), "-I", filepath.Join(root, "include"), "-fsyntax-only", src)
			out, err := exec.Command(cc, args...).CombinedOutput()
			switch {
			case !c.warns && err != nil:
				t.Fatalf("%s %v: %v\n%s", c.compiler, args, err, out)
			case c.warns && err == nil:
				t.Fatalf("%s %v built a call of dac_set_cleanup_options without a warning", c.compiler, args)
			case c.warns && !strings.Contains(string(out), "deprecated: use dac_cleanup_configure with DAC_CLEANUP_OPTIONS_INIT"):
				t.Fatalf("%s %v: not the deprecation warning:\n%s", c.compiler, args, out)
			}
		})
	}
}
