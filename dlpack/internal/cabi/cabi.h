//go:build cgo

// DLPack 1.3 ABI, written from the specification for the layout proof and
// the test producer. Names carry a cabi_ prefix so that this header never
// collides with a real dlpack.h elsewhere in a build.
#ifndef DLBRIDGE_CABI_H
#define DLBRIDGE_CABI_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t major;
  uint32_t minor;
} cabi_DLPackVersion;

// DLDeviceType is a C enum; the spec fixes its values (kDLCPU = 1 ...
// kDLTrn = 18), and C gives an enum with such values the size of int.
typedef enum {
  cabi_kDLCPU = 1,
  cabi_kDLCUDA = 2,
  cabi_kDLCUDAHost = 3,
  cabi_kDLOpenCL = 4,
  cabi_kDLVulkan = 7,
  cabi_kDLMetal = 8,
  cabi_kDLVPI = 9,
  cabi_kDLROCM = 10,
  cabi_kDLROCMHost = 11,
  cabi_kDLExtDev = 12,
  cabi_kDLCUDAManaged = 13,
  cabi_kDLOneAPI = 14,
  cabi_kDLWebGPU = 15,
  cabi_kDLHexagon = 16,
  cabi_kDLMAIA = 17,
  cabi_kDLTrn = 18,
} cabi_DLDeviceType;

typedef struct {
  cabi_DLDeviceType device_type;
  int32_t device_id;
} cabi_DLDevice;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} cabi_DLDataType;

typedef struct {
  void *data;
  cabi_DLDevice device;
  int32_t ndim;
  cabi_DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} cabi_DLTensor;

typedef struct cabi_DLManagedTensor {
  cabi_DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct cabi_DLManagedTensor *self);
} cabi_DLManagedTensor;

typedef struct cabi_DLManagedTensorVersioned {
  cabi_DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct cabi_DLManagedTensorVersioned *self);
  uint64_t flags;
  cabi_DLTensor dl_tensor;
} cabi_DLManagedTensorVersioned;

// One row of the layout table: a struct (field == "" for the struct itself)
// or one of its fields, with its size and offset.
typedef struct {
  const char *strct;
  const char *field;
  size_t size;
  size_t offset;
} cabi_layout_row;

// cabi_layout returns the table and its length.
const cabi_layout_row *cabi_layout(size_t *n);

// What the test producer should build.
typedef struct {
  int32_t ndim;
  const int64_t *shape;   // NULL: store a NULL shape pointer
  const int64_t *strides; // NULL: store a NULL strides pointer
  uint8_t code, bits;
  uint16_t lanes;
  int32_t device_type, device_id;
  uint64_t flags;
  uint32_t major, minor;
  size_t data_bytes; // 0: NULL data
  uint64_t byte_offset;
  int null_deleter;
} cabi_spec;

// A record that outlives the tensor so a second deleter call is counted
// instead of touching freed memory. Tests free it with cabi_free_record.
typedef struct {
  _Atomic int64_t calls;
  void *block; // the tensor's single malloc block; NULL once freed
  void *data;  // the tensor's data pointer (without byte_offset)
} cabi_record;

void *cabi_new_versioned(const cabi_spec *s, cabi_record **rec);
void *cabi_new_legacy(const cabi_spec *s, cabi_record **rec);
int64_t cabi_record_calls(const cabi_record *rec);
void cabi_free_record(cabi_record *rec);
int64_t cabi_total_deleter_calls(void);

// Calls fn(arg) on a new pthread and waits for it. Returns the
// pthread_create error, 0 on success.
int cabi_call_on_new_thread(uintptr_t fn, uintptr_t arg);
// Calls the deleter stored in a versioned (legacy = 0) or legacy tensor on a
// new pthread, as a C consumer on its own thread would.
int cabi_delete_on_new_thread(uintptr_t tensor, int legacy);

#endif
