//go:build !cgo

package cuda

// enterCtx makes ctx current on the calling OS thread, which the caller has
// locked. It returns the context to restore in leaveCtx: a foreign context
// that was current, or 0 when the thread had none (ours then stays, so the
// next call on this thread finds it and pays one cuCtxGetCurrent only).
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
	return cur, Success
}

// leaveCtx restores the foreign context enterCtx displaced, if any.
func leaveCtx(prev uintptr) {
	if prev != 0 {
		cuCtxSetCurrent(prev)
	}
}
