//go:build cgo

package main

/*
#include <stdint.h>
#include <time.h>

// Direct calls: C functions that call the driver through function pointers
// (what a program linked against libcuda does through its PLT), so a cgo
// call to one of them is the "direct cgo" cost of that driver call.
static int (*p_ctxGetDevice)(int*);
static int (*p_devAttr)(int*, int, int);
static int (*p_ptrAttr)(void*, int, unsigned long long);
static int (*p_ptrAttrs)(unsigned int, int*, void**, unsigned long long);
static int (*p_addrRange)(unsigned long long*, size_t*, unsigned long long);
static int (*p_record)(void*, void*);
static int (*p_wait)(void*, void*, unsigned int);
static int (*p_htod)(unsigned long long, const void*, size_t, void*);
static int (*p_sync)(void*);

static void bind(uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t e, uintptr_t f, uintptr_t g, uintptr_t h, uintptr_t i) {
	p_ctxGetDevice = (void*)a; p_devAttr = (void*)b; p_ptrAttr = (void*)c; p_ptrAttrs = (void*)d;
	p_addrRange = (void*)e; p_record = (void*)f; p_wait = (void*)g; p_htod = (void*)h; p_sync = (void*)i;
}

static int d_ctxGetDevice(void) { int d; return p_ctxGetDevice(&d); }
static int d_devAttr(int dev) { int v; return p_devAttr(&v, 10, dev); }
static int d_ptrAttr(unsigned long long p) { unsigned long long v = 0; return p_ptrAttr(&v, 2, p); }
static int d_ptrAttrs(int* attrs, unsigned long long p) {
	unsigned long long slots[11] = {0};
	void* ptrs[11];
	for (int i = 0; i < 11; i++) ptrs[i] = &slots[i];
	return p_ptrAttrs(11, attrs, ptrs, p);
}
static int d_addrRange(unsigned long long p) { unsigned long long b; size_t s; return p_addrRange(&b, &s, p); }
static int d_recordWait(uintptr_t e, uintptr_t s1, uintptr_t s2) {
	int r = p_record((void*)e, (void*)s1);
	return r ? r : p_wait((void*)s2, (void*)e, 0);
}
static int d_htod(unsigned long long p, uintptr_t src, uintptr_t s) { return p_htod(p, (const void*)src, 4, (void*)s); }

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

// Loops timed in C: the driver's own cost per call, without any binding.
static double l_ctxGetDevice(int n) {
	int d; double t = now();
	for (int i = 0; i < n; i++) p_ctxGetDevice(&d);
	return now() - t;
}
static double l_ptrAttr(unsigned long long p, int n) {
	unsigned long long v; double t = now();
	for (int i = 0; i < n; i++) p_ptrAttr(&v, 2, p);
	return now() - t;
}
static double l_recordWait(uintptr_t e, uintptr_t s1, uintptr_t s2, int n) {
	double t = now();
	for (int i = 1; i <= n; i++) {
		p_record((void*)e, (void*)s1);
		p_wait((void*)s2, (void*)e, 0);
		if (i % 1024 == 0) { p_sync((void*)s1); p_sync((void*)s2); }
	}
	p_sync((void*)s1); p_sync((void*)s2);
	return now() - t;
}
*/
import "C"

import (
	"time"
	"unsafe"
)

const cgoBuild = true

func bindDirect(e *env) {
	s := e.sym
	C.bind(C.uintptr_t(s["cuCtxGetDevice"]), C.uintptr_t(s["cuDeviceGetAttribute"]), C.uintptr_t(s["cuPointerGetAttribute"]),
		C.uintptr_t(s["cuPointerGetAttributes"]), C.uintptr_t(s["cuMemGetAddressRange_v2"]), C.uintptr_t(s["cuEventRecord"]),
		C.uintptr_t(s["cuStreamWaitEvent"]), C.uintptr_t(s["cuMemcpyHtoDAsync_v2"]), C.uintptr_t(s["cuStreamSynchronize"]))
	check("direct cuCtxGetDevice", int32(C.d_ctxGetDevice()))
}

func directCtxGetDevice()     { C.d_ctxGetDevice() }
func directDevAttr(dev int32) { C.d_devAttr(C.int(dev)) }
func directPtrAttr(p uint64)  { C.d_ptrAttr(C.ulonglong(p)) }
func directPtrAttrs(e *env, p uint64) {
	C.d_ptrAttrs((*C.int)(unsafe.Pointer(&e.attrs[0])), C.ulonglong(p))
}
func directAddrRange(p uint64) { C.d_addrRange(C.ulonglong(p)) }
func directRecordWait(e, s1, s2 uintptr) {
	C.d_recordWait(C.uintptr_t(e), C.uintptr_t(s1), C.uintptr_t(s2))
}
func directHtoD(p uint64, src unsafe.Pointer, s uintptr) {
	C.d_htod(C.ulonglong(p), C.uintptr_t(uintptr(src)), C.uintptr_t(s))
}

func loopCtxGetDevice(n int) time.Duration { return time.Duration(C.l_ctxGetDevice(C.int(n))) }
func loopPtrAttr(p uint64, n int) time.Duration {
	return time.Duration(C.l_ptrAttr(C.ulonglong(p), C.int(n)))
}
func loopRecordWait(e, s1, s2 uintptr, n int) time.Duration {
	return time.Duration(C.l_recordWait(C.uintptr_t(e), C.uintptr_t(s1), C.uintptr_t(s2), C.int(n)))
}
