// Command dlbridge inspects the CUDA side of a machine with the dlbridge
// libraries: what devices there are, how fast host<->device transfers run
// along each of zerocopy's paths, and whether the whole stack works.
//
// Usage:
//
//	dlbridge devices
//	dlbridge bandwidth [-sizes 4K,1M,1G] [-paths pinned,pageable,staged,registered,strided]
//	                   [-dirs h2d,d2h] [-baseline FILE] [-svg FILE] [-tsv FILE]
//	dlbridge selftest
//	dlbridge build -o LIB.so [-tags T] [-ldflags F] [-v] PKG...
//
// devices lists the driver and each device (name, compute capability,
// memory, PCI bus id, UUID, a few attributes), or says in one line that no
// driver is present.
//
// bandwidth times copies of sizes from 4 KiB to 1 GiB between host and
// device memory along each path: from pinned memory (pinned), from Go
// memory through the driver (pageable), through zerocopy's pipeline of
// pinned buffers (staged), from a Go buffer kept registered (registered),
// and a column block of a row-major matrix to and from pinned memory
// (strided, pitched 2D copies). It prints a table of GB/s, with the CUDA C
// baseline of bench/cuda/memcpy_bw beside it when given its output with
// -baseline, a summary of the ratios the project targets, and writes an SVG
// plot of GB/s against size per path with -svg. A progress line runs on
// stderr meanwhile.
//
// selftest allocates device memory, copies to and from it, launches a
// kernel, checks the data, and exports and imports the memory through
// DLPack and the CUDA Array Interface, printing each step and PASS or
// FAIL. Without a GPU it runs the same checks on fake device memory
// (zerocopy/fakemem).
//
// build links one c-shared library with dlbridge's C ABI and the Go
// packages named (local folders or package paths), whose functions
// registered with pyfunc.Register Python calls as dlbridge.ops.<ns>.<name>
// after dlbridge.load_library(LIB.so): one Go runtime per process, as
// xcaddy builds Caddy with plugins. It needs the go command and a C
// compiler (cgo); docs/go-functions.md is the guide.
//
// The driver is loaded at run time (libcuda.so.1, or the library named by
// DLBRIDGE_LIBCUDA), so the binary builds with CGO_ENABLED=0 and runs on
// machines with and without CUDA.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: dlbridge <command> [flags]

commands:
  devices     list the CUDA driver and devices
  bandwidth   measure host<->device transfer rates per path (see -h)
  selftest    allocate, copy, launch, export and import; PASS or FAIL
  build       link Go packages' Python functions into one library (see -h)
`

// run is the command line without the process: it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "devices":
		return devices(args[1:], stdout, stderr)
	case "bandwidth":
		return bandwidth(args[1:], stdout, stderr)
	case "selftest":
		return selftest(args[1:], stdout, stderr)
	case "build":
		return build(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "dlbridge: unknown command %q\n%s", args[0], usage)
	return 2
}
