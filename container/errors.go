package container

import (
	"errors"
	"fmt"
)

// Code classifies an error. Its values are the C ABI's status codes
// (DAC_OK, DAC_ERR_* in include/distautograd.h): codes.go, generated from
// the header by cmd/dacgen (make generate), defines them.
type Code int

// String returns the C name of the code, e.g. "DAC_ERR_NOT_FOUND".
func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// Error is what every failing operation returns: a code and the message,
// byte for byte the one the native component raises where it raises one.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// CodeOf returns the code of err: OK for nil, ErrInternal for a foreign error.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ErrInternal
}

// The native component's messages (torch/csrc/distributed/autograd/context/
// container.cpp in PyTorch 1.13). Users match on them: never reword.
const (
	MsgNotInitialized   = "Need to initialize distributed autograd using torch.distributed.autograd.init()"
	MsgWorkerRange      = "worker_id needs to be in the range [0, 65535]"
	MsgAlreadyHasCtx    = "Already have an autograd context id for this thread."
	MsgNoCurrentContext = "Current thread doesn't have a valid autograd context. Please wrap your code using: `with torch.distributed.autograd.context() as context_id` to generate a valid context"
	MsgCurrentGone      = "Couldn't find autograd context data for current autograd context id"
)

var (
	errNotInitialized   = &Error{ErrNotInitialized, MsgNotInitialized}
	errWorkerRange      = &Error{ErrInvalidArgument, MsgWorkerRange}
	errAlreadyHasCtx    = &Error{ErrAlreadyHasContext, MsgAlreadyHasCtx}
	errNoCurrentContext = &Error{ErrNoCurrentContext, MsgNoCurrentContext}
	errCurrentGone      = &Error{ErrNotFound, MsgCurrentGone}
)

func errNotFound(id int64) error {
	return &Error{ErrNotFound, fmt.Sprintf("Could not find autograd context with id: %d", id)}
}

func errAlreadyInit(have int16, want int64) error {
	return &Error{ErrAlreadyInitialized, fmt.Sprintf(
		"Container is already initialized with worker_id: %d, cannot initialize with different worker_id: %d", have, want)}
}

// Errorf builds an Error of the given code; for messages of distautograd's
// own (argument checks, limits), which carry the "distautograd: " prefix.
func Errorf(code Code, format string, args ...any) error {
	return &Error{code, "distautograd: " + fmt.Sprintf(format, args...)}
}

// MessageOf returns the canonical message of the codes whose message takes no
// argument (the C side asks for them), or a generic one.
func MessageOf(code Code) string {
	switch code {
	case ErrNotInitialized:
		return MsgNotInitialized
	case ErrAlreadyHasContext:
		return MsgAlreadyHasCtx
	case ErrNoCurrentContext:
		return MsgNoCurrentContext
	}
	return "distautograd: " + code.String()
}
