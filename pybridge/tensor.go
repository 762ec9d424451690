package pybridge

/*
#include "pyapi.h"
*/
import "C"

import (
	"sync/atomic"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
	"github.com/dlbridge/dlbridge/zerocopy"
)

// Tensor is what a tensor handle names: a view. The write that may still
// be pending on its memory lives on the view (zerocopy.View.Stream).
type Tensor struct {
	View *zerocopy.View
}

// Return drops the reference Borrow took.
func (t *Tensor) Return() { t.View.Owner().Release() }

var tensors Table[*Tensor]

// NewTensor registers v under a new handle. The handle owns v: CloseTensor
// closes it.
func NewTensor(v *zerocopy.View) Handle { return tensors.Add(&Tensor{View: v}) }

// Borrow returns the tensor h names with a reference on its memory that
// keeps it allocated, even if another thread closes h meanwhile, until
// Return. It fails with ValueError for a closed or unknown handle.
func Borrow(h Handle) (*Tensor, error) {
	t, err := tensors.Get(h)
	if err != nil {
		return nil, err
	}
	if err := t.View.Owner().Retain(); err != nil {
		return nil, WithCode(ValueError, err)
	}
	return t, nil
}

// CloseTensor forgets h and closes its view; the memory is freed (or the
// producer's deleter runs) once no export or derived view holds it.
// Closing twice is an error (ValueError).
func CloseTensor(h Handle) error {
	t, err := tensors.Delete(h)
	if err != nil {
		return err
	}
	// Outside the table's lock: the release may run a foreign deleter that
	// waits for the GIL, held by a thread that may be calling into us.
	return t.View.Close()
}

// LiveTensors is the number of open tensor handles.
func LiveTensors() int { return tensors.Len() }

// LiveExports is the number of DLPack tensors exported by this process
// (through Export or zerocopy's ToDLPack) whose deleter has not run yet.
func LiveExports() int { return dlpack.LiveExports() }

// exportsMade counts the DLPack tensors Export handed out.
var exportsMade atomic.Int64

// DeleterCalls is the number of Export's tensors whose deleter has run:
// exports made minus exports alive, exact when every DLPack export of the
// process goes through Export (as in libdlbridge).
func DeleterCalls() int64 { return exportsMade.Load() - int64(dlpack.LiveExports()) }

// CopyMode is the copy argument of __dlpack__ and from_dlpack.
type CopyMode int32

// The copy modes: None (copy only when needed), False (never), True (always).
const (
	CopyIfNeeded CopyMode = 0
	CopyNever    CopyMode = 1
	CopyAlways   CopyMode = 2
)

// Stream values of the DLPack Python protocol and CAI v3 (other positive
// values are CUstream handles).
const (
	StreamLegacy    int64 = 1  // the legacy default stream
	StreamPerThread int64 = 2  // the per-thread default stream
	StreamNoSync    int64 = -1 // the consumer asks for no synchronization
)

// ExportRequest is what a DLPack consumer asked __dlpack__ for.
type ExportRequest struct {
	// Versioned asks for a DLManagedTensorVersioned (max_version >= 1.0);
	// otherwise a legacy DLManagedTensor, which cannot say READ_ONLY.
	Versioned bool
	// HasStream says Stream was given (not None). Stream is the
	// consumer's stream: 1, 2, a CUstream, or -1 for no synchronization.
	HasStream bool
	Stream    int64
	// Device, when HasDevice, is dl_device: where the consumer wants it.
	HasDevice bool
	Device    dlpack.Device
	Copy      CopyMode
}

// Export makes a DLPack managed tensor of t as req asks: zero-copy when it
// can; a copy (flagged IS_COPIED on versioned exports) when req.Copy is
// CopyAlways or the device differs and copying is allowed; BufferError when
// the request cannot be met. Pending Go-side writes are ordered before the
// consumer's stream with an event, never a device-wide synchronization.
// The returned pointer belongs to the caller, who passes it on to a
// consumer (or calls its deleter).
func Export(t *Tensor, req ExportRequest) (unsafe.Pointer, error) {
	v := t.View
	src := v.Device()
	dst := src
	if req.HasDevice {
		dst = req.Device
	}
	if err := checkConsumerStream(src, req); err != nil {
		return nil, err
	}
	needCopy := dst != src || req.Copy == CopyAlways
	if dst != src && req.Copy == CopyNever {
		return nil, Errorf(BufferError, "dlbridge: __dlpack__: tensor is on %s, dl_device asks for %s, and copy=False forbids the copy", src, dst)
	}
	if !needCopy {
		if v.ReadOnly() && !req.Versioned {
			return nil, Errorf(BufferError, "dlbridge: __dlpack__: tensor is read-only and the consumer asked for a legacy (unversioned) DLPack capsule, which cannot say so; use max_version=(1, 0) or later, or copy=True")
		}
		if !req.Versioned && hasNegativeStride(v) {
			// PyTorch before 2.0 aborts the whole process (an uncaught C++
			// exception) on such a capsule; legacy consumers are that old.
			return nil, Errorf(BufferError, "dlbridge: __dlpack__: negative strides %s in a legacy (unversioned) DLPack capsule are refused: PyTorch < 2 aborts the process on them; ask with max_version=(1, 0) or later, copy=True, or use the array interface", zerocopy.FormatShape(v.Strides()))
		}
		if err := orderBefore(t, req, false); err != nil {
			return nil, err
		}
		return exportView(v, req.Versioned, false)
	}
	c, err := copyTo(t, dst)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// The copy is the consumer's alone: writable, and flagged as a copy.
	return exportView(c, req.Versioned, true)
}

func hasNegativeStride(v *zerocopy.View) bool {
	shape := v.Shape()
	for i, s := range v.Strides() {
		if s < 0 && shape[i] > 1 {
			return true
		}
	}
	return false
}

func checkConsumerStream(d dlpack.Device, req ExportRequest) error {
	if !req.HasStream {
		return nil
	}
	switch d.Type {
	case dlpack.CUDA, dlpack.CUDAManaged:
		if req.Stream == 0 {
			return Errorf(ValueError, "dlbridge: __dlpack__: stream=0 is ambiguous for CUDA and not allowed (use 1 for the legacy default stream, 2 for per-thread, -1 for none)")
		}
	case dlpack.ROCM:
	default:
		if req.Stream != StreamNoSync {
			return Errorf(ValueError, "dlbridge: __dlpack__: stream=%d given for a tensor on %s; only None or -1 are allowed there", req.Stream, d)
		}
	}
	return nil
}

// OrderBeforeExchange orders the write pending on t before a consumer of
// the C exchange API (managed_tensor_from_py_object_no_sync), which has no
// stream handshake and orders itself after dlbridge's work stream, the
// current_work_stream it is told (PlanStream's EntryExport).
func OrderBeforeExchange(t *Tensor) error {
	return orderBefore(t, ExportRequest{}, true)
}

// orderBefore orders the write pending on t before its consumer on the
// stream PlanStream picks (EntryExport: req's stream=, or a C exchange API
// consumer's): on a CUDA device that stream waits (by event:
// zerocopy.View.OrderBefore); a host consumer cannot be ordered, so the
// host waits for the write.
func orderBefore(t *Tensor, req ExportRequest, exchange bool) error {
	v := t.View
	if v.Stream() == 0 {
		return nil
	}
	d := v.Device()
	if d.Type != dlpack.CUDA && d.Type != dlpack.CUDAManaged {
		return engineErr(v.Synchronize())
	}
	ask := StreamAsk{Entry: EntryExport, Op: "export", Devices: [2]dlpack.Device{d}, Exchange: exchange,
		Given: StreamArg{Given: req.HasStream, Handle: uintptr(req.Stream), Device: -1}}
	var plan StreamPlan
	if err := PlanStream(&ask, &plan); err != nil {
		return err
	}
	if plan.Handle == 0 {
		return nil // stream=-1: the consumer asked for no order
	}
	return engineErr(v.OrderBefore(plan.Handle))
}

// exportView hands v out through zerocopy (flags READ_ONLY, IS_COPIED and
// IS_SUBBYTE_TYPE_PADDED from the view, IS_COPIED also when copied).
func exportView(v *zerocopy.View, versioned, copied bool) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	var err error
	switch {
	case !versioned:
		p, err = v.ToDLPackLegacy()
	case copied:
		p, err = v.ToDLPack(zerocopy.DLPackCopied())
	default:
		p, err = v.ToDLPack()
	}
	if err != nil {
		return nil, WithCode(BufferError, err)
	}
	exportsMade.Add(1)
	return p, nil
}

// Import takes ownership of a DLManagedTensorVersioned* (versioned) or a
// DLManagedTensor* handed over from C and returns a view of it; a CUDA
// view's pending stream is our work stream, which the producer was asked
// to order its writes before. The
// producer's deleter runs exactly once: when the last view of the memory is
// closed, or before Import returns an error (BufferError for a tensor that
// does not validate). With gil set (a tensor that came from Python) the
// deleter runs holding the GIL, and not at all after the interpreter has
// finalized.
func Import(p unsafe.Pointer, versioned, gil bool) (*zerocopy.View, error) {
	return ImportOn(p, versioned, gil, 0)
}

// ImportOn is Import for a producer that ordered its writes before CUDA
// stream pending (a CUstream; 1 and 2 the default streams) rather than our
// work stream (0): the C exchange API's current work stream of the
// producer, which no stream has waited for yet. The view's pending stream
// is that stream: readers are ordered after it when they need it, nothing
// waits at import.
func ImportOn(p unsafe.Pointer, versioned, gil bool, pending uintptr) (*zerocopy.View, error) {
	if p == nil {
		return nil, Errorf(ValueError, "dlbridge: DLPack import of a NULL pointer")
	}
	if _, ours := zerocopy.DLPackOwner(p); ours {
		// One of our own exports coming back: its deleter is Go code that
		// needs no GIL, and p is Go memory that must not be handed to C.
		gil = false
	}
	if gil && C.dlb_py_init() != 0 {
		major := uint32(1)
		if versioned {
			major = (*dlpack.DLManagedTensorVersioned)(p).Version.Major
		}
		if major == 1 { // unknown majors are rejected without reading further
			s := C.dlb_gil_shim(p, boolInt(versioned))
			if s == nil {
				C.dlb_call_deleter(p, boolInt(versioned))
				return nil, Errorf(MemoryError, "dlbridge: out of memory importing a DLPack tensor")
			}
			p = s
		}
	}
	var v *zerocopy.View
	var err error
	if versioned {
		v, err = zerocopy.FromDLPackVersioned(p)
	} else {
		v, err = zerocopy.FromDLPackLegacy(p)
	}
	if err != nil {
		return nil, WithCode(BufferError, err)
	}
	if d := v.Device(); d.Type == dlpack.CUDA {
		if pending != 0 {
			v.SetStream(pending)
		} else if s, err := zerocopy.WorkStream(int(d.ID)); err == nil {
			// dlbridge's importers ask the producer to order its writes
			// before our work stream (from_dlpack's stream=, or the exchange
			// API's wait): that is the write pending on the view.
			v.SetStream(s.Handle())
		}
	}
	return v, nil
}

// PyInit looks up the CPython functions the bridge calls; it reports
// whether the library runs inside a Python interpreter.
func PyInit() bool { return C.dlb_py_init() != 0 }

// WrapPython wraps memory that a Python object keeps alive (an exporter of
// __cuda_array_interface__, __array_interface__ or the buffer protocol).
// obj is a PyObject* on which the caller already holds a reference; the
// view's owner takes it over and drops it, holding the GIL, when the memory
// is released, or before WrapPython returns an error. A nil obj wraps memory
// nobody frees.
func WrapPython(s zerocopy.Spec, obj unsafe.Pointer) (*zerocopy.View, error) {
	v, err := zerocopy.Wrap(s, PythonOwner(obj))
	if err != nil {
		return nil, WithCode(BufferError, err)
	}
	return v, nil
}

// PythonOwner returns an Owner holding one reference, whose release drops
// obj, a PyObject* on which the caller holds a reference (holding the GIL,
// taken if needed). A nil obj owns memory nobody frees.
func PythonOwner(obj unsafe.Pointer) *zerocopy.Owner {
	var rel zerocopy.Releaser
	if obj != nil {
		rel = zerocopy.ReleaseFunc(func() { C.dlb_py_decref(obj) })
	}
	return zerocopy.NewOwner(rel, "python object")
}

// PyDecRef drops a reference to a PyObject*, holding the GIL (taken if
// needed); after the interpreter has finalized it does nothing.
func PyDecRef(obj unsafe.Pointer) { C.dlb_py_decref(obj) }

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
