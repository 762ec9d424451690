package capi

/*
#include <stdint.h>
#include "capi.h"
*/
import "C"

import (
	"time"
	"unsafe"

	"github.com/dlbridge/dlbridge/pybridge"
)

// The entry points of dlbridge.ipc (pybridge/ipc.go): pools, sockets and
// connections are handles of their own; tensors are tensor handles.

//export dlb_ipc_pool_new
func dlb_ipc_pool_new(dev C.int32_t, limit C.int64_t, out *C.uint64_t) C.int32_t {
	return fence(func() error {
		h, err := pybridge.IPCPoolNew(int32(dev), int64(limit))
		if err == nil {
			*out = C.uint64_t(h)
		}
		return err
	})
}

//export dlb_ipc_pool_empty
func dlb_ipc_pool_empty(pool C.uint64_t, dtype *C.char, ndim C.int32_t, shape *C.int64_t, zero C.int32_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return fence(func() error {
		dt, sh, err := layout(dtype, shape, ndim)
		if err != nil {
			return err
		}
		return publishTo(out, info)(pybridge.IPCPoolEmpty(pybridge.Handle(pool), dt, sh, zero != 0))
	})
}

//export dlb_ipc_pool_copy_in
func dlb_ipc_pool_copy_in(pool, h C.uint64_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		return publishTo(out, info)(pybridge.IPCPoolCopyIn(pybridge.Handle(pool), t))
	})
}

//dlb:array out 3
//export dlb_ipc_pool_usage
func dlb_ipc_pool_usage(pool C.uint64_t, out *C.int64_t) C.int32_t {
	return fence(func() error {
		r, u, live, err := pybridge.IPCPoolUsage(pybridge.Handle(pool))
		if err == nil {
			o := (*[3]C.int64_t)(unsafe.Pointer(out)) // sound: the caller passes an array of 3
			o[0], o[1], o[2] = C.int64_t(r), C.int64_t(u), C.int64_t(live)
		}
		return err
	})
}

//export dlb_ipc_pool_trim
func dlb_ipc_pool_trim(pool C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.IPCPoolTrim(pybridge.Handle(pool)) })
}

//dlb:array out 2
//export dlb_ipc_pool_cached
func dlb_ipc_pool_cached(pool C.uint64_t, out *C.int64_t) C.int32_t {
	return pairOut(out, func() (int, int64, error) { return pybridge.IPCPoolCached(pybridge.Handle(pool)) })
}

//dlb:array out 2
//export dlb_ipc_mapped
func dlb_ipc_mapped(conn C.uint64_t, out *C.int64_t) C.int32_t {
	return pairOut(out, func() (int, int64, error) {
		m, i, err := pybridge.IPCMapped(pybridge.Handle(conn))
		return m, int64(i), err
	})
}

// pairOut writes f's two counts into out, an array of 2 the caller passes.
func pairOut(out *C.int64_t, f func() (int, int64, error)) C.int32_t {
	return fence(func() error {
		a, b, err := f()
		if err == nil {
			o := (*[2]C.int64_t)(unsafe.Pointer(out)) // sound: the caller passes an array of 2
			o[0], o[1] = C.int64_t(a), C.int64_t(b)
		}
		return err
	})
}

func handleOut(out *C.uint64_t, f func() (pybridge.Handle, error)) C.int32_t {
	return fence(func() error {
		h, err := f()
		if err == nil {
			*out = C.uint64_t(h)
		}
		return err
	})
}

//export dlb_ipc_listen
func dlb_ipc_listen(path *C.char, out *C.uint64_t) C.int32_t {
	p := C.GoString(path)
	return handleOut(out, func() (pybridge.Handle, error) { return pybridge.IPCListen(p) })
}

//export dlb_ipc_accept
func dlb_ipc_accept(l C.uint64_t, out *C.uint64_t) C.int32_t {
	return handleOut(out, func() (pybridge.Handle, error) { return pybridge.IPCAccept(pybridge.Handle(l)) })
}

//export dlb_ipc_dial
func dlb_ipc_dial(path *C.char, out *C.uint64_t) C.int32_t {
	p := C.GoString(path)
	return handleOut(out, func() (pybridge.Handle, error) { return pybridge.IPCDial(p) })
}

//export dlb_ipc_serve
func dlb_ipc_serve(path *C.char, out *C.uint64_t) C.int32_t {
	p := C.GoString(path)
	return handleOut(out, func() (pybridge.Handle, error) { return pybridge.IPCServe(p) })
}

//export dlb_ipc_offer
func dlb_ipc_offer(srv, pool, h C.uint64_t, ttlMS C.int64_t, uses C.int32_t, out *C.uint64_t) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		tok, err := pybridge.IPCOffer(pybridge.Handle(srv), pybridge.Handle(pool), t, time.Duration(ttlMS)*time.Millisecond, int(uses))
		if err == nil {
			*out = C.uint64_t(tok)
		}
		return err
	})
}

//export dlb_ipc_claim
func dlb_ipc_claim(conn, token C.uint64_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return fence(func() error {
		return publishTo(out, info)(pybridge.IPCClaim(pybridge.Handle(conn), uint64(token)))
	})
}

//export dlb_ipc_send
func dlb_ipc_send(conn, pool, h C.uint64_t, hasStream C.int32_t, stream C.uint64_t, streamDev C.int32_t) C.int32_t {
	return withTensor(h, func(t *pybridge.Tensor) error {
		return pybridge.IPCSend(pybridge.Handle(conn), pybridge.Handle(pool), t, streamArg(hasStream, stream, streamDev))
	})
}

//export dlb_ipc_recv
func dlb_ipc_recv(conn C.uint64_t, out *C.uint64_t, info *C.dlb_info) C.int32_t {
	return fence(func() error {
		return publishTo(out, info)(pybridge.IPCRecv(pybridge.Handle(conn)))
	})
}

//export dlb_ipc_leases
func dlb_ipc_leases(conn C.uint64_t, out *C.int64_t) C.int32_t {
	return fence(func() error {
		n, err := pybridge.IPCLeases(pybridge.Handle(conn))
		if err == nil {
			*out = C.int64_t(n)
		}
		return err
	})
}

//export dlb_ipc_close
func dlb_ipc_close(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.IPCClose(pybridge.Handle(h)) })
}

//export dlb_ipc_set_timeout
func dlb_ipc_set_timeout(conn C.uint64_t, answerMS, recvMS C.int64_t) C.int32_t {
	return fence(func() error {
		ms := func(v C.int64_t) time.Duration {
			if v < 0 {
				return -1
			}
			return time.Duration(v) * time.Millisecond
		}
		return pybridge.IPCSetTimeout(pybridge.Handle(conn), ms(answerMS), ms(recvMS))
	})
}

//export dlb_ipc_pool_set_timeout
func dlb_ipc_pool_set_timeout(pool C.uint64_t, ms C.int64_t) C.int32_t {
	return fence(func() error {
		return pybridge.IPCPoolSetTimeout(pybridge.Handle(pool), time.Duration(ms)*time.Millisecond)
	})
}
