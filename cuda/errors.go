package cuda

import (
	"fmt"
	"strconv"
	"unsafe"
)

// Result is a CUresult, the status code every driver call returns. The
// error codes are usable as sentinels: errors.Is(err, cuda.ErrOutOfMemory)
// holds for an *Error with that code.
type Result int32

// Results with a name, as in cuda.h. The list covers the codes a program
// acts on; any other code still prints with its number and the driver's
// own name and message.
const (
	Success                     Result = 0
	ErrInvalidValue             Result = 1
	ErrOutOfMemory              Result = 2
	ErrNotInitialized           Result = 3
	ErrDeinitialized            Result = 4
	ErrStubLibrary              Result = 34
	ErrDeviceUnavailable        Result = 46
	ErrNoDevice                 Result = 100
	ErrInvalidDevice            Result = 101
	ErrInvalidImage             Result = 200
	ErrInvalidContext           Result = 201
	ErrContextAlreadyCurrent    Result = 202
	ErrNoBinaryForGPU           Result = 209
	ErrPeerAccessUnsupported    Result = 217
	ErrInvalidPTX               Result = 218
	ErrJITCompilerNotFound      Result = 221
	ErrUnsupportedPTXVersion    Result = 222
	ErrInvalidSource            Result = 300
	ErrFileNotFound             Result = 301
	ErrInvalidHandle            Result = 400
	ErrIllegalState             Result = 401
	ErrNotFound                 Result = 500
	ErrNotReady                 Result = 600
	ErrIllegalAddress           Result = 700
	ErrLaunchOutOfResources     Result = 701
	ErrLaunchTimeout            Result = 702
	ErrPeerAccessAlreadyEnabled Result = 704
	ErrPeerAccessNotEnabled     Result = 705
	ErrPrimaryContextActive     Result = 708
	ErrContextIsDestroyed       Result = 709
	ErrAssert                   Result = 710
	ErrHostMemoryAlreadyRegd    Result = 712
	ErrHostMemoryNotRegistered  Result = 713
	ErrMisalignedAddress        Result = 716
	ErrLaunchFailed             Result = 719
	ErrNotPermitted             Result = 800
	ErrNotSupported             Result = 801
	ErrTimeout                  Result = 909
	ErrUnknown                  Result = 999
)

// resultNoSymbol is what a binding returns when the driver lacks its entry
// point; it never comes from the driver (CUresult values are >= 0).
const resultNoSymbol Result = -1

// Name returns the cuda.h name of r ("CUDA_ERROR_OUT_OF_MEMORY"), from a
// table built in, so it works without a driver.
func (r Result) Name() string {
	switch r {
	case Success:
		return "CUDA_SUCCESS"
	case ErrInvalidValue:
		return "CUDA_ERROR_INVALID_VALUE"
	case ErrOutOfMemory:
		return "CUDA_ERROR_OUT_OF_MEMORY"
	case ErrNotInitialized:
		return "CUDA_ERROR_NOT_INITIALIZED"
	case ErrDeinitialized:
		return "CUDA_ERROR_DEINITIALIZED"
	case ErrStubLibrary:
		return "CUDA_ERROR_STUB_LIBRARY"
	case ErrDeviceUnavailable:
		return "CUDA_ERROR_DEVICE_UNAVAILABLE"
	case ErrNoDevice:
		return "CUDA_ERROR_NO_DEVICE"
	case ErrInvalidDevice:
		return "CUDA_ERROR_INVALID_DEVICE"
	case ErrInvalidImage:
		return "CUDA_ERROR_INVALID_IMAGE"
	case ErrInvalidContext:
		return "CUDA_ERROR_INVALID_CONTEXT"
	case ErrContextAlreadyCurrent:
		return "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"
	case ErrNoBinaryForGPU:
		return "CUDA_ERROR_NO_BINARY_FOR_GPU"
	case ErrPeerAccessUnsupported:
		return "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"
	case ErrInvalidPTX:
		return "CUDA_ERROR_INVALID_PTX"
	case ErrJITCompilerNotFound:
		return "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"
	case ErrUnsupportedPTXVersion:
		return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
	case ErrInvalidSource:
		return "CUDA_ERROR_INVALID_SOURCE"
	case ErrFileNotFound:
		return "CUDA_ERROR_FILE_NOT_FOUND"
	case ErrInvalidHandle:
		return "CUDA_ERROR_INVALID_HANDLE"
	case ErrIllegalState:
		return "CUDA_ERROR_ILLEGAL_STATE"
	case ErrNotFound:
		return "CUDA_ERROR_NOT_FOUND"
	case ErrNotReady:
		return "CUDA_ERROR_NOT_READY"
	case ErrIllegalAddress:
		return "CUDA_ERROR_ILLEGAL_ADDRESS"
	case ErrLaunchOutOfResources:
		return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"
	case ErrLaunchTimeout:
		return "CUDA_ERROR_LAUNCH_TIMEOUT"
	case ErrPeerAccessAlreadyEnabled:
		return "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"
	case ErrPeerAccessNotEnabled:
		return "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"
	case ErrPrimaryContextActive:
		return "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"
	case ErrContextIsDestroyed:
		return "CUDA_ERROR_CONTEXT_IS_DESTROYED"
	case ErrAssert:
		return "CUDA_ERROR_ASSERT"
	case ErrHostMemoryAlreadyRegd:
		return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"
	case ErrHostMemoryNotRegistered:
		return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"
	case ErrMisalignedAddress:
		return "CUDA_ERROR_MISALIGNED_ADDRESS"
	case ErrLaunchFailed:
		return "CUDA_ERROR_LAUNCH_FAILED"
	case ErrNotPermitted:
		return "CUDA_ERROR_NOT_PERMITTED"
	case ErrNotSupported:
		return "CUDA_ERROR_NOT_SUPPORTED"
	case ErrTimeout:
		return "CUDA_ERROR_TIMEOUT"
	case ErrUnknown:
		return "CUDA_ERROR_UNKNOWN"
	case resultNoSymbol:
		return "DLBRIDGE_ERROR_MISSING_SYMBOL"
	}
	return "CUresult(" + strconv.Itoa(int(r)) + ")"
}

// Error makes a Result usable as a sentinel error value.
func (r Result) Error() string {
	return "cuda: " + r.Name() + " (" + strconv.Itoa(int(r)) + ")"
}

// Error is a failed driver call (or a check this package made before one):
// the CUresult, its name and message as the driver states them, the entry
// point and what was passed.
//
// errors.Is(err, cuda.ErrOutOfMemory) matches on Code; errors.As gives
// the *Error.
type Error struct {
	Code    Result // the CUresult
	Name    string // e.g. "CUDA_ERROR_OUT_OF_MEMORY", from cuGetErrorName
	Message string // e.g. "out of memory", from cuGetErrorString
	Op      string // the driver entry point, or the Go method for a check made here
	Detail  string // what was passed: sizes, pointers, handles (may be empty)
}

// Error formats as "cuda: Op(Detail): NAME: message".
func (e *Error) Error() string {
	op := e.Op
	if e.Detail != "" {
		op += "(" + e.Detail + ")"
	}
	return fmt.Sprintf("cuda: %s: %s: %s", op, e.Name, e.Message)
}

// Is reports whether target is the Result e carries, or ErrMissingSymbol
// for an entry point the driver lacks.
func (e *Error) Is(target error) bool {
	if r, ok := target.(Result); ok {
		return r == e.Code
	}
	return e.Code == resultNoSymbol && target == ErrMissingSymbol
}

// newError builds the *Error for a failed call, asking the driver for the
// name and message of code (the built-in name where it does not know it).
func newError(op string, code Result, detail string) error {
	e := &Error{Code: code, Op: op, Detail: detail, Name: code.Name()}
	if code == resultNoSymbol {
		e.Message = "the loaded driver " + driverPath + " does not export " + op
		return e
	}
	var p *byte
	if cuGetErrorName(int32(code), unsafe.Pointer(&p)) == Success && p != nil {
		e.Name = cString(p)
	}
	p = nil
	if cuGetErrorString(int32(code), unsafe.Pointer(&p)) == Success && p != nil {
		e.Message = cString(p)
	} else {
		e.Message = "unrecognized error code"
	}
	return e
}

// invalid builds the error for a check this package made before calling the
// driver, with the code the driver would have used.
func invalid(code Result, op, format string, args ...any) error {
	return &Error{Code: code, Name: code.Name(), Message: fmt.Sprintf(format, args...), Op: op}
}

// errHandle is the error for a nil or destroyed handle.
func errHandle(op, what string) error {
	return invalid(ErrInvalidHandle, op, "%s", what)
}

// check turns a Result into an error (nil for Success).
func check(op string, r Result, detail func() string) error {
	if r == Success {
		return nil
	}
	d := ""
	if detail != nil {
		d = detail()
	}
	return newError(op, r, d)
}

// cString copies a NUL-terminated C string that the driver owns (static
// strings from cuGetErrorName/String, or a buffer we passed).
func cString(p *byte) string {
	n := 0
	// Sound: p points to a NUL-terminated string; we stop at the NUL.
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// ptrOf passes the address of a Go variable to the driver as an output
// parameter. The binding's escape rules (go:uintptrescapes in purego, cgo's
// argument handling) keep the variable on the heap and alive for the call.
func ptrOf[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }
