package abi

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var localInclude = regexp.MustCompile(`(?m)^#include "([^"]+)"`)

// includes returns the files that the file at path includes with quotes, as
// paths relative to root.
func includes(t *testing.T, path string) []string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range localInclude.FindAllStringSubmatch(string(src), -1) {
		out = append(out, filepath.Clean(filepath.Join(filepath.Dir(path), m[1])))
	}
	return out
}

// The C side's rooms (csrc/dacc.h): capi.c includes every room's .c into
// its unit and nothing else of csrc/ but through them; and no room depends
// on one that depends on it, directly or not, where a room depends on
// another when its .c or .h includes the other's header. As every dacc_*
// function is declared in the header of the room that defines it
// (TestCapiDefinesEveryHeaderFunction), a call from one room into another
// goes along these edges too, so the rooms call each other in one
// direction only. (Each room also compiles alone: make lint-c.)
func TestCRoomsFormNoCycle(t *testing.T) {
	sources, err := filepath.Glob(filepath.Join(root, "csrc", "*.[ch]"))
	if err != nil || len(sources) == 0 {
		t.Fatalf("no csrc/ sources: %v", err)
	}
	room := func(path string) string { return strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)) }
	deps := map[string][]string{} // room -> the rooms whose header it includes
	var cfiles []string
	for _, abs := range sources {
		rel, _ := filepath.Rel(root, abs)
		if strings.HasSuffix(rel, ".c") {
			cfiles = append(cfiles, rel)
		}
		r := room(rel)
		if _, ok := deps[r]; !ok {
			deps[r] = nil
		}
		for _, inc := range includes(t, rel) {
			if filepath.Dir(inc) != "csrc" {
				continue // the public header, the generated ones
			}
			if !strings.HasSuffix(inc, ".h") {
				t.Errorf("%s includes %s: only capi.c includes a room's .c", rel, inc)
				continue
			}
			if d := room(inc); d != r && !slices.Contains(deps[r], d) {
				deps[r] = append(deps[r], d)
			}
		}
	}
	for _, inc := range includes(t, "capi.c") {
		if filepath.Dir(inc) == "csrc" && strings.HasSuffix(inc, ".h") {
			t.Errorf("capi.c includes %s: it includes the rooms' .c files, which include their headers", inc)
		}
	}
	unit := slices.DeleteFunc(includes(t, "capi.c"), func(s string) bool { return !strings.HasSuffix(s, ".c") })
	slices.Sort(unit)
	if !slices.Equal(unit, cfiles) {
		t.Errorf("capi.c includes\n  %v\nthe rooms' .c files are\n  %v", unit, cfiles)
	}

	// Depth-first, in name order: a room met again while its own
	// dependencies are being walked closes a cycle.
	const (
		unseen = iota
		walking
		done
	)
	state := map[string]int{}
	var path []string
	var walk func(r string)
	walk = func(r string) {
		switch state[r] {
		case walking:
			i := slices.Index(path, r)
			t.Errorf("the rooms of csrc/ include each other's headers in a cycle: %s", strings.Join(append(path[i:], r), " -> "))
			return
		case done:
			return
		}
		state[r] = walking
		path = append(path, r)
		for _, d := range slices.Sorted(slices.Values(deps[r])) {
			walk(d)
		}
		path = path[:len(path)-1]
		state[r] = done
	}
	for _, r := range slices.Sorted(maps.Keys(deps)) {
		walk(r)
	}
}
