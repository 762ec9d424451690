//go:build cgo

package dlpacktest

import (
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack/internal/cabi"
)

// Spec says what the C producer builds: NDim, Shape and Strides (nil
// stores NULL), dtype Code/Bits/Lanes, DeviceType/DeviceID, Flags,
// Major/Minor (versioned only), DataBytes of 256-byte aligned data (0
// stores NULL), ByteOffset, and NullDeleter.
type Spec = cabi.Spec

// Record tracks one produced tensor: Calls is how often its deleter ran,
// Data its data pointer (without byte_offset). It outlives the tensor so a
// second deleter call is counted rather than freeing twice; Free it when
// the test is done.
type Record = cabi.Record

// NewVersioned mallocs a DLManagedTensorVersioned, its shape, strides and
// data in one C block, with a C deleter that counts its calls and frees the
// block on the first.
func NewVersioned(s Spec) (unsafe.Pointer, Record) { return cabi.NewVersioned(s) }

// NewLegacy is NewVersioned for a legacy DLManagedTensor.
func NewLegacy(s Spec) (unsafe.Pointer, Record) { return cabi.NewLegacy(s) }

// TotalDeleterCalls counts the calls of every deleter the producer made.
func TotalDeleterCalls() int64 { return cabi.TotalDeleterCalls() }

// CallOnNewThread calls the C function void fn(void *arg) on a new pthread
// and waits for it.
func CallOnNewThread(fn, arg uintptr) error { return cabi.CallOnNewThread(fn, arg) }

// DeleteOnNewThread calls the deleter stored in tensor (a
// DLManagedTensorVersioned*, or a DLManagedTensor* when legacy) on a new
// pthread and waits for it. A NULL deleter is not called.
func DeleteOnNewThread(tensor unsafe.Pointer, legacy bool) error {
	return cabi.DeleteOnNewThread(tensor, legacy)
}
