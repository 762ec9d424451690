package capi

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"time"
)

// DLBRIDGE_CPUPROFILE=FILE writes a CPU profile (runtime/pprof) of the
// library's Go code for DLBRIDGE_CPUPROFILE_SECONDS seconds (default 30)
// from the moment the library loads: how a Go author sees where the time
// of their functions' calls from Python goes (go tool pprof FILE), and how
// the profile that guides the library's build (pybridge/cmd/libdlbridge/
// default.pgo, made by scripts/pgo-profile.sh) is made.
func init() {
	path := os.Getenv("DLBRIDGE_CPUPROFILE")
	if path == "" {
		return
	}
	secs := 30
	if s := os.Getenv("DLBRIDGE_CPUPROFILE_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "dlbridge: DLBRIDGE_CPUPROFILE_SECONDS=%q: want a positive number of seconds; profiling for %d\n", s, secs)
		} else {
			secs = n
		}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlbridge: DLBRIDGE_CPUPROFILE: %v; no profile\n", err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "dlbridge: DLBRIDGE_CPUPROFILE: %v; no profile\n", err)
		f.Close()
		return
	}
	time.AfterFunc(time.Duration(secs)*time.Second, func() {
		pprof.StopCPUProfile()
		f.Close()
	})
}
