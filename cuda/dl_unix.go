//go:build linux || freebsd

package cuda

import "github.com/ebitengine/purego"

// dlopen opens the driver with RTLD_NOW so that a broken library fails here,
// in one place, rather than at some later call. RTLD_GLOBAL is not needed:
// nothing resolves symbols against libcuda by name.
func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

// dlsym returns the address of name, or 0 when the library lacks it.
func dlsym(h uintptr, name string) uintptr {
	p, err := purego.Dlsym(h, name)
	if err != nil {
		return 0
	}
	return p
}
