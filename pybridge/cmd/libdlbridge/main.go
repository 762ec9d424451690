// Command libdlbridge is the c-shared library the Python package dlbridge
// loads:
//
//	go build -buildmode=c-shared -o build/libdlbridge.so ./pybridge/cmd/libdlbridge
//
// Its C ABI lives in package capi (imported here for its //export
// functions), so that authors of their own c-shared libraries can import
// capi too and ship one library with both the dlbridge ABI and their own
// exported functions (see examples/userlib).
package main

import _ "github.com/dlbridge/dlbridge/pybridge/capi"

func main() {}
