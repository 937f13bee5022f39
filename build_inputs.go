package main

import "embed"

// capi.c includes include/distautograd.h, outside this package's directory,
// and the rooms of its one translation unit, csrc/*.c and their headers
// csrc/*.h (which the cgo preambles include too), in a directory of
// their own; go's build cache hashes only the files of the package's own
// directory, not what C sources #include from others (golang/go#24355):
// editing only one of those would reuse the capi.c object compiled against
// the old one. Embedding them makes them inputs of the build, so a change
// recompiles capi.c. The blank variables are never read.
//
//go:embed include/distautograd.h
var _ string

//go:embed csrc/*.c csrc/*.h
var _ embed.FS
