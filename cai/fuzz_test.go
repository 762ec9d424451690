package cai

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// addCorpusSeeds seeds f with every dictionary in testdata/cai.
func addCorpusSeeds(f *testing.F) {
	for _, sub := range []string{"valid", "producers"} {
		for name, b := range corpusFiles(f, sub) {
			f.Add(b, kindOf(f, name) == Host)
		}
	}
	for _, c := range readInvalidCorpus(f) {
		f.Add([]byte(c.input), c.kind == Host)
	}
}

// FuzzDecodeValidate feeds arbitrary bytes to DecodeJSON and Validate:
// they must never panic; what decodes must be valid JSON and must survive
// an encode/decode round trip unchanged; what validates must convert.
func FuzzDecodeValidate(f *testing.F) {
	addCorpusSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, host bool) {
		kind := CUDA
		if host {
			kind = Host
		}
		i, err := DecodeJSON(data, kind)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("decoded input that is not JSON: %q", data)
		}
		verr := i.Validate()
		enc, err := i.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON of a decoded interface: %v", err)
		}
		if !json.Valid(enc) {
			t.Fatalf("encoded invalid JSON: %s", enc)
		}
		back, err := DecodeJSON(enc, kind)
		if err != nil {
			t.Fatalf("cannot decode our own encoding %s: %v", enc, err)
		}
		if diff := cmp.Diff(i, back); diff != "" {
			t.Fatalf("round trip changed the interface (-first +second):\n%s", diff)
		}
		enc2, _ := back.MarshalJSON()
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
		if verr2 := back.Validate(); (verr == nil) != (verr2 == nil) {
			t.Fatalf("validation changed across the round trip: %v vs %v", verr, verr2)
		}
		if verr != nil {
			return
		}
		// A valid interface converts without panicking; if it maps to a
		// DLPack type, its strides convert too.
		if _, err := i.DataType(); err == nil {
			if _, err := i.ElementStrides(); err != nil {
				t.Fatalf("valid interface, ElementStrides: %v", err)
			}
		}
		_ = i.Descr.String()
	})
}

// FuzzTypestr parses arbitrary strings: never a panic, and a parsed
// typestr re-encodes to one that parses to the same thing; a typestr that
// maps to a DLPack type maps back to an equivalent typestr.
func FuzzTypestr(f *testing.F) {
	for _, s := range []string{
		"<f4", "|b1", "<V2", "|V12", "<c16", ">f8", "=i4", "f4", "|O", "|O8", "<U5", "|S3",
		"<M8[ns]", "<m8[25s]", "|t3", "<f16", "<f04", "", "<", "<<f4", "<f4x", "<M8[",
		"|V1", "<i99999999999999999999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ParseTypestr(s)
		if err != nil {
			return
		}
		again, err := ParseTypestr(ts.String())
		if err != nil || again != ts {
			t.Fatalf("%q parsed to %+v, whose String %q re-parses to %+v, %v", s, ts, ts.String(), again, err)
		}
		if ts.ItemSize() < 1 {
			t.Fatalf("%q: item size %d", s, ts.ItemSize())
		}
		dt, err := ts.DataType()
		if err != nil {
			return
		}
		out, descr, err := TypestrOf(dt)
		if err != nil || descr != nil {
			t.Fatalf("%q maps to %s, which TypestrOf refuses: %v", s, dt, err)
		}
		ots, err := ParseTypestr(out)
		if err != nil {
			t.Fatal(err)
		}
		if dt2, err := ots.DataType(); err != nil || dt2 != dt || ots.ItemSize() != ts.ItemSize() {
			t.Fatalf("%q -> %s -> %q -> %v, %v", s, dt, out, dt2, err)
		}
	})
}
