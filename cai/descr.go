package cai

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dlbridge/dlbridge/dlpack"
)

// Field is one entry of a descr list: NumPy's (name, type) or (name, type,
// shape) tuple, where type is a typestr or a nested descr.
type Field struct {
	// Name of the field; "" marks padding, as NumPy writes it.
	Name string
	// Title is the optional long name of NumPy's (title, name) form; when
	// set, the entry's first element is the pair [Title, Name].
	Title string
	// Typestr is the field's type; empty when Fields is set.
	Typestr string
	// Fields is a nested record; nil when Typestr is set.
	Fields Descr
	// Shape repeats the field as a subarray (C order); nil for one item.
	Shape []int64
}

// Descr is a descr list: the fields of one item, in memory order, each
// starting where the previous one ends.
type Descr []Field

// maxDescrDepth bounds nesting of records in foreign input.
const maxDescrDepth = 32

// ItemSize is the number of bytes one item described by d occupies: the
// sum of the field sizes (padding included). It also checks d: each field
// has exactly one of Typestr and Fields, typestrs are well formed, little-
// endian or order-free and of supported kinds, subarray extents are not
// negative, names are unique (except padding ""), and nothing overflows.
func (d Descr) ItemSize() (int64, error) { return d.itemSize(0) }

func (d Descr) itemSize(depth int) (int64, error) {
	if depth > maxDescrDepth {
		return 0, fmt.Errorf("%w: records nested deeper than %d", ErrDescr, maxDescrDepth)
	}
	if len(d) == 0 {
		return 0, fmt.Errorf("%w: empty field list", ErrDescr)
	}
	total := int64(0)
	for k, f := range d {
		if f.Name != "" {
			for _, g := range d[:k] {
				if g.Name == f.Name {
					return 0, fmt.Errorf("%w: field name %q appears twice", ErrDescr, f.Name)
				}
			}
		}
		size, err := f.size(depth)
		if err != nil {
			return 0, err
		}
		var ok bool
		if total, ok = dlpack.AddInt64(total, size); !ok {
			return 0, fmt.Errorf("%w: record size overflows int64 at field %q", ErrDescr, f.Name)
		}
	}
	return total, nil
}

// Size is the number of bytes the field occupies: its type's item size
// times the product of its subarray shape.
func (f Field) Size() (int64, error) { return f.size(0) }

func (f Field) size(depth int) (int64, error) {
	var item int64
	switch {
	case f.Typestr != "" && f.Fields != nil:
		return 0, fmt.Errorf("%w: field %q has both a typestr and nested fields", ErrDescr, f.Name)
	case f.Fields != nil:
		s, err := f.Fields.itemSize(depth + 1)
		if err != nil {
			return 0, fmt.Errorf("field %q: %w", f.Name, err)
		}
		item = s
	case f.Typestr != "":
		t, err := ParseTypestr(f.Typestr)
		if err != nil {
			return 0, fmt.Errorf("%w: field %q: %w", ErrDescr, f.Name, err)
		}
		if err := t.checkSupported(f.Typestr); err != nil {
			return 0, fmt.Errorf("field %q: %w", f.Name, err)
		}
		item = t.ItemSize()
	default:
		return 0, fmt.Errorf("%w: field %q has neither a typestr nor nested fields", ErrDescr, f.Name)
	}
	if len(f.Shape) > dlpack.MaxNDim {
		return 0, fmt.Errorf("%w: field %q: subarray of %d dimensions exceeds %d", ErrDescr, f.Name, len(f.Shape), dlpack.MaxNDim)
	}
	n, err := dlpack.NumElements(f.Shape)
	if err != nil {
		return 0, fmt.Errorf("%w: field %q: subarray %v", ErrDescr, f.Name, err)
	}
	size, ok := dlpack.MulInt64(n, item)
	if !ok {
		return 0, fmt.Errorf("%w: field %q: %d items of %d bytes overflow int64", ErrDescr, f.Name, n, item)
	}
	return size, nil
}

// Offsets returns the byte offset of each field of d within an item, in
// order: each field starts where the previous one ends (padding fields
// named "" occupy their space like any other).
func (d Descr) Offsets() ([]int64, error) {
	if _, err := d.ItemSize(); err != nil {
		return nil, err
	}
	out := make([]int64, len(d))
	off := int64(0)
	for k, f := range d {
		out[k] = off
		s, _ := f.Size() // checked by ItemSize
		off += s
	}
	return out, nil
}

// homogeneous reports whether every leaf of d is the same scalar typestr,
// accumulating the number of leaf items (subarrays counted item by item).
func (d Descr) homogeneous(elem *string, lanes *int64, depth int) bool {
	if depth > maxDescrDepth || len(d) == 0 {
		return false
	}
	for _, f := range d {
		rep, err := dlpack.NumElements(f.Shape)
		if err != nil || rep == 0 {
			return false
		}
		if f.Fields != nil {
			var sub int64
			if f.Typestr != "" || !f.Fields.homogeneous(elem, &sub, depth+1) {
				return false
			}
			n, ok := dlpack.MulInt64(sub, rep)
			if !ok {
				return false
			}
			if *lanes, ok = dlpack.AddInt64(*lanes, n); !ok {
				return false
			}
			continue
		}
		t, err := ParseTypestr(f.Typestr)
		if err != nil {
			return false
		}
		if *elem == "" {
			*elem = f.Typestr
		} else if et, _ := ParseTypestr(*elem); et != t {
			return false
		}
		var ok bool
		if *lanes, ok = dlpack.AddInt64(*lanes, rep); !ok {
			return false
		}
	}
	return true
}

// RecordField places a named field at a byte offset: the input of
// PackRecord.
type RecordField struct {
	Name    string
	Typestr string
	Fields  Descr
	Offset  int64
	Shape   []int64
}

// PackRecord builds the descr NumPy writes for a record of itemSize bytes
// whose fields sit at the given offsets (in any order): the fields sorted
// by offset, each gap and the tail filled with a padding field named ""
// of type "|V<gap>". Fields may not overlap or reach past itemSize.
func PackRecord(itemSize int64, fields ...RecordField) (Descr, error) {
	fs := slices.Clone(fields)
	slices.SortStableFunc(fs, func(a, b RecordField) int {
		switch {
		case a.Offset < b.Offset:
			return -1
		case a.Offset > b.Offset:
			return 1
		}
		return 0
	})
	var d Descr
	at := int64(0)
	pad := func(n int64) {
		d = append(d, Field{Typestr: "|V" + strconv.FormatInt(n, 10)})
	}
	for _, rf := range fs {
		if rf.Offset < at {
			return nil, fmt.Errorf("%w: field %q at offset %d overlaps the previous field, which ends at %d", ErrDescr, rf.Name, rf.Offset, at)
		}
		if rf.Offset > at {
			pad(rf.Offset - at)
		}
		f := Field{Name: rf.Name, Typestr: rf.Typestr, Fields: rf.Fields, Shape: rf.Shape}
		size, err := f.Size()
		if err != nil {
			return nil, err
		}
		d = append(d, f)
		at = rf.Offset + size
		if at > itemSize || at < rf.Offset {
			return nil, fmt.Errorf("%w: field %q at offset %d (%d bytes) reaches past the item size %d", ErrDescr, rf.Name, rf.Offset, size, itemSize)
		}
	}
	if at < itemSize {
		pad(itemSize - at)
	}
	if _, err := d.ItemSize(); err != nil {
		return nil, err
	}
	return d, nil
}

// String writes d the way Python prints a descr list:
// [('x', '<f4'), ('pos', '<f8', (3,)), ('sub', [('a', '|u1')])].
func (d Descr) String() string {
	var b strings.Builder
	d.write(&b, 0)
	return b.String()
}

func (d Descr) write(b *strings.Builder, depth int) {
	if depth > maxDescrDepth {
		b.WriteString("[...]")
		return
	}
	b.WriteByte('[')
	for k, f := range d {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		if f.Title != "" {
			b.WriteByte('(')
			b.WriteString(pyRepr(f.Title))
			b.WriteString(", ")
			b.WriteString(pyRepr(f.Name))
			b.WriteByte(')')
		} else {
			b.WriteString(pyRepr(f.Name))
		}
		b.WriteString(", ")
		if f.Fields != nil {
			f.Fields.write(b, depth+1)
		} else {
			b.WriteString(pyRepr(f.Typestr))
		}
		if f.Shape != nil {
			b.WriteString(", (")
			for j, e := range f.Shape {
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString(strconv.FormatInt(e, 10))
			}
			if len(f.Shape) == 1 {
				b.WriteByte(',')
			}
			b.WriteByte(')')
		}
		b.WriteByte(')')
	}
	b.WriteByte(']')
}

// pyRepr quotes s roughly as Python's repr does (single quotes when s has
// none); it only serves error messages.
func pyRepr(s string) string {
	if !strings.ContainsAny(s, "'\\") && strconv.CanBackquote(s) {
		return "'" + s + "'"
	}
	return strconv.Quote(s)
}
