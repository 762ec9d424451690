package cai

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dlbridge/dlbridge/dlpack"
)

// The JSON form of the dictionary is what Python's json.dumps prints for
// it (tuples become lists, None null, booleans true/false; separators ", "
// and ": "; non-ASCII escaped as \uXXXX), with the keys in this order:
//
//	{"shape": [2, 3], "typestr": "<f4", "data": [140234567, false], "version": 3,
//	 "strides": null, "descr": [["", "<f4"]], "mask": null, "stream": 1}
//
// "descr" is written only when Descr is not nil, "stream" always for CUDA
// (null for None) and for Host only when set (an invalid dictionary, kept
// so that it round-trips), "offset" only when not 0. "data" is null for
// buffer-protocol data.

// maxJSONDepth bounds nesting in foreign JSON (unknown values we skip,
// descr lists, masks).
const maxJSONDepth = 64

// MarshalJSON implements json.Marshaler with AppendJSON.
func (i Interface) MarshalJSON() ([]byte, error) {
	return i.AppendJSON(make([]byte, 0, 256))
}

// AppendJSON appends the JSON form of i to dst. It encodes whatever i
// holds, valid or not (test corpora need invalid dictionaries too); it
// fails only for masks or records nested deeper than the decoder accepts
// (which also stops a cyclic Mask).
func (i *Interface) AppendJSON(dst []byte) ([]byte, error) {
	return i.appendJSON(dst, 0)
}

func (i *Interface) appendJSON(b []byte, depth int) ([]byte, error) {
	if depth > maxMaskDepth {
		return b, fmt.Errorf("%w: masks nested deeper than %d", ErrSyntax, maxMaskDepth)
	}
	b = append(b, `{"shape": `...)
	b = appendInts(b, i.Shape)
	b = append(b, `, "typestr": `...)
	b = appendString(b, i.Typestr)
	b = append(b, `, "data": `...)
	if i.Data.FromBuffer {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		b = strconv.AppendUint(b, uint64(i.Data.Ptr), 10)
		if i.Data.ReadOnly {
			b = append(b, ", true]"...)
		} else {
			b = append(b, ", false]"...)
		}
	}
	b = append(b, `, "version": `...)
	b = strconv.AppendInt(b, int64(i.Version), 10)
	b = append(b, `, "strides": `...)
	if i.Strides == nil {
		b = append(b, "null"...)
	} else {
		b = appendInts(b, i.Strides)
	}
	if i.Descr != nil {
		b = append(b, `, "descr": `...)
		var err error
		if b, err = appendDescr(b, i.Descr, 0); err != nil {
			return b, err
		}
	}
	b = append(b, `, "mask": `...)
	if i.Mask == nil {
		b = append(b, "null"...)
	} else {
		var err error
		if b, err = i.Mask.appendJSON(b, depth+1); err != nil {
			return b, err
		}
	}
	if i.Kind != Host || i.Stream.Present {
		b = append(b, `, "stream": `...)
		if i.Stream.Present {
			b = strconv.AppendUint(b, uint64(i.Stream.Handle), 10)
		} else {
			b = append(b, "null"...)
		}
	}
	if i.Offset != 0 {
		b = append(b, `, "offset": `...)
		b = strconv.AppendInt(b, i.Offset, 10)
	}
	return append(b, '}'), nil
}

func appendInts(b []byte, v []int64) []byte {
	b = append(b, '[')
	for k, x := range v {
		if k > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, x, 10)
	}
	return append(b, ']')
}

func appendDescr(b []byte, d Descr, depth int) ([]byte, error) {
	if depth > maxDescrDepth {
		return b, fmt.Errorf("%w: records nested deeper than %d", ErrDescr, maxDescrDepth)
	}
	b = append(b, '[')
	for k, f := range d {
		if k > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '[')
		if f.Title != "" {
			b = append(b, '[')
			b = appendString(b, f.Title)
			b = append(b, ", "...)
			b = appendString(b, f.Name)
			b = append(b, ']')
		} else {
			b = appendString(b, f.Name)
		}
		b = append(b, ", "...)
		if f.Fields != nil {
			var err error
			if b, err = appendDescr(b, f.Fields, depth+1); err != nil {
				return b, err
			}
		} else {
			b = appendString(b, f.Typestr)
		}
		if f.Shape != nil {
			b = append(b, ", "...)
			b = appendInts(b, f.Shape)
		}
		b = append(b, ']')
	}
	return append(b, ']'), nil
}

const hexDigits = "0123456789abcdef"

// appendString writes s as Python's json.dumps does with ensure_ascii:
// printable ASCII as is, \" \\ \b \f \n \r \t, everything else \uXXXX
// (surrogate pairs above U+FFFF; invalid UTF-8 as U+FFFD).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for k := 0; k < len(s); {
		c := s[k]
		if c >= 0x20 && c <= 0x7e && c != '"' && c != '\\' {
			b = append(b, c)
			k++
			continue
		}
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
			k++
			continue
		case '\b':
			b = append(b, '\\', 'b')
			k++
			continue
		case '\f':
			b = append(b, '\\', 'f')
			k++
			continue
		case '\n':
			b = append(b, '\\', 'n')
			k++
			continue
		case '\r':
			b = append(b, '\\', 'r')
			k++
			continue
		case '\t':
			b = append(b, '\\', 't')
			k++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[k:])
		k += size
		if r >= 0x10000 {
			r1, r2 := utf16.EncodeRune(r)
			b = appendU(b, r1)
			b = appendU(b, r2)
		} else {
			b = appendU(b, r)
		}
	}
	return append(b, '"')
}

func appendU(b []byte, r rune) []byte {
	return append(b, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
}

// UnmarshalJSON implements json.Unmarshaler: it decodes the dictionary
// into i, keeping i.Kind (set it first: the JSON does not say which
// protocol it follows) and replacing every other field. It does not
// validate.
func (i *Interface) UnmarshalJSON(data []byte) error {
	v, err := DecodeJSON(data, i.Kind)
	if err != nil {
		return err
	}
	*i = v
	return nil
}

// DecodeJSON reads the JSON form of a dictionary of the given kind. It
// checks syntax and JSON types (integers where Python has ints, lists
// where it has tuples, ...) and requires shape, typestr and version;
// keys it does not know are skipped, as a consumer of a newer version of
// the protocol should. It does not validate the values: call Validate.
// Errors wrap ErrSyntax (with the byte offset), ErrMissing, ErrShape,
// ErrStrides or ErrStream.
func DecodeJSON(data []byte, kind Kind) (Interface, error) {
	d := decoder{buf: data}
	var i Interface
	if err := d.object(&i, kind, 0); err != nil {
		return Interface{}, err
	}
	d.ws()
	if d.pos != len(d.buf) {
		return Interface{}, d.errorf("unexpected %s after the dictionary", d.describe())
	}
	return i, nil
}

// decoder is a strict JSON reader specialised for the dictionary: it
// reads values straight into the Interface without building a tree.
type decoder struct {
	buf  []byte
	pos  int
	ints [dlpack.MaxNDim]int64 // scratch for integer lists
}

func (d *decoder) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: JSON offset %d: %s", ErrSyntax, d.pos, fmt.Sprintf(format, args...))
}

// describe names the next token for error messages.
func (d *decoder) describe() string {
	if d.pos >= len(d.buf) {
		return "end of input"
	}
	c := d.buf[d.pos]
	switch {
	case c == '"':
		return "a string"
	case c == '[':
		return "a list"
	case c == '{':
		return "a dictionary"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || (c >= '0' && c <= '9'):
		return "a number"
	}
	return strconv.QuoteRune(rune(c))
}

func (d *decoder) ws() {
	for d.pos < len(d.buf) {
		switch d.buf[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte (0 at the end).
func (d *decoder) peek() byte {
	d.ws()
	if d.pos >= len(d.buf) {
		return 0
	}
	return d.buf[d.pos]
}

func (d *decoder) expect(c byte) error {
	if d.peek() != c {
		return d.errorf("expected %q, found %s", rune(c), d.describe())
	}
	d.pos++
	return nil
}

// literal consumes word (true, false, null) if it comes next.
func (d *decoder) literal(word string) bool {
	if d.peek() == word[0] && len(d.buf)-d.pos >= len(word) && string(d.buf[d.pos:d.pos+len(word)]) == word {
		d.pos += len(word)
		return true
	}
	return false
}

// Keys of the dictionary, as bits for the required-key check.
const (
	hasShape = 1 << iota
	hasTypestr
	hasVersion
)

func (d *decoder) object(i *Interface, kind Kind, depth int) error {
	if depth > maxMaskDepth {
		return d.errorf("masks nested deeper than %d", maxMaskDepth)
	}
	*i = Interface{Kind: kind, Data: Data{FromBuffer: true}}
	if d.peek() != '{' {
		return d.errorf("expected a dictionary, found %s", d.describe())
	}
	d.pos++
	seen := 0
	if d.peek() == '}' {
		d.pos++
	} else {
		for {
			key, err := d.str()
			if err != nil {
				return err
			}
			if err := d.expect(':'); err != nil {
				return err
			}
			switch string(key) {
			case "shape":
				seen |= hasShape
				if i.Shape, err = d.intList("shape", ErrShape); err != nil {
					return err
				}
				if i.Shape == nil {
					return d.errorf("shape must be a list of integers, found null")
				}
			case "typestr":
				seen |= hasTypestr
				if d.peek() != '"' {
					return d.errorf("typestr must be a string, found %s", d.describe())
				}
				s, err := d.str()
				if err != nil {
					return err
				}
				i.Typestr = internTypestr(s)
			case "data":
				if err := d.data(&i.Data); err != nil {
					return err
				}
			case "version":
				seen |= hasVersion
				v, err := d.int("version")
				if err != nil {
					return err
				}
				if v < math.MinInt32 || v > math.MaxInt32 {
					return d.errorf("version %d out of range", v)
				}
				i.Version = int(v)
			case "strides":
				if i.Strides, err = d.intList("strides", ErrStrides); err != nil {
					return err
				}
			case "descr":
				if d.literal("null") {
					i.Descr = nil
					break
				}
				if i.Descr, err = d.descr(1); err != nil {
					return err
				}
			case "mask":
				if d.literal("null") {
					i.Mask = nil
					break
				}
				m := new(Interface)
				if err := d.object(m, kind, depth+1); err != nil {
					return err
				}
				i.Mask = m
			case "stream":
				if d.literal("null") {
					i.Stream = Stream{}
					break
				}
				if d.peek() == '-' {
					v, err := d.int("stream")
					if err != nil {
						return err
					}
					if v < 0 {
						return fmt.Errorf("%w: stream %d is negative (want None, 1, 2 or a stream handle)", ErrStream, v)
					}
					i.Stream = Stream{Present: true} // "-0"
					break
				}
				v, err := d.uint("stream")
				if err != nil {
					return err
				}
				i.Stream = Stream{Handle: uintptr(v), Present: true}
			case "offset":
				if i.Offset, err = d.int("offset"); err != nil {
					return err
				}
			default:
				if err := d.skip(1); err != nil {
					return err
				}
			}
			c := d.peek()
			d.pos++
			if c == '}' {
				break
			}
			if c != ',' {
				d.pos--
				return d.errorf("expected ',' or '}' in the dictionary, found %s", d.describe())
			}
		}
	}
	switch {
	case seen&hasShape == 0:
		return fmt.Errorf("%w: \"shape\"", ErrMissing)
	case seen&hasTypestr == 0:
		return fmt.Errorf("%w: \"typestr\"", ErrMissing)
	case seen&hasVersion == 0:
		return fmt.Errorf("%w: \"version\"", ErrMissing)
	}
	return nil
}

func internTypestr(s []byte) string {
	if t, ok := commonTypestrs[string(s)]; ok {
		return t
	}
	return string(s)
}

func (d *decoder) data(out *Data) error {
	if d.literal("null") {
		*out = Data{FromBuffer: true}
		return nil
	}
	if d.peek() != '[' {
		return d.errorf("data must be a list [pointer, read-only] or null, found %s", d.describe())
	}
	d.pos++
	p, err := d.uint("data[0] (pointer)")
	if err != nil {
		return err
	}
	if err := d.expect(','); err != nil {
		return err
	}
	var ro bool
	switch {
	case d.literal("true"):
		ro = true
	case d.literal("false"):
	default:
		return d.errorf("data[1] (read-only) must be a boolean, found %s", d.describe())
	}
	if d.peek() != ']' {
		return d.errorf("data must have exactly 2 items (pointer, read-only)")
	}
	d.pos++
	if uint64(p) > uint64(^uintptr(0)) {
		return d.errorf("data pointer %d does not fit a %d-bit address", p, strconv.IntSize)
	}
	*out = Data{Ptr: uintptr(p), ReadOnly: ro}
	return nil
}

// intList reads null (nil) or a list of at most MaxNDim integers.
func (d *decoder) intList(what string, tooMany error) ([]int64, error) {
	if d.literal("null") {
		return nil, nil
	}
	if d.peek() != '[' {
		return nil, d.errorf("%s must be a list of integers, found %s", what, d.describe())
	}
	d.pos++
	n := 0
	if d.peek() == ']' {
		d.pos++
		return []int64{}, nil
	}
	for {
		if n == len(d.ints) {
			return nil, fmt.Errorf("%w: %s has more than %d entries", tooMany, what, dlpack.MaxNDim)
		}
		v, err := d.int(what)
		if err != nil {
			return nil, err
		}
		d.ints[n] = v
		n++
		c := d.peek()
		d.pos++
		if c == ']' {
			break
		}
		if c != ',' {
			d.pos--
			return nil, d.errorf("expected ',' or ']' in %s, found %s", what, d.describe())
		}
	}
	return append(make([]int64, 0, n), d.ints[:n]...), nil
}

// number scans a JSON number and reports its text and whether it is an
// integer (no fraction, no exponent).
func (d *decoder) number(what string) (text []byte, integer bool, err error) {
	d.ws()
	start := d.pos
	p := d.pos
	if p < len(d.buf) && d.buf[p] == '-' {
		p++
	}
	switch {
	case p < len(d.buf) && d.buf[p] == '0':
		p++
	case p < len(d.buf) && d.buf[p] >= '1' && d.buf[p] <= '9':
		for p < len(d.buf) && d.buf[p] >= '0' && d.buf[p] <= '9' {
			p++
		}
	default:
		return nil, false, d.errorf("%s must be an integer, found %s", what, d.describe())
	}
	integer = true
	if p < len(d.buf) && d.buf[p] == '.' {
		integer = false
		p++
		q := p
		for p < len(d.buf) && d.buf[p] >= '0' && d.buf[p] <= '9' {
			p++
		}
		if p == q {
			d.pos = p
			return nil, false, d.errorf("malformed number in %s", what)
		}
	}
	if p < len(d.buf) && (d.buf[p] == 'e' || d.buf[p] == 'E') {
		integer = false
		p++
		if p < len(d.buf) && (d.buf[p] == '+' || d.buf[p] == '-') {
			p++
		}
		q := p
		for p < len(d.buf) && d.buf[p] >= '0' && d.buf[p] <= '9' {
			p++
		}
		if p == q {
			d.pos = p
			return nil, false, d.errorf("malformed number in %s", what)
		}
	}
	d.pos = p
	return d.buf[start:p], integer, nil
}

func (d *decoder) int(what string) (int64, error) {
	d.ws()
	at := d.pos
	text, integer, err := d.number(what)
	if err != nil {
		return 0, err
	}
	if !integer {
		d.pos = at
		return 0, d.errorf("%s must be an integer, found %s", what, text)
	}
	if v, ok := smallInt(text); ok {
		return v, nil
	}
	v, err := strconv.ParseInt(string(text), 10, 64)
	if err != nil {
		d.pos = at
		return 0, d.errorf("%s value %s does not fit int64", what, text)
	}
	return v, nil
}

// smallInt converts the text of a JSON integer of at most 18 digits, which
// cannot overflow int64, without strconv; longer ones report false.
func smallInt(text []byte) (int64, bool) {
	neg := text[0] == '-'
	digits := text
	if neg {
		digits = text[1:]
	}
	if len(digits) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range digits {
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

func (d *decoder) uint(what string) (uint64, error) {
	d.ws()
	at := d.pos
	text, integer, err := d.number(what)
	if err != nil {
		return 0, err
	}
	if !integer {
		d.pos = at
		return 0, d.errorf("%s must be an integer, found %s", what, text)
	}
	if text[0] == '-' {
		if string(text) == "-0" {
			return 0, nil
		}
		d.pos = at
		return 0, d.errorf("%s must not be negative, found %s", what, text)
	}
	if v, ok := smallInt(text); ok {
		return uint64(v), nil
	}
	v, err := strconv.ParseUint(string(text), 10, 64)
	if err != nil {
		d.pos = at
		return 0, d.errorf("%s value %s does not fit 64 bits", what, text)
	}
	return v, nil
}

// str reads a JSON string and returns its decoded bytes: a sub-slice of
// the input when it has no escapes, a new slice otherwise.
func (d *decoder) str() ([]byte, error) {
	if d.peek() != '"' {
		return nil, d.errorf("expected a string, found %s", d.describe())
	}
	d.pos++
	start := d.pos
	for d.pos < len(d.buf) {
		c := d.buf[d.pos]
		switch {
		case c == '"':
			s := d.buf[start:d.pos]
			d.pos++
			if !utf8.Valid(s) {
				return nil, d.errorf("string is not valid UTF-8")
			}
			return s, nil
		case c == '\\':
			return d.strSlow(start)
		case c < 0x20:
			return nil, d.errorf("control character %#x in a string", c)
		}
		d.pos++
	}
	return nil, d.errorf("unterminated string")
}

func (d *decoder) strSlow(start int) ([]byte, error) {
	out := append([]byte(nil), d.buf[start:d.pos]...)
	for d.pos < len(d.buf) {
		c := d.buf[d.pos]
		switch {
		case c == '"':
			d.pos++
			if !utf8.Valid(out) {
				return nil, d.errorf("string is not valid UTF-8")
			}
			return out, nil
		case c < 0x20:
			return nil, d.errorf("control character %#x in a string", c)
		case c != '\\':
			out = append(out, c)
			d.pos++
			continue
		}
		d.pos++
		if d.pos >= len(d.buf) {
			break
		}
		e := d.buf[d.pos]
		d.pos++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return nil, d.errorf("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A high surrogate followed by a low one is one rune; a
				// lone surrogate (legal in Python strings) has no UTF-8
				// form and becomes U+FFFD, as encoding/json does.
				save := d.pos
				if d.pos+1 < len(d.buf) && d.buf[d.pos] == '\\' && d.buf[d.pos+1] == 'u' {
					d.pos += 2
					if r2, ok := d.hex4(); ok {
						if c := utf16.DecodeRune(r, r2); c != utf8.RuneError {
							out = utf8.AppendRune(out, c)
							continue
						}
					}
				}
				d.pos = save
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			d.pos--
			return nil, d.errorf("bad escape \\%c", e)
		}
	}
	return nil, d.errorf("unterminated string")
}

func (d *decoder) hex4() (rune, bool) {
	if len(d.buf)-d.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.buf[d.pos : d.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	d.pos += 4
	return r, true
}

// descr reads a descr list: [[name, typestr-or-descr(, shape)], ...].
func (d *decoder) descr(depth int) (Descr, error) {
	if depth > maxDescrDepth {
		return nil, d.errorf("descr nested deeper than %d", maxDescrDepth)
	}
	if d.peek() != '[' {
		return nil, d.errorf("descr must be a list of [name, type] lists, found %s", d.describe())
	}
	d.pos++
	out := Descr{}
	if d.peek() == ']' {
		d.pos++
		return out, nil
	}
	for {
		f, err := d.field(depth)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
		c := d.peek()
		d.pos++
		if c == ']' {
			return out, nil
		}
		if c != ',' {
			d.pos--
			return nil, d.errorf("expected ',' or ']' in descr, found %s", d.describe())
		}
	}
}

func (d *decoder) field(depth int) (Field, error) {
	var f Field
	if d.peek() != '[' {
		return f, d.errorf("descr entry must be a [name, type] or [name, type, shape] list, found %s", d.describe())
	}
	d.pos++
	// Name: a string, or [title, name].
	switch d.peek() {
	case '"':
		s, err := d.str()
		if err != nil {
			return f, err
		}
		f.Name = string(s)
	case '[':
		d.pos++
		t, err := d.str()
		if err != nil {
			return f, err
		}
		if err := d.expect(','); err != nil {
			return f, err
		}
		n, err := d.str()
		if err != nil {
			return f, err
		}
		if err := d.expect(']'); err != nil {
			return f, err
		}
		f.Title, f.Name = string(t), string(n)
	default:
		return f, d.errorf("descr field name must be a string or [title, name], found %s", d.describe())
	}
	if err := d.expect(','); err != nil {
		return f, err
	}
	// Type: a typestr or a nested descr.
	switch d.peek() {
	case '"':
		s, err := d.str()
		if err != nil {
			return f, err
		}
		f.Typestr = internTypestr(s)
	case '[':
		sub, err := d.descr(depth + 1)
		if err != nil {
			return f, err
		}
		f.Fields = sub
	default:
		return f, d.errorf("descr field %q type must be a typestr or a list of fields, found %s", f.Name, d.describe())
	}
	// Optional shape: a list of integers, or one integer (NumPy accepts
	// both when building a dtype).
	if d.peek() == ',' {
		d.pos++
		if c := d.peek(); c == '-' || (c >= '0' && c <= '9') {
			v, err := d.int("descr field shape")
			if err != nil {
				return f, err
			}
			f.Shape = []int64{v}
		} else {
			sh, err := d.intList("descr field shape", ErrDescr)
			if err != nil {
				return f, err
			}
			if sh == nil {
				return f, d.errorf("descr field %q shape must be a list of integers, found null", f.Name)
			}
			f.Shape = sh
		}
	}
	if err := d.expect(']'); err != nil {
		return f, err
	}
	return f, nil
}

// skip reads and discards one JSON value of any type (an unknown key's).
func (d *decoder) skip(depth int) error {
	if depth > maxJSONDepth {
		return d.errorf("value nested deeper than %d", maxJSONDepth)
	}
	switch c := d.peek(); {
	case c == '"':
		_, err := d.str()
		return err
	case c == '{', c == '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		d.pos++
		if d.peek() == closer {
			d.pos++
			return nil
		}
		for {
			if c == '{' {
				if _, err := d.str(); err != nil {
					return err
				}
				if err := d.expect(':'); err != nil {
					return err
				}
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			n := d.peek()
			d.pos++
			if n == closer {
				return nil
			}
			if n != ',' {
				d.pos--
				return d.errorf("expected ',' or %q, found %s", rune(closer), d.describe())
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		_, _, err := d.number("value")
		return err
	case d.literal("true"), d.literal("false"), d.literal("null"):
		return nil
	}
	return d.errorf("expected a JSON value, found %s", d.describe())
}
