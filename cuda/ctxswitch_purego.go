//go:build !cgo

package cuda

import "sync/atomic"

// enterCtx makes ctx current on the calling OS thread, which the caller has
// locked. It returns what to undo in leaveCtx: a foreign context that was
// current; noCtx when the thread had none and ctx is not the one kept
// (keepCtx); 0 when there is nothing to undo (ctx was current, or it is
// the kept one, which then stays, so the next call on this thread finds it
// and pays one cuCtxGetCurrent only).
func enterCtx(ctx uintptr) (prev uintptr, r Result) {
	c, r := cuCtxGetCurrent()
	if r != Success {
		return 0, r
	}
	cur := uintptr(c)
	if cur == ctx {
		return 0, Success
	}
	if r = cuCtxSetCurrent(ctx); r != Success {
		return 0, r
	}
	if cur == 0 && ctx != keep.Load() {
		return noCtx, Success
	}
	return cur, Success
}

// noCtx as enterCtx's prev: the thread had no context, take ours off.
const noCtx = 1

// leaveCtx undoes what enterCtx did, as its prev says.
func leaveCtx(prev uintptr) {
	switch prev {
	case 0:
	case noCtx:
		cuCtxSetCurrent(0)
	default:
		cuCtxSetCurrent(prev)
	}
}

var keep atomic.Uintptr

// setKeepCtx names the context that may stay current on a thread that had
// none (see keepCtx).
func setKeepCtx(ctx uintptr) { keep.Store(ctx) }
