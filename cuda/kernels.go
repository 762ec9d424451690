package cuda

import (
	"embed"
	"fmt"
	"time"
)

// The built-in kernels, hand-written PTX (sm_70+, PTX ISA 7.0) that the
// driver JIT-compiles for the device at load time.
//
//go:embed kernels/*.ptx
var kernelFS embed.FS

// KernelFiles lists the embedded PTX files.
var KernelFiles = []string{"fill.ptx", "spin.ptx", "pack.ptx"}

// KernelPTX returns the PTX text of one embedded file (see KernelFiles).
func KernelPTX(file string) ([]byte, error) {
	b, err := kernelFS.ReadFile("kernels/" + file)
	if err != nil {
		return nil, invalid(ErrFileNotFound, "KernelPTX", "no embedded kernel file %q", file)
	}
	return b, nil
}

// Kernels are the built-in kernels loaded into one context:
//
//	fill_f32(float* p, u64 n, float v)                  p[i] = v
//	iota_f32(float* p, u64 n, float start, float step)  p[i] = start + i*step
//	scale_f32(float* p, u64 n, float f)                 p[i] *= f
//	spin_then_write(u32* p, u64 n, u32 v, u64 ns)       spin ns nanoseconds, then p[i] = v
//	strided_copy2d(dst, src, rows, cols, dst_rs, dst_cs, src_rs, src_cs, esize)
//
// The methods pick the launch shape (grid-stride loops: any n works).
type Kernels struct {
	ctx    *Context
	mods   []*Module
	fill   *Function
	iota   *Function
	scale  *Function
	spin   *Function
	copy2d *Function
}

// LoadKernels loads the embedded kernels into c. Unload them when done.
func (c *Context) LoadKernels() (*Kernels, error) {
	k := &Kernels{ctx: c}
	fns := map[string]**Function{
		"fill_f32": &k.fill, "iota_f32": &k.iota, "scale_f32": &k.scale,
		"spin_then_write": &k.spin, "strided_copy2d": &k.copy2d,
	}
	byFile := map[string][]string{
		"fill.ptx": {"fill_f32", "iota_f32", "scale_f32"},
		"spin.ptx": {"spin_then_write"},
		"pack.ptx": {"strided_copy2d"},
	}
	for _, file := range KernelFiles {
		src, err := KernelPTX(file)
		if err != nil {
			k.Unload()
			return nil, err
		}
		m, err := c.ModuleLoadData(src)
		if err != nil {
			k.Unload()
			return nil, fmt.Errorf("cuda: loading kernels/%s: %w", file, err)
		}
		k.mods = append(k.mods, m)
		for _, name := range byFile[file] {
			f, err := m.Function(name)
			if err != nil {
				k.Unload()
				return nil, err
			}
			*fns[name] = f
		}
	}
	return k, nil
}

// Unload unloads the kernels' modules.
func (k *Kernels) Unload() error {
	if k == nil {
		return errHandle("Kernels.Unload", "nil *Kernels")
	}
	var first error
	for _, m := range k.mods {
		if err := m.Unload(); err != nil && first == nil {
			first = err
		}
	}
	k.mods = nil
	return first
}

// Function returns one of the loaded kernels by name (nil if unknown), for
// launching it with arguments of one's own.
func (k *Kernels) Function(name string) *Function {
	switch name {
	case "fill_f32":
		return k.fill
	case "iota_f32":
		return k.iota
	case "scale_f32":
		return k.scale
	case "spin_then_write":
		return k.spin
	case "strided_copy2d":
		return k.copy2d
	}
	return nil
}

const (
	blockSize = 256
	maxGrid1D = 4096 // enough blocks to fill any current GPU; the loop does the rest
)

func grid1D(n int64) Dim3 {
	g := (n + blockSize - 1) / blockSize
	if g > maxGrid1D {
		g = maxGrid1D
	}
	if g < 1 {
		g = 1
	}
	return Dim3{X: uint32(g)}
}

func checkN(op string, p DevicePtr, n int64) error {
	if n < 0 {
		return invalid(ErrInvalidValue, op, "element count %d: must be >= 0", n)
	}
	if p == 0 && n > 0 {
		return invalid(ErrInvalidValue, op, "null device pointer")
	}
	if p%4 != 0 {
		return invalid(ErrMisalignedAddress, op, "pointer %v is not 4-byte aligned", p)
	}
	return nil
}

// FillF32 queues p[i] = v for i < n on s (nil: the legacy default stream).
func (k *Kernels) FillF32(s *Stream, p DevicePtr, n int64, v float32) error {
	if k == nil {
		return errHandle("Kernels.FillF32", "nil *Kernels")
	}
	if err := checkN("Kernels.FillF32", p, n); err != nil || n == 0 {
		return err
	}
	return k.fill.Launch(s, grid1D(n), Dim3{X: blockSize}, 0, p, uint64(n), v)
}

// IotaF32 queues p[i] = start + float32(i)*step for i < n on s.
func (k *Kernels) IotaF32(s *Stream, p DevicePtr, n int64, start, step float32) error {
	if k == nil {
		return errHandle("Kernels.IotaF32", "nil *Kernels")
	}
	if err := checkN("Kernels.IotaF32", p, n); err != nil || n == 0 {
		return err
	}
	return k.iota.Launch(s, grid1D(n), Dim3{X: blockSize}, 0, p, uint64(n), start, step)
}

// ScaleF32 queues p[i] *= factor for i < n on s.
func (k *Kernels) ScaleF32(s *Stream, p DevicePtr, n int64, factor float32) error {
	if k == nil {
		return errHandle("Kernels.ScaleF32", "nil *Kernels")
	}
	if err := checkN("Kernels.ScaleF32", p, n); err != nil || n == 0 {
		return err
	}
	return k.scale.Launch(s, grid1D(n), Dim3{X: blockSize}, 0, p, uint64(n), factor)
}

// SpinThenWrite queues a kernel on s that busy-waits for spin (measured by
// the GPU's global timer), then writes the 32-bit value to p[0..n). It
// makes ordering bugs visible: a reader that does not wait for it sees the
// old contents.
func (k *Kernels) SpinThenWrite(s *Stream, p DevicePtr, n int64, value uint32, spin time.Duration) error {
	if k == nil {
		return errHandle("Kernels.SpinThenWrite", "nil *Kernels")
	}
	if err := checkN("Kernels.SpinThenWrite", p, n); err != nil {
		return err
	}
	if spin < 0 {
		spin = 0
	}
	g := grid1D(n)
	if g.X > 256 {
		g.X = 256 // every block spins: keep them all resident at once
	}
	return k.spin.Launch(s, g, Dim3{X: blockSize}, 0, p, uint64(n), value, uint64(spin.Nanoseconds()))
}

// Strided2D is one side of a strided 2-d copy: the address of element
// (0, 0) and the distance in bytes between rows and between columns (either
// may be negative).
type Strided2D struct {
	Ptr       DevicePtr
	RowStride int64
	ColStride int64
}

// StridedCopy2D queues a copy of a rows x cols block of elemSize-byte
// elements (1, 2, 4 or 8) from src to dst on s, each side with its own
// strides. Pointers and strides must be multiples of elemSize.
func (k *Kernels) StridedCopy2D(s *Stream, dst, src Strided2D, rows, cols int64, elemSize int) error {
	const op = "Kernels.StridedCopy2D"
	if k == nil {
		return errHandle(op, "nil *Kernels")
	}
	switch elemSize {
	case 1, 2, 4, 8:
	default:
		return invalid(ErrInvalidValue, op, "element size %d: must be 1, 2, 4 or 8", elemSize)
	}
	if rows < 0 || cols < 0 {
		return invalid(ErrInvalidValue, op, "block %dx%d: extents must be >= 0", rows, cols)
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	es := int64(elemSize)
	for _, x := range []struct {
		name string
		v    int64
	}{
		{"dst pointer", int64(dst.Ptr)}, {"dst row stride", dst.RowStride}, {"dst column stride", dst.ColStride},
		{"src pointer", int64(src.Ptr)}, {"src row stride", src.RowStride}, {"src column stride", src.ColStride},
	} {
		if x.v%es != 0 {
			return invalid(ErrMisalignedAddress, op, "%s %d is not a multiple of the element size %d", x.name, x.v, es)
		}
	}
	if dst.Ptr == 0 || src.Ptr == 0 {
		return invalid(ErrInvalidValue, op, "null device pointer (dst %v, src %v)", dst.Ptr, src.Ptr)
	}
	gx := (cols + blockSize - 1) / blockSize
	if gx > 1024 {
		gx = 1024
	}
	gy := rows
	if gy > 65535 {
		gy = 65535
	}
	return k.copy2d.Launch(s, Dim3{X: uint32(gx), Y: uint32(gy)}, Dim3{X: blockSize}, 0,
		dst.Ptr, src.Ptr, uint64(rows), uint64(cols),
		dst.RowStride, dst.ColStride, src.RowStride, src.ColStride, uint32(elemSize))
}

// Pack2D gathers a rows x cols strided block at src into contiguous
// row-major memory at dst (StridedCopy2D with dst strides cols*elemSize and
// elemSize).
func (k *Kernels) Pack2D(s *Stream, dst DevicePtr, src Strided2D, rows, cols int64, elemSize int) error {
	return k.StridedCopy2D(s, Strided2D{Ptr: dst, RowStride: cols * int64(elemSize), ColStride: int64(elemSize)}, src, rows, cols, elemSize)
}

// Unpack2D scatters contiguous row-major rows x cols elements at src into
// the strided block at dst.
func (k *Kernels) Unpack2D(s *Stream, dst Strided2D, src DevicePtr, rows, cols int64, elemSize int) error {
	return k.StridedCopy2D(s, dst, Strided2D{Ptr: src, RowStride: cols * int64(elemSize), ColStride: int64(elemSize)}, rows, cols, elemSize)
}
