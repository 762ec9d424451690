//go:build !cgo

package cuda

import "unsafe"

// byValue64 lays out the arguments of a call whose last parameter is a
// 64-byte struct passed by value, for purego.SyscallN on amd64 (System V):
// such a struct is of class MEMORY and travels on the stack, after the six
// integer registers, which the leading arguments fill first (the rest
// padded with zeros). Callers pass at most six register arguments.
func byValue64(regs []uintptr, p unsafe.Pointer) []uintptr {
	out := make([]uintptr, 6, 6+8)
	copy(out, regs)
	w := (*[8]uintptr)(p) // sound: p points at 64 readable bytes the caller keeps alive
	return append(out, w[:]...)
}
