package pybridge

import (
	"errors"
	"fmt"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/pybridge/pyfunc"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Code is the status an exported entry point returns to C. OK is zero; every
// other code names the Python exception the caller should raise, with the
// message LastError gives on the same thread. It is pyfunc.Class, dlbridge's
// one table of error classes (see there), so that an error a registered Go
// function classifies and one of the bridge are the same thing.
type Code = pyfunc.Class

// The codes, by the Python exception they stand for.
const (
	OK           = pyfunc.Unclassified
	BufferError  = pyfunc.BufferError  // the data cannot be exported or imported as asked
	TypeError    = pyfunc.TypeError    // an argument of the wrong kind (dtype, object)
	ValueError   = pyfunc.ValueError   // an argument with a bad value (shape, handle, stream)
	MemoryError  = pyfunc.MemoryError  // an allocation failed
	RuntimeError = pyfunc.RuntimeError // anything else, including a recovered Go panic
	IndexError   = pyfunc.IndexError   // an index out of range (tensor[i])
	TimeoutError = pyfunc.TimeoutError // a wait past its deadline
)

// Error is an error that carries the Code the fence reports for it.
type Error = pyfunc.Error

// Errorf formats an error (with %w support) that the fence reports as code.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Class: code, Err: fmt.Errorf(format, args...)}
}

// WithCode gives err the code the fence reports for it; nil stays nil.
func WithCode(code Code, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Class: code, Err: err}
}

// CodeOf is the code the fence reports for err: the outermost *Error's code,
// ValueError for use of released memory or a closed view (a closed
// tensor), MemoryError when the driver is out of memory, RuntimeError for
// everything else, and OK for nil.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	if c := pyfunc.ClassOf(err); c != OK {
		return c
	}
	if errors.Is(err, zerocopy.ErrReleased) || errors.Is(err, zerocopy.ErrClosed) {
		return ValueError
	}
	var m *zerocopy.MismatchError
	if errors.As(err, &m) {
		if m.WrongKind() {
			return TypeError
		}
		return ValueError
	}
	if errors.Is(err, cuda.ErrOutOfMemory) {
		return MemoryError
	}
	return RuntimeError
}

// engineErr gives an error of the engine (zerocopy, cuda) the code CodeOf
// finds for it; nil stays nil.
func engineErr(err error) error {
	if err == nil {
		return nil
	}
	return WithCode(CodeOf(err), err)
}
