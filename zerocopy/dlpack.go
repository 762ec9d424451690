package zerocopy

import (
	"fmt"
	"unsafe"

	"github.com/dlbridge/dlbridge/dlpack"
)

// An imported view needs a View (its Layout holds shape and strides), its
// Owner and the dlpack.Handle whose Release runs the producer's deleter:
// all in one allocation. The view points into the struct (the owner),
// which keeps it alive.
//
// While the leak net is on (SetLeakReporter) the View is allocated apart:
// the net's cleanup holds the Owner, and would keep a view in the same
// allocation reachable, so a leaked view would never be found.
type (
	dlpackOwner struct {
		owner Owner
		h     dlpack.Handle
	}
	dlpackImport struct {
		view View
		o    dlpackOwner
	}
)

// FromDLPackVersioned takes over p, a DLManagedTensorVersioned* handed over
// by a producer, as a zero-copy view: the view's pointer is data +
// byte_offset, and its Owner calls the producer's deleter exactly once when
// the last view over the memory is closed (a NULL deleter is legal).
//
// Every field is validated first (dlpack.Handle.TakeVersioned); errors
// wrap a *dlpack.FieldError naming the C field. A rejected tensor's deleter
// has already run when the error comes back, so the caller never frees p.
//
// The view is Foreign, ReadOnly when READ_ONLY is set, Copied when
// IS_COPIED is set, Padded when IS_SUBBYTE_TYPE_PADDED is set. Its pending
// stream is the one the producer was asked to order its writes before
// (__dlpack__(stream=s): pass PendingOn(s)), none without the option; every
// reader on another stream is then ordered after it (OrderBefore, CopyCUDA,
// the CUDA Array Interface). Up to dlpack.InlineDims dimensions cost one
// allocation, two with a pending stream.
func FromDLPackVersioned(p unsafe.Pointer, opts ...ImportOption) (*View, error) {
	v, err := fromDLPack(p, false, opts)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: FromDLPackVersioned: %w", err)
	}
	return v, nil
}

// FromDLPackLegacy is FromDLPackVersioned for a legacy DLManagedTensor*:
// no version, no flags (the view is writable), NULL strides mean compact
// row-major.
func FromDLPackLegacy(p unsafe.Pointer, opts ...ImportOption) (*View, error) {
	v, err := fromDLPack(p, true, opts)
	if err != nil {
		return nil, fmt.Errorf("zerocopy: FromDLPackLegacy: %w", err)
	}
	return v, nil
}

// ImportOption adjusts what FromDLPackVersioned and FromDLPackLegacy make
// (a plain value: importing stays allocation-free without one).
type ImportOption struct{ stream uintptr }

// PendingOn says the producer was asked to order its writes before CUDA
// stream s (a CUstream handle; 1 and 2 the legacy and per-thread default
// streams): the DLPack stream handshake. The imported view's pending stream
// is s (0: none).
func PendingOn(s uintptr) ImportOption { return ImportOption{stream: s} }

func fromDLPack(p unsafe.Pointer, legacy bool, opts []ImportOption) (*View, error) {
	var (
		v  *View
		ob *dlpackOwner
	)
	if leakReporter.Load() != nil {
		v, ob = new(View), new(dlpackOwner)
	} else {
		b := new(dlpackImport)
		v, ob = &b.view, &b.o
	}
	o, h := &ob.owner, &ob.h
	// Take validates shape and strides into dims, and the view's Layout
	// copies them, so dims is scratch: on the stack, not in the box (a
	// tensor of more than InlineDims dimensions gets a slice of its own).
	var scratch [2 * dlpack.InlineDims]int64
	dims := scratch[:]
	var d dlpack.Desc
	var err error
	label := "dlpack import"
	if legacy {
		d, err = h.TakeLegacy(p, dims)
		label = "dlpack legacy import"
	} else {
		d, _, err = h.TakeVersioned(p, dims)
	}
	if err != nil {
		return nil, err // the deleter has run
	}
	o.Init(h, label) // the last release calls the producer's deleter
	v.base, v.device = d.Data, d.Device
	v.lay = trustedLayout(d.DType, d.Shape, d.Strides, d.Flags&dlpack.FlagSubbyteTypePadded != 0)
	v.readOnly = d.Flags&dlpack.FlagReadOnly != 0
	v.copied = d.Flags&dlpack.FlagIsCopied != 0
	v.foreign = true
	v.owner = o
	for _, opt := range opts {
		if opt.stream != 0 {
			v.owner.pend.Store(newPending(opt.stream, -1))
		}
	}
	trackLeak(v)
	return v, nil
}

// DLPackOption adjusts what ToDLPack hands out: DLPackReadOnly,
// DLPackCopied. (A plain value, not a func: ToDLPack stays allocation-free.)
type DLPackOption struct{ flags dlpack.Flags }

// DLPackReadOnly marks the exported tensor READ_ONLY even when the view is
// writable: the consumer gets read access only.
func DLPackReadOnly() DLPackOption { return DLPackOption{dlpack.FlagReadOnly} }

// DLPackCopied marks the exported tensor IS_COPIED: the caller made this
// memory for the consumer alone, which may then write it freely.
func DLPackCopied() DLPackOption { return DLPackOption{dlpack.FlagIsCopied} }

// ownerRef is a reference on an Owner, as the dlpack.Releaser that an
// export holds until the consumer's deleter runs. A pointer conversion from
// *Owner, so handing it over costs no allocation.
type ownerRef Owner

// Release drops the export's reference (an error would mean a double
// release, which the export table already rules out).
func (r *ownerRef) Release() { _ = (*Owner)(r).Release() }

// ToDLPack exports v as a DLManagedTensorVersioned* for a C consumer, which
// must call its deleter exactly once when done (from any thread). The
// tensor has v's pointer (byte_offset 0), device, dtype, shape and strides
// (always filled), version dlpack.CurrentVersion, and flags READ_ONLY,
// IS_COPIED and IS_SUBBYTE_TYPE_PADDED from the view and opts.
//
// The export takes a reference on v's owner, released by the deleter, so
// the memory outlives v.Close if the consumer still holds it. A closed or
// released view is refused.
//
// ToDLPack does not order streams: when v.Stream() has a pending write,
// the caller makes the consumer's stream wait for it first with
// OrderBefore (the __dlpack__(stream=...) handshake).
func (v *View) ToDLPack(opts ...DLPackOption) (unsafe.Pointer, error) {
	flags := v.dlpackFlags()
	for _, o := range opts {
		flags |= o.flags
	}
	return v.toDLPack(flags, false)
}

// ToDLPackLegacy exports v as a legacy DLManagedTensor* (for consumers that
// predate DLPack 1.0). A legacy tensor cannot say read-only or padded, so
// such views are refused rather than handed out as writable or packed.
func (v *View) ToDLPackLegacy() (unsafe.Pointer, error) {
	if v.readOnly {
		return nil, fmt.Errorf("zerocopy: ToDLPackLegacy: the view is read-only and a legacy DLManagedTensor cannot say so (use ToDLPack)")
	}
	if v.lay.padded && v.lay.dtype.IsSubByte() {
		return nil, fmt.Errorf("zerocopy: ToDLPackLegacy: padded %s elements cannot be described by a legacy DLManagedTensor (use ToDLPack)", v.lay.dtype)
	}
	return v.toDLPack(0, true)
}

func (v *View) dlpackFlags() dlpack.Flags {
	var f dlpack.Flags
	if v.readOnly {
		f |= dlpack.FlagReadOnly
	}
	if v.copied {
		f |= dlpack.FlagIsCopied
	}
	if v.lay.padded {
		f |= dlpack.FlagSubbyteTypePadded
	}
	return f
}

func (v *View) toDLPack(flags dlpack.Flags, legacy bool) (unsafe.Pointer, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	if err := v.owner.Retain(); err != nil {
		return nil, err
	}
	d := dlpack.Desc{Data: v.Ptr(), Device: v.device, DType: v.lay.dtype, Shape: v.lay.shape(),
		Strides: v.lay.strides(), Flags: flags}
	var p unsafe.Pointer
	var err error
	if legacy {
		p, err = dlpack.ExportLegacy(&d, (*ownerRef)(v.owner))
	} else {
		p, err = dlpack.Export(&d, (*ownerRef)(v.owner))
	}
	if err != nil {
		v.owner.Release() // the export took nothing
		return nil, fmt.Errorf("zerocopy: ToDLPack: %w", err)
	}
	return p, nil
}

// DLPackOwner reports whether p is a DLManagedTensorVersioned* or
// DLManagedTensor* that ToDLPack or ToDLPackLegacy made and whose deleter
// has not run, and returns the Owner it keeps alive. Bridges use it to
// recognise their own tensors coming back.
func DLPackOwner(p unsafe.Pointer) (*Owner, bool) {
	r, ok := dlpack.LookupExport(p)
	if !ok {
		return nil, false
	}
	o, ok := r.(*ownerRef)
	if !ok {
		return nil, false
	}
	return (*Owner)(o), true
}
