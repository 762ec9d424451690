package cai

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dlbridge/dlbridge/dlpack"
)

// MarshalJSON implements json.Marshaler with AppendJSON.
func (i Interface) MarshalJSON() ([]byte, error) { return i.AppendJSON(make([]byte, 0, 256)) }

// AppendJSON appends the JSON form of i to dst: what Python's json.dumps
// prints for the dictionary (separators ", " and ": ", non-ASCII escaped
// as \uXXXX), with the keys in the order shape, typestr, data (null for
// buffer-protocol data), version, strides, descr (only when Descr is not
// nil), mask, stream (always for CUDA, null for None; for Host only when
// set, an invalid dictionary kept so that it round-trips), offset (only
// when not 0). It encodes whatever i holds, valid or not (test corpora
// need invalid dictionaries too); it fails only for masks or records
// nested deeper than the decoder accepts (which also stops a cyclic Mask).
func (i *Interface) AppendJSON(dst []byte) ([]byte, error) { return i.appendJSON(dst, 0) }

func (i *Interface) appendJSON(b []byte, depth int) (_ []byte, err error) {
	if depth > maxMaskDepth {
		return b, fmt.Errorf("%w: masks nested deeper than %d", ErrSyntax, maxMaskDepth)
	}
	var data any // null
	if !i.Data.FromBuffer {
		data = []any{uint64(i.Data.Ptr), i.Data.ReadOnly}
	}
	b = fmt.Appendf(b, `{"shape": %s, "typestr": %s, "data": %s, "version": %d, "strides": %s`,
		py(append([]int64{}, i.Shape...)), py(i.Typestr), py(data), i.Version, py(i.Strides))
	if i.Descr != nil {
		descr, err := wireDescr(i.Descr, 0)
		if err != nil {
			return b, err
		}
		b = fmt.Appendf(b, `, "descr": %s`, py(descr))
	}
	if b = append(b, `, "mask": `...); i.Mask == nil {
		b = append(b, "null"...)
	} else if b, err = i.Mask.appendJSON(b, depth+1); err != nil {
		return b, err
	}
	if i.Stream.Present {
		b = fmt.Appendf(b, `, "stream": %d`, i.Stream.Handle)
	} else if i.Kind != Host {
		b = append(b, `, "stream": null`...)
	}
	if i.Offset != 0 {
		b = fmt.Appendf(b, `, "offset": %d`, i.Offset)
	}
	return append(b, '}'), nil
}

// wireDescr is d as NumPy lists it: [[name or [title, name], typestr or
// descr (, shape)], ...].
func wireDescr(d Descr, depth int) (out []any, err error) {
	if depth > maxDescrDepth {
		return nil, fmt.Errorf("%w: records nested deeper than %d", ErrDescr, maxDescrDepth)
	}
	out = []any{}
	for _, f := range d {
		e := []any{f.Name, f.Typestr}
		if f.Title != "" {
			e[0] = []string{f.Title, f.Name}
		}
		if f.Fields != nil {
			if e[1], err = wireDescr(f.Fields, depth+1); err != nil {
				return nil, err
			}
		}
		if f.Shape != nil {
			e = append(e, f.Shape)
		}
		out = append(out, e)
	}
	return out, nil
}

// py is v (lists, strings, integers, booleans, nil) as json.dumps prints it.
func py(v any) []byte { return appendPython(nil, v) }

// appendPython appends v as json.dumps prints it. encoding/json writes it
// compact (bad UTF-8 as \ufffd; v holds nothing it could fail on); outside
// strings, ',' gets the space json.dumps puts after it, and, as
// ensure_ascii does, DEL and all beyond ASCII become \uXXXX, in UTF-16.
func appendPython(dst []byte, v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	b, inString := bytes.TrimSuffix(buf.Bytes(), []byte("\n")), false
	for k := 0; k < len(b); k++ {
		switch c := b[k]; {
		case c >= 0x7f:
			r, n := utf8.DecodeRune(b[k:])
			for _, u := range utf16.AppendRune(nil, r) {
				dst = fmt.Appendf(dst, `\u%04x`, u)
			}
			k += n - 1
		case inString && c == '\\': // an escape: the next byte is no quote
			dst, k = append(dst, c, b[k+1]), k+1
		case c == ',' && !inString:
			dst = append(dst, ", "...)
		default:
			dst, inString = append(dst, c), inString != (c == '"')
		}
	}
	return dst
}

// appendString writes s as a JSON string the way json.dumps does.
func appendString(b []byte, s string) []byte { return appendPython(b, s) }

// UnmarshalJSON implements json.Unmarshaler: it decodes the dictionary
// into i, keeping i.Kind (set it first: the JSON does not say which
// protocol it follows) and replacing every other field. It does not
// validate.
func (i *Interface) UnmarshalJSON(data []byte) error {
	v, err := DecodeJSON(data, i.Kind)
	if err == nil {
		*i = v
	}
	return err
}

// DecodeJSON reads the JSON form of a dictionary of the given kind. It
// checks syntax and nesting, then JSON types (integers where Python has
// ints, lists where it has tuples, ...), and requires shape, typestr and
// version; keys it does not know are skipped, as a consumer of a newer
// version of the protocol should, and of a repeated key the last counts,
// as in Python. It does not validate the values: call Validate. Errors
// wrap ErrSyntax (with the byte offset for malformed JSON), ErrMissing,
// ErrShape, ErrStrides or ErrStream.
func DecodeJSON(data []byte, kind Kind) (Interface, error) {
	d := decoder{buf: data}
	if i := d.object(d.value(), kind, 0); d.err == nil {
		return i, nil
	}
	return Interface{}, d.err
}

// decoder converts what encoding/json reads (maps, lists, strings,
// json.Numbers, booleans, nils) into an Interface. The first error counts.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) failf(kind error, format string, args ...any) bool {
	d.err = cmp.Or(d.err, fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...)))
	return false
}

// expect fails with "must, found found" unless ok.
func (d *decoder) expect(ok bool, found any, must string) bool {
	return ok || d.failf(ErrSyntax, "%s, found %v", must, found)
}

// as returns v as a T, or fails naming the JSON type found.
func as[T any](d *decoder, v any, must string) T {
	t, ok := v.(T)
	if !ok {
		d.expect(false, describe(v), must)
	}
	return t
}

// describe names the JSON type of v, which encoding/json decoded.
func describe(v any) string { return jsonTypes[fmt.Sprintf("%T", v)] }

var jsonTypes = map[string]string{"<nil>": "null", "bool": "a boolean", "json.Number": "a number",
	"string": "a string", "[]interface {}": "a list", "map[string]interface {}": "a dictionary"}

// syntaxWords adds our words to encoding/json's syntax errors.
var syntaxWords = strings.NewReplacer("after object key:value pair", "after a dictionary item: expected ',' or '}'",
	"after array element", "after a list item: expected ',' or ']'", "numeric literal", "number: malformed number",
	"looking for beginning of object key string", "where a key belongs: expected a string",
	"looking for beginning of value", "where a value belongs: expected a JSON value",
	"escape", "escape: bad escape", "in string literal", "in a string: control character")

// value reads the text as one JSON value with encoding/json, and fails if
// the text is not UTF-8 (encoding/json would replace bad bytes silently)
// or nests too deep, whether or not the JSON is well formed.
func (d *decoder) value() (v any) {
	dec := json.NewDecoder(bytes.NewReader(d.buf))
	dec.UseNumber()
	err, deep := dec.Decode(&v), nestingError(d.buf)
	var se *json.SyntaxError
	switch rest := bytes.TrimLeft(d.buf[dec.InputOffset():], " \t\r\n"); {
	case len(bytes.Trim(d.buf, " \t\r\n")) == 0:
		d.failf(ErrSyntax, "expected a dictionary, found end of input")
	case !utf8.Valid(d.buf):
		d.failf(ErrSyntax, "the text must be UTF-8, found other bytes")
	case deep != "":
		d.failf(ErrSyntax, "%s", deep)
	case errors.As(err, &se):
		d.failf(ErrSyntax, "JSON offset %d: %s", se.Offset, syntaxWords.Replace(se.Error()))
	case err != nil: // io.ErrUnexpectedEOF
		d.failf(ErrSyntax, "unexpected end of input: unterminated string, list or dictionary")
	case len(rest) > 0:
		d.failf(ErrSyntax, "unexpected %q after the dictionary", rest[0])
	}
	return v
}

// maxJSONDepth bounds nesting in the values of the top-level keys.
const maxJSONDepth = 64

// nestingError finds a top-level key's value holding anything inside more
// than maxJSONDepth lists and dictionaries or, for descr, a record deeper
// than maxDescrDepth (masks are left to object, which checks their depth
// and descr, and to encoding/json's own limit). It reads the bytes,
// tracking strings and depth, so that malformed JSON gets it too.
func nestingError(text []byte) string {
	key, depth, start, inString := "", 0, 0, false
	for k := 0; k < len(text); k++ {
		switch c := text[k]; {
		case inString && c == '\\':
			k++
		case inString:
			if inString = c != '"'; !inString && depth == 1 {
				key, _ = strconv.Unquote(string(text[start : k+1])) // a key, or a value before the next key
			}
		case c == ']' || c == '}':
			depth--
		case strings.IndexByte(" \t\r\n,:", c) >= 0: // between tokens
		case key == "descr" && c == '[' && depth > 2*maxDescrDepth+1: // fields of record 33
			return fmt.Sprintf("descr nested deeper than %d", maxDescrDepth)
		case key != "descr" && key != "mask" && depth > maxJSONDepth:
			return fmt.Sprintf("value nested deeper than %d", maxJSONDepth)
		case c == '[' || c == '{':
			depth++
		case c == '"':
			inString, start = true, k
		}
	}
	return ""
}

// object converts a dictionary (a mask recursively).
func (d *decoder) object(v any, kind Kind, depth int) Interface {
	if depth > maxMaskDepth {
		d.failf(ErrSyntax, "masks nested deeper than %d", maxMaskDepth)
	}
	m := as[map[string]any](d, v, "expected a dictionary")
	for _, k := range []string{"shape", "typestr", "version"} {
		if _, ok := m[k]; !ok {
			d.failf(ErrMissing, "%q", k)
		}
	}
	i := Interface{Kind: kind, Shape: d.ints(m["shape"], "shape", ErrShape), Data: Data{FromBuffer: true}}
	d.expect(i.Shape != nil, "null", "shape must be a list of integers")
	i.Typestr = as[string](d, m["typestr"], "typestr must be a string")
	if data := m["data"]; data != nil {
		l := as[[]any](d, data, "data must be a list [pointer, read-only] or null")
		if d.expect(len(l) == 2, len(l), "data must have exactly 2 items (pointer, read-only)") {
			p, u := d.integer(l[0], "data[0] (pointer)", true)
			d.expect(p >= 0, p, "data[0] (pointer) must not be negative")
			d.expect(uint64(uintptr(u)) == u, u, "data[0] (pointer) must fit a uintptr")
			i.Data = Data{Ptr: uintptr(u), ReadOnly: as[bool](d, l[1], "data[1] (read-only) must be a boolean")}
		}
	}
	version, _ := d.integer(m["version"], "version", false)
	i.Version = int(version)
	d.expect(int64(i.Version) == version, version, "version must fit an int")
	i.Strides, i.Descr = d.ints(m["strides"], "strides", ErrStrides), d.descr(m["descr"], 1)
	if s := m["stream"]; s != nil {
		h, u := d.integer(s, "stream", true)
		i.Stream = StreamHandle(uintptr(u))
		if h < 0 {
			d.failf(ErrStream, "stream %d is negative (want None, 1, 2 or a stream handle)", h)
		}
	}
	if offset, ok := m["offset"]; ok {
		i.Offset, _ = d.integer(offset, "offset", false)
	}
	if m["mask"] != nil && d.err == nil {
		mask := d.object(m["mask"], kind, depth+1)
		i.Mask = &mask
	}
	return i
}

// str reads the text as one JSON string.
func (d *decoder) str() ([]byte, error) {
	s := as[string](d, d.value(), "expected a string")
	return []byte(s), d.err
}

// integer converts a JSON integer (no fraction, no exponent) that fits
// int64 or, if unsigned, either int64 (i; the caller refuses negative
// values) or uint64 (u).
func (d *decoder) integer(v any, what string, unsigned bool) (i int64, u uint64) {
	n, isNumber := v.(json.Number)
	i, err := strconv.ParseInt(string(n), 10, 64)
	if u = uint64(i); unsigned && err != nil {
		u, err = strconv.ParseUint(string(n), 10, 64)
	}
	switch {
	case !isNumber || strings.ContainsAny(string(n), ".eE"):
		d.expect(false, cmp.Or(string(n), describe(v)), what+" must be an integer")
	case err != nil && unsigned:
		d.failf(ErrSyntax, "%s value %s does not fit 64 bits", what, n)
	case err != nil:
		d.failf(ErrSyntax, "%s value %s does not fit int64", what, n)
	}
	return i, u
}

// ints converts null (nil) or a list of at most MaxNDim integers.
func (d *decoder) ints(v any, what string, tooMany error) []int64 {
	if v == nil {
		return nil
	}
	l := as[[]any](d, v, what+" must be a list of integers")
	out := make([]int64, len(l))
	for k, e := range l {
		if k == dlpack.MaxNDim {
			d.failf(tooMany, "%s has more than %d entries", what, dlpack.MaxNDim)
		}
		out[k], _ = d.integer(e, what, false)
	}
	return out
}

// descr converts null (nil) or a descr list: [[name or [title, name],
// typestr or descr (, shape: a list, or one integer as NumPy accepts)], ...].
func (d *decoder) descr(v any, depth int) Descr {
	if v == nil {
		return nil
	} else if depth > maxDescrDepth {
		d.failf(ErrSyntax, "descr nested deeper than %d", maxDescrDepth)
		return nil
	}
	out := Descr{}
	for _, e := range as[[]any](d, v, "descr must be a list of [name, type] lists") {
		l := as[[]any](d, e, "descr entry must be a [name, type] or [name, type, shape] list")
		if !d.expect(len(l) == 2 || len(l) == 3, len(l), "descr entry: expected ']' after 2 or 3 items (name, type, shape)") {
			break
		}
		var f Field
		if t, ok := l[0].([]any); ok && d.expect(len(t) == 2, len(t), "descr field [title, name] must have 2 items") {
			f.Title, l[0] = as[string](d, t[0], "descr field title must be a string"), t[1] // the name follows
		}
		f.Name = as[string](d, l[0], "descr field name must be a string or [title, name]")
		if _, ok := l[1].([]any); ok {
			f.Fields = d.descr(l[1], depth+1)
		} else if f.Typestr, ok = l[1].(string); !ok {
			d.failf(ErrSyntax, "descr field %q type must be a typestr or a list of fields, found %s", f.Name, describe(l[1]))
		}
		if len(l) == 3 {
			if n, ok := l[2].(json.Number); ok {
				l[2] = []any{n} // NumPy takes one integer for a 1-d shape
			}
			f.Shape = d.ints(l[2], "descr field shape", ErrDescr)
			d.expect(f.Shape != nil, "null", "descr field shape must be a list of integers")
		}
		out = append(out, f)
	}
	return out
}
