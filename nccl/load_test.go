package nccl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlbridge/dlbridge/nccl"
)

func TestNoLibrarySaysWhereItLooked(t *testing.T) {
	if _, err := nccl.Version(); err != nil { // the real load happens first
		t.Fatal(err)
	}
	t.Setenv(nccl.EnvLibrary, "/nonexistent/libnccl.so.2")
	err := nccl.Open()
	if !errors.Is(err, nccl.ErrNoLibrary) || !strings.Contains(err.Error(), "/nonexistent/libnccl.so.2") {
		t.Fatalf("got %v", err)
	}
}
