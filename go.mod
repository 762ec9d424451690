module github.com/dlbridge/dlbridge

go 1.25.0

require (
	github.com/ebitengine/purego v0.11.3
	github.com/google/go-cmp v0.7.0
)
