package capi

import (
	"os"
	"os/exec"
	"testing"
)

// TestHeaderCurrent fails while dlbridge.h or the extension's _exports.h
// differ from what gen_header.go writes from the exports of this package:
// an export changed without `go generate ./pybridge/capi/`.
func TestHeaderCurrent(t *testing.T) {
	cmd := exec.Command("go", "run", "gen_header.go", "-check")
	// The generator runs here, on the host, also when the tests are built
	// for another GOARCH and run under an emulator (make gotest-aarch64):
	// the last value of a variable wins.
	cmd.Env = append(os.Environ(), "GOOS=", "GOARCH=", "CGO_ENABLED=0", "CC=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gen_header.go -check: %v\n%s", err, out)
	}
}
