// The C ABI of libdlbridge (package capi). Every function returns 0 on
// success or a pybridge.Code naming the Python exception to raise, with the
// message in dlb_last_error() on the calling thread.
#ifndef DLBRIDGE_CAPI_H
#define DLBRIDGE_CAPI_H

#include <stdint.h>

// dlb_info describes a tensor handle; every call that makes a handle fills
// one when given a non-NULL pointer, so Python needs no second call.
typedef struct {
	uint64_t ptr;        // address of element [0, ..., 0]
	int32_t device_type; // DLDeviceType
	int32_t device_id;
	uint8_t code;        // DLDataTypeCode
	uint8_t bits;
	uint16_t lanes;
	int32_t ndim;
	uint32_t flags;      // DLB_INFO_* bits
	int32_t itemsize;    // bytes per element (1 for packed sub-byte types)
	uint64_t stream;     // CUDA stream of a pending Go-side write, 0 if none
	int64_t shape[64];
	int64_t strides[64]; // in elements
} dlb_info;

#define DLB_INFO_READONLY 1u
#define DLB_INFO_COPIED 2u
#define DLB_INFO_PADDED 4u
#define DLB_INFO_C_CONTIGUOUS 8u
#define DLB_INFO_F_CONTIGUOUS 16u
#define DLB_INFO_FOREIGN 32u

// dlb_scalar carries a number both ways (zerocopy.Value: the same kinds).
typedef struct {
	int32_t kind; // 0 int, 1 uint, 2 float, 3 complex, 4 bool
	int32_t _pad;
	int64_t i;
	uint64_t u;
	double re;
	double im;
} dlb_scalar;

// One item of a basic index (tensor[...]).
typedef struct {
	int32_t kind; // DLB_INDEX_*
	int32_t _pad;
	int64_t start; // the index for DLB_INDEX_INT
	int64_t stop;
	int64_t step;
} dlb_index_item;

#define DLB_INDEX_INT 0     // select start, dropping the dimension
#define DLB_INDEX_SLICE 1   // start:stop:step, already normalized (slice.indices)
#define DLB_INDEX_NEWAXIS 2 // insert a dimension of extent 1

// One argument of a call of a registered Go function (dlb_call).
typedef struct {
	int32_t kind;         // DLB_ARG_*
	int32_t ndim;         // DLB_ARG_MEMORY
	uint64_t handle;      // DLB_ARG_HANDLE: the tensor handle; DLB_ARG_MEMORY: the data pointer
	int32_t device_type;  // DLB_ARG_MEMORY: where the memory is
	int32_t device_id;
	uint8_t code;         // DLB_ARG_MEMORY: the dtype
	uint8_t bits;
	uint16_t lanes;
	uint32_t flags;       // DLB_INFO_READONLY
	const int64_t *shape; // DLB_ARG_MEMORY: ndim extents
	const int64_t *strides; // DLB_ARG_MEMORY: ndim strides in elements, or NULL (C-contiguous)
	int64_t stream;       // DLB_ARG_MEMORY: the stream of the write pending on it, 0 if none
	int64_t i;            // DLB_ARG_INT
	uint64_t u;           // DLB_ARG_UINT
	double f;             // DLB_ARG_FLOAT
	const char *s;        // DLB_ARG_STR (UTF-8, slen bytes)
	int64_t slen;
	uint64_t kept;        // out: a DLB_ARG_MEMORY argument the Go body kept: pass to dlb_call_keep
} dlb_arg;

#define DLB_ARG_MISSING 0 // left out: the parameter's default
#define DLB_ARG_HANDLE 1  // a tensor handle, borrowed for the call
#define DLB_ARG_MEMORY 2  // memory a Python object keeps alive for the call (buffer protocol, DLTensor)
#define DLB_ARG_INT 3
#define DLB_ARG_UINT 4
#define DLB_ARG_FLOAT 5
#define DLB_ARG_BOOL 6    // i is 0 or 1
#define DLB_ARG_STR 7

// One result of a call: a tensor handle (its dlb_info in the infos array
// at the same index), or a scalar of the DLB_ARG_* kinds.
typedef struct {
	int32_t kind;
	int32_t _pad;
	uint64_t handle;
	int64_t i;
	uint64_t u;
	double f;
	char *s;      // DLB_ARG_STR: malloc'd, the caller frees it
	int64_t slen;
} dlb_result;

#define DLB_RES_TENSOR 1

#endif
