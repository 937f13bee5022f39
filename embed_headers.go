package main

import _ "embed"

// capi.c includes include/distautograd.h, outside this package's directory,
// and go's build cache does not hash the files that C sources #include from
// other directories (golang/go#24355): editing only the public header would
// reuse the capi.c object compiled against the old one. Embedding the header
// makes it an input of the build, so a change recompiles capi.c. The blank
// variable costs nothing in the binary.
//
//go:embed include/distautograd.h
var _ string
