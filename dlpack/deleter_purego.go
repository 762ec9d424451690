//go:build !cgo && (darwin || freebsd || linux || netbsd || windows)

package dlpack

import (
	"sync"
	"sync/atomic"

	"github.com/ebitengine/purego"
)

// Without cgo the shared deleters are purego callbacks. purego allows at
// most 2000 callbacks per process and never frees one, so exactly two are
// made, lazily, on the first export (or DeleterPtr call).

var (
	deleterOnce        sync.Once
	pgDeleterVersioned atomic.Uintptr
	pgDeleterLegacy    atomic.Uintptr
)

// deleterPtrs returns the shared deleters, creating them if needed.
func deleterPtrs() (versioned, legacy uintptr) {
	if v := pgDeleterVersioned.Load(); v != 0 {
		return v, pgDeleterLegacy.Load()
	}
	deleterOnce.Do(func() {
		// A uintptr result keeps the callbacks valid for Windows' NewCallback,
		// which needs one; C callers of a void function ignore it.
		l := purego.NewCallback(func(p uintptr) uintptr { deleterEntry(p, true); return 0 })
		v := purego.NewCallback(func(p uintptr) uintptr { deleterEntry(p, false); return 0 })
		pgDeleterLegacy.Store(l)
		pgDeleterVersioned.Store(v) // last: a non-zero versioned pointer means both exist
	})
	return pgDeleterVersioned.Load(), pgDeleterLegacy.Load()
}

// ownDeleters returns the shared deleters if they exist, without creating
// them (an import must not pay for a callback it cannot need).
func ownDeleters() (versioned, legacy uintptr) {
	return pgDeleterVersioned.Load(), pgDeleterLegacy.Load()
}

// callDeleter calls the C function fn(arg) through purego.
func callDeleter(fn, arg uintptr) { purego.SyscallN(fn, arg) }
