package cuda

import (
	"bytes"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Module is code loaded into a context (a CUmodule): PTX, which the driver
// compiles for the device, or a cubin/fatbin built for it.
type Module struct {
	h   atomic.Uintptr // 0 once unloaded
	ctx *Context
	// Log is the JIT compiler's info log of the load (may be empty).
	Log string
}

// Function is a kernel of a loaded module (a CUfunction).
type Function struct {
	h    uintptr
	mod  *Module
	name string
}

// JIT options of cuModuleLoadDataEx used for the logs (values from cuda.h).
const (
	jitInfoLogBuffer             = 3
	jitInfoLogBufferSize         = 4
	jitErrorLogBuffer            = 5
	jitErrorLogBufferSize        = 6
	jitLogVerbose                = 12
	jitLogSize                   = 16 << 10
	elfMagic                     = "\x7fELF"
	fatbinMagic           uint32 = 0xBA55ED50
)

// ModuleLoadData loads a module from memory (cuModuleLoadDataEx): PTX text
// (a NUL terminator is added when missing), a cubin (ELF) or a fatbin. When
// the driver rejects PTX, the error's Detail carries the JIT error log.
func (c *Context) ModuleLoadData(image []byte) (*Module, error) {
	if err := c.use("Context.ModuleLoadData"); err != nil {
		return nil, err
	}
	if len(image) == 0 {
		return nil, invalid(ErrInvalidImage, "Context.ModuleLoadData", "empty image")
	}
	img := image
	binary := bytes.HasPrefix(image, []byte(elfMagic)) ||
		(len(image) >= 4 && uint32(image[0])|uint32(image[1])<<8|uint32(image[2])<<16|uint32(image[3])<<24 == fatbinMagic)
	if !binary && image[len(image)-1] != 0 {
		// PTX is read as a C string.
		img = make([]byte, len(image)+1)
		copy(img, image)
	}
	if err := c.addChild("Context.ModuleLoadData"); err != nil {
		return nil, err
	}

	// The option values array holds pointers to the log buffers (as
	// uintptr, so it is plain memory for cgo) and their sizes, which the
	// driver overwrites with the bytes used. Pinning keeps every piece
	// where the driver writes it for the whole call.
	info := make([]byte, jitLogSize)
	errLog := make([]byte, jitLogSize)
	opts := []int32{jitInfoLogBuffer, jitInfoLogBufferSize, jitErrorLogBuffer, jitErrorLogBufferSize, jitLogVerbose}
	vals := []uintptr{
		uintptr(unsafe.Pointer(&info[0])), jitLogSize,
		uintptr(unsafe.Pointer(&errLog[0])), jitLogSize,
		1,
	}
	var pin runtime.Pinner
	pin.Pin(&info[0])
	pin.Pin(&errLog[0])
	pin.Pin(&opts[0])
	pin.Pin(&vals[0])
	var h uintptr
	r := cuModuleLoadDataEx_ctx(c.h, ptrOf(&h), unsafe.Pointer(&img[0]), uint32(len(opts)),
		unsafe.Pointer(&opts[0]), unsafe.Pointer(&vals[0]))
	pin.Unpin()
	infoLog := logString(info, vals[1])
	if r != Success {
		c.removeChild()
		d := fmt.Sprintf("%d bytes", len(image))
		if l := logString(errLog, vals[3]); l != "" {
			d += ": " + l
		}
		return nil, newError("cuModuleLoadDataEx", r, d)
	}
	m := &Module{ctx: c, Log: infoLog}
	m.h.Store(h)
	return m, nil
}

// logString reads a JIT log buffer: n bytes the driver reports using (or
// up to the first NUL), trimmed.
func logString(b []byte, n uintptr) string {
	if n > uintptr(len(b)) {
		n = uintptr(len(b))
	}
	s := b[:n]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(string(s))
}

// Handle returns the raw CUmodule (0 once unloaded).
func (m *Module) Handle() uintptr {
	if m == nil {
		return 0
	}
	return m.h.Load()
}

// Context returns the context the module was loaded into.
func (m *Module) Context() *Context {
	if m == nil {
		return nil
	}
	return m.ctx
}

func (m *Module) get(op string) (uintptr, error) {
	if m == nil {
		return 0, errHandle(op, "nil *Module")
	}
	h := m.h.Load()
	if h == 0 {
		return 0, errHandle(op, "module was unloaded")
	}
	return h, nil
}

// Function returns the kernel with the given name (cuModuleGetFunction).
// A name the module lacks gives an error matching ErrNotFound.
func (m *Module) Function(name string) (*Function, error) {
	mh, err := m.get("Module.Function")
	if err != nil {
		return nil, err
	}
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return nil, invalid(ErrInvalidValue, "Module.Function", "kernel name %q", name)
	}
	cname := append([]byte(name), 0)
	var h uintptr
	if r := cuModuleGetFunction_auto(m.ctx.h, true, ptrOf(&h), mh, unsafe.Pointer(&cname[0])); r != Success {
		return nil, newError("cuModuleGetFunction", r, fmt.Sprintf("name=%q", name))
	}
	return &Function{h: h, mod: m, name: name}, nil
}

// Unload unloads the module (cuModuleUnload); its Functions become
// invalid. A second Unload returns an error matching ErrInvalidHandle.
func (m *Module) Unload() error {
	if m == nil {
		return errHandle("Module.Unload", "nil *Module")
	}
	h := m.h.Swap(0)
	if h == 0 {
		return errHandle("Module.Unload", "module unloaded twice")
	}
	r := cuModuleUnload_ctx(m.ctx.h, h)
	err := m.ctx.removeChild()
	if r != Success {
		return newError("cuModuleUnload", r, fmt.Sprintf("module=%#x", h))
	}
	return err
}

// Name returns the kernel's name.
func (f *Function) Name() string {
	if f == nil {
		return ""
	}
	return f.name
}

// Handle returns the raw CUfunction.
func (f *Function) Handle() uintptr {
	if f == nil {
		return 0
	}
	return f.h
}

// FunctionAttribute is a CUfunction_attribute.
type FunctionAttribute int32

// Function attributes (values from cuda.h).
const (
	FuncAttrMaxThreadsPerBlock FunctionAttribute = 0
	FuncAttrSharedSizeBytes    FunctionAttribute = 1
	FuncAttrNumRegs            FunctionAttribute = 4
	FuncAttrPTXVersion         FunctionAttribute = 5
	FuncAttrBinaryVersion      FunctionAttribute = 6
)

// Attribute returns a kernel attribute (cuFuncGetAttribute), e.g. the most
// threads a block of it may have.
func (f *Function) Attribute(a FunctionAttribute) (int, error) {
	if f == nil {
		return 0, errHandle("Function.Attribute", "nil *Function")
	}
	if _, err := f.mod.get("Function.Attribute"); err != nil {
		return 0, err
	}
	v, r := cuFuncGetAttribute_auto(f.mod.ctx.h, true, int32(a), f.h)
	if r != Success {
		return 0, newError("cuFuncGetAttribute", r, fmt.Sprintf("attr=%d kernel=%s", a, f.name))
	}
	return int(int32(uint32(v))), nil
}

// Dim3 is a grid or block shape. Zero components count as 1.
type Dim3 struct{ X, Y, Z uint32 }

func (d Dim3) norm() Dim3 {
	if d.X == 0 {
		d.X = 1
	}
	if d.Y == 0 {
		d.Y = 1
	}
	if d.Z == 0 {
		d.Z = 1
	}
	return d
}

// Launch queues the kernel on s (cuLaunchKernel) with the given grid and
// block shapes, dynamic shared memory in bytes, and arguments. A nil s means
// the legacy default stream of the module's context.
//
// Each argument must have the exact type of the kernel parameter: DevicePtr
// (or uintptr, unsafe.Pointer to device-visible memory) for pointers,
// int8...int64, uint8...uint64, float32, float64, bool. Go's int and uint
// are rejected because their width is not the kernel's business to guess.
// The values are copied at launch; the kernel sees them as they were.
func (f *Function) Launch(s *Stream, grid, block Dim3, sharedMem uint32, args ...any) error {
	const op = "Function.Launch"
	if f == nil {
		return errHandle(op, "nil *Function")
	}
	if _, err := f.mod.get(op); err != nil {
		return err
	}
	if s == nil {
		s = f.mod.ctx.LegacyStream()
	}
	sh, _, direct, err := s.get(op)
	if err != nil {
		return err
	}
	if s.ctx.h != f.mod.ctx.h {
		return invalid(ErrInvalidHandle, op, "kernel %s of %v launched on a stream of %v", f.name, f.mod.ctx.dev, s.ctx.dev)
	}
	grid, block = grid.norm(), block.norm()
	if uint64(block.X)*uint64(block.Y)*uint64(block.Z) > 1024 {
		return invalid(ErrInvalidValue, op, "block %dx%dx%d has %d threads, more than 1024",
			block.X, block.Y, block.Z, uint64(block.X)*uint64(block.Y)*uint64(block.Z))
	}

	// Each argument's value goes into an 8-byte-aligned slot of vals; the
	// kernelParams array (ptrs, uintptrs so that cgo sees plain memory)
	// points at the slots. Both are pinned for the call; the driver copies
	// the values before cuLaunchKernel returns.
	n := len(args)
	if n == 0 {
		n = 1
	}
	vals := make([]uint64, n)
	ptrs := make([]uintptr, n)
	for i, a := range args {
		v, err := argBits(a)
		if err != nil {
			return invalid(ErrInvalidValue, op, "kernel %s argument %d: %v", f.name, i, err)
		}
		vals[i] = v
		ptrs[i] = uintptr(unsafe.Pointer(&vals[i]))
	}
	var pin runtime.Pinner
	pin.Pin(&vals[0])
	pin.Pin(&ptrs[0])
	var params unsafe.Pointer
	if len(args) > 0 {
		params = unsafe.Pointer(&ptrs[0])
	}
	r := cuLaunchKernel_auto(f.mod.ctx.h, direct, f.h, grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z, sharedMem, sh, params, nil)
	pin.Unpin()
	if r != Success {
		return newError("cuLaunchKernel", r, fmt.Sprintf("kernel=%s grid=%dx%dx%d block=%dx%dx%d shared=%d stream=%#x args=%d",
			f.name, grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z, sharedMem, sh, len(args)))
	}
	return nil
}

// argBits returns an argument's bytes as the low bytes of a uint64 (the
// platforms CUDA supports are little-endian, so a 4-byte parameter read
// from the slot's start sees exactly its value).
func argBits(a any) (uint64, error) {
	switch v := a.(type) {
	case DevicePtr:
		return uint64(v), nil
	case uintptr:
		return uint64(v), nil
	case unsafe.Pointer:
		return uint64(uintptr(v)), nil
	case int8:
		return uint64(uint8(v)), nil
	case uint8:
		return uint64(v), nil
	case int16:
		return uint64(uint16(v)), nil
	case uint16:
		return uint64(v), nil
	case int32:
		return uint64(uint32(v)), nil
	case uint32:
		return uint64(v), nil
	case int64:
		return uint64(v), nil
	case uint64:
		return v, nil
	case float32:
		return uint64(math.Float32bits(v)), nil
	case float64:
		return math.Float64bits(v), nil
	case bool:
		if v {
			return 1, nil
		}
		return 0, nil
	case int, uint:
		return 0, fmt.Errorf("type %T has no fixed width: use int32/int64 or uint32/uint64", a)
	case nil:
		return 0, fmt.Errorf("nil")
	}
	return 0, fmt.Errorf("unsupported type %T", a)
}
