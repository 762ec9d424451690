package dlpack

import (
	"strconv"
	"sync/atomic"
	"unsafe"
)

// Desc describes a tensor with Go slices for shape and strides: where
// element [0, 0, ...] is, what it holds and how it is laid out. Strides are
// in elements. An import returns it validated, strides always filled;
// Export validates it and reads nil strides as C-contiguous.
type Desc struct {
	Data    uintptr // address of element [0, 0, ...] (DLPack data + byte_offset)
	Device  Device
	DType   DataType
	Shape   []int64
	Strides []int64
	Flags   Flags
}

// InlineDims is the number of dimensions whose shape and strides fit the
// dims storage an importer embeds next to its Handle (2*InlineDims int64s)
// to import tensors up to this rank without allocating; exports keep that
// many inline too.
const InlineDims = 8

// Handle is the duty to call a producer's deleter exactly once: Release
// calls it, from any goroutine, the first time only. TakeVersioned and
// TakeLegacy fill a caller-owned Handle, so that an importer can place it,
// the dims storage and its own bookkeeping (package zerocopy: the View and
// its Owner) in one allocation. A Handle must not be copied after it is
// filled.
type Handle struct {
	// tensor is the DLManagedTensor[Versioned]* handed over, as an address:
	// C memory, or Go memory of our own export kept alive by its table.
	tensor  uintptr
	deleter uintptr // its deleter; 0 when NULL
	done    atomic.Bool
	self    bool // deleter is this package's export deleter
	legacy  bool
}

// Imported is a DLPack tensor taken over from a producer: a validated Desc
// plus the Handle that calls the producer's deleter exactly once (Release).
type Imported struct {
	Desc
	// Version is the producer's DLPack version; zero for legacy tensors.
	Version Version
	// Legacy reports a DLManagedTensor (no version, no flags).
	Legacy bool
	Handle
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
// and fills im with its validated description: Handle.TakeVersioned into
// im. im must be zero or released.
func (im *Imported) FromVersioned(p unsafe.Pointer, dims []int64) error {
	d, v, err := im.Handle.TakeVersioned(p, dims)
	im.Desc, im.Version, im.Legacy = d, v, false
	return err
}

// FromLegacy is FromVersioned for a legacy DLManagedTensor*.
func (im *Imported) FromLegacy(p unsafe.Pointer, dims []int64) error {
	d, err := im.Handle.TakeLegacy(p, dims)
	im.Desc, im.Version, im.Legacy = d, Version{}, true
	return err
}

// TakeVersioned takes over p, a DLManagedTensorVersioned* from a producer,
// and returns its validated description and version. Shape and strides are
// copied into dims when it holds 2*ndim values, else into a new slice. h
// must be zero or released.
//
// From here on h owns the producer's deleter: on success Release calls it
// exactly once; on error it has already been called (a rejected tensor is
// still freed) and h is released. A NULL deleter is legal: nothing to free.
//
// Every field is validated before use and errors are *FieldError naming
// it: an unknown major version (the deleter runs and nothing else is read),
// unknown flag bits, ndim outside 0..64, NULL shape with ndim > 0, negative
// extents, NULL strides (legal before DLPack 1.2 and for ndim 0: compact
// row-major), element count, total size and stride × extent overflow, NULL
// data with elements, lanes != 1 (vector types are not supported; sub-byte
// lanes that fill one byte, PyTorch's float4_e2m1fn_x2, are), unknown
// device type or dtype code/bits, a negative device id, and a byte_offset
// or span that wraps the address space.
func (h *Handle) TakeVersioned(p unsafe.Pointer, dims []int64) (Desc, Version, error) {
	*h = Handle{}
	if p == nil {
		return Desc{}, Version{}, fieldErr("DLManagedTensorVersioned*", "NULL pointer")
	}
	// p points to a DLManagedTensorVersioned the producer handed over; the
	// spec keeps version, manager_ctx, deleter and flags stable across
	// major versions, so they are safe to read before the version check.
	m := (*DLManagedTensorVersioned)(p)
	h.tensor = uintptr(p)
	h.deleter = m.Deleter
	own, _ := ownDeleters()
	h.self = h.deleter != 0 && h.deleter == own
	ver := m.Version
	if ver.Major != CurrentVersion.Major {
		h.Release()
		return Desc{}, ver, fieldErr("version.major", "DLPack "+ver.String()+
			" is not supported (this package reads major version "+
			strconv.FormatUint(uint64(CurrentVersion.Major), 10)+"); the deleter was called")
	}
	if f := m.Flags &^ knownFlags; f != 0 {
		h.Release()
		return Desc{}, ver, fieldErr("flags", "unknown bits 0x"+strconv.FormatUint(uint64(f), 16)+
			" (known: READ_ONLY, IS_COPIED, IS_SUBBYTE_TYPE_PADDED)")
	}
	nullStridesOK := ver.Minor < 2
	d, err := describe(&m.DLTensor, m.Flags, dims, nullStridesOK)
	if err != nil {
		h.Release()
		return Desc{}, ver, err
	}
	return d, ver, nil
}

// TakeLegacy is TakeVersioned for a legacy DLManagedTensor*: no version
// check, no flags (the tensor is writable), NULL strides mean compact
// row-major.
func (h *Handle) TakeLegacy(p unsafe.Pointer, dims []int64) (Desc, error) {
	*h = Handle{legacy: true}
	if p == nil {
		return Desc{}, fieldErr("DLManagedTensor*", "NULL pointer")
	}
	// p points to a DLManagedTensor the producer handed over.
	m := (*DLManagedTensor)(p)
	h.tensor = uintptr(p)
	h.deleter = m.Deleter
	_, own := ownDeleters()
	h.self = h.deleter != 0 && h.deleter == own
	d, err := describe(&m.DLTensor, 0, dims, true)
	if err != nil {
		h.Release()
		return Desc{}, err
	}
	return d, nil
}

// PeekNDim returns the ndim field of p (a DLManagedTensorVersioned*, or a
// DLManagedTensor* when legacy) without validating anything, so that an
// importer can size its dims storage before TakeVersioned or TakeLegacy.
// It returns 0 for NULL and for a versioned tensor of an unknown major
// version, whose other fields must not be read.
func PeekNDim(p unsafe.Pointer, legacy bool) int {
	if p == nil {
		return 0
	}
	if legacy {
		// p points to a DLManagedTensor.
		return int((*DLManagedTensor)(p).DLTensor.NDim)
	}
	// p points to a DLManagedTensorVersioned; ndim is read only when the
	// major version says the layout is the one we know.
	m := (*DLManagedTensorVersioned)(p)
	if m.Version.Major != CurrentVersion.Major {
		return 0
	}
	return int(m.DLTensor.NDim)
}

// Release calls the producer's deleter, once: later calls (from any
// goroutine) do nothing. When the tensor is one this package exported, the
// Go release runs directly instead of a call through C.
func (h *Handle) Release() {
	if h.tensor == 0 || !h.done.CompareAndSwap(false, true) {
		return
	}
	switch {
	case h.deleter == 0:
	case h.self:
		releaseExport(h.tensor, h.legacy)
	default:
		callDeleter(h.deleter, h.tensor)
	}
}

// Released reports whether the deleter has been called (or was NULL and
// Release ran).
func (h *Handle) Released() bool { return h.done.Load() }

// Tensor is the address of the DLManagedTensor[Versioned] taken over.
func (h *Handle) Tensor() uintptr { return h.tensor }

// describe validates t and returns its description. Nothing in t is
// trusted: every pointer is checked before it is read, every product and
// sum is overflow-checked.
func describe(t *DLTensor, flags Flags, dims []int64, nullStridesOK bool) (Desc, error) {
	ndim := t.NDim
	if ndim < 0 || ndim > MaxNDim {
		return Desc{}, fieldErr("dl_tensor.ndim", itoa(int64(ndim))+" is out of range 0.."+itoa(MaxNDim))
	}
	dt := t.DType
	if dt.Lanes != 1 && !dt.PackedLanes() {
		return Desc{}, fieldErr("dl_tensor.dtype.lanes", itoa(int64(dt.Lanes))+
			" lanes: vector types are not supported (lanes must be 1, or fill one byte with sub-byte lanes, as float4_e2m1fn_x2 does)")
	}
	if !dtypeOK(dt) {
		if !dt.Code.Valid() {
			return Desc{}, fieldErr("dl_tensor.dtype.code", itoa(int64(dt.Code))+" is not a DLDataTypeCode (0..17)")
		}
		return Desc{}, fieldErr("dl_tensor.dtype.bits", itoa(int64(dt.Bits))+" is not a width "+dt.Code.String()+" allows")
	}
	dev := t.Device
	if !deviceTypeOK(dev.Type) {
		return Desc{}, fieldErr("dl_tensor.device.device_type", itoa(int64(dev.Type))+" is not a DLDeviceType (1..4, 7..18)")
	}
	if dev.ID < 0 {
		return Desc{}, fieldErr("dl_tensor.device.device_id", itoa(int64(dev.ID))+" is negative")
	}
	n := int(ndim)
	if cap(dims) < 2*n {
		dims = make([]int64, 2*n)
	}
	shape, strides := dims[:n:n], dims[n:2*n:2*n]
	nullStrides := false
	if n > 0 {
		if t.Shape == nil {
			return Desc{}, fieldErr("dl_tensor.shape", "NULL with ndim = "+itoa(int64(n)))
		}
		// The producer promises ndim extents at shape (checked non-NULL).
		copy(shape, unsafe.Slice(t.Shape, n))
		if t.Strides != nil {
			// ... and ndim strides at strides when it is not NULL.
			copy(strides, unsafe.Slice(t.Strides, n))
		} else if nullStridesOK {
			nullStrides = true
		} else {
			return Desc{}, fieldErr("dl_tensor.strides", "NULL with ndim = "+itoa(int64(n))+
				" (DLPack >= 1.2 requires strides; NULL is legal only for legacy and 1.0/1.1 tensors)")
		}
	}
	numel := int64(1)
	for i, e := range shape {
		if e < 0 {
			return Desc{}, fieldErr("dl_tensor.shape["+itoa(int64(i))+"]", itoa(e)+" is negative")
		}
		var ok bool
		if numel, ok = MulInt64(numel, e); !ok {
			return Desc{}, fieldErr("dl_tensor.shape["+itoa(int64(i))+"]", itoa(e)+": element count overflows int64")
		}
	}
	if nullStrides {
		FillCStrides(strides, shape) // products fit: the element count did
	}
	padded := flags&FlagSubbyteTypePadded != 0
	if _, ok := dt.StorageBytes(numel, padded); !ok {
		return Desc{}, fieldErr("dl_tensor.shape", itoa(numel)+" elements of "+dt.String()+": total size overflows int64")
	}
	lo, hi, err := ByteSpan(dt, shape, strides, padded)
	if err != nil {
		return Desc{}, fieldErr("dl_tensor.strides", err.Error())
	}
	data := uintptr(t.Data)
	if data == 0 && numel != 0 {
		return Desc{}, fieldErr("dl_tensor.data", "NULL for "+itoa(numel)+" elements")
	}
	off := t.ByteOffset
	if off > uint64(^uintptr(0)-data) {
		return Desc{}, fieldErr("dl_tensor.byte_offset", strconv.FormatUint(off, 10)+
			": data + byte_offset overflows the address space")
	}
	ptr := data + uintptr(off)
	if numel != 0 {
		// lo < 0 only with negative strides; ^lo+1 is -lo without overflow.
		if lo < 0 && uint64(^lo)+1 > uint64(ptr) {
			return Desc{}, fieldErr("dl_tensor.strides", "negative strides reach "+strconv.FormatUint(uint64(^lo)+1, 10)+
				" bytes below data + byte_offset (0x"+strconv.FormatUint(uint64(ptr), 16)+"), past address 0")
		}
		if uint64(hi) > uint64(^uintptr(0)-ptr) {
			return Desc{}, fieldErr("dl_tensor.strides", "the tensor spans "+itoa(hi)+
				" bytes past data + byte_offset, beyond the end of the address space")
		}
	}
	return Desc{Data: ptr, Device: dev, DType: dt, Shape: shape, Strides: strides, Flags: flags}, nil
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
