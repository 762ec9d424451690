// Package deps pins the module's two dependencies in go.mod while the
// packages that use them grow; it is imported by nothing.
package deps

import (
	_ "github.com/ebitengine/purego"
	_ "github.com/google/go-cmp/cmp"
)
