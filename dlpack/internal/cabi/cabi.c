//go:build cgo

#include "cabi.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define ROW(S, F) {#S, #F, sizeof(((S *)0)->F), offsetof(S, F)}
#define STRUCT(S) {#S, "", sizeof(S), 0}

static const cabi_layout_row rows[] = {
    STRUCT(cabi_DLPackVersion),
    ROW(cabi_DLPackVersion, major),
    ROW(cabi_DLPackVersion, minor),
    STRUCT(cabi_DLDevice),
    ROW(cabi_DLDevice, device_type),
    ROW(cabi_DLDevice, device_id),
    STRUCT(cabi_DLDataType),
    ROW(cabi_DLDataType, code),
    ROW(cabi_DLDataType, bits),
    ROW(cabi_DLDataType, lanes),
    STRUCT(cabi_DLTensor),
    ROW(cabi_DLTensor, data),
    ROW(cabi_DLTensor, device),
    ROW(cabi_DLTensor, ndim),
    ROW(cabi_DLTensor, dtype),
    ROW(cabi_DLTensor, shape),
    ROW(cabi_DLTensor, strides),
    ROW(cabi_DLTensor, byte_offset),
    STRUCT(cabi_DLManagedTensor),
    ROW(cabi_DLManagedTensor, dl_tensor),
    ROW(cabi_DLManagedTensor, manager_ctx),
    ROW(cabi_DLManagedTensor, deleter),
    STRUCT(cabi_DLManagedTensorVersioned),
    ROW(cabi_DLManagedTensorVersioned, version),
    ROW(cabi_DLManagedTensorVersioned, manager_ctx),
    ROW(cabi_DLManagedTensorVersioned, deleter),
    ROW(cabi_DLManagedTensorVersioned, flags),
    ROW(cabi_DLManagedTensorVersioned, dl_tensor),
};

const cabi_layout_row *cabi_layout(size_t *n) {
  *n = sizeof(rows) / sizeof(rows[0]);
  return rows;
}

static _Atomic int64_t total_calls;

int64_t cabi_total_deleter_calls(void) { return atomic_load(&total_calls); }

int64_t cabi_record_calls(const cabi_record *rec) {
  return atomic_load(&((cabi_record *)rec)->calls);
}

void cabi_free_record(cabi_record *rec) { free(rec); }

// count_and_free is the body of both deleters: count the call, and free the
// block on the first call only, so that a buggy second call is counted
// rather than turned into a double free.
static void count_and_free(cabi_record *rec) {
  atomic_fetch_add(&total_calls, 1);
  if (atomic_fetch_add(&rec->calls, 1) == 0) {
    void *b = rec->block;
    rec->block = NULL;
    free(b);
  }
}

static void versioned_deleter(cabi_DLManagedTensorVersioned *self) {
  count_and_free((cabi_record *)self->manager_ctx);
}

static void legacy_deleter(cabi_DLManagedTensor *self) {
  count_and_free((cabi_record *)self->manager_ctx);
}

// build lays out [header][shape][strides][data] in one malloc block, the
// way a careful C producer would, and makes the record that tracks it.
static char *build(const cabi_spec *s, size_t header, cabi_record **rec) {
  size_t n = s->ndim > 0 ? (size_t)s->ndim : 0;
  size_t dims = n * sizeof(int64_t);
  size_t data_off = header + 2 * dims;
  char *block = calloc(1, data_off + s->data_bytes + 256);
  *rec = calloc(1, sizeof(cabi_record));
  if (block == NULL || *rec == NULL) {
    free(block);
    free(*rec);
    *rec = NULL;
    return NULL;
  }
  (*rec)->block = block;
  int64_t *shape = (int64_t *)(block + header);
  int64_t *strides = shape + n;
  if (s->shape != NULL) {
    memcpy(shape, s->shape, dims);
  }
  if (s->strides != NULL) {
    memcpy(strides, s->strides, dims);
  }
  // malloc aligns to 16; DLPack wants data aligned to 256, hence the slack.
  uintptr_t d = ((uintptr_t)block + data_off + 255) & ~(uintptr_t)255;
  (*rec)->data = s->data_bytes ? (void *)d : NULL;
  return block;
}

// fill points the tensor at the parts of its block.
static void fill(cabi_DLTensor *t, const cabi_spec *s, char *block,
                 size_t header, cabi_record *rec) {
  size_t n = s->ndim > 0 ? (size_t)s->ndim : 0;
  int64_t *shape = (int64_t *)(block + header);
  t->data = rec->data;
  t->device.device_type = (cabi_DLDeviceType)s->device_type;
  t->device.device_id = s->device_id;
  t->ndim = s->ndim;
  t->dtype.code = s->code;
  t->dtype.bits = s->bits;
  t->dtype.lanes = s->lanes;
  t->shape = s->shape ? shape : NULL;
  t->strides = s->strides ? shape + n : NULL;
  t->byte_offset = s->byte_offset;
}

void *cabi_new_versioned(const cabi_spec *s, cabi_record **rec) {
  size_t header = sizeof(cabi_DLManagedTensorVersioned);
  char *block = build(s, header, rec);
  if (block == NULL) {
    return NULL;
  }
  cabi_DLManagedTensorVersioned *m = (cabi_DLManagedTensorVersioned *)block;
  m->version.major = s->major;
  m->version.minor = s->minor;
  m->manager_ctx = *rec;
  m->deleter = s->null_deleter ? NULL : versioned_deleter;
  m->flags = s->flags;
  fill(&m->dl_tensor, s, block, header, *rec);
  return m;
}

void *cabi_new_legacy(const cabi_spec *s, cabi_record **rec) {
  size_t header = sizeof(cabi_DLManagedTensor);
  char *block = build(s, header, rec);
  if (block == NULL) {
    return NULL;
  }
  cabi_DLManagedTensor *m = (cabi_DLManagedTensor *)block;
  m->manager_ctx = *rec;
  m->deleter = s->null_deleter ? NULL : legacy_deleter;
  fill(&m->dl_tensor, s, block, header, *rec);
  return m;
}

typedef struct {
  void (*fn)(void *);
  void *arg;
} call;

static void *run_call(void *p) {
  call *c = p;
  c->fn(c->arg);
  return NULL;
}

int cabi_call_on_new_thread(uintptr_t fn, uintptr_t arg) {
  call c = {(void (*)(void *))fn, (void *)arg};
  pthread_t th;
  int err = pthread_create(&th, NULL, run_call, &c);
  if (err != 0) {
    return err;
  }
  return pthread_join(th, NULL);
}

int cabi_delete_on_new_thread(uintptr_t tensor, int legacy) {
  uintptr_t fn;
  if (legacy) {
    fn = (uintptr_t)((cabi_DLManagedTensor *)tensor)->deleter;
  } else {
    fn = (uintptr_t)((cabi_DLManagedTensorVersioned *)tensor)->deleter;
  }
  if (fn == 0) {
    return 0;
  }
  return cabi_call_on_new_thread(fn, tensor);
}
