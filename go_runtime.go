package main

import "strings"

// goRuntimeBuiltWith is which changes of Go's runtime this build of the
// library took (scripts/go-runtime-overlay): "name=1,name=0,...", as the
// script wrote it to build/go-runtime/BUILT_WITH; the Makefile sets it with
// -ldflags -X. A build that did not go through the Makefile leaves it
// empty, and reports no change.
var goRuntimeBuiltWith string

// goRuntimeDebugInfo adds to dac_debug_info a key go_runtime_NAME per
// change of the overlay (its name with _ for -), 1 if this build took it,
// else 0.
func goRuntimeDebugInfo(m map[string]int64) {
	for _, kv := range strings.Split(goRuntimeBuiltWith, ",") {
		name, v, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		key := "go_runtime_" + strings.ReplaceAll(name, "-", "_")
		if v == "1" {
			m[key] = 1
		} else {
			m[key] = 0
		}
	}
}
