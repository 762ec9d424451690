//go:build dlbtrace

package zerocopy

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// A build with -tags dlbtrace (a diagnosis build, never shipped) writes the
// steps of every staged transfer to the file that DLBRIDGE_TRACE names, one
// block per transfer, in microseconds from the transfer's start. It shows
// where a transfer's time goes when the caller is not a Go benchmark (the
// Python package through libdlbridge). Transfers must not overlap.
// DLBRIDGE_TRACE_WORKERS sets the default Copier's worker cap,
// DLBRIDGE_TRACE_MINPART the smallest host copy task in bytes (minPart).
func init() {
	if w, err := strconv.Atoi(os.Getenv("DLBRIDGE_TRACE_WORKERS")); err == nil && w > 0 {
		maxDefaultWorkers = w
	}
	if m, err := strconv.ParseInt(os.Getenv("DLBRIDGE_TRACE_MINPART"), 10, 64); err == nil && m > 0 {
		minPart = m
	}
	path := os.Getenv("DLBRIDGE_TRACE")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlbtrace:", err)
		return
	}
	type step struct {
		at    time.Duration
		what  string
		piece int
	}
	// Preallocated and reused: a trace that allocated per transfer made
	// the Go GC run every few transfers, and its stop-the-world waits
	// stalled the workers (bench/results/upload-h100, trace-stall.txt).
	steps := make([]step, 8192)
	out := make([]byte, 0, 1<<20)
	var n atomic.Int64
	var t0 time.Time
	stagedTrace = func(what string, piece int) {
		if what == "staged" {
			n.Store(0)
			t0 = time.Now()
		}
		if i := n.Add(1) - 1; i < int64(len(steps)) {
			steps[i] = step{time.Since(t0), what, piece}
		}
		if what != "done" {
			return
		}
		got := steps[:min(n.Load(), int64(len(steps)))]
		slices.SortStableFunc(got, func(a, b step) int { return int(a.at - b.at) })
		out = fmt.Appendf(out[:0], "transfer at %s\n", t0.Format("15:04:05.000000"))
		for _, s := range got {
			out = fmt.Appendf(out, "%8.1f %-16s %d\n", float64(s.at.Nanoseconds())/1e3, s.what, s.piece)
		}
		f.Write(append(out, '\n'))
	}
}
