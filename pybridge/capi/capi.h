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

#endif
