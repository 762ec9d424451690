package capi

import (
	"os/exec"
	"testing"
)

// TestHeaderCurrent fails while dlbridge.h or the extension's _exports.h
// differ from what gen_header.go writes from the exports of this package:
// an export changed without `go generate ./pybridge/capi/`.
func TestHeaderCurrent(t *testing.T) {
	out, err := exec.Command("go", "run", "gen_header.go", "-check").CombinedOutput()
	if err != nil {
		t.Fatalf("gen_header.go -check: %v\n%s", err, out)
	}
}
