//go:build !cgo && linux

package dlpack

import (
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Without cgo there is no cabi: start the foreign thread with libc's
// pthread_create through purego, with the shared deleter as the thread's
// start routine (void *(*)(void *); its 0 result is the thread's NULL).
func TestExportReleasedOnForeignThreadNoCgo(t *testing.T) {
	lib, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	create, err := purego.Dlsym(lib, "pthread_create")
	if err != nil {
		t.Skip(err)
	}
	join, err := purego.Dlsym(lib, "pthread_join")
	if err != nil {
		t.Skip(err)
	}
	live := LiveExports()
	rel := &countRel{}
	d := Desc{Data: 0x1000, Device: CPUDevice, DType: Int8Type, Shape: []int64{3}}
	p, err := Export(&d, rel)
	if err != nil {
		t.Fatal(err)
	}
	tid := new(uint64) // pthread_t; heap memory, so it does not move during the call
	if rc, _, _ := purego.SyscallN(create, uintptr(unsafe.Pointer(tid)), 0, DeleterPtr(), uintptr(p)); rc != 0 {
		t.Fatalf("pthread_create: %d", rc)
	}
	purego.SyscallN(join, uintptr(*tid), 0)
	if rel.count() != 1 {
		t.Errorf("released %d times from a foreign thread, want 1", rel.count())
	}
	mustNoLive(t, live)
}
