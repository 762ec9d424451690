// Package plain registers nothing: dlbridge build warns of it.
package plain

// Twice returns 2*x.
func Twice(x int) int { return 2 * x }
