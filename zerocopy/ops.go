package zerocopy

// View operations. Each returns a new View over the same memory with the
// layout from the Layout operation of the same name, and never copies. The
// new view borrows the reference of the view it came from (see View): it
// needs no Close and is valid while that view is open. The receiver is left
// unchanged. The errors are those of the Layout operations: arguments that
// do not fit the view. Deriving from a closed view is not an error here;
// the derived view reports ErrClosed when it is used.

// Slice returns the elements start, start+step, ... before stop along dim,
// with Python's rules (see Layout.Slice). Slice(0, Omit, Omit, -1) reverses
// dim 0.
func (v *View) Slice(dim int, start, stop, step int64) (*View, error) {
	nv := v.sub(nil)
	if err := v.lay.slice(&nv.lay, dim, start, stop, step); err != nil {
		return nil, err
	}
	return nv, nil
}

// Select returns the view at index along dim, with that dimension removed
// (NumPy's a[..., index, ...]). A negative index counts from the end.
func (v *View) Select(dim int, index int64) (*View, error) {
	nv := v.sub(nil)
	if err := v.lay.selectInto(&nv.lay, dim, index); err != nil {
		return nil, err
	}
	return nv, nil
}

// Permute reorders the dimensions: dimension i of the result is dimension
// order[i] of v. order must name every dimension once.
func (v *View) Permute(order ...int) (*View, error) {
	l, err := v.lay.Permute(order...)
	if err != nil {
		return nil, err
	}
	return v.sub(&l), nil
}

// Transpose swaps dimensions d0 and d1.
func (v *View) Transpose(d0, d1 int) (*View, error) {
	l, err := v.lay.Transpose(d0, d1)
	if err != nil {
		return nil, err
	}
	return v.sub(&l), nil
}

// T is the matrix transpose of a 2-d view; 0-d and 1-d views come back as
// they are (a new view). Higher ranks are an error: say which dims with
// Transpose or Permute.
func (v *View) T() (*View, error) {
	l, err := v.lay.T()
	if err != nil {
		return nil, err
	}
	return v.sub(&l), nil
}

// Reshape returns the same elements in row-major order with a new shape,
// without copying; one extent may be -1. It succeeds whenever the strides
// allow it (see Layout.Reshape); otherwise the error says a copy would be
// needed (Clone first).
func (v *View) Reshape(shape ...int64) (*View, error) {
	l, err := v.lay.Reshape(shape...)
	if err != nil {
		return nil, err
	}
	return v.sub(&l), nil
}

// Flatten returns a 1-d view of all elements in row-major order when the
// strides allow it without a copy (a C-contiguous view always does).
func (v *View) Flatten() (*View, error) {
	l, err := v.lay.Flatten()
	if err != nil {
		return nil, err
	}
	return v.sub(&l), nil
}

// Squeeze removes dimensions of extent 1: the given ones (each must have
// extent 1, as in NumPy), or all of them when none are given.
func (v *View) Squeeze(dims ...int) (*View, error) {
	l, err := v.lay.Squeeze(dims...)
	if err != nil {
		return nil, err
	}
	return v.sub(&l), nil
}

// Unsqueeze inserts a dimension of extent 1 before dim (0..ndim; negative
// counts from the end, -1 appends). Its stride keeps a contiguous view
// contiguous, as in PyTorch.
func (v *View) Unsqueeze(dim int) (*View, error) {
	l, err := v.lay.Unsqueeze(dim)
	if err != nil {
		return nil, err
	}
	return v.sub(&l), nil
}

// Broadcast returns v stretched to shape by NumPy's rules (see
// Layout.Broadcast). Several positions of the result then share one
// element: it stays writable, as PyTorch's expand does, but writing through
// it (Set) changes every position at once, and Copy refuses it as a
// destination.
func (v *View) Broadcast(shape ...int64) (*View, error) {
	l, err := v.lay.Broadcast(shape...)
	if err != nil {
		return nil, err
	}
	return v.sub(&l), nil
}

// AsReadOnly returns a view of the same memory and layout that refuses
// writes (HostSlice, Set, Copy into it; DLPack export sets READ_ONLY).
func (v *View) AsReadOnly() *View {
	nv := v.sub(&v.lay)
	nv.readOnly = true
	return nv
}
