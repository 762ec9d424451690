package zerocopy_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// pattern returns n bytes no two nearby positions of which are equal.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i>>8*13+i>>16*3) ^ seed
	}
	return b
}

func mustView(t testing.TB, v *zerocopy.View, err error) *zerocopy.View {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// goView wraps b as a view of dtype dt and shape (a Go byte buffer).
func goView(t testing.TB, b []byte, dt dlpack.DataType, shape ...int64) *zerocopy.View {
	t.Helper()
	v, err := zerocopy.FromBytes(b, dt, shape...)
	return mustView(t, v, err)
}

// devWith allocates a device view holding b.
func devWith(t testing.TB, dev int, b []byte, dt dlpack.DataType, shape ...int64) *zerocopy.View {
	t.Helper()
	d, err := zerocopy.AllocCUDA(dev, dt, shape...)
	d = mustView(t, d, err)
	if err := zerocopy.CopyCUDA(d, goView(t, b, dt, shape...), nil); err != nil {
		t.Fatal(err)
	}
	return d
}

// devBytes reads a C-contiguous device view back into Go memory.
func devBytes(t testing.TB, d *zerocopy.View) []byte {
	t.Helper()
	lo, hi := d.ByteSpan()
	out := make([]byte, hi-lo)
	if err := zerocopy.CopyCUDA(goView(t, out, d.DType(), append([]int64{}, d.Shape()...)...), d, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

func newCopier(t testing.TB, o zerocopy.CopierOptions) *zerocopy.Copier {
	c := zerocopy.NewCopier(o)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Copier.Close: %v", err)
		}
	})
	return c
}

var forcedPaths = []zerocopy.TransferPath{zerocopy.PathAuto, zerocopy.PathDirect, zerocopy.PathStaged, zerocopy.PathRegistered}

// TestTransferPathsSizes round-trips contiguous buffers of awkward sizes
// through every path, with small staging chunks so that chunk edges fall
// inside, at and around the ends of the data.
func TestTransferPathsSizes(t *testing.T) {
	needCUDA(t)
	const chunk = 64 << 10
	sizes := []int{1, 3, 4095, 4096, 4097, chunk - 1, chunk, chunk + 1, 3*chunk + 5, 4*chunk + 1, 1<<20 + 7, 3<<20 + 13}
	c := newCopier(t, zerocopy.CopierOptions{ChunkBytes: chunk, Buffers: 3, Workers: 4, StagedMin: 1, RegisterMin: 1})
	for _, path := range forcedPaths {
		for _, n := range sizes {
			t.Run(fmt.Sprintf("%v/%d", path, n), func(t *testing.T) {
				src := pattern(n, byte(n))
				d, err := zerocopy.AllocCUDA(0, dlpack.Uint8Type, int64(n))
				d = mustView(t, d, err)
				up, err := c.CopyVia(d, goView(t, src, dlpack.Uint8Type, int64(n)), nil, path)
				if err != nil {
					t.Fatalf("H2D: %v", err)
				}
				out := make([]byte, n)
				down, err := c.CopyVia(goView(t, out, dlpack.Uint8Type, int64(n)), d, nil, path)
				if err != nil {
					t.Fatalf("D2H: %v", err)
				}
				if !bytes.Equal(out, src) {
					t.Fatalf("round trip differs at byte %d (paths %v, %v)", firstDiff(out, src), up, down)
				}
				if path != zerocopy.PathAuto && (up != path || down != path) {
					t.Errorf("forced %v, took %v up and %v down", path, up, down)
				}
			})
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// layoutCase is a copy between two layouts: each side is a base tensor of
// its own shape, viewed through a function (a slice, a transpose, ...).
type layoutCase struct {
	name             string
	dt               dlpack.DataType
	dstBase, srcBase []int64
	dst, src         func(*zerocopy.View) (*zerocopy.View, error)
}

func ident(v *zerocopy.View) (*zerocopy.View, error) {
	return v.Slice(0, zerocopy.Omit, zerocopy.Omit, 1)
}

func chain(fs ...func(*zerocopy.View) (*zerocopy.View, error)) func(*zerocopy.View) (*zerocopy.View, error) {
	return func(v *zerocopy.View) (*zerocopy.View, error) {
		cur := v
		for _, f := range fs {
			nv, err := f(cur)
			if cur != v {
				cur.Close()
			}
			if err != nil {
				return nil, err
			}
			cur = nv
		}
		return cur, nil
	}
}

func slice(dim int, start, stop, step int64) func(*zerocopy.View) (*zerocopy.View, error) {
	return func(v *zerocopy.View) (*zerocopy.View, error) { return v.Slice(dim, start, stop, step) }
}

func permute(order ...int) func(*zerocopy.View) (*zerocopy.View, error) {
	return func(v *zerocopy.View) (*zerocopy.View, error) { return v.Permute(order...) }
}

func broadcast(shape ...int64) func(*zerocopy.View) (*zerocopy.View, error) {
	return func(v *zerocopy.View) (*zerocopy.View, error) { return v.Broadcast(shape...) }
}

const omit = zerocopy.Omit

var layoutCases = []layoutCase{
	{name: "contiguous", dt: dlpack.Float32Type, dstBase: []int64{6, 10}, srcBase: []int64{6, 10}, dst: ident, src: ident},
	{name: "column block of row-major", dt: dlpack.Float32Type, dstBase: []int64{20, 30}, srcBase: []int64{20, 30},
		dst: slice(1, 4, 17, 1), src: slice(1, 4, 17, 1)},
	{name: "column block into compact", dt: dlpack.Float32Type, dstBase: []int64{20, 13}, srcBase: []int64{20, 30},
		dst: ident, src: slice(1, 4, 17, 1)},
	{name: "compact into column block", dt: dlpack.Float64Type, dstBase: []int64{20, 30}, srcBase: []int64{20, 13},
		dst: slice(1, 4, 17, 1), src: ident},
	{name: "single column", dt: dlpack.Int16Type, dstBase: []int64{33, 1}, srcBase: []int64{33, 9},
		dst: ident, src: slice(1, 5, 6, 1)},
	{name: "every other row and column", dt: dlpack.Uint8Type, dstBase: []int64{9, 11}, srcBase: []int64{17, 21},
		dst: ident, src: chain(slice(0, 0, omit, 2), slice(1, 0, omit, 2))},
	{name: "transpose", dt: dlpack.Float32Type, dstBase: []int64{12, 7}, srcBase: []int64{7, 12},
		dst: ident, src: permute(1, 0)},
	{name: "reversed rows", dt: dlpack.Int32Type, dstBase: []int64{8, 5}, srcBase: []int64{8, 5},
		dst: ident, src: slice(0, omit, omit, -1)},
	{name: "reversed both sides", dt: dlpack.Int32Type, dstBase: []int64{8, 5}, srcBase: []int64{8, 5},
		dst: slice(1, omit, omit, -1), src: slice(1, omit, omit, -1)},
	{name: "broadcast source", dt: dlpack.Float32Type, dstBase: []int64{5, 8}, srcBase: []int64{1, 8},
		dst: ident, src: broadcast(5, 8)},
	{name: "sub-volume", dt: dlpack.Float32Type, dstBase: []int64{6, 8, 10}, srcBase: []int64{6, 8, 10},
		dst: chain(slice(0, 1, 5, 1), slice(1, 2, 6, 1), slice(2, 3, 9, 1)),
		src: chain(slice(0, 1, 5, 1), slice(1, 2, 6, 1), slice(2, 3, 9, 1))},
	{name: "sub-volume into compact", dt: dlpack.Uint16Type, dstBase: []int64{4, 4, 6}, srcBase: []int64{6, 8, 10},
		dst: ident, src: chain(slice(0, 1, 5, 1), slice(1, 2, 6, 1), slice(2, 3, 9, 1))},
	{name: "4-d permuted", dt: dlpack.Float32Type, dstBase: []int64{3, 5, 4, 6}, srcBase: []int64{3, 4, 5, 6},
		dst: ident, src: permute(0, 2, 1, 3)},
	{name: "complex128 transpose", dt: dlpack.Complex128Type, dstBase: []int64{5, 3}, srcBase: []int64{3, 5},
		dst: ident, src: permute(1, 0)},
	{name: "empty", dt: dlpack.Float32Type, dstBase: []int64{0, 4}, srcBase: []int64{0, 4}, dst: ident, src: ident},
	{name: "0-d", dt: dlpack.Float64Type, dstBase: []int64{}, srcBase: []int64{}, dst: ident0, src: ident0},
	{name: "wide sub-volume (3D copies)", dt: dlpack.Float32Type, dstBase: []int64{4, 6, 300}, srcBase: []int64{4, 6, 300},
		dst: chain(slice(0, 1, 3, 1), slice(1, 1, 5, 1), slice(2, 20, 280, 1)),
		src: chain(slice(0, 1, 3, 1), slice(1, 1, 5, 1), slice(2, 20, 280, 1))},
	{name: "wide sub-volume into compact", dt: dlpack.Float32Type, dstBase: []int64{2, 4, 260}, srcBase: []int64{4, 6, 300},
		dst: ident, src: chain(slice(0, 1, 3, 1), slice(1, 1, 5, 1), slice(2, 20, 280, 1))},
	{name: "large transpose", dt: dlpack.Float32Type, dstBase: []int64{1100, 40}, srcBase: []int64{40, 1100},
		dst: ident, src: permute(1, 0)},
	{name: "large transpose of int64 block", dt: dlpack.Int64Type, dstBase: []int64{1030, 3, 2}, srcBase: []int64{2, 3, 1040},
		dst: ident, src: chain(slice(2, 5, 1035, 1), permute(2, 1, 0))},
	{name: "large column block", dt: dlpack.Float32Type, dstBase: []int64{300, 1000}, srcBase: []int64{300, 1000},
		dst: slice(1, 100, 700, 1), src: slice(1, 100, 700, 1)},
}

func ident0(v *zerocopy.View) (*zerocopy.View, error) { return v.Reshape() }

func nbytes(dt dlpack.DataType, shape []int64) int {
	n := dt.ItemSize()
	for _, e := range shape {
		n *= int(e)
	}
	return n
}

// memSide makes a base tensor of one memory kind holding b, and reads it
// back as bytes.
type memSide struct {
	name string
	make func(t *testing.T, b []byte, dt dlpack.DataType, shape []int64) *zerocopy.View
	read func(t *testing.T, v *zerocopy.View) []byte
}

var (
	goSide = memSide{"go",
		func(t *testing.T, b []byte, dt dlpack.DataType, shape []int64) *zerocopy.View {
			return goView(t, bytes.Clone(b), dt, shape...)
		},
		func(t *testing.T, v *zerocopy.View) []byte { return bytes.Clone(viewBytes(t, v)) }}
	pinnedSide = memSide{"pinned",
		func(t *testing.T, b []byte, dt dlpack.DataType, shape []int64) *zerocopy.View {
			v, err := zerocopy.AllocPinned(dt, shape...)
			v = mustView(t, v, err)
			if len(b) > 0 {
				copy(viewBytes(t, v), b)
			}
			return v
		},
		func(t *testing.T, v *zerocopy.View) []byte {
			if err := v.Synchronize(); err != nil {
				t.Fatal(err)
			}
			return bytes.Clone(viewBytes(t, v))
		}}
	devSide = memSide{"device",
		func(t *testing.T, b []byte, dt dlpack.DataType, shape []int64) *zerocopy.View {
			return devWith(t, 0, b, dt, shape...)
		},
		func(t *testing.T, v *zerocopy.View) []byte { return devBytes(t, v) }}
)

// apply derives a view with f, closed when the test ends.
func apply(t testing.TB, f func(*zerocopy.View) (*zerocopy.View, error), v *zerocopy.View) *zerocopy.View {
	t.Helper()
	nv, err := f(v)
	return mustView(t, nv, err)
}

// viewBytes is the memory of a compact host view as bytes.
func viewBytes(t testing.TB, v *zerocopy.View) []byte {
	t.Helper()
	lo, hi := v.ByteSpan()
	if hi == lo {
		return []byte{}
	}
	addr := v.Ptr() + uintptr(lo)
	// Sound: the view is open and host-accessible, its span [lo, hi) is
	// memory it owns; the word is reinterpreted, not converted, as in
	// zerocopy's own hostPointer.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), hi-lo)
}

// TestCopyCUDALayouts copies between strided layouts in every direction
// and along every path, and compares with the same copy done on host
// memory by zerocopy.Copy.
func TestCopyCUDALayouts(t *testing.T) {
	needCUDA(t)
	dirs := []struct{ dst, src memSide }{
		{devSide, goSide}, {goSide, devSide}, {devSide, devSide}, {devSide, pinnedSide}, {pinnedSide, devSide},
	}
	c := newCopier(t, zerocopy.CopierOptions{ChunkBytes: 4096, Buffers: 2, Workers: 3, StagedMin: 1, RegisterMin: 1})
	for _, lc := range layoutCases {
		for _, dir := range dirs {
			paths := forcedPaths
			if dir.dst.name != "go" && dir.src.name != "go" {
				paths = paths[:1]
			}
			for _, path := range paths {
				t.Run(fmt.Sprintf("%s/%s<-%s/%v", lc.name, dir.dst.name, dir.src.name, path), func(t *testing.T) {
					dinit := pattern(nbytes(lc.dt, lc.dstBase), 0x5a)
					sinit := pattern(nbytes(lc.dt, lc.srcBase), 0xa5)
					// The oracle: the same copy on Go memory.
					want := bytes.Clone(dinit)
					ref := apply(t, lc.dst, goView(t, want, lc.dt, lc.dstBase...))
					rsrc := apply(t, lc.src, goView(t, bytes.Clone(sinit), lc.dt, lc.srcBase...))
					if err := zerocopy.Copy(ref, rsrc); err != nil {
						t.Fatalf("oracle: %v", err)
					}

					dbase := dir.dst.make(t, dinit, lc.dt, lc.dstBase)
					sbase := dir.src.make(t, sinit, lc.dt, lc.srcBase)
					dv := apply(t, lc.dst, dbase)
					sv := apply(t, lc.src, sbase)
					used, err := c.CopyVia(dv, sv, nil, path)
					if err != nil {
						t.Fatalf("CopyVia(%v): %v", path, err)
					}
					dbase.SetStream(dv.Stream())
					got := dir.dst.read(t, dbase)
					if !bytes.Equal(got, want) {
						t.Fatalf("path %v: result differs from the host copy at byte %d of %d\n dst %v\n src %v", used, firstDiff(got, want), len(want), dv, sv)
					}
				})
			}
		}
	}
}

// TestCopyCUDAPeer copies between the two fake devices, contiguous and
// strided.
func TestCopyCUDAPeer(t *testing.T) {
	needCUDA(t)
	if n, _ := cuda.DeviceCount(); n < 2 {
		t.Skip("needs two devices")
	}
	for _, lc := range layoutCases[:8] {
		t.Run(lc.name, func(t *testing.T) {
			dinit := pattern(nbytes(lc.dt, lc.dstBase), 1)
			sinit := pattern(nbytes(lc.dt, lc.srcBase), 2)
			want := bytes.Clone(dinit)
			ref := apply(t, lc.dst, goView(t, want, lc.dt, lc.dstBase...))
			rsrc := apply(t, lc.src, goView(t, bytes.Clone(sinit), lc.dt, lc.srcBase...))
			if err := zerocopy.Copy(ref, rsrc); err != nil {
				t.Fatal(err)
			}
			dbase := devWith(t, 1, dinit, lc.dt, lc.dstBase...)
			sbase := devWith(t, 0, sinit, lc.dt, lc.srcBase...)
			dv := apply(t, lc.dst, dbase)
			sv := apply(t, lc.src, sbase)
			if err := zerocopy.CopyCUDA(dv, sv, nil); err != nil {
				t.Fatal(err)
			}
			dbase.SetStream(dv.Stream())
			if got := devBytes(t, dbase); !bytes.Equal(got, want) {
				t.Fatalf("differs at byte %d", firstDiff(got, want))
			}
		})
	}
}

// TestPeerCopyEnablesPeerAccess: the first copy between two devices turns
// on peer access both ways, for the contexts and for both devices' pools
// (whose memory does not follow the contexts), once per pair.
func TestPeerCopyEnablesPeerAccess(t *testing.T) {
	needFake(t)
	if n, _ := cuda.DeviceCount(); n < 2 {
		t.Skip("needs two devices")
	}
	src := devWith(t, 0, pattern(4096, 5), dlpack.Uint8Type, 4096)
	dst, err := zerocopy.AllocCUDA(1, dlpack.Uint8Type, 4096)
	dst = mustView(t, dst, err)
	access := func(dev, peer int) int {
		pool, _, err := zerocopy.DeviceMemPool(dev) // the pool AllocCUDAAsync allocates from
		if err != nil {
			t.Fatal(err)
		}
		return int(int32(fakeCall(t, "fakecuda_pool_access", pool.Handle(), uintptr(peer))))
	}
	for i := range 2 {
		sets, enables := fakeCalls(t, "cuMemPoolSetAccess"), fakeCalls(t, "cuCtxEnablePeerAccess")
		if err := zerocopy.CopyCUDA(dst, src, nil); err != nil {
			t.Fatal(err)
		}
		if err := dst.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if i == 1 { // an earlier test may have made the pair's first copy
			if s, e := fakeCalls(t, "cuMemPoolSetAccess")-sets, fakeCalls(t, "cuCtxEnablePeerAccess")-enables; s != 0 || e != 0 {
				t.Errorf("second copy: %d pool access and %d peer access calls, want none", s, e)
			}
		}
	}
	if a, b := access(0, 1), access(1, 0); a != 3 || b != 3 {
		t.Errorf("pool access: cuda:1 to cuda:0's pool %d, cuda:0 to cuda:1's %d; want 3 (read-write) both", a, b)
	}
	if got := devBytes(t, dst); !bytes.Equal(got, pattern(4096, 5)) {
		t.Fatal("peer copy lost data")
	}
}

// TestStagedDriverErrorMidTransfer fails a staged transfer's DMA after a
// few pieces, both ways: the error comes back (no hang: the workers skip
// what is left and end), and the same Copier, ring and workers then copy
// correctly.
func TestStagedDriverErrorMidTransfer(t *testing.T) {
	needFake(t)
	// 4 workers in one crew; 12 in both crews (64 MiB and more).
	t.Run("8MiB", func(t *testing.T) {
		stagedErrorMidTransfer(t, 8<<20, zerocopy.CopierOptions{ChunkBytes: 1 << 20, Workers: 4})
	})
	t.Run("64MiB", func(t *testing.T) {
		stagedErrorMidTransfer(t, 64<<20, zerocopy.CopierOptions{Workers: 12})
	})
}

func stagedErrorMidTransfer(t *testing.T, size int, opts zerocopy.CopierOptions) {
	c := zerocopy.NewCopier(opts)
	defer c.Close()
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i*13 + 1)
	}
	h := goView(t, src, dlpack.Uint8Type)
	back := make([]byte, size)
	hb := goView(t, back, dlpack.Uint8Type)
	d := devWith(t, 0, make([]byte, size), dlpack.Uint8Type, int64(size))
	for _, fn := range []string{"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuEventSynchronize"} {
		t.Run(fn, func(t *testing.T) {
			// An error a direct call may get for another context than
			// its own (CUDA_ERROR_INVALID_VALUE) is retried with the right
			// one, and the retry would pass the one-shot injection on a
			// crew thread with no context current: inject one that is not.
			fakeInject(t, fn, cuda.ErrIllegalAddress, 3)
			_, errUp := c.CopyVia(d, h, nil, zerocopy.PathStaged)
			_, errDown := c.CopyVia(hb, d, nil, zerocopy.PathStaged)
			if !errors.Is(errUp, cuda.ErrIllegalAddress) && !errors.Is(errDown, cuda.ErrIllegalAddress) {
				t.Fatalf("upload: %v, download: %v; want CUDA_ERROR_ILLEGAL_ADDRESS from one", errUp, errDown)
			}
			fakeCall(t, "fakecuda_clear_injections")
			clear(back)
			if _, err := c.CopyVia(d, h, nil, zerocopy.PathStaged); err != nil {
				t.Fatal(err)
			}
			if _, err := c.CopyVia(hb, d, nil, zerocopy.PathStaged); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, src) {
				t.Fatal("after the error, a staged round trip did not bring the bytes back")
			}
		})
	}
}

// TestStagedBothCrews: with 12 workers, uploads and downloads under and
// over 64 MiB (one crew, then both) alternate on one ring and bring the
// bytes back.
func TestStagedBothCrews(t *testing.T) {
	needFake(t)
	c := zerocopy.NewCopier(zerocopy.CopierOptions{Workers: 12})
	defer c.Close()
	for round, size := range []int{8 << 20, 64 << 20, 16 << 20, 64<<20 + 4096} {
		src := pattern(size, byte(round))
		back := make([]byte, size)
		d := devWith(t, 0, make([]byte, size), dlpack.Uint8Type, int64(size))
		if _, err := c.CopyVia(d, goView(t, src, dlpack.Uint8Type), nil, zerocopy.PathStaged); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CopyVia(goView(t, back, dlpack.Uint8Type), d, nil, zerocopy.PathStaged); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, src) {
			t.Fatalf("%d bytes: the round trip differs", size)
		}
	}
}
