package dlpack

import (
	"strconv"
	"sync/atomic"
	"unsafe"
)

// Desc is a validated description of a tensor in Go memory: where element
// [0, 0, ...] is, what it holds and how it is laid out. Strides are in
// elements and always filled.
type Desc struct {
	Data    uintptr // address of element [0, 0, ...] (DLPack data + byte_offset)
	Device  Device
	DType   DataType
	Shape   []int64
	Strides []int64
	Flags   Flags
}

// InlineDims is the number of dimensions whose shape and strides fit the
// dims storage a caller embeds next to an Imported (2*InlineDims int64s):
// importers that embed [2*InlineDims]int64 import tensors up to this rank
// without allocating.
const InlineDims = 8

// Imported is a DLPack tensor taken over from a producer: a validated Desc
// plus the duty to call the producer's deleter exactly once (Release).
//
// It is meant to be embedded: FromVersioned and FromLegacy fill a
// caller-owned Imported and write shape and strides into caller-owned dims,
// so that an importer can place the handle, its owner and the dims in one
// allocation. An Imported must not be copied after it is filled.
type Imported struct {
	Desc
	// Version is the producer's DLPack version; zero for legacy tensors.
	Version Version
	// Legacy reports a DLManagedTensor (no version, no flags).
	Legacy bool

	self bool // deleter is this package's export deleter
	done atomic.Bool
	// tensor is the DLManagedTensor[Versioned]* handed over, as an address:
	// C memory, or Go memory of our own export kept alive by its table.
	tensor  uintptr
	deleter uintptr // its deleter; 0 when NULL
}

// ImportVersioned takes over a DLManagedTensorVersioned*. It is
// FromVersioned on a new Imported; see there.
func ImportVersioned(p unsafe.Pointer) (*Imported, error) {
	im := new(Imported)
	if err := im.FromVersioned(p, nil); err != nil {
		return nil, err
	}
	return im, nil
}

// ImportLegacy takes over a legacy DLManagedTensor*. It is FromLegacy on a
// new Imported; see there.
func ImportLegacy(p unsafe.Pointer) (*Imported, error) {
	im := new(Imported)
	if err := im.FromLegacy(p, nil); err != nil {
		return nil, err
	}
	return im, nil
}

// FromVersioned takes over p, a DLManagedTensorVersioned* from a producer,
// and fills im with its validated description. Shape and strides are
// copied into dims when it holds 2*ndim values, else into a new slice.
// im must be zero or released.
//
// From here on im owns the producer's deleter: on success Release calls it
// exactly once; on error it has already been called (a rejected tensor is
// still freed) and im is released. A NULL deleter is legal: nothing to free.
//
// Every field is validated before use and errors are *FieldError naming
// it: an unknown major version (the deleter runs and nothing else is read),
// unknown flag bits, ndim outside 0..64, NULL shape with ndim > 0, negative
// extents, NULL strides (legal before DLPack 1.2 and for ndim 0: compact
// row-major), element count, total size and stride × extent overflow, NULL
// data with elements, lanes != 1 (vector types are not supported), unknown
// device type or dtype code/bits, a negative device id, and a byte_offset
// or span that wraps the address space.
func (im *Imported) FromVersioned(p unsafe.Pointer, dims []int64) error {
	*im = Imported{}
	if p == nil {
		return fieldErr("DLManagedTensorVersioned*", "NULL pointer")
	}
	// p points to a DLManagedTensorVersioned the producer handed over; the
	// spec keeps version, manager_ctx, deleter and flags stable across
	// major versions, so they are safe to read before the version check.
	m := (*DLManagedTensorVersioned)(p)
	im.tensor = uintptr(p)
	im.deleter = m.Deleter
	im.Version = m.Version
	own, _ := ownDeleters()
	im.self = im.deleter != 0 && im.deleter == own
	if m.Version.Major != CurrentVersion.Major {
		im.Release()
		return fieldErr("version.major", "DLPack "+m.Version.String()+
			" is not supported (this package reads major version "+
			strconv.FormatUint(uint64(CurrentVersion.Major), 10)+"); the deleter was called")
	}
	if f := m.Flags &^ knownFlags; f != 0 {
		im.Release()
		return fieldErr("flags", "unknown bits 0x"+strconv.FormatUint(uint64(f), 16)+
			" (known: READ_ONLY, IS_COPIED, IS_SUBBYTE_TYPE_PADDED)")
	}
	nullStridesOK := m.Version.Major == 1 && m.Version.Minor < 2
	if err := im.fill(&m.DLTensor, m.Flags, dims, nullStridesOK); err != nil {
		im.Release()
		return err
	}
	return nil
}

// FromLegacy is FromVersioned for a legacy DLManagedTensor*: no version
// check, no flags (the tensor is writable), NULL strides mean compact
// row-major.
func (im *Imported) FromLegacy(p unsafe.Pointer, dims []int64) error {
	*im = Imported{Legacy: true}
	if p == nil {
		return fieldErr("DLManagedTensor*", "NULL pointer")
	}
	// p points to a DLManagedTensor the producer handed over.
	m := (*DLManagedTensor)(p)
	im.tensor = uintptr(p)
	im.deleter = m.Deleter
	_, own := ownDeleters()
	im.self = im.deleter != 0 && im.deleter == own
	if err := im.fill(&m.DLTensor, 0, dims, true); err != nil {
		im.Release()
		return err
	}
	return nil
}

// Release calls the producer's deleter, once: later calls (from any
// goroutine) do nothing. When the tensor is one this package exported, the
// Go release runs directly instead of a call through C.
func (im *Imported) Release() {
	if im.tensor == 0 || !im.done.CompareAndSwap(false, true) {
		return
	}
	switch {
	case im.deleter == 0:
	case im.self:
		releaseExport(im.tensor, im.Legacy)
	default:
		callDeleter(im.deleter, im.tensor)
	}
}

// Released reports whether the deleter has been called (or was NULL and
// Release ran).
func (im *Imported) Released() bool { return im.done.Load() }

// Tensor is the address of the DLManagedTensor[Versioned] taken over.
func (im *Imported) Tensor() uintptr { return im.tensor }

// fill validates t and writes the description into im. Nothing in t is
// trusted: every pointer is checked before it is read, every product and
// sum is overflow-checked.
func (im *Imported) fill(t *DLTensor, flags Flags, dims []int64, nullStridesOK bool) error {
	ndim := t.NDim
	if ndim < 0 || ndim > MaxNDim {
		return fieldErr("dl_tensor.ndim", itoa(int64(ndim))+" is out of range 0.."+itoa(MaxNDim))
	}
	dt := t.DType
	if dt.Lanes != 1 {
		return fieldErr("dl_tensor.dtype.lanes", itoa(int64(dt.Lanes))+
			" lanes: vector types are not supported (lanes must be 1)")
	}
	if !dtypeOK(dt) {
		if !dt.Code.Valid() {
			return fieldErr("dl_tensor.dtype.code", itoa(int64(dt.Code))+" is not a DLDataTypeCode (0..17)")
		}
		return fieldErr("dl_tensor.dtype.bits", itoa(int64(dt.Bits))+" is not a width "+dt.Code.String()+" allows")
	}
	dev := t.Device
	if !deviceTypeOK(dev.Type) {
		return fieldErr("dl_tensor.device.device_type", itoa(int64(dev.Type))+" is not a DLDeviceType (1..4, 7..18)")
	}
	if dev.ID < 0 {
		return fieldErr("dl_tensor.device.device_id", itoa(int64(dev.ID))+" is negative")
	}
	n := int(ndim)
	if cap(dims) < 2*n {
		dims = make([]int64, 2*n)
	}
	shape, strides := dims[:n:n], dims[n:2*n:2*n]
	nullStrides := false
	if n > 0 {
		if t.Shape == nil {
			return fieldErr("dl_tensor.shape", "NULL with ndim = "+itoa(int64(n)))
		}
		// The producer promises ndim extents at shape (checked non-NULL).
		copy(shape, unsafe.Slice(t.Shape, n))
		if t.Strides != nil {
			// ... and ndim strides at strides when it is not NULL.
			copy(strides, unsafe.Slice(t.Strides, n))
		} else if nullStridesOK {
			nullStrides = true
		} else {
			return fieldErr("dl_tensor.strides", "NULL with ndim = "+itoa(int64(n))+
				" (DLPack >= 1.2 requires strides; NULL is legal only for legacy and 1.0/1.1 tensors)")
		}
	}
	numel := int64(1)
	for i, e := range shape {
		if e < 0 {
			return fieldErr("dl_tensor.shape["+itoa(int64(i))+"]", itoa(e)+" is negative")
		}
		var ok bool
		if numel, ok = MulInt64(numel, e); !ok {
			return fieldErr("dl_tensor.shape["+itoa(int64(i))+"]", itoa(e)+": element count overflows int64")
		}
	}
	if nullStrides {
		FillCStrides(strides, shape) // products fit: the element count did
	}
	padded := flags&FlagSubbyteTypePadded != 0
	if _, ok := dt.StorageBytes(numel, padded); !ok {
		return fieldErr("dl_tensor.shape", itoa(numel)+" elements of "+dt.String()+": total size overflows int64")
	}
	lo, hi, err := ByteSpan(dt, shape, strides, padded)
	if err != nil {
		return fieldErr("dl_tensor.strides", err.Error())
	}
	data := uintptr(t.Data)
	if data == 0 && numel != 0 {
		return fieldErr("dl_tensor.data", "NULL for "+itoa(numel)+" elements")
	}
	off := t.ByteOffset
	if off > uint64(^uintptr(0)-data) {
		return fieldErr("dl_tensor.byte_offset", strconv.FormatUint(off, 10)+
			": data + byte_offset overflows the address space")
	}
	ptr := data + uintptr(off)
	if numel != 0 {
		// lo < 0 only with negative strides; ^lo+1 is -lo without overflow.
		if lo < 0 && uint64(^lo)+1 > uint64(ptr) {
			return fieldErr("dl_tensor.strides", "negative strides reach "+strconv.FormatUint(uint64(^lo)+1, 10)+
				" bytes below data + byte_offset (0x"+strconv.FormatUint(uint64(ptr), 16)+"), past address 0")
		}
		if uint64(hi) > uint64(^uintptr(0)-ptr) {
			return fieldErr("dl_tensor.strides", "the tensor spans "+itoa(hi)+
				" bytes past data + byte_offset, beyond the end of the address space")
		}
	}
	im.Desc = Desc{Data: ptr, Device: dev, DType: dt, Shape: shape, Strides: strides, Flags: flags}
	return nil
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
