// Package fresh tells the tests of a built library whether it was built
// from the sources as they are now: a test of a stale build would test the
// wrong code. The list of sources is the Makefile's LIBRARY_SOURCES (what
// every build of the library depends on), which `make -s library-sources`
// prints: there is no second copy of it.
package fresh

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var (
	mu      sync.Mutex
	sources = map[string][]string{}
)

// Sources returns the library's sources under root, relative to it.
func Sources(root string) ([]string, error) {
	mu.Lock()
	defer mu.Unlock()
	if s, ok := sources[root]; ok {
		return s, nil
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "-C", root, "library-sources")
	// Run under make (make test), the parent's jobserver flags mean nothing here.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("make library-sources in %s: %w", root, err)
	}
	s := strings.Fields(string(out))
	if len(s) == 0 {
		return nil, fmt.Errorf("make library-sources in %s printed nothing", root)
	}
	sources[root] = s
	return s, nil
}

// Check returns nil if the file at root/output exists and is newer than
// every source of the library, else an error that says which is missing or
// newer and that make (makeTarget, e.g. "testing-lib") builds it.
func Check(root, output, makeTarget string) error {
	run := strings.TrimSpace("make " + strings.TrimSpace(makeTarget))
	st, err := os.Stat(filepath.Join(root, output))
	if err != nil {
		return fmt.Errorf("%s is missing: run %s first (%v)", output, run, err)
	}
	srcs, err := Sources(root)
	if err != nil {
		return err
	}
	for _, src := range srcs {
		s, err := os.Stat(filepath.Join(root, src))
		if err != nil {
			return fmt.Errorf("library source %s: %w", src, err)
		}
		if s.ModTime().After(st.ModTime()) {
			return fmt.Errorf("%s is older than %s: run %s first", output, src, run)
		}
	}
	return nil
}
