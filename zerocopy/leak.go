package zerocopy

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/dlbridge/dlbridge/dlpack"
)

// LeakInfo describes a view the garbage collector found unreachable while
// it still held its reference: somebody forgot Close.
type LeakInfo struct {
	Label  string // the owner's label ("go slice", "dlpack import", ...)
	DType  dlpack.DataType
	Device dlpack.Device
	Shape  []int64
	Ptr    uintptr
	// Created is "function file:line" of the code outside this package that
	// made the view, or "" when unknown.
	Created string
}

// String reads like "leaked view float32[2, 3] cuda:0 (go slice) created at f file.go:12".
func (l LeakInfo) String() string {
	s := fmt.Sprintf("leaked view %s%s %s ptr=%#x (%s)", l.DType, FormatShape(l.Shape), l.Device, l.Ptr, l.Label)
	if l.Created != "" {
		s += " created at " + l.Created
	}
	return s
}

var leakReporter atomic.Pointer[func(LeakInfo)]

// SetLeakReporter turns the leak safety net on (f != nil) or off (nil).
// While it is on, every view created gets a cleanup that runs if the garbage
// collector finds the view unreachable and never closed: the cleanup calls
// the reporter of that moment (if any) and then drops the view's reference,
// so the memory is freed after all. Views created while it is off are never
// tracked, and then the net costs nothing. It is a diagnostic, never the
// plan: close every view. f runs on a runtime goroutine and must not block.
func SetLeakReporter(f func(LeakInfo)) {
	if f == nil {
		leakReporter.Store(nil)
		return
	}
	leakReporter.Store(&f)
}

// leakRecord is the cleanup argument: everything needed to report and
// release, and nothing that reaches the view (or it would never be
// collected).
type leakRecord struct {
	owner   *Owner
	info    LeakInfo
	pcs     [8]uintptr
	npc     int
	cleanup runtime.Cleanup
}

// trackLeak attaches the safety net to a new view when it is on.
func trackLeak(v *View) {
	if leakReporter.Load() == nil {
		return
	}
	r := &leakRecord{owner: v.owner, info: LeakInfo{
		Label: v.owner.label, DType: v.lay.dtype, Device: v.device, Ptr: v.Ptr(),
		Shape: append([]int64(nil), v.lay.shape()...), // a copy: the shape may live inside the view's allocation
	}}
	r.npc = runtime.Callers(2, r.pcs[:])
	r.cleanup = runtime.AddCleanup(v, reportLeak, r)
	v.leak = r
}

// stopLeak disarms the safety net of a view being closed. The view is still
// reachable (the caller holds it), so the cleanup cannot be queued yet.
func (v *View) stopLeak() {
	if v.leak != nil {
		v.leak.cleanup.Stop()
	}
}

func reportLeak(r *leakRecord) {
	defer r.owner.Release()
	if f := leakReporter.Load(); f != nil {
		info := r.info
		info.Created = r.site()
		(*f)(info)
	}
}

// pkgDir is this package's source directory, to skip its frames.
var pkgDir = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}()

// site names the first caller outside this package's non-test files.
func (r *leakRecord) site() string {
	frames := runtime.CallersFrames(r.pcs[:r.npc])
	for {
		f, more := frames.Next()
		if f.File != "" && (filepath.Dir(f.File) != pkgDir || strings.HasSuffix(f.File, "_test.go")) {
			return fmt.Sprintf("%s %s:%d", f.Function, filepath.Base(f.File), f.Line)
		}
		if !more {
			return ""
		}
	}
}
