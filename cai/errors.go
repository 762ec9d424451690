package cai

import "errors"

// The errors Validate, DecodeJSON and the conversions wrap. Every error
// this package returns wraps exactly one of them (test with errors.Is) and
// adds what was wrong: the key, the value and the limit.
var (
	// ErrSyntax: the JSON text is malformed or a value has the wrong JSON
	// type (a string where an integer belongs, a float extent, ...).
	ErrSyntax = errors.New("cai: malformed dictionary")
	// ErrMissing: a required key (shape, typestr, version; data for CAI)
	// is absent.
	ErrMissing = errors.New("cai: missing required key")
	// ErrVersion: CAI version below 2 or above 3, or an array interface
	// version other than 3.
	ErrVersion = errors.New("cai: unsupported version")
	// ErrTypestr: the typestr does not follow NumPy's grammar.
	ErrTypestr = errors.New("cai: bad typestr")
	// ErrUnsupported: well-formed but not representable here: object,
	// string, datetime and bit-field kinds, a non-null mask, opaque void
	// types, types with no DLPack equivalent.
	ErrUnsupported = errors.New("cai: unsupported")
	// ErrBigEndian: the data is stored big-endian.
	ErrBigEndian = errors.New("cai: big-endian data is not supported")
	// ErrDescr: the descr list is malformed or does not add up to the
	// typestr's item size.
	ErrDescr = errors.New("cai: bad descr")
	// ErrShape: too many dimensions, a negative extent, or an element
	// count that overflows int64.
	ErrShape = errors.New("cai: bad shape")
	// ErrStrides: the strides have the wrong length, are not multiples of
	// the item size, or reach past the address space.
	ErrStrides = errors.New("cai: bad strides")
	// ErrData: a NULL pointer for a non-empty array, or data the protocol
	// does not allow (no pointer for CAI, offset with a pointer).
	ErrData = errors.New("cai: bad data")
	// ErrStream: stream 0 (disallowed by CAI v3), or a stream on a host
	// array interface.
	ErrStream = errors.New("cai: bad stream")
	// ErrKind: the Interface's Kind is neither CUDA nor Host, or the wrong
	// one for the operation.
	ErrKind = errors.New("cai: bad kind")
)
