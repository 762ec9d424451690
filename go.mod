module github.com/dlbridge/dlbridge

go 1.26.8
