package main

import (
	"bytes"
	"fmt"
	"strings"

	"distautograd/container"
)

// The defaults and limits the C ABI states are container/'s constants,
// each written once there. dacgen writes them into the public header,
// between these two lines (the rest of the header is written by hand), and
// into _abi.py; distautograd.hpp uses the header's macros, and docs link to
// them.
const (
	constantsBegin = "/* dacgen:constants:begin: written by cmd/dacgen from container/ (make generate) */"
	constantsEnd   = "/* dacgen:constants:end */"
)

// sharedConst is a constant of container's that the C ABI states.
type sharedConst struct {
	name  string // the header's macro; _abi.py's name is it without DAC_
	value int64
	owner string // the Go constant
	doc   string
}

func sharedConsts() []sharedConst {
	return []sharedConst{
		{"DAC_CLEANUP_DEFAULT_MAX_ATTEMPTS", container.DefaultCleanupAttempts, "DefaultCleanupAttempts",
			"max_attempts' default: the native component's 20 retries and the first attempt"},
		{"DAC_CLEANUP_DEFAULT_INITIAL_BACKOFF_US", container.DefaultCleanupInitialBackoff.Microseconds(), "DefaultCleanupInitialBackoff",
			"initial_backoff_us' default: the wait before a message's first retry, doubling per retry"},
		{"DAC_CLEANUP_DEFAULT_MAX_BACKOFF_US", container.DefaultCleanupMaxBackoff.Microseconds(), "DefaultCleanupMaxBackoff",
			"max_backoff_us' default: the longest wait between two attempts"},
		{"DAC_CLEANUP_DEFAULT_MAX_PENDING", container.DefaultCleanupMaxPending, "DefaultCleanupMaxPending",
			"max_pending's default: messages queued or awaiting a retry before one more is dropped"},
		{"DAC_CLEANUP_MAX_PENDING_LIMIT", container.MaxCleanupPending, "MaxCleanupPending",
			"the most max_pending may be: its queue is allocated up front"},
		{"DAC_CONTEXT_ID_RUN", container.ContextIDRun, "ContextIDRun",
			"how many consecutive context ids make a run, which a thread creates from alone"},
		{"DAC_MESSAGE_ID_BLOCK", container.MessageIDBlock, "MessageIDBlock",
			"how many autograd message ids a thread takes from the one counter at once"},
		{"DAC_REAPED_IDS_KEPT", container.ReapedIDsKept, "ReapedIDsKept",
			"how many reaped ids the container remembers, spread over its shards (dac_reap_idle_contexts)"},
		{"DAC_REAPED_IDS_MIN_PER_SHARD", container.ReapedIDsMinPerShard, "ReapedIDsMinPerShard",
			"the fewest reaped ids a shard remembers"},
	}
}

// headerConstants returns header with the lines between constantsBegin and
// constantsEnd written from sharedConsts, or ok false if it has no such
// lines.
func headerConstants(header []byte) (out []byte, ok bool, err error) {
	begin := bytes.Index(header, []byte(constantsBegin+"\n"))
	end := bytes.Index(header, []byte(constantsEnd+"\n"))
	if begin < 0 && end < 0 {
		return nil, false, nil
	}
	if begin < 0 || end < begin {
		return nil, false, fmt.Errorf("the header has %q without %q before it", constantsEnd, constantsBegin)
	}
	var b bytes.Buffer
	b.Write(header[:begin+len(constantsBegin)+1])
	for _, c := range sharedConsts() {
		fmt.Fprintf(&b, "%s\n#define %s %d\n", cComment(c.doc+" (container."+c.owner+")"), c.name, c.value)
	}
	b.Write(header[end:])
	return b.Bytes(), true, nil
}

// pythonConstants returns _abi.py's lines of the constants.
func pythonConstants() []byte {
	var b bytes.Buffer
	b.WriteString("\n\n# The defaults and limits of distautograd.h (DAC_*), from container/'s constants.\n")
	for _, c := range sharedConsts() {
		fmt.Fprintf(&b, "%s = %d  # %s\n", strings.TrimPrefix(c.name, "DAC_"), c.value, c.doc)
	}
	return b.Bytes()
}

// cComment returns text as a C comment in the header's style: lines of at
// most 78 columns, each after the first starting "** ".
func cComment(text string) string {
	var lines []string
	line := "/*"
	for _, w := range strings.Fields(text) {
		if len(line)+1+len(w) > 75 {
			lines = append(lines, line)
			line = "**"
		}
		line += " " + w
	}
	return strings.Join(append(lines, line+" */"), "\n")
}
