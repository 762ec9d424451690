//go:build !cgo

package main

import (
	"time"
	"unsafe"
)

// Without cgo there is no direct call to measure: these are never called
// (directOr checks cgoBuild first).
const cgoBuild = false

func bindDirect(*env)                                       {}
func directCtxGetDevice()                                   {}
func directDevAttr(int32)                                   {}
func directPtrAttr(uint64)                                  {}
func directPtrAttrs(*env, uint64)                           {}
func directAddrRange(uint64)                                {}
func directRecordWait(e, s1, s2 uintptr)                    {}
func directHtoD(uint64, unsafe.Pointer, uintptr)            {}
func loopCtxGetDevice(int) time.Duration                    { return 0 }
func loopPtrAttr(uint64, int) time.Duration                 { return 0 }
func loopRecordWait(e, s1, s2 uintptr, n int) time.Duration { return 0 }
