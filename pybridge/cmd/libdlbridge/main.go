// Command libdlbridge is the c-shared library the Python package dlbridge
// loads:
//
//	go build -buildmode=c-shared -o build/libdlbridge.so ./pybridge/cmd/libdlbridge
//
// Its C ABI lives in package capi (imported here for its //export
// functions), so that dlbridge build can link the same ABI and Go packages
// whose functions are registered with pyfunc into one library (see
// examples/gofunc).
package main

import _ "github.com/dlbridge/dlbridge/pybridge/capi"

func main() {}
