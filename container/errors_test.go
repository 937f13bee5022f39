package container_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"distautograd/container"
)

// The codes are the C ABI's status values: their numbers and names must stay
// in step with include/distautograd.h (capi_test checks the C side).
func TestCodeNames(t *testing.T) {
	want := []string{
		"DAC_OK", "DAC_ERR_NOT_INITIALIZED", "DAC_ERR_INVALID_ARGUMENT", "DAC_ERR_ALREADY_INITIALIZED",
		"DAC_ERR_NO_CURRENT_CONTEXT", "DAC_ERR_NOT_FOUND", "DAC_ERR_ALREADY_HAS_CONTEXT", "DAC_ERR_EXHAUSTED",
		"DAC_ERR_BAD_HANDLE", "DAC_ERR_LIMIT", "DAC_ERR_FORKED", "DAC_ERR_INTERNAL", "DAC_ERR_UNSUPPORTED",
	}
	for i, name := range want {
		assert.Equal(t, name, container.Code(i).String())
	}
	assert.Equal(t, container.Code(12), container.ErrUnsupported)
	assert.Equal(t, "Code(1000)", container.Code(1000).String())
	assert.Equal(t, "Code(-1)", container.Code(-1).String())
}

func TestCodeOf(t *testing.T) {
	assert.Equal(t, container.OK, container.CodeOf(nil))
	assert.Equal(t, container.ErrInternal, container.CodeOf(errors.New("foreign")))

	_, err := container.New(70000)
	assert.Equal(t, container.ErrInvalidArgument, container.CodeOf(err))
	assert.Equal(t, container.ErrInvalidArgument, container.CodeOf(fmt.Errorf("wrapped: %w", err)))
}

func TestErrorf(t *testing.T) {
	err := container.Errorf(container.ErrLimit, "%d too many", 3)
	assert.EqualError(t, err, "distautograd: 3 too many")
	assert.Equal(t, container.ErrLimit, container.CodeOf(err))
}

func TestMessageOf(t *testing.T) {
	assert.Equal(t, container.MsgNotInitialized, container.MessageOf(container.ErrNotInitialized))
	assert.Equal(t, container.MsgAlreadyHasCtx, container.MessageOf(container.ErrAlreadyHasContext))
	assert.Equal(t, container.MsgNoCurrentContext, container.MessageOf(container.ErrNoCurrentContext))
	assert.Equal(t, "distautograd: DAC_ERR_INTERNAL", container.MessageOf(container.ErrInternal))
}
