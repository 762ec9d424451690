package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/dlbridge/dlbridge/cai"
	"github.com/dlbridge/dlbridge/cuda"
	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
	"github.com/dlbridge/dlbridge/zerocopy/fakemem"
)

// A selftest is a list of steps run in order; the first failure skips the
// rest (they build on each other).
type step struct {
	name string
	run  func() error
}

const rows, cols = 256, 256 // the test tensor: float32[256 256]

func selftest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("selftest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	devFlag := fs.Int("device", 0, "CUDA device ordinal")
	fakeFlag := fs.Bool("fake", false, "use fake device memory even when a GPU is present")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var t selfTest
	var steps []step
	if err := cuda.Init(); err != nil || *fakeFlag {
		if err != nil {
			fmt.Fprintf(stdout, "selftest: no CUDA driver present (%s): running on fake device memory (zerocopy/fakemem)\n", noDriverReason(err))
		} else {
			fmt.Fprintf(stdout, "selftest: -fake: running on fake device memory (zerocopy/fakemem)\n")
		}
		steps = t.fakeSteps()
	} else {
		d, err := cuda.GetDevice(*devFlag)
		if err != nil {
			fmt.Fprintf(stdout, "selftest: %v\nFAIL\n", err)
			return 1
		}
		name, _ := d.Name()
		ver, _ := cuda.DriverVersion()
		fmt.Fprintf(stdout, "selftest: %s (cuda:%d), CUDA driver %d.%d, %s\n", name, *devFlag, ver/1000, ver%1000/10, cuda.LibraryPath())
		t.ord = *devFlag
		steps = t.gpuSteps()
	}
	defer t.cleanup()
	failed := false
	for i, s := range steps {
		prefix := fmt.Sprintf("  [%2d/%d] %-52s", i+1, len(steps), s.name)
		if failed {
			fmt.Fprintf(stdout, "%s skipped\n", prefix)
			continue
		}
		t0 := time.Now()
		err := s.run()
		if err != nil {
			fmt.Fprintf(stdout, "%s FAIL\n          %v\n", prefix, err)
			failed = true
			continue
		}
		fmt.Fprintf(stdout, "%s ok (%v)\n", prefix, time.Since(t0).Round(time.Microsecond))
	}
	if err := t.cleanup(); err != nil && !failed {
		fmt.Fprintf(stdout, "  cleanup: FAIL: %v\n", err)
		failed = true
	}
	if failed {
		fmt.Fprintln(stdout, "FAIL")
		return 1
	}
	fmt.Fprintln(stdout, "PASS")
	return 0
}

// selfTest is the state the steps share.
type selfTest struct {
	ord     int
	ctx     *cuda.Context
	stream  *cuda.Stream
	kernels *cuda.Kernels
	tracker *fakemem.Tracker
	dev     *zerocopy.View // the device tensor
	host    []float32      // what it should hold
	views   []*zerocopy.View
	cleaned bool
}

func (t *selfTest) keep(v *zerocopy.View) *zerocopy.View {
	t.views = append(t.views, v)
	return v
}

// cleanup closes what the steps left open, once.
func (t *selfTest) cleanup() error {
	if t.cleaned {
		return nil
	}
	t.cleaned = true
	var errs []error
	for _, v := range slices.Backward(t.views) {
		if err := v.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if t.kernels != nil {
		errs = append(errs, t.kernels.Unload())
	}
	if t.stream != nil {
		errs = append(errs, t.stream.Synchronize(), t.stream.Destroy())
	}
	if t.ctx != nil {
		errs = append(errs, t.ctx.Release())
	}
	return errors.Join(errs...)
}

// iota fills the expected contents: element i is i.
func (t *selfTest) iota() *zerocopy.View {
	t.host = make([]float32, rows*cols)
	for i := range t.host {
		t.host[i] = float32(i)
	}
	v, _ := zerocopy.FromSlice(slices.Clone(t.host), rows, cols)
	return t.keep(v)
}

// checkAll compares a host view with t.host (times scale).
func checkAll(v *zerocopy.View, want []float32) error {
	got, err := zerocopy.HostSlice[float32](v)
	if err != nil {
		return err
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d elements, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("element %d is %g, want %g", i, got[i], want[i])
		}
	}
	return nil
}

func (t *selfTest) gpuSteps() []step {
	var out *zerocopy.View
	return []step{
		{"retain the primary context, make a stream", func() (err error) {
			if t.ctx, err = cuda.Retain(t.ord); err != nil {
				return err
			}
			t.stream, err = t.ctx.NewStream(cuda.StreamNonBlocking, 0)
			return err
		}},
		{fmt.Sprintf("allocate float32[%d %d] on cuda:%d", rows, cols, t.ord), func() error {
			v, err := zerocopy.AllocCUDA(t.ord, dlpack.Float32Type, rows, cols)
			if err != nil {
				return err
			}
			t.dev = t.keep(v)
			return zerocopy.VerifyCUDA(v)
		}},
		{"copy host -> device (CopyCUDA)", func() error {
			return zerocopy.CopyCUDA(t.dev, t.iota(), t.stream)
		}},
		{"launch scale_f32 x2 on the copy's stream", func() (err error) {
			if t.kernels, err = t.ctx.LoadKernels(); err != nil {
				return err
			}
			if err := t.kernels.ScaleF32(t.stream, cuda.DevicePtr(t.dev.Ptr()), rows*cols, 2); err != nil {
				return err
			}
			t.dev.SetStream(t.stream.Handle())
			for i := range t.host {
				t.host[i] *= 2
			}
			return nil
		}},
		{"copy device -> host on another stream, check data", func() error {
			out = t.keep(mustFloat32(rows, cols))
			if err := zerocopy.CopyCUDA(out, t.dev, nil); err != nil { // waits for the kernel by event
				return err
			}
			return checkAll(out, t.host)
		}},
		{"copy a column block device -> host (2D), check", func() error {
			return t.checkBlock(func(dst, src *zerocopy.View) error { return zerocopy.CopyCUDA(dst, src, nil) })
		}},
		{"VerifyCUDA refuses a view past the allocation", func() error {
			return t.verifyPastEnd(func(v *zerocopy.View) error { return zerocopy.VerifyCUDA(v) })
		}},
		{"DLPack: export, import, read through the import", t.dlpackRoundTrip(func(dst, src *zerocopy.View) error {
			return zerocopy.CopyCUDA(dst, src, nil)
		})},
		{"CAI: export to JSON, import, read through the import", t.caiRoundTrip(func(dst, src *zerocopy.View) error {
			return zerocopy.CopyCUDA(dst, src, nil)
		})},
		{"free: the allocation is gone after the last Close", func() error {
			p := t.dev.Ptr()
			for _, v := range slices.Backward(t.views) {
				if err := v.Close(); err != nil {
					return err
				}
			}
			t.views = nil
			if _, _, err := cuda.MemGetAddressRange(cuda.DevicePtr(p)); err == nil {
				return fmt.Errorf("the driver still knows the allocation at %#x", p)
			}
			return nil
		}},
	}
}

func (t *selfTest) fakeSteps() []step {
	var out *zerocopy.View
	copyFn := func(dst, src *zerocopy.View) error { return zerocopy.Copy(dst, src) }
	return []step{
		{fmt.Sprintf("allocate fake float32[%d %d] on cuda:0", rows, cols), func() error {
			t.tracker = fakemem.New(fakemem.Options{HostAccess: true})
			v, err := t.tracker.View(dlpack.CUDADevice(0), dlpack.Float32Type, rows, cols)
			if err != nil {
				return err
			}
			t.dev = t.keep(v)
			return t.tracker.CheckView(v)
		}},
		{"copy host -> fake device", func() error { return zerocopy.Copy(t.dev, t.iota()) }},
		{"scale x2 (a host loop stands in for the kernel)", func() error {
			s, err := zerocopy.HostSlice[float32](t.dev)
			if err != nil {
				return err
			}
			for i := range s {
				s[i] *= 2
				t.host[i] *= 2
			}
			return nil
		}},
		{"copy fake device -> host, check data", func() error {
			out = t.keep(mustFloat32(rows, cols))
			if err := zerocopy.Copy(out, t.dev); err != nil {
				return err
			}
			return checkAll(out, t.host)
		}},
		{"copy a column block, check", func() error { return t.checkBlock(copyFn) }},
		{"the tracker refuses a view past the allocation", func() error {
			return t.verifyPastEnd(func(v *zerocopy.View) error { return t.tracker.CheckView(v) })
		}},
		{"DLPack: export, import, read through the import", t.dlpackRoundTrip(copyFn)},
		{"CAI: export to JSON, import, read through the import", t.caiRoundTrip(copyFn)},
		{"free: one free, nothing live, no misuse", func() error {
			for _, v := range slices.Backward(t.views) {
				if err := v.Close(); err != nil {
					return err
				}
			}
			t.views = nil
			s := t.tracker.Stats()
			if s.Live != 0 || s.Frees != 1 || s.DoubleFrees != 0 || s.UnknownFrees != 0 || s.UseAfterFree != 0 {
				return fmt.Errorf("tracker stats %+v", s)
			}
			return nil
		}},
	}
}

func mustFloat32(shape ...int64) *zerocopy.View {
	n := int64(1)
	for _, e := range shape {
		n *= e
	}
	v, _ := zerocopy.FromSlice(make([]float32, n), shape...)
	return v
}

// checkBlock copies columns [64, 192) of the device tensor into a compact
// host tensor with cp and checks them.
func (t *selfTest) checkBlock(cp func(dst, src *zerocopy.View) error) error {
	block, err := t.dev.Slice(1, 64, 192, 1) // borrows t.dev's reference
	if err != nil {
		return err
	}
	dst := t.keep(mustFloat32(rows, 128))
	if err := cp(dst, block); err != nil {
		return err
	}
	var want []float32
	for r := range rows {
		want = append(want, t.host[r*cols+64:r*cols+192]...)
	}
	return checkAll(dst, want)
}

// verifyPastEnd builds a view one row longer than the allocation and
// expects check to refuse it.
func (t *selfTest) verifyPastEnd(check func(*zerocopy.View) error) error {
	if err := check(t.dev); err != nil {
		return fmt.Errorf("the allocation itself: %w", err)
	}
	// Past any rounding of the driver: a whole extra allocation's worth.
	v, err := zerocopy.Wrap(zerocopy.Spec{Ptr: t.dev.Ptr(), Device: t.dev.Device(), DType: dlpack.Float32Type,
		Shape: []int64{2 * rows, cols}}, zerocopy.NewOwner(nil, "past the end"))
	if err != nil {
		return err
	}
	defer v.Close()
	err = check(v)
	if err == nil {
		return fmt.Errorf("a view of twice the allocation passed")
	}
	return nil
}

func (t *selfTest) dlpackRoundTrip(cp func(dst, src *zerocopy.View) error) func() error {
	return func() error {
		refs := t.dev.Owner().Refs()
		p, err := t.dev.ToDLPack()
		if err != nil {
			return err
		}
		im, err := zerocopy.FromDLPackVersioned(p) // takes over p: its deleter runs on Close
		if err != nil {
			return err
		}
		if im.Ptr() != t.dev.Ptr() || im.Device() != t.dev.Device() || !slices.Equal(im.Shape(), t.dev.Shape()) || im.DType() != t.dev.DType() {
			im.Close()
			return fmt.Errorf("imported %v, exported %v", im, t.dev)
		}
		out := mustFloat32(rows, cols)
		defer out.Close()
		err = cp(out, im)
		if cerr := im.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if got := t.dev.Owner().Refs(); got != refs {
			return fmt.Errorf("owner references %d after the import was closed, want %d (deleter not run once)", got, refs)
		}
		return checkAll(out, t.host)
	}
}

func (t *selfTest) caiRoundTrip(cp func(dst, src *zerocopy.View) error) func() error {
	return func() error {
		iface, err := t.dev.CUDAArrayInterface()
		if err != nil {
			return err
		}
		js, err := iface.MarshalJSON()
		if err != nil {
			return err
		}
		back, err := cai.DecodeJSON(js, cai.CUDA)
		if err != nil {
			return fmt.Errorf("decoding %s: %w", js, err)
		}
		if err := t.dev.Owner().Retain(); err != nil {
			return err
		}
		im, err := zerocopy.FromCAI(back, t.dev.Device(), t.dev.Owner())
		if err != nil {
			return err
		}
		defer im.Close()
		if im.Ptr() != t.dev.Ptr() || !slices.Equal(im.Shape(), t.dev.Shape()) || !slices.Equal(im.Strides(), t.dev.Strides()) {
			return fmt.Errorf("imported %v from %s, exported %v", im, js, t.dev)
		}
		out := mustFloat32(rows, cols)
		defer out.Close()
		if err := cp(out, im); err != nil {
			return err
		}
		return checkAll(out, t.host)
	}
}
