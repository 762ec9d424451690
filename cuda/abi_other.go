//go:build !cgo && !amd64 && !arm64

package cuda

import "unsafe"

// byValue64: on other architectures the purego build does not know how a
// 64-byte struct is passed; calls that need it are built with cgo there.
func byValue64(regs []uintptr, p unsafe.Pointer) []uintptr {
	panic("cuda: passing a struct by value needs cgo on this architecture")
}
