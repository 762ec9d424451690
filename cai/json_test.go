package cai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const corpusDir = "../testdata/cai"

// kindOf reads the kind from a corpus file name ("cuda_…", "host_…").
func kindOf(t testing.TB, name string) Kind {
	switch {
	case strings.HasPrefix(name, "cuda"):
		return CUDA
	case strings.HasPrefix(name, "host"):
		return Host
	}
	t.Fatalf("corpus entry %q: kind must be cuda or host", name)
	return 0
}

func corpusFiles(t testing.TB, sub string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(corpusDir, sub, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no corpus in %s: %v", sub, err)
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = b
	}
	return out
}

// testdata/cai/valid holds dictionaries printed by Python's json.dumps in
// this package's key order: each must decode, validate, and encode back
// to the same bytes.
func TestCorpusValidRoundTrip(t *testing.T) {
	for name, b := range corpusFiles(t, "valid") {
		t.Run(name, func(t *testing.T) {
			want := bytes.TrimRight(b, "\n")
			i, err := DecodeJSON(want, kindOf(t, name))
			if err != nil {
				t.Fatalf("DecodeJSON: %v", err)
			}
			if err := i.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			got, err := i.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("re-encoded differs\n got: %s\nwant: %s", got, want)
			}
			if !json.Valid(got) {
				t.Errorf("encoding/json rejects %s", got)
			}
		})
	}
}

// testdata/cai/producers holds dictionaries in the key order (and layout)
// real producers print: PyTorch, CuPy, Numba, NumPy. Each must decode and
// validate, and survive a round trip through our canonical form.
func TestCorpusProducers(t *testing.T) {
	for name, b := range corpusFiles(t, "producers") {
		t.Run(name, func(t *testing.T) {
			kind := kindOf(t, name)
			i, err := DecodeJSON(b, kind)
			if err != nil {
				t.Fatalf("DecodeJSON: %v", err)
			}
			if err := i.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if _, err := i.DataType(); err != nil {
				t.Errorf("DataType: %v", err)
			}
			enc, err := i.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			back, err := DecodeJSON(enc, kind)
			if err != nil {
				t.Fatalf("decoding our own %s: %v", enc, err)
			}
			if diff := cmp.Diff(i, back); diff != "" {
				t.Errorf("round trip (-first +second):\n%s", diff)
			}
		})
	}
}

type invalidCase struct {
	line  int
	kind  Kind
	want  string
	input string
}

func readInvalidCorpus(t testing.TB) []invalidCase {
	t.Helper()
	f, err := os.Open(filepath.Join(corpusDir, "invalid.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []invalidCase
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.SplitN(line, "\t", 3)
		if len(parts) != 3 {
			t.Fatalf("invalid.tsv:%d: want kind<TAB>error<TAB>json", n)
		}
		out = append(out, invalidCase{line: n, kind: kindOf(t, parts[0]), want: parts[1], input: parts[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// decodeValidate is what a consumer runs on a dictionary it receives.
func decodeValidate(b []byte, kind Kind) (Interface, error) {
	i, err := DecodeJSON(b, kind)
	if err != nil {
		return Interface{}, err
	}
	return i, i.Validate()
}

// testdata/cai/invalid.tsv: every malformed or invalid dictionary fails
// with an error that contains the expected text.
func TestCorpusInvalid(t *testing.T) {
	cases := readInvalidCorpus(t)
	if len(cases) < 50 {
		t.Fatalf("only %d invalid cases read", len(cases))
	}
	for _, tc := range cases {
		_, err := decodeValidate([]byte(tc.input), tc.kind)
		if err == nil {
			t.Errorf("invalid.tsv:%d: no error for %s", tc.line, tc.input)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("invalid.tsv:%d: error %q does not contain %q", tc.line, err, tc.want)
		}
	}
}

func TestDecodeFields(t *testing.T) {
	in := `{"shape": [3, 2], "typestr": "|V12", "data": [4096, true], "version": 3,
		"strides": [12, 36], "descr": [["x", "<f4"], [["Why", "y"], "<f4"], ["z", "<f4"]],
		"mask": null, "stream": 18446744073709551615}`
	got, err := DecodeJSON([]byte(in), CUDA)
	if err != nil {
		t.Fatal(err)
	}
	want := Interface{Kind: CUDA, Shape: []int64{3, 2}, Typestr: "|V12", Data: Data{Ptr: 4096, ReadOnly: true},
		Version: 3, Strides: []int64{12, 36},
		Descr:  Descr{{Name: "x", Typestr: "<f4"}, {Name: "y", Title: "Why", Typestr: "<f4"}, {Name: "z", Typestr: "<f4"}},
		Stream: StreamHandle(^uintptr(0))}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestDecodeLenient(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Interface
	}{
		{"unknown keys skipped", `{"shape": [], "typestr": "<f4", "data": [8, false], "version": 3, "x": {"a": [1, -2.5e-3, "s\u00e9", true, false, null, {}]}, "y": []}`,
			Interface{Shape: []int64{}, Typestr: "<f4", Data: Data{Ptr: 8}, Version: 3}},
		{"whitespace", " \t\r\n{ \"shape\" : [ 1 , 2 ] , \"typestr\" : \"<f4\" , \"data\" : [ 8 , false ] , \"version\" : 3 } \n",
			Interface{Shape: []int64{1, 2}, Typestr: "<f4", Data: Data{Ptr: 8}, Version: 3}},
		{"last duplicate wins", `{"shape": [1], "shape": [2], "typestr": "<f4", "data": [8, false], "version": 3}`,
			Interface{Shape: []int64{2}, Typestr: "<f4", Data: Data{Ptr: 8}, Version: 3}},
		{"escaped key and typestr", `{"sh\u0061pe": [1], "typestr": "\u003cf4", "data": [8, false], "version": 3}`,
			Interface{Shape: []int64{1}, Typestr: "<f4", Data: Data{Ptr: 8}, Version: 3}},
		{"descr shape as an integer", `{"shape": [1], "typestr": "|V8", "data": [8, false], "version": 3, "descr": [["v", "<f4", 2]]}`,
			Interface{Shape: []int64{1}, Typestr: "|V8", Data: Data{Ptr: 8}, Version: 3, Descr: Descr{{Name: "v", Typestr: "<f4", Shape: []int64{2}}}}},
		{"descr null", `{"shape": [1], "typestr": "<f4", "data": [8, false], "version": 3, "descr": null}`,
			Interface{Shape: []int64{1}, Typestr: "<f4", Data: Data{Ptr: 8}, Version: 3}},
		{"negative zero stream", `{"shape": [1], "typestr": "<f4", "data": [8, false], "version": 3, "stream": -0}`,
			Interface{Shape: []int64{1}, Typestr: "<f4", Data: Data{Ptr: 8}, Version: 3, Stream: StreamHandle(0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeJSON([]byte(tc.in), CUDA)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeErrorsAreTyped(t *testing.T) {
	tests := []struct {
		in string
		is error
	}{
		{`{`, ErrSyntax},
		{`{"shape": [2], "typestr": "<f4", "version": 3, "stream": -3}`, ErrStream},
		{`{"typestr": "<f4", "version": 3}`, ErrMissing},
		{`{"shape": [` + strings.Repeat("1, ", 64) + `1], "typestr": "<f4", "version": 3}`, ErrShape},
		{`{"shape": [1], "strides": [` + strings.Repeat("1, ", 64) + `1], "typestr": "<f4", "version": 3}`, ErrStrides},
	}
	for _, tc := range tests {
		if _, err := DecodeJSON([]byte(tc.in), CUDA); !errors.Is(err, tc.is) {
			t.Errorf("DecodeJSON(%.40q) = %v, want %v", tc.in, err, tc.is)
		}
	}
}

// Our string encoding is Python's json.dumps (ensure_ascii): check it
// against encoding/json, which must read it back to the same string.
func TestStringEncoding(t *testing.T) {
	tests := map[string]string{
		"plain":               `"plain"`,
		"":                    `""`,
		`q"b\`:                `"q\"b\\"`,
		"\b\f\n\r\t":          `"\b\f\n\r\t"`,
		"\x00\x1f\x7f":        `"\u0000\u001f\u007f"`,
		"é☃":                  `"\u00e9\u2603"`,
		"😀":                   `"\ud83d\ude00"`,
		"bad\xffutf8":         `"bad\ufffdutf8"`,
		"<tags> & 'quotes' /": `"<tags> & 'quotes' /"`,
	}
	for in, want := range tests {
		got := string(appendString(nil, in))
		if got != want {
			t.Errorf("appendString(%q) = %s, want %s", in, got, want)
		}
		var back string
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			t.Errorf("encoding/json rejects %s: %v", got, err)
			continue
		}
		d := decoder{buf: []byte(got)}
		ours, err := d.str()
		if err != nil {
			t.Errorf("our decoder rejects %s: %v", got, err)
			continue
		}
		if string(ours) != back {
			t.Errorf("decode(%s): ours %q, encoding/json %q", got, ours, back)
		}
	}
}

func TestStringDecodingMatchesEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`"\ud83d\ude00"`, `"\ud83d"`, `"\ude00x"`, `"\ud83dx"`, `"\ud83d\u0041"`, `"\u00E9"`, `"a\/b"`,
		`"\ud83d\ud83d\ude00"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		d := decoder{buf: []byte(in)}
		got, err := d.str()
		if err != nil || string(got) != want {
			t.Errorf("decode(%s) = %q, %v; encoding/json gives %q", in, got, err, want)
		}
	}
	for _, in := range []string{`"\x"`, `"\u12"`, `"\u12g4"`, `"abc`, "\"a\x01\"", "\"\xff\"", `"\`} {
		d := decoder{buf: []byte(in)}
		if got, err := d.str(); err == nil {
			t.Errorf("decode(%q) = %q, want an error", in, got)
		}
	}
}

func TestUnmarshalKeepsKind(t *testing.T) {
	var i Interface
	i.Kind = Host
	i.Offset = 99 // replaced
	in := `{"shape": [2], "typestr": "<f4", "data": null, "version": 3}`
	if err := json.Unmarshal([]byte(in), &i); err != nil {
		t.Fatal(err)
	}
	want := Interface{Kind: Host, Shape: []int64{2}, Typestr: "<f4", Data: Data{FromBuffer: true}, Version: 3}
	if diff := cmp.Diff(want, i); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	out, err := json.Marshal(i)
	if err != nil {
		t.Fatal(err)
	}
	const wantOut = `{"shape":[2],"typestr":"\u003cf4","data":null,"version":3,"strides":null,"mask":null}`
	if string(out) != wantOut { // encoding/json compacts and HTML-escapes what MarshalJSON returns
		t.Errorf("json.Marshal = %s, want %s", out, wantOut)
	}
}

func TestEncodeMaskAndCycles(t *testing.T) {
	m := Interface{Kind: CUDA, Shape: []int64{2}, Typestr: "|b1", Data: Data{Ptr: 64}, Version: 3}
	i := valid()
	i.Mask = &m
	b, err := i.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"shape": [2, 3], "typestr": "<f4", "data": [139637976731648, false], "version": 3, "strides": null, ` +
		`"mask": {"shape": [2], "typestr": "|b1", "data": [64, false], "version": 3, "strides": null, "mask": null, "stream": null}, "stream": null}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	back, err := DecodeJSON(b, CUDA)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(i, back); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// A cyclic mask must not recurse forever.
	c := valid()
	c.Mask = &c
	if _, err := c.MarshalJSON(); err == nil {
		t.Error("cyclic mask encoded without error")
	}
	if err := c.Validate(); err == nil {
		t.Error("cyclic mask validated")
	}
}
