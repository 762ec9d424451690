//go:build !cgo

package cuda

import "unsafe"

// byValue64 lays out the arguments of a call whose last parameter is a
// 64-byte struct passed by value, for purego.SyscallN on arm64 (AAPCS64):
// a composite larger than 16 bytes is copied by the caller and passed as a
// pointer in the next integer register. The caller's copy is p, kept alive
// (and unmoved: heap memory) by the caller for the call.
func byValue64(regs []uintptr, p unsafe.Pointer) []uintptr {
	return append(append([]uintptr{}, regs...), uintptr(p))
}
