package capi

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/hex"
	"unsafe"

	"github.com/dlbridge/dlbridge/pybridge"
)

// The entry points of dlbridge.nccl (pybridge/nccl.go): worlds,
// communicators and batches are handles of their own; tensors are tensor
// handles (0: none); a stream is a CUstream handle, 0 for the one
// pybridge decides (the tensors' pending stream, else the work stream).
// A failure of a communicator is raised as RuntimeError, or TimeoutError
// when a deadline passed; dlb_nccl_last_failure then describes it.

// putString writes s into buf (capacity bytes, NUL-terminated when it
// fits) and its length into *n: a caller with a small buffer asks again.
func putStringN(s string, buf *C.char, capacity C.int64_t, n *C.int64_t) error {
	if n == nil {
		return nullOut("n")
	}
	*n = C.int64_t(len(s))
	if buf != nil && int64(len(s)) < int64(capacity) {
		// Sound: the caller's buffer of capacity bytes, written before it returns.
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity))
		copy(dst, s)
		dst[len(s)] = 0
	}
	return nil
}

// dlb_nccl_unique_id is a new ncclUniqueId (ncclGetUniqueId): its 128
// bytes as 256 hex digits.
//
//export dlb_nccl_unique_id
func dlb_nccl_unique_id(buf *C.char, capacity C.int64_t, n *C.int64_t) C.int32_t {
	return fence(func() error {
		id, err := pybridge.NCCLUniqueID()
		if err != nil {
			return err
		}
		return putStringN(hex.EncodeToString(id[:]), buf, capacity, n)
	})
}

// dlb_nccl_init_rank joins the communicator of id (256 hex digits) as rank
// of nranks on CUDA device dev, waiting at most timeoutMS (0: the default)
// for the others.
//
//export dlb_nccl_init_rank
func dlb_nccl_init_rank(id *C.char, nranks, rank, dev C.int32_t, timeoutMS C.int64_t, out *C.uint64_t) C.int32_t {
	return handleOut(out, func() (pybridge.Handle, error) {
		if id == nil {
			return 0, pybridge.Errorf(pybridge.ValueError, "dlbridge.nccl: NULL unique id")
		}
		return pybridge.NCCLInitRank(C.GoString(id), int(nranks), int(rank), int(dev), int64(timeoutMS))
	})
}

// dlb_nccl_join joins the job that env describes ("NAME=value" lines of
// MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
// DLBRIDGE_NCCL_TIMEOUT) on device dev (< 0: LOCAL_RANK); out[0] is the
// world, out[1] its communicator.
//
//dlb:array out 2
//export dlb_nccl_join
func dlb_nccl_join(env *C.char, dev C.int32_t, timeoutMS C.int64_t, out *C.uint64_t) C.int32_t {
	return fence(func() error {
		if out == nil {
			return nullOut("out")
		}
		w, c, err := pybridge.NCCLJoin(C.GoString(env), int(dev), int64(timeoutMS))
		if err == nil {
			o := (*[2]C.uint64_t)(unsafe.Pointer(out)) // sound: the caller passes an array of 2
			o[0], o[1] = C.uint64_t(w), C.uint64_t(c)
		}
		return err
	})
}

// dlb_nccl_world_info describes world h (JSON: rank, size, local_rank,
// members, dead).
//
//export dlb_nccl_world_info
func dlb_nccl_world_info(h C.uint64_t, buf *C.char, capacity C.int64_t, n *C.int64_t) C.int32_t {
	return fence(func() error {
		s, err := pybridge.NCCLWorldInfo(pybridge.Handle(h))
		if err != nil {
			return err
		}
		return putStringN(s, buf, capacity, n)
	})
}

//export dlb_nccl_world_rebuild
func dlb_nccl_world_rebuild(h C.uint64_t, out *C.uint64_t) C.int32_t {
	return handleOut(out, func() (pybridge.Handle, error) { return pybridge.NCCLWorldRebuild(pybridge.Handle(h)) })
}

//export dlb_nccl_world_close
func dlb_nccl_world_close(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.NCCLWorldClose(pybridge.Handle(h)) })
}

// dlb_nccl_comm_info is communicator h's rank, size, device, timeout (ms)
// and operations issued.
//
//dlb:array out 5
//export dlb_nccl_comm_info
func dlb_nccl_comm_info(h C.uint64_t, out *C.int64_t) C.int32_t {
	return fence(func() error {
		if out == nil {
			return nullOut("out")
		}
		v, err := pybridge.NCCLCommInfo(pybridge.Handle(h))
		if err == nil {
			o := (*[5]C.int64_t)(unsafe.Pointer(out)) // sound: the caller passes an array of 5
			for i := range v {
				o[i] = C.int64_t(v[i])
			}
		}
		return err
	})
}

//export dlb_nccl_comm_close
func dlb_nccl_comm_close(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.NCCLCommClose(pybridge.Handle(h)) })
}

//export dlb_nccl_abort
func dlb_nccl_abort(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.NCCLAbort(pybridge.Handle(h)) })
}

//export dlb_nccl_finalize
func dlb_nccl_finalize(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.NCCLFinalize(pybridge.Handle(h)) })
}

//export dlb_nccl_wait
func dlb_nccl_wait(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.NCCLWait(pybridge.Handle(h)) })
}

// dlb_nccl_async_error is communicator h's failure ("" while healthy).
//
//export dlb_nccl_async_error
func dlb_nccl_async_error(h C.uint64_t, buf *C.char, capacity C.int64_t, n *C.int64_t) C.int32_t {
	return fence(func() error {
		s, err := pybridge.NCCLAsyncError(pybridge.Handle(h))
		if err != nil {
			return err
		}
		return putStringN(s, buf, capacity, n)
	})
}

// dlb_nccl_last_failure describes (JSON, pybridge.NCCLFailure) the failure
// of a communicator that the last dlb_nccl_ call of this thread reported,
// or "" when that call did not fail so.
//
//export dlb_nccl_last_failure
func dlb_nccl_last_failure(buf *C.char, capacity C.int64_t, n *C.int64_t) C.int32_t {
	return fence(func() error {
		s, err := pybridge.NCCLLastFailure()
		if err != nil {
			return err
		}
		return putStringN(s, buf, capacity, n)
	})
}

// dlb_nccl_collective queues operation kind (pybridge.NCCLAllReduce...) of
// communicator comm over tensors dst and src (0: none) with reduction op
// and root (or peer), on the stream pybridge.PlanStream picks from the
// caller's stream= (see streamArg).
//
//export dlb_nccl_collective
func dlb_nccl_collective(comm C.uint64_t, kind C.int32_t, dst, src C.uint64_t, op, root C.int32_t, hasStream C.int32_t, stream C.uint64_t, streamDev C.int32_t) C.int32_t {
	return fence(func() error {
		return pybridge.NCCLCollective(pybridge.Handle(comm), int(kind), pybridge.Handle(dst), pybridge.Handle(src), int(op), int(root), streamArg(hasStream, stream, streamDev))
	})
}

//export dlb_nccl_all_to_all
func dlb_nccl_all_to_all(comm, dst, src C.uint64_t, hasStream C.int32_t, stream C.uint64_t, streamDev C.int32_t) C.int32_t {
	return fence(func() error {
		return pybridge.NCCLAllToAll(pybridge.Handle(comm), pybridge.Handle(dst), pybridge.Handle(src), streamArg(hasStream, stream, streamDev))
	})
}

//export dlb_nccl_batch_new
func dlb_nccl_batch_new(out *C.uint64_t) C.int32_t {
	return handleOut(out, func() (pybridge.Handle, error) { return pybridge.NCCLBatchNew(), nil })
}

// dlb_nccl_batch_add adds an operation, as dlb_nccl_collective takes it,
// to batch h; its tensors stay borrowed until the batch launches or closes.
//
//export dlb_nccl_batch_add
func dlb_nccl_batch_add(h, comm C.uint64_t, kind C.int32_t, dst, src C.uint64_t, op, root C.int32_t, hasStream C.int32_t, stream C.uint64_t, streamDev C.int32_t) C.int32_t {
	return fence(func() error {
		return pybridge.NCCLBatchAdd(pybridge.Handle(h), pybridge.Handle(comm), int(kind), pybridge.Handle(dst), pybridge.Handle(src), int(op), int(root), streamArg(hasStream, stream, streamDev))
	})
}

// dlb_nccl_batch_launch launches batch h's operations as one NCCL group
// and closes the batch.
//
//export dlb_nccl_batch_launch
func dlb_nccl_batch_launch(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.NCCLBatchLaunch(pybridge.Handle(h)) })
}

//export dlb_nccl_batch_close
func dlb_nccl_batch_close(h C.uint64_t) C.int32_t {
	return fence(func() error { return pybridge.NCCLBatchClose(pybridge.Handle(h)) })
}

// dlb_nccl_live is the number of open worlds, communicators and batches.
//
//export dlb_nccl_live
func dlb_nccl_live(out *C.int64_t) C.int32_t {
	return fence(func() error {
		if out == nil {
			return nullOut("out")
		}
		*out = C.int64_t(pybridge.LiveNCCLObjects())
		return nil
	})
}

// dlb_nccl_split makes the communicator of the ranks of comm that pass
// the same color, numbered by key; *out is 0 for color -1 (none).
//
//export dlb_nccl_split
func dlb_nccl_split(comm C.uint64_t, color, key C.int32_t, out *C.uint64_t) C.int32_t {
	return handleOut(out, func() (pybridge.Handle, error) {
		return pybridge.NCCLSplit(pybridge.Handle(comm), int(color), int(key))
	})
}
