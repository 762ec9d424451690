package nccl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Result is an ncclResult_t.
type Result int32

// The results NCCL defines (nccl.h).
const (
	success            Result = 0
	ErrUnhandledCUDA   Result = 1
	ErrSystem          Result = 2
	ErrInternal        Result = 3
	ErrInvalidArgument Result = 4
	ErrInvalidUsage    Result = 5
	ErrRemote          Result = 6
	inProgress         Result = 7
	ErrNCCLTimeout     Result = 8
	resultNoSymbol     Result = -1
	resultNames               = "ncclSuccess ncclUnhandledCudaError ncclSystemError ncclInternalError ncclInvalidArgument ncclInvalidUsage ncclRemoteError ncclInProgress ncclTimeout"
)

func (r Result) String() string {
	names := strings.Fields(resultNames)
	if r >= 0 && int(r) < len(names) {
		return names[r]
	}
	if r == resultNoSymbol {
		return "entry point missing"
	}
	return "ncclResult(" + strconv.Itoa(int(r)) + ")"
}

// Error makes a Result usable with errors.Is against an *Error.
func (r Result) Error() string { return r.String() }

// Error is a failed NCCL call: the entry point, its result, NCCL's message
// for the code and NCCL's last error text, which says what went wrong.
type Error struct {
	Op     string
	Result Result
	Last   string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("nccl: %s: %v", e.Op, e.Result)
	if fns[sym_ncclGetErrorString] != 0 && e.Result >= 0 {
		msg += " (" + callStr(sym_ncclGetErrorString, uintptr(e.Result)) + ")"
	}
	if e.Last != "" {
		msg += ": " + e.Last
	}
	return msg
}

// Is matches the Result (errors.Is(err, nccl.ErrRemote)).
func (e *Error) Is(target error) bool {
	r, ok := target.(Result)
	return ok && r == e.Result
}

func newError(op string, r Result, comm uintptr) error {
	if r == resultNoSymbol {
		return fmt.Errorf("%w: %s (NCCL at %s is version %d)", ErrMissingSymbol, op, libPath, version)
	}
	e := &Error{Op: op, Result: r}
	if fns[sym_ncclGetLastError] != 0 {
		e.Last = callStr(sym_ncclGetLastError, comm)
	}
	return e
}

// ErrTimeout matches (errors.Is) an OpError whose operation did not
// complete within the communicator's timeout.
var ErrTimeout = errors.New("nccl: timed out")

// ErrAborted matches operations refused because the communicator was
// aborted (after a failure, or by Abort).
var ErrAborted = errors.New("nccl: communicator aborted")

// OpError is the failure of an operation of a communicator: which one, on
// which rank, the ranks that did not come (when known) and the cause (a
// timeout, NCCL's asynchronous error). The communicator is aborted when an
// OpError is returned; build a new one (World.Rebuild) to go on.
type OpError struct {
	Op      string        // "all_reduce", "send/recv", "init", ...
	Seq     uint64        // the operation's number on the communicator, from 1
	Rank    int           // this rank in the communicator
	Size    int           // the communicator's size
	Missing []int         // ranks known not to have come (exited, or not reached Seq)
	Timeout time.Duration // the deadline that passed (0 when the cause was another)
	Detail  string        // what is known of the other ranks
	Err     error         // ErrTimeout or the NCCL error
}

func (e *OpError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nccl: %s (operation %d) on rank %d of %d", e.Op, e.Seq, e.Rank, e.Size)
	if e.Timeout > 0 {
		fmt.Fprintf(&b, " did not complete within %v", e.Timeout)
	} else {
		b.WriteString(" failed")
	}
	if len(e.Missing) > 0 {
		fmt.Fprintf(&b, "; rank(s) %v did not come", e.Missing)
	}
	if e.Detail != "" {
		b.WriteString(" (" + e.Detail + ")")
	}
	fmt.Fprintf(&b, ": %v; the communicator was aborted", e.Err)
	return b.String()
}

func (e *OpError) Unwrap() []error { return []error{e.Err, ErrAborted} }
