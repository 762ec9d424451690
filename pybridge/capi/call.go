package capi

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "capi.h"
*/
import "C"

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/pybridge"
	"github.com/dlbridge/dlbridge/pybridge/pyfunc"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// The calls of registered Go functions (package pyfunc): Python's
// dlbridge.ops.<ns>.<name> describes them with dlb_func_count and
// dlb_func_describe and calls them with dlb_call.

// dlb_func_count is the number of registered functions, or -1 when a
// registration failed (the error in dlb_last_error, as ImportError).
//
//dlb:value
//export dlb_func_count
func dlb_func_count() C.int32_t {
	if err := pyfunc.Err(); err != nil {
		pybridge.SetLastError(pybridge.RuntimeError, "dlbridge: the library's Go functions could not all be registered: "+err.Error())
		return -1
	}
	return C.int32_t(len(pyfunc.Funcs()))
}

// dlb_func_describe writes function i's description (JSON, see
// pyfunc.Description) into buf (cap bytes, NUL-terminated when it fits)
// and its length into *n: a caller with a small buffer asks again.
//
//export dlb_func_describe
func dlb_func_describe(i C.int32_t, buf *C.char, capacity C.int64_t, n *C.int64_t) C.int32_t {
	return fence(func() error {
		f := pyfunc.At(int(i))
		if f == nil {
			return pybridge.Errorf(pybridge.IndexError, "dlbridge: no registered function number %d (%d are registered)", int(i), len(pyfunc.Funcs()))
		}
		b, err := f.Describe(int(i))
		if err != nil {
			return err
		}
		*n = C.int64_t(len(b))
		if buf != nil && int64(len(b)) < int64(capacity) {
			// Sound: the caller's buffer of capacity bytes, written before it returns.
			dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity))
			copy(dst, b)
			dst[len(b)] = 0
		}
		return nil
	})
}

// argKeeper is the releaser of memory Python objects lend to a call
// (DLB_ARG_MEMORY): one argument's, or all those under the call's lease.
// Usually the call's own reference is the last: C then gives the memory
// back when the call returns. When the body kept a view (a Retain, a
// result that views an argument), the memory must outlive the call: Go
// reports a token for each argument the keeper answers for, C answers each
// with a Python object that holds that memory (dlb_call_keep), and the
// last release drops them.
type argKeeper struct {
	state int32 // sync/atomic's functions; written plainly only before the call shares it
	want  int   // the objects C gives for the token (set before the token is)
	mu    sync.Mutex
	keep  []unsafe.Pointer // PyObject*s, as C gives them; complete once state is keepKept
}

const (
	keepInCall   = iota // the call holds the memory
	keepReleased        // every Go reference is gone: nothing to drop
	keepAwaiting        // the body kept it; C has not answered yet
	keepKept            // C's object holds it; the last release drops that
)

func (k *argKeeper) Release() {
	for {
		switch atomic.LoadInt32(&k.state) {
		case keepInCall:
			if atomic.CompareAndSwapInt32(&k.state, keepInCall, keepReleased) {
				return
			}
		case keepAwaiting:
			if atomic.CompareAndSwapInt32(&k.state, keepAwaiting, keepReleased) {
				return // C has not given its object yet: it drops it at once
			}
		case keepKept:
			k.drop()
			return
		default:
			return
		}
	}
}

// drop gives back the objects C gave.
func (k *argKeeper) drop() {
	for _, o := range k.keep {
		pybridge.PyDecRef(o)
	}
	k.keep = nil
}

// await makes k wait for want objects from C, if no release came first,
// and returns their token (0: nothing to keep).
func (k *argKeeper) await(want int) C.uint64_t {
	k.want = want
	if !atomic.CompareAndSwapInt32(&k.state, keepInCall, keepAwaiting) {
		return 0
	}
	return C.uint64_t(awaitingKeep.Add(k))
}

var awaitingKeep pybridge.Table[*argKeeper]

// dlb_call_keep hands Go obj, a PyObject* with a reference Go now owns,
// that keeps alive the memory of an argument that token names
// (dlb_arg.kept). Go drops obj when the last view of that memory is
// closed, or, when that already happened, once C has given all the
// token's objects.
//
//dlb:nopy
//export dlb_call_keep
func dlb_call_keep(token C.uint64_t, obj unsafe.Pointer) C.int32_t {
	return fence(func() error {
		k, err := awaitingKeep.Get(pybridge.Handle(token))
		if err != nil {
			pybridge.PyDecRef(obj)
			return err
		}
		k.mu.Lock()
		k.keep = append(k.keep, obj)
		complete := len(k.keep) >= k.want
		k.mu.Unlock()
		if !complete {
			return nil
		}
		if _, err := awaitingKeep.Delete(pybridge.Handle(token)); err != nil {
			return err // an extra answer for the token: its object stays in the list
		}
		if !atomic.CompareAndSwapInt32(&k.state, keepAwaiting, keepKept) {
			k.drop() // released meanwhile: nothing to keep
		}
		return nil
	})
}

// lentArg is the Go side of memory a Python object lends to a call: the
// view, its owner and the owner's releaser in one allocation, used again
// by later calls unless the body kept the view. Views derived from an
// earlier use stay closed (zerocopy.View.Init).
type lentArg struct {
	view   zerocopy.View
	owner  zerocopy.Owner
	keeper argKeeper
	leased zerocopy.View // host memory under the call's lease
	spec   zerocopy.Spec // the current call's, over C's arrays: read only during the call
}

// callLease is the one reference a call holds on all the host memory its
// arguments lend (zerocopy.Lease): a call in a loop then costs one locked
// instruction for its arrays, where a view with an owner of its own costs
// four per array. The price: a view the body keeps of one array keeps the
// call's other arrays too, until it is closed.
type callLease struct {
	zl     zerocopy.Lease
	keeper argKeeper
	open   bool
}

// begin starts the lease's use for this call, once.
func (ls *callLease) begin() error {
	if ls.open {
		return nil
	}
	ls.keeper.state = keepInCall // not shared yet
	if err := ls.zl.Begin(&ls.keeper, "call arguments"); err != nil {
		return err
	}
	ls.open = true
	return nil
}

// callScratch is what a call needs besides its arguments' memory, taken
// from and given back to scratches once a call: sync.Pool's per-thread
// slot costs no locked instruction, and allocating the lent views per call
// cost more than the rest of the argument (bench/results/gofunc-2core).
type callScratch struct {
	args    pyfunc.Args // the fields a call does not change are set once
	out     pyfunc.Outcome
	tensors [pyfunc.MaxParams]*zerocopy.View
	values  [pyfunc.MaxParams]pyfunc.Value
	side    [pyfunc.MaxParams]callArg
	lent    [pyfunc.MaxParams]*lentArg // nil where a body kept the last one
	lease   *callLease                 // nil after a call whose body kept a view under it
	// The outcome's slices and the result views handed to C.
	outTensors [pyfunc.MaxParams]*zerocopy.View
	outValues  [pyfunc.MaxParams]pyfunc.Value
	owned      [pyfunc.MaxParams]*zerocopy.View
	nres       int // results of the call, for done
	frame      pyfunc.Frame
}

var scratches = sync.Pool{New: func() any {
	sc := new(callScratch)
	sc.args = pyfunc.Args{OutTensors: sc.outTensors[:], OutValues: sc.outValues[:], Frame: &sc.frame}
	return sc
}}

// done clears the results' slots (no pointer outlives the call in the
// pool; release cleared the arguments') and gives sc back.
func (sc *callScratch) done() {
	for i := 0; i < sc.nres; i++ {
		sc.outTensors[i], sc.outValues[i].Str, sc.owned[i] = nil, "", nil
	}
	sc.args.Tensors, sc.args.Values = nil, nil
	sc.out = pyfunc.Outcome{}
	scratches.Put(sc)
}

// callArg is one argument's Go side during a call.
type callArg struct {
	borrowed *pybridge.Tensor // DLB_ARG_HANDLE
	lent     *lentArg         // DLB_ARG_MEMORY
	leased   bool             // lent's view is lent.leased, under the call's lease
}

// dlb_call calls registered function fn with nargs arguments (one per
// parameter that Python passes). given says whether the caller passed
// stream=: then stream is its handle and streamDev the device its object
// names (-1: a bare handle); else stream is the current stream the
// producer of a CUDA argument named (0: none). pybridge.PlanStream picks
// the call's stream from that. Results go to res[0..nres) and, for
// tensors, infos at the same index.
//
//dlb:nopy
//export dlb_call
func dlb_call(fn C.int32_t, nargs C.int32_t, args *C.dlb_arg, given C.int32_t, stream C.uint64_t, streamDev C.int32_t, nres C.int32_t, res *C.dlb_result, infos *C.dlb_info) C.int32_t {
	var code pybridge.Code
	code = pybridge.Fence(func() error {
		err := call(fn, nargs, args, given, stream, streamDev, nres, res, infos)
		if err != nil {
			return pybridge.WithCode(pybridge.CodeOf(err), err)
		}
		return nil
	})
	return C.int32_t(code)
}

func call(fn C.int32_t, nargs C.int32_t, args *C.dlb_arg, given C.int32_t, stream C.uint64_t, streamDev C.int32_t, nres C.int32_t, res *C.dlb_result, infos *C.dlb_info) error {
	f := pyfunc.At(int(fn))
	if f == nil {
		return pybridge.Errorf(pybridge.ValueError, "dlbridge: no registered function number %d", int(fn))
	}
	n := len(f.Params)
	if int(nargs) != n || int(nres) != len(f.Results) || n > 0 && args == nil || nres > 0 && (res == nil || infos == nil) {
		return pybridge.Errorf(pybridge.ValueError, "dlbridge: %s takes %d arguments and gives %d results; called with %d and room for %d", f.Name, n, len(f.Results), int(nargs), int(nres))
	}
	// Sound: the caller's array of nargs arguments, valid for this call.
	cargs := unsafe.Slice(args, n)
	sc := scratches.Get().(*callScratch)
	sc.nres = len(f.Results)
	a := &sc.args
	a.Tensors, a.Values = sc.tensors[:n], sc.values[:n]
	side := sc.side[:n]
	defer sc.release(cargs)
	cudaAt := -1 // the index of the call's device's tensor
	for i := range cargs {
		ca := &cargs[i]
		ca.kept = 0
		p := &f.Params[i]
		if p.Kind == pyfunc.TensorKind {
			v, err := sc.tensorArg(f, p, ca, &side[i], &sc.lent[i])
			if err != nil {
				return err
			}
			a.Tensors[i] = v
			if d := v.Device(); d.Type == dlpack.CUDA || d.Type == dlpack.CUDAManaged {
				cudaAt = i // the last CUDA tensor names the device, as pyfunc's check does
			}
			continue
		}
		v := &a.Values[i] // set field by field: see tensorArg on composite literals
		switch ca.kind {
		case C.DLB_ARG_MISSING:
		case C.DLB_ARG_INT:
			v.Kind, v.Int = pyfunc.IntKind, int64(ca.i)
		case C.DLB_ARG_UINT:
			v.Kind, v.Uint = pyfunc.UintKind, uint64(ca.u)
		case C.DLB_ARG_FLOAT:
			v.Kind, v.Float = pyfunc.FloatKind, float64(ca.f)
		case C.DLB_ARG_BOOL:
			v.Kind, v.Bool = pyfunc.BoolKind, ca.i != 0
		case C.DLB_ARG_STR:
			v.Kind, v.Str = pyfunc.StringKind, C.GoStringN(ca.s, C.int(ca.slen))
		default:
			return pybridge.Errorf(pybridge.TypeError, "%s: argument %s: want %s, got a tensor", f.Name, p.Name, p.GoType)
		}
	}
	ask := pybridge.StreamAsk{Entry: pybridge.EntryCall, Op: f.Name}
	if given != 0 {
		ask.Given = pybridge.StreamArg{Given: true, Handle: uintptr(stream), Device: int32(streamDev)}
	} else {
		ask.Current = uintptr(stream)
	}
	if cudaAt >= 0 {
		ask.Devices[0], ask.DevFrom = dlpack.CUDADevice(int(a.Tensors[cudaAt].Device().ID)), f.Params[cudaAt].Name
	}
	var plan pybridge.StreamPlan
	if err := pybridge.PlanStream(&ask, &plan); err != nil {
		return err
	}
	a.Stream, a.StreamDevice = plan.Handle, int(plan.Device)
	out := &sc.out
	if err := f.CallInto(a, out); err != nil {
		return err
	}
	// A dlbridge tensor the body wrote on the caller's stream outlives the
	// call, and the caller may destroy that stream first: readers wait for
	// an event recorded now instead.
	for i := 0; out.Stream != 0 && i < len(side); i++ {
		if t := side[i].borrowed; t != nil && t.View.Stream() == out.Stream &&
			out.Stream != pybridge.WorkStream(t.View.Device().ID) {
			if err := t.View.MarkPending(); err != nil {
				return err
			}
		}
	}
	return publishResults(f, out, side, sc.owned[:len(f.Results)], res, infos)
}

// tensorArg makes the view of a tensor argument; *lent is the allocation
// for a lent one's view (nil: make one).
func (sc *callScratch) tensorArg(f *pyfunc.Func, p *pyfunc.Param, ca *C.dlb_arg, side *callArg, lent **lentArg) (*zerocopy.View, error) {
	switch ca.kind {
	case C.DLB_ARG_HANDLE:
		t, err := pybridge.Borrow(pybridge.Handle(ca.handle))
		if err != nil {
			return nil, err
		}
		side.borrowed = t
		return t.View, nil
	case C.DLB_ARG_MEMORY:
		nd := int(ca.ndim)
		if nd < 0 || nd > dlpack.MaxNDim || nd > 0 && ca.shape == nil {
			return nil, pybridge.Errorf(pybridge.ValueError, "%s: argument %s: ndim %d out of range (0..%d)", f.Name, p.Name, nd, dlpack.MaxNDim)
		}
		l := *lent
		if l == nil {
			l = new(lentArg)
			l.spec.Foreign = true
			*lent = l
		}
		// Field by field into the spec the argument keeps: a composite
		// literal is built aside and copied, and that copy's wide loads of
		// narrow stores stalled store forwarding, at a third of this
		// function's time. The flag bytes are read two at a time, so the
		// one that changes is stored only when it does.
		s := &l.spec
		s.Ptr, s.Stream = uintptr(ca.handle), uintptr(ca.stream)
		s.Device.Type, s.Device.ID = dlpack.DeviceType(ca.device_type), int32(ca.device_id)
		s.DType.Code, s.DType.Bits, s.DType.Lanes = dlpack.TypeCode(ca.code), uint8(ca.bits), uint16(ca.lanes)
		if ro := ca.flags&C.DLB_INFO_READONLY != 0; s.ReadOnly != ro {
			s.ReadOnly = ro
		}
		s.Strides = nil
		if nd > 0 {
			// Sound: the caller's arrays of nd extents and strides, valid
			// for the call; Wrap copies them into the layout.
			s.Shape = unsafe.Slice((*int64)(unsafe.Pointer(ca.shape)), nd)
			if ca.strides != nil {
				s.Strides = unsafe.Slice((*int64)(unsafe.Pointer(ca.strides)), nd)
			}
		} else {
			s.Shape = []int64{}
		}
		if s.Stream == 0 && s.Device.Type == dlpack.CPU { // no pending write: under the lease
			if sc.lease == nil {
				sc.lease = new(callLease)
			}
			if err := sc.lease.begin(); err != nil {
				return nil, pybridge.WithCode(pybridge.RuntimeError, fmt.Errorf("%s: argument %s: %w", f.Name, p.Name, err))
			}
			if err := sc.lease.zl.Borrow(&l.leased, s); err != nil {
				return nil, pybridge.WithCode(pybridge.BufferError, fmt.Errorf("%s: argument %s: %w", f.Name, p.Name, err))
			}
			side.lent, side.leased = l, true
			return &l.leased, nil
		}
		l.keeper.state = keepInCall // not shared yet
		l.owner.Init(&l.keeper, "call argument")
		if err := l.view.Init(s, &l.owner); err != nil {
			return nil, pybridge.WithCode(pybridge.BufferError, fmt.Errorf("%s: argument %s: %w", f.Name, p.Name, err)) // l is free again
		}
		side.lent = l
		return &l.view, nil
	}
	return nil, pybridge.Errorf(pybridge.TypeError, "%s: missing tensor argument %s", f.Name, p.Name)
}

// release ends the call's hold on its arguments and gives sc back. Memory
// a Python object lent that the body kept gets a token in dlb_arg.kept
// (see argKeeper), and its allocation stays with it.
func (sc *callScratch) release(cargs []C.dlb_arg) {
	var leased uint32 // the arguments under the lease, by index
	for i := range cargs {
		s := &sc.side[i]
		if s.borrowed != nil {
			s.borrowed.Return()
			s.borrowed = nil
		}
		if l := s.lent; l != nil && s.leased {
			s.lent, s.leased = nil, false
			leased |= 1 << i
		} else if l != nil {
			s.lent = nil
			l.view.Close()
			if atomic.LoadInt32(&l.keeper.state) != keepReleased {
				sc.lent[i] = nil
				cargs[i].kept = l.keeper.await(1)
			}
		}
		sc.tensors[i] = nil
		if v := &sc.values[i]; v.Kind != 0 {
			v.Kind = 0 // a parameter left out next time reads Kind 0
			if v.Str != "" {
				v.Str = ""
			}
		}
	}
	if ls := sc.lease; ls != nil && ls.open {
		ls.open = false
		if ls.zl.End() { // a view was kept: the arrays stay until it is closed
			sc.lease = nil
			if token := ls.keeper.await(bits.OnesCount32(leased)); token != 0 {
				for i := range cargs {
					if leased&(1<<i) != 0 {
						cargs[i].kept = token
					}
				}
			}
		}
	}
	sc.done()
}

// publishResults hands the results to C: each tensor result under a handle
// of its own, scalars by value. owned is room for the result views.
func publishResults(f *pyfunc.Func, out *pyfunc.Outcome, side []callArg, owned []*zerocopy.View, res *C.dlb_result, infos *C.dlb_info) error {
	n := len(f.Results)
	if n == 0 {
		return nil
	}
	// Sound: the caller's arrays of n results and n infos.
	cres := unsafe.Slice(res, n)
	cinfo := unsafe.Slice(infos, n)
	for i, v := range out.Tensors {
		if f.Results[i].Kind != pyfunc.TensorKind {
			continue
		}
		// A result holds a reference of its own: a fresh allocation gives
		// up the body's, a view of an argument (or of another result)
		// takes one.
		r, err := v.Retain()
		if err != nil {
			for _, o := range owned {
				if o != nil {
					o.Close()
				}
			}
			return pybridge.Errorf(pybridge.RuntimeError, "%s: result %d: %v", f.Name, i+1, err)
		}
		owned[i] = r
	}
	for _, v := range out.Tensors {
		if v != nil && !isArgument(v, side) {
			v.Close()
		}
	}
	for i, r := range f.Results {
		c := &cres[i]
		val := out.Values[i]
		switch r.Kind {
		case pyfunc.TensorKind:
			c.kind = C.DLB_RES_TENSOR
			h := pybridge.NewTensor(owned[i])
			c.handle = C.uint64_t(h)
			fillInfo(owned[i], owned[i].Stream(), &cinfo[i])
		case pyfunc.BoolKind:
			c.kind, c.i = C.DLB_ARG_BOOL, 0
			if val.Bool {
				c.i = 1
			}
		case pyfunc.IntKind:
			c.kind, c.i = C.DLB_ARG_INT, C.int64_t(val.Int)
		case pyfunc.UintKind:
			c.kind, c.u = C.DLB_ARG_UINT, C.uint64_t(val.Uint)
		case pyfunc.FloatKind:
			c.kind, c.f = C.DLB_ARG_FLOAT, C.double(val.Float)
		case pyfunc.StringKind:
			c.kind, c.slen = C.DLB_ARG_STR, C.int64_t(len(val.Str))
			c.s = (*C.char)(C.CBytes([]byte(val.Str)))
		}
	}
	return nil
}

func isArgument(v *zerocopy.View, side []callArg) bool {
	for i := range side {
		if side[i].lent != nil && &side[i].lent.view == v || side[i].borrowed != nil && side[i].borrowed.View == v {
			return true
		}
	}
	return false
}
