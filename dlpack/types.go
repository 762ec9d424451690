package dlpack

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is DLPackVersion: a major change breaks the ABI of
// DLManagedTensorVersioned; a minor change only adds enumeration values.
type Version struct {
	Major uint32
	Minor uint32
}

// CurrentVersion is the DLPack version this package implements and stamps on
// every tensor it exports.
var CurrentVersion = Version{Major: 1, Minor: 3}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Flags is the bitmask of DLManagedTensorVersioned.flags.
type Flags uint64

const (
	// FlagReadOnly marks a tensor the consumer must not write.
	FlagReadOnly Flags = 1 << 0
	// FlagIsCopied marks a tensor the producer copied for this consumer alone.
	FlagIsCopied Flags = 1 << 1
	// FlagSubbyteTypePadded marks sub-byte elements (fp4, fp6) stored one per
	// byte instead of packed.
	FlagSubbyteTypePadded Flags = 1 << 2

	knownFlags = FlagReadOnly | FlagIsCopied | FlagSubbyteTypePadded
)

func (f Flags) String() string {
	if f == 0 {
		return "0"
	}
	var parts []string
	if f&FlagReadOnly != 0 {
		parts = append(parts, "READ_ONLY")
	}
	if f&FlagIsCopied != 0 {
		parts = append(parts, "IS_COPIED")
	}
	if f&FlagSubbyteTypePadded != 0 {
		parts = append(parts, "IS_SUBBYTE_TYPE_PADDED")
	}
	if rest := f &^ knownFlags; rest != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint64(rest)))
	}
	return strings.Join(parts, "|")
}

// DeviceType is DLDeviceType (a C enum: int32 in the ABI).
type DeviceType int32

// The device types of DLPack 1.3. Values 5 and 6 are unassigned.
const (
	CPU         DeviceType = 1
	CUDA        DeviceType = 2
	CUDAHost    DeviceType = 3
	OpenCL      DeviceType = 4
	Vulkan      DeviceType = 7
	Metal       DeviceType = 8
	VPI         DeviceType = 9
	ROCM        DeviceType = 10
	ROCMHost    DeviceType = 11
	ExtDev      DeviceType = 12
	CUDAManaged DeviceType = 13
	OneAPI      DeviceType = 14
	WebGPU      DeviceType = 15
	Hexagon     DeviceType = 16
	MAIA        DeviceType = 17
	Trn         DeviceType = 18
)

var deviceTypeNames = map[DeviceType]string{
	CPU: "cpu", CUDA: "cuda", CUDAHost: "cuda_host", OpenCL: "opencl", Vulkan: "vulkan",
	Metal: "metal", VPI: "vpi", ROCM: "rocm", ROCMHost: "rocm_host", ExtDev: "ext_dev",
	CUDAManaged: "cuda_managed", OneAPI: "oneapi", WebGPU: "webgpu", Hexagon: "hexagon",
	MAIA: "maia", Trn: "trn",
}

// Valid reports whether t is a device type DLPack defines.
func (t DeviceType) Valid() bool {
	if t >= 0 && t < DeviceType(len(deviceTypeKnown)) {
		return deviceTypeKnown[t]
	}
	_, ok := deviceTypeNames[t]
	return ok
}

// typeCodeTable, typeCodeKnown and deviceTypeKnown are the maps above as
// arrays, for the checks every import makes (an array index, not a map
// lookup).
var (
	typeCodeTable   [256]typeCodeInfo
	typeCodeKnown   [256]bool
	deviceTypeKnown [64]bool
)

func init() {
	for c, info := range typeCodes {
		typeCodeTable[c], typeCodeKnown[c] = info, true
	}
	for t := range deviceTypeNames {
		if t >= 0 && t < DeviceType(len(deviceTypeKnown)) {
			deviceTypeKnown[t] = true
		}
	}
}

func (t DeviceType) String() string {
	if n, ok := deviceTypeNames[t]; ok {
		return n
	}
	return "DeviceType(" + strconv.Itoa(int(t)) + ")"
}

// HostAccessible reports whether the CPU may dereference pointers of this
// device type directly (plain, pinned and managed memory).
func (t DeviceType) HostAccessible() bool {
	switch t {
	case CPU, CUDAHost, ROCMHost, CUDAManaged:
		return true
	}
	return false
}

// Device is DLDevice.
type Device struct {
	Type DeviceType
	ID   int32
}

// The commonly used devices.
var (
	CPUDevice = Device{Type: CPU}
)

// CUDADevice returns the device of CUDA ordinal id.
func CUDADevice(id int) Device { return Device{Type: CUDA, ID: int32(id)} }

// String gives "cpu" for device 0 of host types and "type:id" otherwise,
// the spelling PyTorch users know ("cuda:0").
func (d Device) String() string {
	if d.Type == CPU && d.ID == 0 {
		return "cpu"
	}
	return d.Type.String() + ":" + strconv.Itoa(int(d.ID))
}

// ParseDevice reads "cpu", "cuda", "cuda:N" and every other "type[:id]" that
// Device.String writes.
func ParseDevice(s string) (Device, error) {
	name, idText, hasID := strings.Cut(strings.TrimSpace(strings.ToLower(s)), ":")
	var d Device
	found := false
	for t, n := range deviceTypeNames {
		if n == name {
			d.Type, found = t, true
			break
		}
	}
	if !found {
		return Device{}, fmt.Errorf("dlpack: unknown device %q (want cpu, cuda, cuda:N, ...)", s)
	}
	if hasID {
		id, err := strconv.ParseInt(idText, 10, 32)
		if err != nil || id < 0 {
			return Device{}, fmt.Errorf("dlpack: device %q: id %q is not a non-negative integer", s, idText)
		}
		d.ID = int32(id)
	}
	return d, nil
}

// TypeCode is DLDataTypeCode (stored as uint8 in DLDataType).
type TypeCode uint8

// The type codes of DLPack 1.3.
const (
	Int               TypeCode = 0
	UInt              TypeCode = 1
	Float             TypeCode = 2
	OpaqueHandle      TypeCode = 3
	Bfloat            TypeCode = 4
	Complex           TypeCode = 5
	Bool              TypeCode = 6
	Float8E3M4        TypeCode = 7
	Float8E4M3        TypeCode = 8
	Float8E4M3B11FNUZ TypeCode = 9
	Float8E4M3FN      TypeCode = 10
	Float8E4M3FNUZ    TypeCode = 11
	Float8E5M2        TypeCode = 12
	Float8E5M2FNUZ    TypeCode = 13
	Float8E8M0FNU     TypeCode = 14
	Float6E2M3FN      TypeCode = 15
	Float6E3M2FN      TypeCode = 16
	Float4E2M1FN      TypeCode = 17
)

// typeCodeInfo describes a code: its name prefix and the bit widths DLPack
// allows for it (nil: any multiple of 8 from 8 to 128... see bitsOK).
type typeCodeInfo struct {
	name  string
	fixed uint8 // non-zero: the only legal bit width, and the name has no width suffix
}

var typeCodes = map[TypeCode]typeCodeInfo{
	Int: {name: "int"}, UInt: {name: "uint"}, Float: {name: "float"},
	OpaqueHandle: {name: "handle"}, Bfloat: {name: "bfloat"}, Complex: {name: "complex"},
	Bool:              {name: "bool", fixed: 8},
	Float8E3M4:        {name: "float8_e3m4", fixed: 8},
	Float8E4M3:        {name: "float8_e4m3", fixed: 8},
	Float8E4M3B11FNUZ: {name: "float8_e4m3b11fnuz", fixed: 8},
	Float8E4M3FN:      {name: "float8_e4m3fn", fixed: 8},
	Float8E4M3FNUZ:    {name: "float8_e4m3fnuz", fixed: 8},
	Float8E5M2:        {name: "float8_e5m2", fixed: 8},
	Float8E5M2FNUZ:    {name: "float8_e5m2fnuz", fixed: 8},
	Float8E8M0FNU:     {name: "float8_e8m0fnu", fixed: 8},
	Float6E2M3FN:      {name: "float6_e2m3fn", fixed: 6},
	Float6E3M2FN:      {name: "float6_e3m2fn", fixed: 6},
	Float4E2M1FN:      {name: "float4_e2m1fn", fixed: 4},
}

// Valid reports whether c is a type code DLPack defines.
func (c TypeCode) Valid() bool { _, ok := typeCodes[c]; return ok }

func (c TypeCode) String() string {
	if i, ok := typeCodes[c]; ok {
		return i.name
	}
	return "TypeCode(" + strconv.Itoa(int(c)) + ")"
}

// DataType is DLDataType: code, bits per lane, lanes.
type DataType struct {
	Code  TypeCode
	Bits  uint8
	Lanes uint16
}

// The data types users name most.
var (
	BoolType       = DataType{Bool, 8, 1}
	Int8Type       = DataType{Int, 8, 1}
	Int16Type      = DataType{Int, 16, 1}
	Int32Type      = DataType{Int, 32, 1}
	Int64Type      = DataType{Int, 64, 1}
	Uint8Type      = DataType{UInt, 8, 1}
	Uint16Type     = DataType{UInt, 16, 1}
	Uint32Type     = DataType{UInt, 32, 1}
	Uint64Type     = DataType{UInt, 64, 1}
	Float16Type    = DataType{Float, 16, 1}
	Float32Type    = DataType{Float, 32, 1}
	Float64Type    = DataType{Float, 64, 1}
	Bfloat16Type   = DataType{Bfloat, 16, 1}
	Complex64Type  = DataType{Complex, 64, 1}
	Complex128Type = DataType{Complex, 128, 1}
)

// Validate reports why t is not a data type DLPack defines: an unknown code,
// a bit width the code does not allow, or zero lanes.
func (t DataType) Validate() error {
	info, ok := typeCodeTable[t.Code], typeCodeKnown[t.Code]
	if !ok {
		return fmt.Errorf("dlpack: dtype.code %d is not a DLDataTypeCode (0..17)", t.Code)
	}
	if t.Lanes == 0 {
		return fmt.Errorf("dlpack: dtype.lanes is 0 (must be >= 1)")
	}
	if info.fixed != 0 {
		if t.Bits != info.fixed {
			return fmt.Errorf("dlpack: dtype %s needs bits=%d, got %d", info.name, info.fixed, t.Bits)
		}
		return nil
	}
	ok = false
	switch t.Code {
	case Int, UInt:
		ok = t.Bits == 1 || t.Bits == 4 || t.Bits == 8 || t.Bits == 16 || t.Bits == 32 || t.Bits == 64 || t.Bits == 128
	case Float:
		ok = t.Bits == 16 || t.Bits == 32 || t.Bits == 64 || t.Bits == 128
	case Bfloat:
		ok = t.Bits == 16
	case Complex:
		ok = t.Bits == 32 || t.Bits == 64 || t.Bits == 128
	case OpaqueHandle:
		ok = t.Bits > 0 && t.Bits%8 == 0
	}
	if !ok {
		return fmt.Errorf("dlpack: dtype.bits %d is not a width %s supports", t.Bits, info.name)
	}
	return nil
}

// String gives the name users write: "float32", "bfloat16", "bool",
// "float8_e4m3fn", "int8x4" for 4 lanes.
func (t DataType) String() string {
	info, ok := typeCodes[t.Code]
	var s string
	switch {
	case !ok:
		s = fmt.Sprintf("dtype(code=%d,bits=%d)", t.Code, t.Bits)
	case info.fixed != 0 && info.fixed == t.Bits:
		s = info.name
	default:
		s = info.name + strconv.Itoa(int(t.Bits))
	}
	switch {
	case t.PackedLanes():
		s += "_x" + strconv.Itoa(int(t.Lanes)) // PyTorch's name: float4_e2m1fn_x2
	case t.Lanes != 1:
		s += "x" + strconv.Itoa(int(t.Lanes))
	}
	return s
}

// PackedLanes reports whether t packs several sub-byte lanes into exactly
// one byte: float4_e2m1fn_x2 (bits 4, lanes 2), as PyTorch 2.8+ exports its
// torch.float4_e2m1fn_x2, or int4_x2. Such an element is one byte; it is no
// vector type, and tensors of it are accepted wherever bytes are.
func (t DataType) PackedLanes() bool {
	return t.Lanes > 1 && t.Bits < 8 && int(t.Bits)*int(t.Lanes) == 8
}

// aliases are the other spellings users write for common types.
var aliases = map[string]DataType{
	"half": Float16Type, "float": Float32Type, "double": Float64Type,
	"cfloat": Complex64Type, "cdouble": Complex128Type, "byte": Uint8Type,
	"char": Int8Type, "short": Int16Type, "int": Int32Type, "long": Int64Type,
	"bf16": Bfloat16Type, "f16": Float16Type, "f32": Float32Type, "f64": Float64Type,
	"i8": Int8Type, "i16": Int16Type, "i32": Int32Type, "i64": Int64Type,
	"u8": Uint8Type, "u16": Uint16Type, "u32": Uint32Type, "u64": Uint64Type,
	"c64": Complex64Type, "c128": Complex128Type,
}

// ParseDataType reads the names String writes ("float32", "bfloat16",
// "bool", "complex64", "float8_e4m3fn", "float4_e2m1fn", "uint8",
// "float32x4", "float4_e2m1fn_x2"), a "torch." or "numpy." prefix, and a
// few common aliases ("half", "double", "f32").
func ParseDataType(s string) (DataType, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	for _, p := range []string{"torch.", "numpy.", "np.", "jnp.", "cupy.", "cp."} {
		name = strings.TrimPrefix(name, p)
	}
	lanes := uint16(1)
	if i := strings.LastIndex(name, "_x"); i > 0 && isDigits(name[i+2:]) {
		// Packed sub-byte lanes, PyTorch's spelling: float4_e2m1fn_x2.
		n, err := strconv.ParseUint(name[i+2:], 10, 16)
		if err != nil || n < 2 {
			return DataType{}, fmt.Errorf("dlpack: dtype %q: bad lane count %q", s, name[i+2:])
		}
		t, err := ParseDataType(name[:i])
		if err != nil {
			return DataType{}, err
		}
		t.Lanes = uint16(n)
		if !t.PackedLanes() {
			return DataType{}, fmt.Errorf("dlpack: dtype %q: %d lanes of %d bits do not fill one byte (the _xN suffix packs sub-byte lanes)", s, n, t.Bits)
		}
		return t, nil
	}
	if i := strings.LastIndexByte(name, 'x'); i > 0 && i < len(name)-1 && isDigits(name[i+1:]) && isDigit(name[i-1]) {
		n, err := strconv.ParseUint(name[i+1:], 10, 16)
		if err != nil || n == 0 {
			return DataType{}, fmt.Errorf("dlpack: dtype %q: bad lane count %q", s, name[i+1:])
		}
		lanes, name = uint16(n), name[:i]
	}
	if t, ok := aliases[name]; ok {
		t.Lanes = lanes
		return t, nil
	}
	// Fixed-width names (bool, float8_*, float6_*, float4_*) first: their
	// names end in letters, so they never collide with prefix+width below.
	for code, info := range typeCodes {
		if info.fixed != 0 && name == info.name {
			return DataType{Code: code, Bits: info.fixed, Lanes: lanes}, nil
		}
	}
	for code, info := range typeCodes {
		if info.fixed != 0 || !strings.HasPrefix(name, info.name) {
			continue
		}
		rest := name[len(info.name):]
		if !isDigits(rest) {
			continue
		}
		bits, err := strconv.ParseUint(rest, 10, 8)
		if err != nil {
			return DataType{}, fmt.Errorf("dlpack: dtype %q: bit width %s out of range", s, rest)
		}
		t := DataType{Code: code, Bits: uint8(bits), Lanes: lanes}
		if err := t.Validate(); err != nil {
			return DataType{}, fmt.Errorf("dlpack: dtype %q: %w", s, err)
		}
		return t, nil
	}
	return DataType{}, fmt.Errorf("dlpack: unknown dtype %q (want e.g. float32, bfloat16, bool, complex64, float8_e4m3fn, uint8)", s)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// BitsPerElement is bits × lanes: the size of one element in bits.
func (t DataType) BitsPerElement() int { return int(t.Bits) * int(t.Lanes) }

// IsSubByte reports whether one element takes less than a byte (int4, fp4,
// fp6, int1): such elements are packed several to a byte unless the tensor
// carries FlagSubbyteTypePadded.
func (t DataType) IsSubByte() bool { return t.BitsPerElement() < 8 }

// ItemSize is the number of bytes one element occupies when elements are
// addressed individually: ceil(bits × lanes / 8). For sub-byte types that
// is the padded size (1); use StorageBytes for packed storage.
func (t DataType) ItemSize() int { return (t.BitsPerElement() + 7) / 8 }

// StorageBytes is the number of bytes n contiguous elements need: packed
// (little bit-endian, as DLPack requires) for sub-byte types unless padded,
// ItemSize × n otherwise. It reports false when the size overflows int64.
func (t DataType) StorageBytes(n int64, padded bool) (int64, bool) {
	if n < 0 {
		return 0, false
	}
	if t.IsSubByte() && !padded {
		bits, ok := MulInt64(n, int64(t.BitsPerElement()))
		if !ok {
			return 0, false
		}
		return (bits + 7) / 8, true
	}
	return MulInt64(n, int64(t.ItemSize()))
}

// MulInt64 multiplies non-negative or negative a and b, reporting false on
// overflow. Every size computed from foreign input goes through it.
func MulInt64(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	c := a * b
	if c/b != a || (a == -1 && b == -1<<63) || (b == -1 && a == -1<<63) {
		return 0, false
	}
	return c, true
}

// AddInt64 adds a and b, reporting false on overflow.
func AddInt64(a, b int64) (int64, bool) {
	c := a + b
	if (b > 0 && c < a) || (b < 0 && c > a) {
		return 0, false
	}
	return c, true
}
