package pybridge

import "unsafe"

// unsafeBytes is the n bytes at p (memory an owner keeps alive; n >= 0).
func unsafeBytes(p unsafe.Pointer, n int64) []byte { return unsafe.Slice((*byte)(p), n) }
