package pybridge

import (
	"errors"
	"fmt"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Code is the status an exported entry point returns to C. OK is zero; every
// other code names the Python exception the caller should raise, with the
// message LastError gives on the same thread.
type Code int32

// The codes and the Python exceptions they stand for.
const (
	OK           Code = 0
	BufferError  Code = 1 // the data cannot be exported or imported as asked
	TypeError    Code = 2 // an argument of the wrong kind (dtype, object)
	ValueError   Code = 3 // an argument with a bad value (shape, handle, stream)
	MemoryError  Code = 4 // an allocation failed
	RuntimeError Code = 5 // anything else, including a recovered Go panic
	IndexError   Code = 6 // an index out of range (tensor[i])
)

var codeNames = [...]string{"OK", "BufferError", "TypeError", "ValueError", "MemoryError", "RuntimeError", "IndexError"}

// String is the name of the Python exception class the code maps to.
func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", int32(c))
}

// Error is an error that carries the Code the fence reports for it.
type Error struct {
	Code Code
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap gives the wrapped error to errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// Errorf formats an error (with %w support) that the fence reports as code.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// WithCode gives err the code the fence reports for it; nil stays nil.
func WithCode(code Code, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// CodeOf is the code the fence reports for err: the outermost *Error's code,
// ValueError for use of released memory or a closed view (a closed
// tensor), MemoryError when the driver is out of memory, RuntimeError for
// everything else, and OK for nil.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) && e.Code != OK {
		return e.Code
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
