package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
)

// Descriptor is what crosses the process border for one tensor: which pool
// (the exporter's random pool id and the device's UUID), the allocation's
// export data, the byte offset of element [0, ...] in the allocation, the
// layout, the "ready" interprocess event the importer waits for, and the
// lease the importer gives back when done. It is small (a few hundred bytes)
// whatever the tensor's size.
type Descriptor struct {
	Pool     [16]byte
	Device   cuda.UUID
	Data     cuda.PoolExportData
	Size     int64 // bytes of the allocation
	Offset   int64 // bytes from the allocation's start to element [0, ...]
	DType    dlpack.DataType
	Shape    []int64
	Strides  []int64 // in elements
	ReadOnly bool
	Ready    cuda.IPCEventHandle
	Lease    uint64
	Tag      uint64 // the Server.Offer token this tensor answers (0: a plain Send)
}

// ErrBadDescriptor is matched (errors.Is) by the errors of
// Descriptor.UnmarshalBinary and of imports of malformed descriptors.
var ErrBadDescriptor = errors.New("ipc: malformed tensor descriptor")

// ErrProtocol is matched by Recv's (and every later wait's) error once the
// peer sent a message that is not the protocol (one that does not parse,
// or a kind its side never sends): the connection ended there. Unlike
// ErrBadDescriptor, which refuses one tensor of a connection that goes on,
// it never matches ErrBadDescriptor, so that a loop that skips refused
// tensors does not spin on an ended connection.
var ErrProtocol = errors.New("ipc: a message from the peer could not be handled; the connection ended")

const descVersion = 1

// descFixed: version(1) flags(1) ndim(1) pad(1) dtype(4) pool(16) uuid(16)
// data(64) size(8) offset(8) ready(64) lease(8) tag(8).
const descFixed = 4 + 4 + 16 + 16 + 64 + 8 + 8 + 64 + 8 + 8

// MarshalBinary encodes d (little endian, versioned).
func (d *Descriptor) MarshalBinary() ([]byte, error) {
	n := len(d.Shape)
	if n > 64 {
		return nil, fmt.Errorf("ipc: descriptor with %d dimensions (at most 64)", n)
	}
	if len(d.Strides) != n {
		return nil, fmt.Errorf("ipc: descriptor with %d extents and %d strides", n, len(d.Strides))
	}
	b := make([]byte, descFixed+16*n)
	b[0] = descVersion
	if d.ReadOnly {
		b[1] = 1
	}
	b[2] = byte(n)
	b[4] = byte(d.DType.Code)
	b[5] = d.DType.Bits
	binary.LittleEndian.PutUint16(b[6:], d.DType.Lanes)
	o := 8
	o += copy(b[o:], d.Pool[:])
	o += copy(b[o:], d.Device[:])
	o += copy(b[o:], d.Data[:])
	binary.LittleEndian.PutUint64(b[o:], uint64(d.Size))
	binary.LittleEndian.PutUint64(b[o+8:], uint64(d.Offset))
	o += 16
	o += copy(b[o:], d.Ready[:])
	binary.LittleEndian.PutUint64(b[o:], d.Lease)
	binary.LittleEndian.PutUint64(b[o+8:], d.Tag)
	o += 16
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(b[o:], uint64(d.Shape[i]))
		binary.LittleEndian.PutUint64(b[o+8*n:], uint64(d.Strides[i]))
		o += 8
	}
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary made, and checks that the
// layout lies inside the allocation: a descriptor comes from another
// process and is not trusted.
func (d *Descriptor) UnmarshalBinary(b []byte) error {
	if len(b) < descFixed {
		return fmt.Errorf("%w: %d bytes, want at least %d", ErrBadDescriptor, len(b), descFixed)
	}
	if b[0] != descVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrBadDescriptor, b[0], descVersion)
	}
	if b[1]&^1 != 0 || b[3] != 0 {
		return fmt.Errorf("%w: unknown flags %#x %#x", ErrBadDescriptor, b[1], b[3])
	}
	n := int(b[2])
	if n > 64 {
		return fmt.Errorf("%w: %d dimensions (at most 64)", ErrBadDescriptor, n)
	}
	if len(b) != descFixed+16*n {
		return fmt.Errorf("%w: %d bytes for %d dimensions, want %d", ErrBadDescriptor, len(b), n, descFixed+16*n)
	}
	var out Descriptor
	out.ReadOnly = b[1] == 1
	out.DType = dlpack.DataType{Code: dlpack.TypeCode(b[4]), Bits: b[5], Lanes: binary.LittleEndian.Uint16(b[6:])}
	o := 8
	o += copy(out.Pool[:], b[o:])
	o += copy(out.Device[:], b[o:])
	o += copy(out.Data[:], b[o:])
	out.Size = int64(binary.LittleEndian.Uint64(b[o:]))
	out.Offset = int64(binary.LittleEndian.Uint64(b[o+8:]))
	o += 16
	o += copy(out.Ready[:], b[o:])
	out.Lease = binary.LittleEndian.Uint64(b[o:])
	out.Tag = binary.LittleEndian.Uint64(b[o+8:])
	o += 16
	out.Shape = make([]int64, n)
	out.Strides = make([]int64, n)
	for i := 0; i < n; i++ {
		out.Shape[i] = int64(binary.LittleEndian.Uint64(b[o:]))
		out.Strides[i] = int64(binary.LittleEndian.Uint64(b[o+8*n:]))
		o += 8
	}
	if err := out.check(); err != nil {
		return err
	}
	*d = out
	return nil
}

// check validates the layout against the allocation.
func (d *Descriptor) check() error {
	if err := d.DType.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadDescriptor, err)
	}
	if d.Size <= 0 || d.Offset < 0 || d.Offset > d.Size {
		return fmt.Errorf("%w: offset %d in an allocation of %d bytes", ErrBadDescriptor, d.Offset, d.Size)
	}
	lo, hi, err := dlpack.ByteSpan(d.DType, d.Shape, d.Strides, false)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadDescriptor, err)
	}
	if lo == hi { // no elements
		return nil
	}
	if d.Offset+lo < 0 || hi > d.Size-d.Offset {
		return fmt.Errorf("%w: elements span [%d, %d) around offset %d, outside the %d-byte allocation", ErrBadDescriptor, lo, hi, d.Offset, d.Size)
	}
	return nil
}

// within checks the descriptor against the mapping the importer really got
// (size bytes from the allocation's start, as the driver reports them):
// the peer's own Size is only its word, and a tensor that reached past the
// mapping would let a kernel of this process fault, or read what the peer
// never shared.
func (d *Descriptor) within(size int64) error {
	if d.Size > size {
		return fmt.Errorf("%w: it claims an allocation of %d bytes where %d are mapped", ErrBadDescriptor, d.Size, size)
	}
	c := *d
	c.Size = size
	return c.check()
}
