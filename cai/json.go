package cai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// as \uXXXX), with the keys in the order of wireDict. It encodes whatever
// i holds, valid or not (test corpora need invalid dictionaries too); it
// fails only for masks or records nested deeper than the decoder accepts
// (which also stops a cyclic Mask).
func (i *Interface) AppendJSON(dst []byte) (out []byte, err error) {
	out = dst // on failure
	defer recoverFailure(&err)
	return appendPython(dst, i.wire(0)), nil
}

// wireDict is the dictionary as AppendJSON writes it, in this key order.
type wireDict struct {
	Shape   []int64   `json:"shape"`
	Typestr string    `json:"typestr"`
	Data    any       `json:"data"` // [pointer, read-only], or null for buffer-protocol data
	Version int       `json:"version"`
	Strides []int64   `json:"strides"`
	Descr   any       `json:"descr,omitempty"` // left out when nil; an empty Descr is []
	Mask    *wireDict `json:"mask"`
	Stream  any       `json:"stream,omitempty"` // always for CUDA (null for None), for Host when set
	Offset  int64     `json:"offset,omitempty"`
}

func (i *Interface) wire(depth int) *wireDict {
	if depth > maxMaskDepth {
		fail(ErrSyntax, "masks nested deeper than %d", maxMaskDepth)
	}
	w := &wireDict{Shape: append([]int64{}, i.Shape...), Typestr: i.Typestr, Version: i.Version,
		Strides: i.Strides, Offset: i.Offset}
	if !i.Data.FromBuffer {
		w.Data = []any{uint64(i.Data.Ptr), i.Data.ReadOnly}
	}
	if i.Stream.Present {
		w.Stream = uint64(i.Stream.Handle)
	} else if i.Kind != Host {
		w.Stream = json.RawMessage("null") // None; a nil any would leave the key out
	}
	if i.Descr != nil {
		w.Descr = wireDescr(i.Descr, 0)
	}
	if i.Mask != nil {
		w.Mask = i.Mask.wire(depth + 1)
	}
	return w
}

// wireDescr is d as NumPy lists it: [[name or [title, name], typestr or
// descr (, shape)], ...].
func wireDescr(d Descr, depth int) []any {
	if depth > maxDescrDepth {
		fail(ErrDescr, "records nested deeper than %d", maxDescrDepth)
	}
	out := []any{}
	for _, f := range d {
		e := []any{f.Name, f.Typestr}
		if f.Title != "" {
			e[0] = []string{f.Title, f.Name}
		}
		if f.Fields != nil {
			e[1] = wireDescr(f.Fields, depth+1)
		}
		if f.Shape != nil {
			e = append(e, f.Shape)
		}
		out = append(out, e)
	}
	return out
}

// appendPython appends v as json.dumps prints it. encoding/json writes it
// compact (bad UTF-8 as \ufffd; v holds nothing it could fail on); outside
// strings, ',' and ':' get the space json.dumps puts after them, and, as
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
		case (c == ',' || c == ':') && !inString:
			dst = append(dst, c, ' ')
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
func DecodeJSON(data []byte, kind Kind) (i Interface, err error) {
	defer recoverFailure(&err)
	return object(decoder{buf: data}.value(), kind, 0), nil
}

// failure carries the first problem out of the recursive encoder and
// decoder: fail panics with it, recoverFailure returns it as the error.
type failure struct{ error }

func fail(kind error, format string, args ...any) {
	panic(failure{fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))})
}

func recoverFailure(err *error) {
	if r := recover(); r != nil {
		f, ok := r.(failure)
		if !ok {
			panic(r) // a bug, not bad input
		}
		*err = f.error
	}
}

// as returns v, which encoding/json decoded (UseNumber), as a T, or fails
// with "what must be must, found <the JSON type>", or "must, found ..."
// when what is empty. The message is put together only on failure.
func as[T any](v any, what, must string) T {
	t, ok := v.(T)
	if !ok && what != "" {
		fail(ErrSyntax, "%s must be %s, found %s", what, must, describe(v))
	} else if !ok {
		fail(ErrSyntax, "%s, found %s", must, describe(v))
	}
	return t
}

// describe names the JSON type of v.
func describe(v any) string {
	return map[string]string{"<nil>": "null", "bool": "a boolean", "json.Number": "a number", "string": "a string",
		"[]interface {}": "a list", "map[string]interface {}": "a dictionary"}[fmt.Sprintf("%T", v)]
}

// integer converts a JSON integer (no fraction, no exponent) that fits a T.
func integer[T int | int64](v any, what string) T {
	n := as[json.Number](v, what, "an integer")
	i, err := strconv.ParseInt(string(n), 10, 64)
	if strings.ContainsAny(string(n), ".eE") {
		fail(ErrSyntax, "%s must be an integer, found %s", what, n)
	} else if err != nil || int64(T(i)) != i {
		fail(ErrSyntax, "%s value %s does not fit %T", what, n, T(0))
	}
	return T(i)
}

// handle converts a pointer or a stream: a JSON integer that fits a
// uintptr; a negative one (-0 is 0) fails with kind and the message
// negative, whose words the callers' users know.
func handle(v any, what string, kind error, negative string) uintptr {
	n := as[json.Number](v, what, "an integer")
	u, err := strconv.ParseUint(string(n), 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) || err == nil && uint64(uintptr(u)) != u:
		fail(ErrSyntax, "%s value %s does not fit 64 bits", what, n)
	case err != nil: // negative, or no integer
		if i := integer[int64](v, what); i < 0 {
			fail(kind, negative, i)
		}
	}
	return uintptr(u)
}

// ints converts a list of at most MaxNDim integers.
func ints(v any, what string, tooMany error) []int64 {
	l := as[[]any](v, what, "a list of integers")
	if len(l) > dlpack.MaxNDim {
		fail(tooMany, "%s has more than %d entries", what, dlpack.MaxNDim)
	}
	out := make([]int64, len(l))
	for k, e := range l {
		out[k] = integer[int64](e, what)
	}
	return out
}

// decoder reads JSON text with encoding/json, for object and str.
type decoder struct{ buf []byte }

// syntaxWords adds our words to encoding/json's syntax errors.
var syntaxWords = strings.NewReplacer("after object key:value pair", "after a dictionary item: expected ',' or '}'",
	"after array element", "after a list item: expected ',' or ']'", "numeric literal", "number: malformed number",
	"looking for beginning of object key string", "where a key belongs: expected a string",
	"looking for beginning of value", "where a value belongs: expected a JSON value",
	"escape", "escape: bad escape", "in string literal", "in a string: control character")

// value reads the text as one JSON value with encoding/json, after
// checking what encoding/json does not: that the text is UTF-8 (it would
// replace bad bytes silently) and does not nest too deep.
func (d decoder) value() (v any) {
	if !utf8.Valid(d.buf) {
		fail(ErrSyntax, "the text must be UTF-8, found other bytes")
	}
	checkNesting(d.buf)
	dec := json.NewDecoder(bytes.NewReader(d.buf))
	dec.UseNumber()
	err := dec.Decode(&v)
	var se *json.SyntaxError
	switch rest := bytes.TrimLeft(d.buf[dec.InputOffset():], " \t\r\n"); {
	case err == io.EOF:
		fail(ErrSyntax, "expected a dictionary, found end of input")
	case errors.As(err, &se):
		fail(ErrSyntax, "JSON offset %d: %s", se.Offset, syntaxWords.Replace(se.Error()))
	case err != nil: // io.ErrUnexpectedEOF
		fail(ErrSyntax, "unexpected end of input: unterminated string, list or dictionary")
	case len(rest) > 0:
		fail(ErrSyntax, "unexpected %q after the dictionary", rest[0])
	}
	return v
}

// str reads the text as one JSON string.
func (d decoder) str() (s []byte, err error) {
	defer recoverFailure(&err)
	return []byte(as[string](d.value(), "", "expected a string")), nil
}

// maxJSONDepth bounds nesting in the values of the top-level keys.
const maxJSONDepth = 64

// checkNesting fails for a top-level key's value holding anything inside
// more than maxJSONDepth lists and dictionaries or, for descr, a record
// deeper than maxDescrDepth (masks are left to object, which checks their
// depth and descr, and to encoding/json's own limit). It reads the bytes,
// tracking strings and depth, so that malformed JSON gets it too.
func checkNesting(text []byte) {
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
			fail(ErrSyntax, "descr nested deeper than %d", maxDescrDepth)
		case key != "descr" && key != "mask" && depth > maxJSONDepth:
			fail(ErrSyntax, "value nested deeper than %d", maxJSONDepth)
		case c == '[' || c == '{':
			depth++
		case c == '"':
			inString, start = true, k
		}
	}
}

// object converts a dictionary (a mask recursively).
func object(v any, kind Kind, depth int) Interface {
	if depth > maxMaskDepth {
		fail(ErrSyntax, "masks nested deeper than %d", maxMaskDepth)
	}
	m := as[map[string]any](v, "", "expected a dictionary")
	for _, k := range []string{"shape", "typestr", "version"} {
		if _, ok := m[k]; !ok {
			fail(ErrMissing, "%q", k)
		}
	}
	i := Interface{Kind: kind, Shape: ints(m["shape"], "shape", ErrShape),
		Typestr: as[string](m["typestr"], "typestr", "a string"), Data: Data{FromBuffer: true}}
	if data := m["data"]; data != nil {
		l := as[[]any](data, "data", "a list [pointer, read-only] or null")
		if len(l) != 2 {
			fail(ErrSyntax, "data must have exactly 2 items (pointer, read-only), found %d", len(l))
		}
		ptr := handle(l[0], "data[0] (pointer)", ErrSyntax, "data[0] (pointer) must not be negative, found %d")
		i.Data = Data{Ptr: ptr, ReadOnly: as[bool](l[1], "data[1] (read-only)", "a boolean")}
	}
	i.Version = integer[int](m["version"], "version")
	if m["strides"] != nil {
		i.Strides = ints(m["strides"], "strides", ErrStrides)
	}
	if m["descr"] != nil {
		i.Descr = descr(m["descr"], 1)
	}
	if m["stream"] != nil {
		i.Stream = StreamHandle(handle(m["stream"], "stream",
			ErrStream, "stream %d is negative (want None, 1, 2 or a stream handle)"))
	}
	if offset, ok := m["offset"]; ok {
		i.Offset = integer[int64](offset, "offset")
	}
	if m["mask"] != nil {
		mask := object(m["mask"], kind, depth+1)
		i.Mask = &mask
	}
	return i
}

// descr converts a descr list: [[name or [title, name], typestr or descr
// (, shape: a list, or one integer as NumPy accepts)], ...].
func descr(v any, depth int) Descr {
	if depth > maxDescrDepth {
		fail(ErrSyntax, "descr nested deeper than %d", maxDescrDepth)
	}
	out := Descr{}
	for _, e := range as[[]any](v, "descr", "a list of [name, type] lists") {
		l := as[[]any](e, "descr entry", "a [name, type] or [name, type, shape] list")
		if len(l) != 2 && len(l) != 3 {
			fail(ErrSyntax, "descr entry: expected ']' after 2 or 3 items (name, type, shape), found %d", len(l))
		}
		var f Field
		if t, ok := l[0].([]any); ok && len(t) == 2 { // [title, name]
			f.Title, l[0] = as[string](t[0], "descr field title", "a string"), t[1]
		}
		f.Name = as[string](l[0], "descr field name", "a string or [title, name]")
		switch t := l[1].(type) {
		case string:
			f.Typestr = t
		case []any:
			f.Fields = descr(t, depth+1)
		default:
			fail(ErrSyntax, "descr field %q type must be a typestr or a list of fields, found %s", f.Name, describe(t))
		}
		if len(l) == 3 {
			if n, ok := l[2].(json.Number); ok {
				l[2] = []any{n} // NumPy takes one integer for a 1-d shape
			}
			f.Shape = ints(l[2], "descr field shape", ErrDescr)
		}
		out = append(out, f)
	}
	return out
}
