package pyfunc

import (
	"errors"
	"fmt"
)

// Class is the Python exception class an error is raised as. This is
// dlbridge's one table of error classes: pybridge.Code is this type, the
// library's C entry points return these numbers, and pybridge/capi's
// generated header (dlbridge.h) carries the table to C and Python.
// Numbers are ABI: append, never renumber.
type Class uint8

// The classes. Unclassified (0, also "no error" at the C boundary) is
// raised as RuntimeError, except the engine's own errors (a closed view:
// ValueError; out of device memory: MemoryError), which the bridge
// classifies.
const (
	Unclassified Class = iota
	BufferError
	TypeError
	ValueError
	MemoryError
	RuntimeError
	IndexError
	TimeoutError // a wait past its deadline (dlbridge.nccl's and dlbridge.ipc's)
	numClasses
)

var classNames = [numClasses]string{"", "BufferError", "TypeError", "ValueError", "MemoryError", "RuntimeError", "IndexError", "TimeoutError"}

// String is the name of the Python exception class ("Unclassified" for
// Unclassified and numbers past the table).
func (c Class) String() string {
	if c < numClasses && c != Unclassified {
		return classNames[c]
	}
	return "Unclassified"
}

// Error is an error raised in Python as Class.
type Error struct {
	Class Class
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap gives the wrapped error to errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// ClassOf is the class of the outermost *Error in err's chain, or
// Unclassified.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return Unclassified
}

// TypeErrorf formats an error raised in Python as TypeError.
func TypeErrorf(format string, args ...any) error { return errorf(TypeError, format, args...) }

// ValueErrorf formats an error raised in Python as ValueError.
func ValueErrorf(format string, args ...any) error { return errorf(ValueError, format, args...) }

// BufferErrorf formats an error raised in Python as BufferError.
func BufferErrorf(format string, args ...any) error { return errorf(BufferError, format, args...) }

// MemoryErrorf formats an error raised in Python as MemoryError.
func MemoryErrorf(format string, args ...any) error { return errorf(MemoryError, format, args...) }

// RuntimeErrorf formats an error raised in Python as RuntimeError.
func RuntimeErrorf(format string, args ...any) error { return errorf(RuntimeError, format, args...) }

func errorf(c Class, format string, args ...any) error {
	return &Error{Class: c, Err: fmt.Errorf(format, args...)}
}
