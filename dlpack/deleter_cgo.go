//go:build cgo

package dlpack

/*
#include <stdint.h>
extern void dlbridge_dlpack_deleter_versioned(void*);
extern void dlbridge_dlpack_deleter_legacy(void*);
*/
import "C"

import "unsafe"

// With cgo the shared deleters are cgo-exported Go functions: their C
// addresses are fixed at link time, calls from any thread (also threads the
// Go runtime did not create) are cgo's well-trodden callback path, and no
// purego callback slot is used.

//export dlbridge_dlpack_deleter_versioned
func dlbridge_dlpack_deleter_versioned(p unsafe.Pointer) { deleterEntry(uintptr(p), false) }

//export dlbridge_dlpack_deleter_legacy
func dlbridge_dlpack_deleter_legacy(p unsafe.Pointer) { deleterEntry(uintptr(p), true) }

var (
	cgoDeleterVersioned = uintptr(unsafe.Pointer(C.dlbridge_dlpack_deleter_versioned))
	cgoDeleterLegacy    = uintptr(unsafe.Pointer(C.dlbridge_dlpack_deleter_legacy))
)

// deleterPtrs returns the shared deleters, creating them if needed.
func deleterPtrs() (versioned, legacy uintptr) { return cgoDeleterVersioned, cgoDeleterLegacy }

// ownDeleters returns the shared deleters if they exist, without creating
// them (an import must not pay for a callback it cannot need).
func ownDeleters() (versioned, legacy uintptr) { return cgoDeleterVersioned, cgoDeleterLegacy }
