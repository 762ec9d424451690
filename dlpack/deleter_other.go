//go:build !cgo && !(darwin || freebsd || linux || netbsd || windows)

package dlpack

// Without cgo and without purego support there is no way to make a
// C-callable function or to call one: Export fails with ErrNoDeleter and a
// foreign deleter cannot run (the tensor leaks; counted in leakedDeletes).

import "sync/atomic"

var leakedDeletes atomic.Int64

func deleterPtrs() (versioned, legacy uintptr) { return 0, 0 }

func ownDeleters() (versioned, legacy uintptr) { return 0, 0 }

func callDeleter(fn, arg uintptr) { leakedDeletes.Add(1) }
