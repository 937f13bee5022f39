package abi

import (
	"os"
	"os/exec"
	"path/filepath"
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
