/*
 * fakecuda: a fake libcuda.so.1 for tests without a GPU.
 *
 * It implements, over host memory, every driver entry point that package
 * github.com/dlbridge/dlbridge/cuda uses, with the same symbol names and C
 * signatures, so the real binding code (purego or cgo) runs against it.
 *
 * Build:  gcc -shared -fPIC -O2 -ffp-contract=off -o libcuda.so.1 fakecuda.c -lpthread
 * Use:    DLBRIDGE_LIBCUDA=/path/to/libcuda.so.1
 *
 * Model (documented so tests can rely on it):
 *   - Devices: FAKECUDA_DEVICES (default 1, at most 8), each with
 *     FAKECUDA_MEM_BYTES of memory (default 1 GiB; used for out-of-memory
 *     answers, not reserved). Compute capability 8.0, "Fake CUDA Device N".
 *   - Device memory is host memory (so addresses are unified, as on a real
 *     64-bit system). Every allocation is tracked with its range, kind,
 *     device and context: pointer attributes and cuMemGetAddressRange
 *     answer from that table; copies, memsets and kernels check that the
 *     device side lies inside one live allocation (else
 *     CUDA_ERROR_INVALID_VALUE at the call, or CUDA_ERROR_ILLEGAL_ADDRESS
 *     at execution if the memory went away in between).
 *   - Contexts: one primary context per device, reference counted; the
 *     current context is per OS thread. Calls that need one fail with
 *     CUDA_ERROR_INVALID_CONTEXT without. Calls on a stream or event use
 *     the object's own context (as the real driver does) unless strict
 *     mode is on (FAKECUDA_STRICT_CTX=1 or fakecuda_set_strict_ctx(1)):
 *     then a stream call needs a current context, and one of the stream's
 *     own (another gives CUDA_ERROR_INVALID_VALUE, as the real driver
 *     answered on two GPUs).
 *   - Streams are ordered queues. Work queued on a created stream runs
 *     only when something waits for it: cuStreamSynchronize, cuCtxSynchronize,
 *     cuEventSynchronize of an event recorded on it, a stream that waits
 *     (cuStreamWaitEvent) for such an event when that wait executes (for
 *     the record current when the wait was queued, as in CUDA), the
 *     legacy default stream (which first drains every blocking stream of
 *     its context), or cuStreamQuery/cuEventQuery, each of which runs one
 *     queued operation and answers CUDA_ERROR_NOT_READY while work was
 *     pending. So a reader that forgets to wait sees stale data, always.
 *     The legacy (0, 1) and per-thread (2) streams run work at once.
 *   - Copies from pageable host memory are staged at the call (the source
 *     may be reused at once); copies into pageable host memory complete
 *     before the call returns; pinned memory (cuMemHostAlloc,
 *     cuMemHostRegister) is read and written when the copy executes.
 *   - Modules: PTX text only. Loading checks the .version/.target/
 *     .address_size directives and parses each .entry's parameter list;
 *     for the kernels this fake knows (fill_f32, iota_f32, scale_f32,
 *     spin_then_write, strided_copy2d, and examples/gofunc's
 *     gofunc_scale_f32 and gofunc_axpy_f32) the parameter sizes must match its
 *     C implementation, else CUDA_ERROR_INVALID_PTX with a log. Launching
 *     another kernel answers CUDA_ERROR_NOT_SUPPORTED. spin_then_write
 *     does not spin (the queues already make order visible).
 *   - Errors: fakecuda_inject(fn, code, after_n) makes the call of entry
 *     point fn after after_n successful ones return code, once; fn
 *     "kernel" fails the next kernel execution (surfacing at the next
 *     synchronization, like a device fault). FAKECUDA_INJECT="fn:code:after,..."
 *     does the same from the environment at cuInit. FAKECUDA_INIT_ERROR=code
 *     makes cuInit fail.
 *   - fakecuda_calls(fn) counts calls per entry point, for tests that check
 *     how many driver calls an operation made; fakecuda_order_log lists the
 *     event records and stream waits in order (which stream waited for a
 *     record on which), so tests can check that the right waits are issued.
 *   - fakecuda_guard(base, n, mask) makes every write by an executed
 *     operation to a masked byte count (fakecuda_guard_hits): tests check
 *     that writes to a strided view leave the gaps between its elements alone.
 *   - Across processes: pools created for POSIX file-descriptor handles
 *     keep their memory in shared memory, interprocess events their
 *     counters; exported handles work in another process (see the section
 *     "across processes" below for the model).
 *   - Host work for other fakes: fakecuda_launch_poll(stream, fn, arg)
 *     queues a call of fn(arg, blocking) that executes in stream order like
 *     any operation, with the lock dropped (fn may call the driver). fn
 *     answers 0 when its work is done, nonzero while it waits for something
 *     outside the stream (another process): a query (cuStreamQuery,
 *     cuEventQuery) then answers CUDA_ERROR_NOT_READY and leaves it queued,
 *     a synchronization calls it again until it is done. testdata/fakenccl
 *     runs its collectives so, as NCCL kernels run on the caller's stream.
 *     A query of a stream whose operation runs in another thread answers
 *     CUDA_ERROR_NOT_READY at once, as the real driver never blocks a query.
 *   - Memory pools: cuDeviceGetDefaultMemPool gives one pool per device;
 *     cuMemAllocAsync counts as used in it, freed bytes stay reserved up to
 *     the release threshold (accounting only: memory is not reused).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    CUDA_ERROR_ALREADY_MAPPED = 208,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

static const struct { int code; const char *name, *msg; } errtab[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

#define MAXDEV 8
#define MAXPARAMS 16

/* ---------------------------------------------------------------- state */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int ndev = 1;
static unsigned long long devmem = 1ull << 30;
static int strict_ctx;

typedef struct fctx {
    int dev;
    int refs;
    int active;
    int peer[MAXDEV];
    int sticky; /* error of work run on the implicit streams, reported at the next sync */
} fctx;

static fctx ctxs[MAXDEV];
static unsigned long long used[MAXDEV];
static __thread fctx *tls_cur;
static __thread fctx *tls_stack[32];
static __thread int tls_depth;

enum { K_DEVICE = 1, K_HOST, K_REGISTERED, K_MANAGED };

typedef struct alloc {
    uintptr_t base;
    size_t size;
    int kind;
    int dev;
    fctx *ctx;
    unsigned long long id;
    int free_pending;
    int async; /* from cuMemAllocAsync: counted in the device's pool */
    struct fipcpool *ipool; /* a block of an IPC pool (ipc section) */
    int ipc_imported;       /* ... imported from another process: nothing to give back */
    unsigned long long free_stream; /* free_pending from cuMemFreeAsync: the stream it is queued on (0: none) */
    unsigned long long free_gen;    /* ... and the free's number, which its OP_FREE carries */
} alloc;

static alloc *allocs;
static int nallocs, capallocs;
static unsigned long long next_id = 1;

enum { OP_COPY = 1, OP_MEMSET8, OP_MEMSET32, OP_KERNEL, OP_RECORD, OP_WAIT, OP_FREE, OP_COPY2D, OP_COPY3D, OP_POLL, OP_RESIZE };

/* fakecuda_launch_poll's work: 0 when done, nonzero while not ready. */
typedef int (*poll_fn)(void *arg, int blocking);

typedef struct op {
    struct op *next;
    int type;
    uintptr_t dst, src;
    size_t n;
    int dst_dev, src_dev; /* 1: that side is device memory to check at execution */
    unsigned int value;
    void *buf; /* owned: a staged source, a 2D/3D descriptor */
    int kernel;
    unsigned long long params[MAXPARAMS];
    unsigned long long ev_id, gen;
    unsigned long long rec_stream; /* OP_WAIT: the stream of the awaited record */
    fctx *ctx;
    volatile unsigned long long *ipc_done; /* OP_WAIT on another process's event: its shared counter */
    int ipc_pid;                           /* ... and that process */
    volatile unsigned long long *ipc_mark; /* OP_RECORD of an interprocess event: its shared counter */
    poll_fn poll;                          /* OP_POLL: the work and its argument */
    void *poll_arg;
} op;

typedef struct fstream {
    unsigned long long id;
    fctx *ctx;
    unsigned int flags;
    int prio;
    op *head, *tail;
    int npending;
    int err;
    int busy; /* an operation of it runs with the lock dropped (a wait on another process) */
    int capturing; /* fakecuda_set_capturing: cuStreamIsCapturing answers "active" */
} fstream;

typedef struct fevent {
    unsigned long long id;
    fctx *ctx;
    unsigned int flags;
    unsigned long long rec_gen, done_gen, stream_id;
    uintptr_t rec_handle; /* the stream handle the latest record was queued on, as the caller gave it */
    int recorded;
    struct timespec t;
    volatile unsigned long long *ipc; /* interprocess: {rec_gen, done_gen} in shared memory */
    int ipc_pid;                      /* opened from another process (cuIpcOpenEventHandle): its pid */
} fevent;

typedef struct ffunc ffunc;
typedef struct fmodule {
    fctx *ctx;
    int nfuncs;
    ffunc *funcs[64];
} fmodule;

struct ffunc {
    fmodule *mod;
    char name[128];
    int kernel; /* index into kernels[], or -1 */
    int nparams;
    int psize[MAXPARAMS];
};

/* Handle registry: every handle given out is looked up here before use, so
 * a garbage, freed or wrong-kind handle is CUDA_ERROR_INVALID_HANDLE, not a crash. */
enum { H_STREAM = 1, H_EVENT, H_MODULE, H_FUNC, H_POOL };
typedef struct { void *p; int kind; } handle;
static handle *handles;
static int nhandles, caphandles;

static void reg_add(void *p, int kind) {
    if (nhandles == caphandles) {
        caphandles = caphandles ? 2 * caphandles : 64;
        handles = realloc(handles, caphandles * sizeof *handles);
    }
    handles[nhandles].p = p;
    handles[nhandles].kind = kind;
    nhandles++;
}
static void *reg_find(const void *p, int kind) {
    if (!p) return NULL;
    for (int i = 0; i < nhandles; i++)
        if (handles[i].p == p && handles[i].kind == kind) return handles[i].p;
    return NULL;
}
static void reg_del(void *p) {
    for (int i = 0; i < nhandles; i++)
        if (handles[i].p == p) { handles[i] = handles[--nhandles]; return; }
}

/* ------------------------------------------------ counting and injection */

typedef struct { char name[64]; long calls; } counter;
static counter counters[256];
static int ncounters;

typedef struct { char name[64]; int code; int after; int active; } injection;
static injection injections[64];
static int ninjections;

/* The ordering log: every cuEventRecord (kind 'r': the stream) and every
 * cuStreamWaitEvent on a recorded event (kind 'w': the waiting stream and the
 * stream of the record it waits for), as stream handles the caller passed
 * (0, 1, 2 for the implicit streams). Cleared with the call counters. */
typedef struct { int kind; uintptr_t stream, on; } orderlog;
static orderlog olog[4096];
static int nolog;

static void log_order(int kind, uintptr_t stream, uintptr_t on) {
    if (nolog < (int)(sizeof olog / sizeof olog[0])) {
        olog[nolog].kind = kind;
        olog[nolog].stream = stream;
        olog[nolog].on = on;
        nolog++;
    }
}

static void count_call(const char *fn) {
    for (int i = 0; i < ncounters; i++)
        if (strcmp(counters[i].name, fn) == 0) { counters[i].calls++; return; }
    if (ncounters < 256) {
        snprintf(counters[ncounters].name, sizeof counters[0].name, "%s", fn);
        counters[ncounters++].calls = 1;
    }
}

static int injected(const char *fn) {
    for (int i = 0; i < ninjections; i++) {
        injection *in = &injections[i];
        if (!in->active || strcmp(in->name, fn) != 0) continue;
        if (in->after > 0) { in->after--; continue; }
        in->active = 0;
        return in->code;
    }
    return 0;
}

static void add_injection(const char *fn, int code, int after) {
    for (int i = 0; i < ninjections; i++)
        if (!injections[i].active) { ninjections = i; break; }
    if (ninjections >= 64) return;
    injection *in = &injections[ninjections++];
    snprintf(in->name, sizeof in->name, "%s", fn);
    in->code = code;
    in->after = after < 0 ? 0 : after;
    in->active = 1;
}

#define ENTER(fn)                                                   \
    pthread_mutex_lock(&mu);                                        \
    count_call(fn);                                                 \
    do {                                                            \
        int inj_ = injected(fn);                                    \
        if (inj_) { pthread_mutex_unlock(&mu); return inj_; }       \
    } while (0)
#define RETURN(x) do { int r_ = (x); pthread_mutex_unlock(&mu); return r_; } while (0)
#define NEED_INIT() do { if (!initialized) RETURN(CUDA_ERROR_NOT_INITIALIZED); } while (0)
#define NEED_CTX()                                                             \
    do {                                                                       \
        NEED_INIT();                                                           \
        if (!tls_cur || !tls_cur->active) RETURN(CUDA_ERROR_INVALID_CONTEXT);  \
    } while (0)
#define NEED_CTX_STRICT() do { NEED_INIT(); if (strict_ctx && (!tls_cur || !tls_cur->active)) RETURN(CUDA_ERROR_INVALID_CONTEXT); } while (0)

/* ------------------------------------------------------------ allocations */

static alloc *find_alloc(uintptr_t p) {
    for (int i = 0; i < nallocs; i++)
        if (p >= allocs[i].base && p - allocs[i].base < allocs[i].size) return &allocs[i];
    return NULL;
}

/* in_alloc: [p, p+n) inside one live allocation (n == 0: p inside one). */
static alloc *in_alloc(uintptr_t p, size_t n) {
    alloc *a = find_alloc(p);
    if (!a) return NULL;
    if (n > a->size - (p - a->base)) return NULL;
    return a;
}

static int is_pinned(uintptr_t p, size_t n) {
    alloc *a = in_alloc(p, n);
    return a && (a->kind == K_HOST || a->kind == K_REGISTERED || a->kind == K_MANAGED);
}

static alloc *add_alloc(uintptr_t base, size_t size, int kind, fctx *c) {
    if (nallocs == capallocs) {
        capallocs = capallocs ? 2 * capallocs : 64;
        allocs = realloc(allocs, capallocs * sizeof *allocs);
    }
    alloc *a = &allocs[nallocs++];
    memset(a, 0, sizeof *a);
    a->base = base;
    a->size = size;
    a->kind = kind;
    a->ctx = c;
    a->dev = c ? c->dev : 0;
    a->id = next_id++;
    return a;
}

static int ipc_del_alloc(alloc *a);
static long env_ms(const char *name, long def);
static void ipc_poison(alloc *a);
static unsigned long long next_free_gen = 1;

static void ipc_pool_release_unused(struct fipcpool *p);

static void del_alloc(alloc *a) {
    if (ipc_del_alloc(a)) {
        struct fipcpool *p = a->ipool;
        *a = allocs[--nallocs];
        ipc_pool_release_unused(p);
        return;
    }
    if (a->kind == K_DEVICE || a->kind == K_MANAGED) used[a->dev] -= a->size;
    if (a->kind != K_REGISTERED) free((void *)a->base);
    *a = allocs[--nallocs];
}

/* ---------------------------------------------------------------- queues */

static fstream **streams;
static int nstreams, capstreams;
static unsigned long long next_stream_id = 1;
static fevent **events;
static int nevents, capevents;
static unsigned long long next_event_id = 1;

static fstream *stream_by_id(unsigned long long id) {
    for (int i = 0; i < nstreams; i++)
        if (streams[i]->id == id) return streams[i];
    return NULL;
}
static fevent *event_by_id(unsigned long long id) {
    for (int i = 0; i < nevents; i++)
        if (events[i]->id == id) return events[i];
    return NULL;
}

static int exec_op(op *o);

/* The write guard (fakecuda_guard): bytes of one range that no executed
 * operation may write; each guarded byte written counts as a hit. */
static uintptr_t guard_base;
static size_t guard_n;
static unsigned char *guard_mask;
static long guard_hits;

static void guard_write(uintptr_t dst, size_t n) {
    if (!guard_mask || dst >= guard_base + guard_n || dst + n <= guard_base) return;
    uintptr_t a = dst < guard_base ? guard_base : dst;
    uintptr_t b = dst + n > guard_base + guard_n ? guard_base + guard_n : dst + n;
    for (uintptr_t x = a; x < b; x++) guard_hits += guard_mask[x - guard_base];
}

/* The default memory pool of each device: allocations of cuMemAllocAsync
 * count as used; freed bytes stay reserved up to the release threshold
 * (the fake does not reuse them: it only keeps the accounting). */
typedef struct fpool {
    int dev;
    unsigned long long threshold, used, cached;
    int access[MAXDEV]; /* cuMemPoolSetAccess: the flags granted to each device */
} fpool;
static fpool pools[MAXDEV];

static void pool_release(int dev, size_t n) {
    fpool *p = &pools[dev];
    p->used -= n;
    p->cached += n;
    if (p->cached > p->threshold) p->cached = p->threshold;
}

static int ipc_wait_op(fstream *s, op *o);

static void ipc_wait_busy(fstream *s);

/* Set by the queries around their one step: an OP_POLL that is not ready
 * then stays queued instead of being waited for. */
static __thread int tls_query;

/* step_poll runs the OP_POLL at the head of s with the lock dropped: once
 * for a query, until done otherwise. It answers whether it is done. */
static int step_poll(fstream *s, op *o) {
    int blocking = !tls_query;
    s->busy = 1;
    pthread_mutex_unlock(&mu);
    int r;
    for (;;) {
        r = o->poll(o->poll_arg, blocking);
        if (r == 0 || !blocking) break;
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&mu);
    s->busy = 0;
    return r == 0;
}

static void step(fstream *s) {
    ipc_wait_busy(s);
    op *o = s->head;
    if (!o) return;
    if (o->type == OP_POLL) {
        if (!step_poll(s, o)) return;
        /* The lock was dropped: s->head is still o (nothing else steps a
         * busy stream), but work may have been queued behind it. */
    }
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->npending--;
    int r;
    if (o->ipc_done) {
        r = ipc_wait_op(s, o);
    } else if (o->type == OP_WAIT) {
        /* Running the awaited stream may drop the lock (a wait on another
         * process there): the rest of s must not run meanwhile. */
        s->busy = 1;
        r = exec_op(o);
        s->busy = 0;
    } else {
        r = exec_op(o);
    }
    if (r && !s->err) s->err = r;
    free(o->buf);
    free(o);
}

static void drain(fstream *s) {
    while (s->head) step(s);
}

/* drain_event runs e's stream until the record of generation gen executed
 * (for cuEventSynchronize/Query: they wait for the latest record). */
static void drain_event(fevent *e, unsigned long long gen) {
    while (e->done_gen < gen) {
        fstream *s = stream_by_id(e->stream_id);
        if (!s || !s->head) { e->done_gen = gen; return; }
        step(s);
    }
}

/* drain_record runs stream sid until the record of event ev_id, generation
 * gen, queued on it has executed (nothing to do if it already has, or if the
 * stream is gone: destroying a stream drains it). A wait drains the stream
 * and record captured when it was queued, not the event's latest record: an
 * event may be recorded again, elsewhere, before the wait executes. */
static void drain_record(unsigned long long sid, unsigned long long ev_id, unsigned long long gen) {
    for (;;) {
        /* Look again each round: a wait on another process (ipc section)
         * runs with the lock dropped, and another thread may run the
         * record meanwhile. */
        fstream *s = stream_by_id(sid);
        if (!s) return;
        const op *rec = s->head;
        while (rec && !(rec->type == OP_RECORD && rec->ev_id == ev_id && rec->gen == gen)) rec = rec->next;
        if (!rec) return;
        step(s);
    }
}

/* The legacy default stream waits for every blocking stream of its context. */
static void drain_blocking(fctx *c) {
    for (int i = 0; i < nstreams; i++)
        if (streams[i]->ctx == c && !(streams[i]->flags & 1)) drain(streams[i]);
}
static void drain_ctx(fctx *c) {
    for (int i = 0; i < nstreams; i++)
        if (streams[i]->ctx == c) drain(streams[i]);
}

/* Stream handles 0 and 1 are the legacy stream, 2 the per-thread stream, of
 * the calling thread's current context. resolve() answers the stream to
 * queue on (NULL for an implicit stream) and its context. */
/* Handles of destroyed streams (the last 256): the real driver crashes on
 * one, the fake counts each use (fakecuda_stale_stream_uses) so that tests
 * can require none. A new stream at the same address takes it off. */
static void *destroyed[256];
static int ndestroyed;
static long stale_uses;

static void forget_destroyed(void *h) {
    for (int i = 0; i < ndestroyed && i < 256; i++)
        if (destroyed[i] == h) destroyed[i] = NULL;
}

static int resolve(void *h, fstream **out, fctx **c) {
    uintptr_t v = (uintptr_t)h;
    if (v <= 2) {
        if (!tls_cur || !tls_cur->active) return CUDA_ERROR_INVALID_CONTEXT;
        *out = NULL;
        *c = tls_cur;
        if (v != 2) drain_blocking(tls_cur);
        return 0;
    }
    fstream *s = reg_find(h, H_STREAM);
    if (!s) {
        for (int i = 0; i < ndestroyed && i < 256; i++)
            if (destroyed[i] == h) stale_uses++;
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (!s->ctx->active) return CUDA_ERROR_INVALID_CONTEXT;
    /* Strict mode: a stream of another context than the current one is
     * refused, as the real driver refuses cuMemcpyHtoDAsync on a stream of
     * device 0 while device 1's context is current. */
    if (strict_ctx && tls_cur && tls_cur != s->ctx) return CUDA_ERROR_INVALID_VALUE;
    *out = s;
    *c = s->ctx;
    return 0;
}

/* submit queues o on s, or runs it now on an implicit stream. */
static void submit(fstream *s, fctx *c, op *o) {
    o->ctx = c;
    if (!s) {
        int r = exec_op(o);
        if (r && !c->sticky) c->sticky = r;
        free(o->buf);
        free(o);
        return;
    }
    if (s->tail) s->tail->next = o; else s->head = o;
    s->tail = o;
    s->npending++;
}

static op *new_op(int type) {
    op *o = calloc(1, sizeof *o);
    o->type = type;
    return o;
}

/* ------------------------------------------------------------- CUDA types */

typedef struct {
    size_t srcXInBytes, srcY;
    unsigned int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    unsigned int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

typedef struct {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    unsigned int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    unsigned int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;


/* ------------------------------------------------------------------ kernels */

enum { KN_FILL, KN_IOTA, KN_SCALE, KN_SPIN, KN_COPY2D, KN_XSCALE, KN_AXPY, NKERNELS };
static const struct { const char *name; int n; int size[MAXPARAMS]; } kernels[NKERNELS] = {
    {"fill_f32", 3, {8, 8, 4}},
    {"iota_f32", 4, {8, 8, 4, 4}},
    {"scale_f32", 3, {8, 8, 4}},
    {"spin_then_write", 4, {8, 8, 4, 8}},
    {"strided_copy2d", 9, {8, 8, 8, 8, 8, 8, 8, 8, 4}},
    /* examples/gofunc's own kernels (kernels.ptx there) */
    {"gofunc_scale_f32", 4, {8, 8, 8, 4}},
    {"gofunc_axpy_f32", 4, {8, 8, 8, 4}},
};

static float f32(unsigned long long bits) {
    uint32_t u = (uint32_t)bits;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A kernel may touch device memory of its own device, of a peer that has
 * access enabled, managed memory and mapped pinned host memory. */
static int kernel_can_touch(fctx *c, uintptr_t p, size_t n) {
    alloc *a = in_alloc(p, n);
    if (!a) return 0;
    if (a->kind != K_DEVICE) return 1;
    return a->dev == c->dev || c->peer[a->dev];
}

static int run_kernel(op *o) {
    unsigned long long *P = o->params;
    if (injected("kernel")) return CUDA_ERROR_LAUNCH_FAILED;
    switch (o->kernel) {
    case KN_FILL: case KN_IOTA: case KN_SCALE: case KN_SPIN: {
        uintptr_t p = (uintptr_t)P[0];
        size_t n = (size_t)P[1];
        if (n == 0) return 0;
        if (n > SIZE_MAX / 4 || !kernel_can_touch(o->ctx, p, 4 * n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        if (p % 4) return 716; /* misaligned */
        float *f = (float *)p;
        uint32_t *u = (uint32_t *)p;
        guard_write(p, 4 * n);
        for (size_t i = 0; i < n; i++) {
            switch (o->kernel) {
            case KN_FILL: f[i] = f32(P[2]); break;
            case KN_IOTA: { volatile float prod = (float)i * f32(P[3]); f[i] = f32(P[2]) + prod; break; }
            case KN_SCALE: f[i] = f[i] * f32(P[2]); break;
            case KN_SPIN: u[i] = (uint32_t)P[2]; break;
            }
        }
        return 0;
    }
    case KN_XSCALE: case KN_AXPY: {
        /* (float* out_or_y, const float* x, u64 n, float f): out[i] = x[i]*f, or y[i] = a*x[i] + y[i] */
        uintptr_t d = (uintptr_t)P[0], x = (uintptr_t)P[1];
        size_t n = (size_t)P[2];
        if (n == 0) return 0;
        if (n > SIZE_MAX / 4 || !kernel_can_touch(o->ctx, d, 4 * n) || !kernel_can_touch(o->ctx, x, 4 * n))
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        if (d % 4 || x % 4) return 716;
        float *out = (float *)d;
        const float *in = (const float *)x;
        float a = f32(P[3]);
        guard_write(d, 4 * n);
        for (size_t i = 0; i < n; i++) {
            volatile float prod = in[i] * a; /* rounded once, as mul.rn then add.rn */
            out[i] = o->kernel == KN_XSCALE ? prod : prod + out[i];
        }
        return 0;
    }
    case KN_COPY2D: {
        uintptr_t dst = P[0], src = P[1];
        unsigned long long rows = P[2], cols = P[3];
        long long drs = (long long)P[4], dcs = (long long)P[5], srs = (long long)P[6], scs = (long long)P[7];
        unsigned es = (unsigned)P[8];
        if (es != 1 && es != 2 && es != 4 && es != 8) return 0; /* the PTX copies nothing */
        if (rows == 0 || cols == 0) return 0;
        /* the extremes of r*rs + c*cs are at the corners */
        long long r1 = (long long)rows - 1, c1 = (long long)cols - 1;
        long long dlo = 0, dhi = 0, slo = 0, shi = 0;
        long long dc[4] = {0, r1 * drs, c1 * dcs, r1 * drs + c1 * dcs};
        long long sc[4] = {0, r1 * srs, c1 * scs, r1 * srs + c1 * scs};
        for (int i = 0; i < 4; i++) {
            if (dc[i] < dlo) dlo = dc[i];
            if (dc[i] > dhi) dhi = dc[i];
            if (sc[i] < slo) slo = sc[i];
            if (sc[i] > shi) shi = sc[i];
        }
        if (!kernel_can_touch(o->ctx, dst + dlo, (size_t)(dhi - dlo) + es)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        if (!kernel_can_touch(o->ctx, src + slo, (size_t)(shi - slo) + es)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        if (dst % es || src % es) return 716;
        for (unsigned long long r = 0; r < rows; r++)
            for (unsigned long long c = 0; c < cols; c++) {
                guard_write(dst + r * drs + c * dcs, es);
                memcpy((void *)(dst + r * drs + c * dcs), (const void *)(src + r * srs + c * scs), es);
            }
        return 0;
    }
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* copy operands of 2D/3D copies: the address of (x, y, z). */
static uintptr_t side_addr(unsigned t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t z, size_t pitch, size_t height) {
    uintptr_t base = t == 1 ? (uintptr_t)host : (uintptr_t)dev;
    return base + (z * height + y) * pitch + x;
}

/* check_side: each row of one side of a 2D/3D copy inside one allocation
 * when it is device memory (dev != 0), any memory when pageable host. */
static int check_rows(unsigned t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t z,
                      size_t pitch, size_t height, size_t w, size_t h, size_t d, int must_pin) {
    if (t == 3) return CUDA_ERROR_NOT_SUPPORTED; /* arrays */
    if (t < 1 || t > 4) return CUDA_ERROR_INVALID_VALUE;
    if (t == 1 && !host) return CUDA_ERROR_INVALID_VALUE;
    if (t != 1 && !dev) return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < d; k++)
        for (size_t j = 0; j < h; j++) {
            uintptr_t a = side_addr(t, host, dev, x, y + j, z + k, pitch, height);
            if (t == 1) {
                if (must_pin && !is_pinned(a, w)) return CUDA_ERROR_INVALID_VALUE;
            } else if (!in_alloc(a, w)) {
                return CUDA_ERROR_INVALID_VALUE;
            }
        }
    return 0;
}

static int exec_copy3d(const CUDA_MEMCPY3D *m) {
    size_t d = m->Depth ? m->Depth : 1;
    for (size_t k = 0; k < d; k++)
        for (size_t j = 0; j < m->Height; j++) {
            uintptr_t s = side_addr(m->srcMemoryType, m->srcHost, m->srcDevice, m->srcXInBytes, m->srcY + j, m->srcZ + k, m->srcPitch, m->srcHeight);
            uintptr_t t = side_addr(m->dstMemoryType, m->dstHost, m->dstDevice, m->dstXInBytes, m->dstY + j, m->dstZ + k, m->dstPitch, m->dstHeight);
            if (m->srcMemoryType != 1 && !in_alloc(s, m->WidthInBytes)) return CUDA_ERROR_ILLEGAL_ADDRESS;
            if (m->dstMemoryType != 1 && !in_alloc(t, m->WidthInBytes)) return CUDA_ERROR_ILLEGAL_ADDRESS;
            guard_write(t, m->WidthInBytes);
            memmove((void *)t, (const void *)s, m->WidthInBytes);
        }
    return 0;
}

static void to3d(const CUDA_MEMCPY2D *a, CUDA_MEMCPY3D *m) {
    memset(m, 0, sizeof *m);
    m->srcXInBytes = a->srcXInBytes; m->srcY = a->srcY; m->srcMemoryType = a->srcMemoryType;
    m->srcHost = a->srcHost; m->srcDevice = a->srcDevice; m->srcPitch = a->srcPitch;
    m->dstXInBytes = a->dstXInBytes; m->dstY = a->dstY; m->dstMemoryType = a->dstMemoryType;
    m->dstHost = a->dstHost; m->dstDevice = a->dstDevice; m->dstPitch = a->dstPitch;
    m->WidthInBytes = a->WidthInBytes; m->Height = a->Height; m->Depth = 1;
}

static int exec_op(op *o) {
    switch (o->type) {
    case OP_COPY: {
        uintptr_t src = o->buf ? (uintptr_t)o->buf : o->src;
        if (o->src_dev && !in_alloc(o->src, o->n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        if (o->dst_dev && !in_alloc(o->dst, o->n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        guard_write(o->dst, o->n);
        memmove((void *)o->dst, (const void *)src, o->n);
        return 0;
    }
    case OP_MEMSET8:
        if (!in_alloc(o->dst, o->n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        guard_write(o->dst, o->n);
        memset((void *)o->dst, (int)(o->value & 0xff), o->n);
        return 0;
    case OP_MEMSET32: {
        if (!in_alloc(o->dst, 4 * o->n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        guard_write(o->dst, 4 * o->n);
        uint32_t *p = (uint32_t *)o->dst;
        for (size_t i = 0; i < o->n; i++) p[i] = o->value;
        return 0;
    }
    case OP_KERNEL:
        return run_kernel(o);
    case OP_RECORD: {
        fevent *e = event_by_id(o->ev_id);
        if (e && e->done_gen < o->gen) {
            e->done_gen = o->gen;
            clock_gettime(CLOCK_MONOTONIC, &e->t);
        }
        if (o->ipc_mark) __atomic_store_n(&o->ipc_mark[1], o->gen, __ATOMIC_RELEASE);
        return 0;
    }
    case OP_WAIT:
        drain_record(o->rec_stream, o->ev_id, o->gen);
        return 0;
    case OP_FREE: {
        alloc *a = find_alloc(o->dst);
        /* The free of this very request: a block of an IPC pool that an
         * allocation on the same stream took over meanwhile (ipc section)
         * is someone else's now. */
        if (a && a->base == o->dst && a->free_pending && a->free_gen == o->gen) {
            ipc_poison(a);
            if (a->async) pool_release(a->dev, a->size);
            del_alloc(a);
        }
        return 0;
    }
    case OP_RESIZE: {
        /* A take-over's boundary (cuMemAllocFromPoolAsync): from here on
         * the stream's work is the new owner's, checked against its size. */
        alloc *a = find_alloc(o->dst);
        if (a && a->base == o->dst) a->size = o->n;
        return 0;
    }
    case OP_COPY3D:
        return exec_copy3d((CUDA_MEMCPY3D *)o->buf);
    case OP_POLL:
        return 0; /* step_poll ran it to completion before it was dequeued */
    }
    return CUDA_ERROR_UNKNOWN;
}

/* ------------------------------------------------------------ init & errors */

static void parse_inject_env(void) {
    const char *s = getenv("FAKECUDA_INJECT");
    if (!s) return;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char name[64];
        int code = 0, after = 0;
        if (sscanf(tok, "%63[^:]:%d:%d", name, &code, &after) >= 2) add_injection(name, code, after);
    }
}

EXPORT CUresult cuInit(unsigned int flags) {
    ENTER("cuInit");
    if (flags != 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    const char *e = getenv("FAKECUDA_INIT_ERROR");
    if (e && atoi(e)) RETURN(atoi(e));
    if (!initialized) {
        const char *d = getenv("FAKECUDA_DEVICES");
        if (d) {
            ndev = atoi(d);
            if (ndev < 0) ndev = 0;
            if (ndev > MAXDEV) ndev = MAXDEV;
        }
        const char *m = getenv("FAKECUDA_MEM_BYTES");
        if (m) devmem = strtoull(m, NULL, 0);
        const char *st = getenv("FAKECUDA_STRICT_CTX");
        if (st) strict_ctx = atoi(st);
        for (int i = 0; i < MAXDEV; i++) ctxs[i].dev = i;
        parse_inject_env();
        initialized = 1;
    }
    if (ndev == 0) RETURN(CUDA_ERROR_NO_DEVICE);
    RETURN(0);
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    ENTER("cuDriverGetVersion");
    if (!v) RETURN(CUDA_ERROR_INVALID_VALUE);
    const char *e = getenv("FAKECUDA_DRIVER_VERSION");
    *v = e ? atoi(e) : 13000;
    RETURN(0);
}

static CUresult error_str(int code, const char **p, int which) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errtab / sizeof errtab[0]; i++)
        if (errtab[i].code == code) {
            *p = which ? errtab[i].msg : errtab[i].name;
            return 0;
        }
    *p = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}
/* These two neither count nor inject: they run on every error path. */
EXPORT CUresult cuGetErrorName(int code, const char **p) { return error_str(code, p, 0); }
EXPORT CUresult cuGetErrorString(int code, const char **p) { return error_str(code, p, 1); }

/* ------------------------------------------------------------------ devices */

#define CHECK_DEV(d) do { if ((d) < 0 || (d) >= ndev) RETURN(CUDA_ERROR_INVALID_DEVICE); } while (0)

EXPORT CUresult cuDeviceGetCount(int *n) {
    ENTER("cuDeviceGetCount");
    NEED_INIT();
    if (!n) RETURN(CUDA_ERROR_INVALID_VALUE);
    *n = ndev;
    RETURN(0);
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    ENTER("cuDeviceGet");
    NEED_INIT();
    if (!d) RETURN(CUDA_ERROR_INVALID_VALUE);
    CHECK_DEV(ordinal);
    *d = ordinal;
    RETURN(0);
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    ENTER("cuDeviceGetName");
    NEED_INIT();
    CHECK_DEV(d);
    if (!name || len <= 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    snprintf(name, (size_t)len, "Fake CUDA Device %d", d);
    RETURN(0);
}

static int attribute(int a, int d) {
    switch (a) {
    case 1: return 1024;       /* max threads per block */
    case 2: case 3: return 1024;
    case 4: return 64;
    case 5: return 2147483647;
    case 6: case 7: return 65535;
    case 8: return 49152;      /* shared memory per block */
    case 9: return 65536;
    case 10: return 32;        /* warp size */
    case 13: return 1410000;   /* clock kHz */
    case 16: return 4;         /* SMs */
    case 19: return 1;         /* can map host memory */
    case 33: return 0x10 + d;  /* PCI bus */
    case 34: return 0;
    case 40: return 2;         /* async engines */
    case 41: return 1;         /* unified addressing */
    case 50: return 0;         /* PCI domain */
    case 75: return 8;         /* compute capability */
    case 76: return 0;
    case 83: return 1;         /* managed memory */
    case 89: return 1;
    case 99: return 1;         /* host register supported */
    case 115: return 1;        /* memory pools */
    }
    return 0;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int a, CUdevice d) {
    ENTER("cuDeviceGetAttribute");
    NEED_INIT();
    CHECK_DEV(d);
    if (!v || a <= 0 || a >= 200) RETURN(CUDA_ERROR_INVALID_VALUE);
    *v = attribute(a, d);
    RETURN(0);
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *n, CUdevice d) {
    ENTER("cuDeviceTotalMem_v2");
    NEED_INIT();
    CHECK_DEV(d);
    if (!n) RETURN(CUDA_ERROR_INVALID_VALUE);
    *n = devmem;
    RETURN(0);
}

EXPORT CUresult cuDeviceGetPCIBusId(char *buf, int len, CUdevice d) {
    ENTER("cuDeviceGetPCIBusId");
    NEED_INIT();
    CHECK_DEV(d);
    if (!buf || len <= 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    snprintf(buf, (size_t)len, "0000:%02X:00.0", 0x10 + d);
    RETURN(0);
}

static CUresult uuid(unsigned char *u, CUdevice d) {
    if (!u) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 16; i++) u[i] = (unsigned char)(0xf0 + i + 16 * d);
    u[0] = 0xfa; u[1] = 0xce; u[15] = (unsigned char)d;
    return 0;
}
EXPORT CUresult cuDeviceGetUuid(unsigned char *u, CUdevice d) {
    ENTER("cuDeviceGetUuid"); NEED_INIT(); CHECK_DEV(d); RETURN(uuid(u, d));
}
EXPORT CUresult cuDeviceGetUuid_v2(unsigned char *u, CUdevice d) {
    ENTER("cuDeviceGetUuid_v2"); NEED_INIT(); CHECK_DEV(d); RETURN(uuid(u, d));
}

EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer) {
    ENTER("cuDeviceCanAccessPeer");
    NEED_INIT();
    CHECK_DEV(d);
    CHECK_DEV(peer);
    if (!can) RETURN(CUDA_ERROR_INVALID_VALUE);
    *can = d != peer;
    RETURN(0);
}

/* ----------------------------------------------------------------- contexts */

static fctx *ctx_of(void *h) {
    for (int i = 0; i < ndev; i++)
        if (h == &ctxs[i]) return &ctxs[i];
    return NULL;
}

static void destroy_ctx_resources(fctx *c);

EXPORT CUresult cuDevicePrimaryCtxRetain(void **pctx, CUdevice d) {
    ENTER("cuDevicePrimaryCtxRetain");
    NEED_INIT();
    CHECK_DEV(d);
    if (!pctx) RETURN(CUDA_ERROR_INVALID_VALUE);
    ctxs[d].refs++;
    ctxs[d].active = 1;
    *pctx = &ctxs[d];
    RETURN(0);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    ENTER("cuDevicePrimaryCtxRelease_v2");
    NEED_INIT();
    CHECK_DEV(d);
    fctx *c = &ctxs[d];
    if (c->refs <= 0) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (--c->refs == 0) {
        destroy_ctx_resources(c);
        c->active = 0;
        c->sticky = 0;
        memset(c->peer, 0, sizeof c->peer);
    }
    RETURN(0);
}

EXPORT CUresult cuCtxGetCurrent(void **pctx) {
    ENTER("cuCtxGetCurrent");
    NEED_INIT();
    if (!pctx) RETURN(CUDA_ERROR_INVALID_VALUE);
    *pctx = tls_cur;
    RETURN(0);
}

EXPORT CUresult cuCtxSetCurrent(void *h) {
    ENTER("cuCtxSetCurrent");
    NEED_INIT();
    if (!h) { tls_cur = NULL; RETURN(0); }
    fctx *c = ctx_of(h);
    if (!c || !c->active) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    tls_cur = c;
    RETURN(0);
}

EXPORT CUresult cuCtxPushCurrent_v2(void *h) {
    ENTER("cuCtxPushCurrent_v2");
    NEED_INIT();
    fctx *c = ctx_of(h);
    if (!c || !c->active) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (tls_depth >= 32) RETURN(CUDA_ERROR_UNKNOWN);
    tls_stack[tls_depth++] = tls_cur;
    tls_cur = c;
    RETURN(0);
}

EXPORT CUresult cuCtxPopCurrent_v2(void **pctx) {
    ENTER("cuCtxPopCurrent_v2");
    NEED_INIT();
    if (!tls_cur) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (pctx) *pctx = tls_cur;
    tls_cur = tls_depth > 0 ? tls_stack[--tls_depth] : NULL;
    RETURN(0);
}

EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
    ENTER("cuCtxGetDevice");
    NEED_CTX();
    if (!d) RETURN(CUDA_ERROR_INVALID_VALUE);
    *d = tls_cur->dev;
    RETURN(0);
}

static int take_errors(fctx *c) {
    int r = c->sticky;
    c->sticky = 0;
    for (int i = 0; i < nstreams; i++)
        if (streams[i]->ctx == c && streams[i]->err) {
            if (!r) r = streams[i]->err;
            streams[i]->err = 0;
        }
    return r;
}

EXPORT CUresult cuCtxSynchronize(void) {
    ENTER("cuCtxSynchronize");
    NEED_CTX();
    drain_ctx(tls_cur);
    RETURN(take_errors(tls_cur));
}

EXPORT CUresult cuCtxEnablePeerAccess(void *peer, unsigned int flags) {
    ENTER("cuCtxEnablePeerAccess");
    NEED_CTX();
    fctx *p = ctx_of(peer);
    if (flags != 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!p || !p->active) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (p == tls_cur) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (tls_cur->peer[p->dev]) RETURN(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    tls_cur->peer[p->dev] = 1;
    RETURN(0);
}

EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
    ENTER("cuCtxGetStreamPriorityRange");
    NEED_CTX();
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    RETURN(0);
}

/* ------------------------------------------------------------------- memory */

EXPORT CUresult cuMemGetInfo_v2(size_t *freeb, size_t *total) {
    ENTER("cuMemGetInfo_v2");
    NEED_CTX();
    if (freeb) *freeb = devmem - used[tls_cur->dev];
    if (total) *total = devmem;
    RETURN(0);
}

static int dev_alloc(fctx *c, CUdeviceptr *p, size_t n, int kind) {
    if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
    if (n > devmem - used[c->dev]) return CUDA_ERROR_OUT_OF_MEMORY;
    void *m = NULL;
    if (posix_memalign(&m, 256, n) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(m, 0xcd, n); /* like uninitialized device memory: not zero */
    used[c->dev] += n;
    add_alloc((uintptr_t)m, n, kind, c);
    *p = (CUdeviceptr)(uintptr_t)m;
    return 0;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    ENTER("cuMemAlloc_v2");
    NEED_CTX();
    RETURN(dev_alloc(tls_cur, p, n, K_DEVICE));
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int flags) {
    ENTER("cuMemAllocManaged");
    NEED_CTX();
    if (flags != 1 && flags != 2) RETURN(CUDA_ERROR_INVALID_VALUE);
    RETURN(dev_alloc(tls_cur, p, n, K_MANAGED));
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    ENTER("cuMemFree_v2");
    NEED_CTX();
    alloc *a = find_alloc((uintptr_t)p);
    if (!a || a->base != (uintptr_t)p || (a->kind != K_DEVICE && a->kind != K_MANAGED) || a->free_pending)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    drain_ctx(a->ctx); /* cuMemFree synchronizes */
    a = find_alloc((uintptr_t)p);
    if (a) { ipc_poison(a); del_alloc(a); }
    RETURN(0);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *stream) {
    ENTER("cuMemAllocAsync");
    NEED_CTX_STRICT();
    fstream *s;
    fctx *c;
    int r = resolve(stream, &s, &c);
    if (r) RETURN(r);
    r = dev_alloc(c, p, n, K_DEVICE);
    if (r) RETURN(r);
    find_alloc((uintptr_t)*p)->async = 1;
    fpool *pl = &pools[c->dev];
    pl->used += n;
    pl->cached = pl->cached > n ? pl->cached - n : 0; /* served from reserved memory first */
    RETURN(0);
}

static fpool *ipc_pool_acct(void *h);

static fpool *pool_of(void *h) {
    for (int i = 0; i < MAXDEV; i++)
        if ((void *)&pools[i] == h && i < ndev) return &pools[i];
    return ipc_pool_acct(h);
}

EXPORT CUresult cuDeviceGetDefaultMemPool(void **pool, CUdevice d) {
    ENTER("cuDeviceGetDefaultMemPool");
    NEED_INIT();
    if (!pool) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (d < 0 || d >= ndev) RETURN(CUDA_ERROR_INVALID_DEVICE);
    pools[d].dev = d;
    *pool = &pools[d];
    RETURN(0);
}

enum { POOL_RELEASE_THRESHOLD = 4, POOL_RESERVED_CURRENT = 5, POOL_USED_CURRENT = 7 };

EXPORT CUresult cuMemPoolSetAttribute(void *h, int attr, void *value) {
    ENTER("cuMemPoolSetAttribute");
    NEED_INIT();
    fpool *p = pool_of(h);
    if (!p) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!value) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (attr != POOL_RELEASE_THRESHOLD) RETURN(CUDA_ERROR_INVALID_VALUE);
    p->threshold = *(unsigned long long *)value;
    if (p->cached > p->threshold) p->cached = p->threshold;
    RETURN(0);
}

EXPORT CUresult cuMemPoolGetAttribute(void *h, int attr, void *value) {
    ENTER("cuMemPoolGetAttribute");
    NEED_INIT();
    fpool *p = pool_of(h);
    if (!p) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!value) RETURN(CUDA_ERROR_INVALID_VALUE);
    unsigned long long *v = value;
    switch (attr) {
    case POOL_RELEASE_THRESHOLD: *v = p->threshold; break;
    case POOL_RESERVED_CURRENT: *v = p->used + p->cached; break;
    case POOL_USED_CURRENT: *v = p->used; break;
    default: RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    RETURN(0);
}

/* CUmemAccessDesc: a CUmemLocation {type, id} and CUmemAccess_flags. */
typedef struct { int type, id; int flags; } fmemaccess;

EXPORT CUresult cuMemPoolSetAccess(void *h, const fmemaccess *map, size_t count) {
    ENTER("cuMemPoolSetAccess");
    NEED_INIT();
    fpool *p = pool_of(h);
    if (!p || (count > 0 && !map)) RETURN(CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < count; i++) {
        /* CU_MEM_LOCATION_TYPE_DEVICE = 1; flags NONE 0, READ 1, READWRITE 3. */
        if (map[i].type != 1 || map[i].id < 0 || map[i].id >= ndev) RETURN(CUDA_ERROR_INVALID_DEVICE);
        if (map[i].flags != 0 && map[i].flags != 1 && map[i].flags != 3) RETURN(CUDA_ERROR_INVALID_VALUE);
        if (map[i].id == p->dev && map[i].flags != 3) RETURN(CUDA_ERROR_INVALID_DEVICE); /* the owner keeps RW */
    }
    for (size_t i = 0; i < count; i++) p->access[map[i].id] = map[i].flags;
    RETURN(0);
}

/* fakecuda_stale_stream_uses: calls that named a destroyed stream. */
/* fakecuda_launch_poll queues fn(arg, blocking) on stream h (see the
 * model at the top): the hook testdata/fakenccl runs its operations by. */
EXPORT CUresult fakecuda_launch_poll(void *h, poll_fn fn, void *arg) {
    ENTER("fakecuda_launch_poll");
    NEED_INIT();
    if (!fn) RETURN(CUDA_ERROR_INVALID_VALUE);
    fstream *s; fctx *c;
    int r = resolve(h, &s, &c);
    if (r) RETURN(r);
    if (!s) {
        /* An implicit stream runs work at once: wait here for it. */
        pthread_mutex_unlock(&mu);
        while (fn(arg, 1)) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
        return 0;
    }
    op *o = new_op(OP_POLL);
    o->poll = fn;
    o->poll_arg = arg;
    submit(s, c, o);
    RETURN(0);
}

EXPORT long fakecuda_stale_stream_uses(void) {
    pthread_mutex_lock(&mu);
    long n = stale_uses;
    pthread_mutex_unlock(&mu);
    return n;
}

/* fakecuda_pool_access: the access flags device peer has to pool h (a
 * default pool or one made by cuMemPoolCreate); -1 for an unknown pool. */
EXPORT int fakecuda_pool_access(void *h, int peer) {
    pthread_mutex_lock(&mu);
    fpool *p = pool_of(h);
    int r = -1;
    if (p && peer >= 0 && peer < ndev) r = p->dev == peer ? 3 : p->access[peer];
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUresult cuMemPoolTrimTo(void *h, size_t keep) {
    ENTER("cuMemPoolTrimTo");
    NEED_INIT();
    fpool *p = pool_of(h);
    if (!p) RETURN(CUDA_ERROR_INVALID_HANDLE);
    unsigned long long room = keep > p->used ? keep - p->used : 0;
    if (p->cached > room) p->cached = room;
    RETURN(0);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, void *stream) {
    ENTER("cuMemFreeAsync");
    NEED_CTX_STRICT();
    fstream *s;
    fctx *c;
    int r = resolve(stream, &s, &c);
    if (r) RETURN(r);
    alloc *a = find_alloc((uintptr_t)p);
    if (!a || a->base != (uintptr_t)p || a->kind != K_DEVICE || a->free_pending) RETURN(CUDA_ERROR_INVALID_VALUE);
    a->free_pending = 1;
    a->free_stream = s ? s->id : 0;
    a->free_gen = next_free_gen++;
    op *o = new_op(OP_FREE);
    o->dst = (uintptr_t)p;
    o->gen = a->free_gen;
    submit(s, c, o);
    RETURN(0);
}

EXPORT CUresult cuMemHostAlloc(void **pp, size_t n, unsigned int flags) {
    ENTER("cuMemHostAlloc");
    NEED_CTX();
    if (!pp || n == 0 || (flags & ~7u)) RETURN(CUDA_ERROR_INVALID_VALUE);
    void *m = NULL;
    if (posix_memalign(&m, 4096, n) != 0) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    memset(m, 0, n);
    add_alloc((uintptr_t)m, n, K_HOST, tls_cur);
    *pp = m;
    RETURN(0);
}

EXPORT CUresult cuMemFreeHost(void *p) {
    ENTER("cuMemFreeHost");
    NEED_INIT();
    alloc *a = find_alloc((uintptr_t)p);
    if (!a || a->base != (uintptr_t)p || a->kind != K_HOST) RETURN(CUDA_ERROR_INVALID_VALUE);
    drain_ctx(a->ctx);
    a = find_alloc((uintptr_t)p);
    if (a) del_alloc(a);
    RETURN(0);
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) {
    ENTER("cuMemHostRegister_v2");
    NEED_CTX();
    if (!p || n == 0 || (flags & ~15u)) RETURN(CUDA_ERROR_INVALID_VALUE);
    uintptr_t b = (uintptr_t)p;
    for (int i = 0; i < nallocs; i++) {
        alloc *a = &allocs[i];
        if ((a->kind == K_REGISTERED || a->kind == K_HOST) && b < a->base + a->size && a->base < b + n)
            RETURN(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    }
    add_alloc(b, n, K_REGISTERED, tls_cur);
    RETURN(0);
}

EXPORT CUresult cuMemHostUnregister(void *p) {
    ENTER("cuMemHostUnregister");
    NEED_INIT();
    alloc *a = find_alloc((uintptr_t)p);
    if (!a || a->base != (uintptr_t)p || a->kind != K_REGISTERED) RETURN(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    drain_ctx(a->ctx);
    a = find_alloc((uintptr_t)p);
    if (a) del_alloc(a);
    RETURN(0);
}

EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags) {
    ENTER("cuMemHostGetDevicePointer_v2");
    NEED_CTX();
    if (!d || flags != 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    alloc *a = find_alloc((uintptr_t)p);
    if (!a || (a->kind != K_HOST && a->kind != K_REGISTERED)) RETURN(CUDA_ERROR_INVALID_VALUE);
    *d = (CUdeviceptr)(uintptr_t)p;
    RETURN(0);
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    ENTER("cuMemGetAddressRange_v2");
    NEED_CTX_STRICT();
    alloc *a = find_alloc((uintptr_t)p);
    if (!a || a->kind == K_REGISTERED) RETURN(CUDA_ERROR_NOT_FOUND);
    if (base) *base = a->base;
    if (size) *size = a->size;
    RETURN(0);
}

/* ------------------------------------------------------------------ memsets */

static int memset_op(fstream *s, fctx *c, CUdeviceptr dst, unsigned v, size_t n, int word) {
    size_t bytes = word ? 4 * n : n;
    if (word && (dst % 4)) return CUDA_ERROR_INVALID_VALUE;
    if (n == 0) return 0;
    if (!in_alloc((uintptr_t)dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
    op *o = new_op(word ? OP_MEMSET32 : OP_MEMSET8);
    o->dst = (uintptr_t)dst;
    o->n = n;
    o->value = v;
    submit(s, c, o);
    return 0;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
    ENTER("cuMemsetD8_v2");
    NEED_CTX();
    drain_blocking(tls_cur);
    RETURN(memset_op(NULL, tls_cur, dst, v, n, 0));
}
EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n) {
    ENTER("cuMemsetD32_v2");
    NEED_CTX();
    drain_blocking(tls_cur);
    RETURN(memset_op(NULL, tls_cur, dst, v, n, 1));
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *stream) {
    ENTER("cuMemsetD8Async");
    NEED_CTX_STRICT();
    fstream *s; fctx *c;
    int r = resolve(stream, &s, &c);
    if (r) RETURN(r);
    RETURN(memset_op(s, c, dst, v, n, 0));
}
EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, void *stream) {
    ENTER("cuMemsetD32Async");
    NEED_CTX_STRICT();
    fstream *s; fctx *c;
    int r = resolve(stream, &s, &c);
    if (r) RETURN(r);
    RETURN(memset_op(s, c, dst, v, n, 1));
}

/* -------------------------------------------------------------------- copies */

/* copy_op queues (or runs) a linear copy. dkind/skind: 1 = device pointer
 * (must lie in an allocation), 0 = host pointer (pinned: read/written when
 * the copy runs; pageable: staged now, or completed before returning). */
static int copy_op(fstream *s, fctx *c, uintptr_t dst, int ddev, uintptr_t src, int sdev, size_t n) {
    if (n == 0) return 0;
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    if (ddev && !in_alloc(dst, n)) return CUDA_ERROR_INVALID_VALUE;
    if (sdev && !in_alloc(src, n)) return CUDA_ERROR_INVALID_VALUE;
    op *o = new_op(OP_COPY);
    o->dst = dst;
    o->src = src;
    o->n = n;
    o->dst_dev = ddev;
    o->src_dev = sdev;
    int pageable_dst = !ddev && !is_pinned(dst, n);
    if (!sdev && !is_pinned(src, n) && s) {
        o->buf = malloc(n); /* stage pageable source now */
        memcpy(o->buf, (const void *)src, n);
    }
    submit(s, c, o);
    if (s && pageable_dst) drain(s); /* into pageable memory: done on return */
    return 0;
}

#define SYNC_COPY(name, dst, ddev, src, sdev, n)                              \
    ENTER(name);                                                              \
    NEED_CTX();                                                               \
    drain_blocking(tls_cur);                                                  \
    RETURN(copy_op(NULL, tls_cur, (uintptr_t)(dst), ddev, (uintptr_t)(src), sdev, n))

#define ASYNC_COPY(name, dst, ddev, src, sdev, n, stream)                     \
    ENTER(name);                                                              \
    NEED_CTX_STRICT();                                                        \
    fstream *s; fctx *c;                                                      \
    int r = resolve(stream, &s, &c);                                          \
    if (r) RETURN(r);                                                         \
    RETURN(copy_op(s, c, (uintptr_t)(dst), ddev, (uintptr_t)(src), sdev, n))

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { SYNC_COPY("cuMemcpyHtoD_v2", dst, 1, src, 0, n); }
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { SYNC_COPY("cuMemcpyDtoH_v2", dst, 0, src, 1, n); }
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { SYNC_COPY("cuMemcpyDtoD_v2", dst, 1, src, 1, n); }
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream) {
    ASYNC_COPY("cuMemcpyHtoDAsync_v2", dst, 1, src, 0, n, stream);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream) {
    ASYNC_COPY("cuMemcpyDtoHAsync_v2", dst, 0, src, 1, n, stream);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream) {
    ASYNC_COPY("cuMemcpyDtoDAsync_v2", dst, 1, src, 1, n, stream);
}

static int peer_check(void *dctx, CUdeviceptr dst, void *sctx, CUdeviceptr src, size_t n) {
    fctx *dc = ctx_of(dctx), *sc = ctx_of(sctx);
    if (!dc || !sc || !dc->active || !sc->active) return CUDA_ERROR_INVALID_CONTEXT;
    if (n == 0) return 0;
    alloc *da = in_alloc((uintptr_t)dst, n), *sa = in_alloc((uintptr_t)src, n);
    if (!da || !sa) return CUDA_ERROR_INVALID_VALUE;
    /* The pointers must belong to the contexts named with them. */
    if ((da->kind == K_DEVICE && da->dev != dc->dev) || (sa->kind == K_DEVICE && sa->dev != sc->dev))
        return CUDA_ERROR_INVALID_VALUE;
    return 0;
}

EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n) {
    ENTER("cuMemcpyPeer");
    NEED_CTX();
    int r = peer_check(dctx, dst, sctx, src, n);
    if (r) RETURN(r);
    drain_blocking(ctx_of(dctx));
    drain_blocking(ctx_of(sctx));
    RETURN(copy_op(NULL, tls_cur, (uintptr_t)dst, 1, (uintptr_t)src, 1, n));
}

EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n, void *stream) {
    ENTER("cuMemcpyPeerAsync");
    NEED_CTX_STRICT();
    fstream *s; fctx *c;
    int r = resolve(stream, &s, &c);
    if (r) RETURN(r);
    r = peer_check(dctx, dst, sctx, src, n);
    if (r) RETURN(r);
    RETURN(copy_op(s, c, (uintptr_t)dst, 1, (uintptr_t)src, 1, n));
}

static int copy3d(fstream *s, fctx *c, const CUDA_MEMCPY3D *m, int async) {
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    if (m->reserved0 || m->reserved1) return CUDA_ERROR_INVALID_VALUE;
    size_t d = m->Depth;
    if (m->WidthInBytes == 0 || m->Height == 0 || d == 0) return 0;
    if (m->Height > 1 || d > 1) {
        if (m->srcPitch < m->WidthInBytes || m->dstPitch < m->WidthInBytes) return CUDA_ERROR_INVALID_VALUE;
    }
    if (d > 1 && (m->srcHeight < m->Height || m->dstHeight < m->Height)) return CUDA_ERROR_INVALID_VALUE;
    int r = check_rows(m->srcMemoryType, m->srcHost, m->srcDevice, m->srcXInBytes, m->srcY, m->srcZ,
                       m->srcPitch, m->srcHeight, m->WidthInBytes, m->Height, d, async);
    if (r) return r;
    r = check_rows(m->dstMemoryType, m->dstHost, m->dstDevice, m->dstXInBytes, m->dstY, m->dstZ,
                   m->dstPitch, m->dstHeight, m->WidthInBytes, m->Height, d, async);
    if (r) return r;
    op *o = new_op(OP_COPY3D);
    o->buf = malloc(sizeof *m);
    memcpy(o->buf, m, sizeof *m);
    submit(s, c, o);
    return 0;
}

EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *m) {
    ENTER("cuMemcpy2D_v2");
    NEED_CTX();
    if (!m) RETURN(CUDA_ERROR_INVALID_VALUE);
    drain_blocking(tls_cur);
    CUDA_MEMCPY3D m3;
    to3d(m, &m3);
    RETURN(copy3d(NULL, tls_cur, &m3, 0));
}
EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *m, void *stream) {
    ENTER("cuMemcpy2DAsync_v2");
    NEED_CTX_STRICT();
    if (!m) RETURN(CUDA_ERROR_INVALID_VALUE);
    fstream *s; fctx *c;
    int r = resolve(stream, &s, &c);
    if (r) RETURN(r);
    CUDA_MEMCPY3D m3;
    to3d(m, &m3);
    RETURN(copy3d(s, c, &m3, 1));
}
EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *m) {
    ENTER("cuMemcpy3D_v2");
    NEED_CTX();
    drain_blocking(tls_cur);
    RETURN(copy3d(NULL, tls_cur, m, 0));
}
EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *m, void *stream) {
    ENTER("cuMemcpy3DAsync_v2");
    NEED_CTX_STRICT();
    fstream *s; fctx *c;
    int r = resolve(stream, &s, &c);
    if (r) RETURN(r);
    RETURN(copy3d(s, c, m, 1));
}

/* ------------------------------------------------------------------ streams */

EXPORT CUresult cuStreamCreateWithPriority(void **ps, unsigned int flags, int prio) {
    ENTER("cuStreamCreateWithPriority");
    NEED_CTX();
    if (!ps || (flags & ~1u)) RETURN(CUDA_ERROR_INVALID_VALUE);
    fstream *s = calloc(1, sizeof *s);
    s->id = next_stream_id++;
    s->ctx = tls_cur;
    s->flags = flags;
    s->prio = prio < -5 ? -5 : prio > 0 ? 0 : prio;
    if (nstreams == capstreams) {
        capstreams = capstreams ? 2 * capstreams : 16;
        streams = realloc(streams, capstreams * sizeof *streams);
    }
    streams[nstreams++] = s;
    reg_add(s, H_STREAM);
    forget_destroyed(s);
    *ps = s;
    RETURN(0);
}

static void free_stream(fstream *s) {
    drain(s);
    for (int i = 0; i < nstreams; i++)
        if (streams[i] == s) { streams[i] = streams[--nstreams]; break; }
    reg_del(s);
    free(s);
}

EXPORT CUresult cuStreamDestroy_v2(void *h) {
    ENTER("cuStreamDestroy_v2");
    NEED_CTX_STRICT();
    fstream *s = reg_find(h, H_STREAM);
    if (!s) RETURN(CUDA_ERROR_INVALID_HANDLE);
    free_stream(s);
    destroyed[ndestroyed++ % 256] = h;
    RETURN(0);
}

EXPORT CUresult cuStreamSynchronize(void *h) {
    ENTER("cuStreamSynchronize");
    NEED_CTX_STRICT();
    fstream *s; fctx *c;
    int r = resolve(h, &s, &c);
    if (r) RETURN(r);
    if (!s) {
        r = c->sticky;
        c->sticky = 0;
        RETURN(r);
    }
    drain(s);
    r = s->err;
    s->err = 0;
    RETURN(r);
}

EXPORT CUresult cuStreamQuery(void *h) {
    ENTER("cuStreamQuery");
    NEED_CTX_STRICT();
    fstream *s; fctx *c;
    int r = resolve(h, &s, &c);
    if (r) RETURN(r);
    if (!s) RETURN(0);
    if (s->err) { r = s->err; s->err = 0; RETURN(r); }
    if (!s->head) RETURN(0);
    if (!s->busy) { tls_query = 1; step(s); tls_query = 0; }
    RETURN(CUDA_ERROR_NOT_READY);
}

static int ipc_remote_wait(fstream *s, fctx *c, fevent *e, uintptr_t h);

EXPORT CUresult cuStreamWaitEvent(void *h, void *ev, unsigned int flags) {
    ENTER("cuStreamWaitEvent");
    NEED_CTX_STRICT();
    if (flags != 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    fevent *e = reg_find(ev, H_EVENT);
    if (!e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    fstream *s; fctx *c;
    int r = resolve(h, &s, &c);
    if (r) RETURN(r);
    if (e->ipc_pid) RETURN(ipc_remote_wait(s, c, e, (uintptr_t)h));
    if (!e->recorded) RETURN(0);
    log_order('w', (uintptr_t)h, e->rec_handle);
    op *o = new_op(OP_WAIT);
    o->ev_id = e->id;
    o->gen = e->rec_gen;
    o->rec_stream = e->stream_id; /* the record current now, wherever e goes next */
    submit(s, c, o);
    RETURN(0);
}

EXPORT CUresult cuStreamGetPriority(void *h, int *prio) {
    ENTER("cuStreamGetPriority");
    NEED_CTX_STRICT();
    if (!prio) RETURN(CUDA_ERROR_INVALID_VALUE);
    fstream *s; fctx *c;
    int r = resolve(h, &s, &c);
    if (r) RETURN(r);
    *prio = s ? s->prio : 0;
    RETURN(0);
}

/* cuStreamGetCtx: a stream's own context; for the NULL and default-stream
 * constants, the current one (as the driver answers). */
EXPORT CUresult cuStreamGetCtx(void *h, void **pctx) {
    ENTER("cuStreamGetCtx");
    if (!pctx) RETURN(CUDA_ERROR_INVALID_VALUE);
    fstream *s; fctx *c;
    int r = resolve(h, &s, &c);
    if (r) RETURN(r);
    *pctx = c;
    RETURN(0);
}

EXPORT CUresult cuStreamGetFlags(void *h, unsigned int *flags) {
    ENTER("cuStreamGetFlags");
    NEED_CTX_STRICT();
    if (!flags) RETURN(CUDA_ERROR_INVALID_VALUE);
    fstream *s; fctx *c;
    int r = resolve(h, &s, &c);
    if (r) RETURN(r);
    *flags = s ? s->flags : 0;
    RETURN(0);
}

/* Graph capture is not run here; a stream can be marked as capturing
 * (fakecuda_set_capturing) so that callers that ask (cuStreamIsCapturing)
 * take their capture paths, and an allocation from a pool made for
 * shareable handles is refused on it, as the driver's graph allocation
 * nodes support no IPC. */
EXPORT CUresult cuStreamIsCapturing(void *h, int *status) {
    ENTER("cuStreamIsCapturing");
    NEED_CTX_STRICT();
    if (!status) RETURN(CUDA_ERROR_INVALID_VALUE);
    fstream *s; fctx *c;
    int r = resolve(h, &s, &c);
    if (r) RETURN(r);
    *status = s && s->capturing ? 1 : 0; /* CU_STREAM_CAPTURE_STATUS_ACTIVE : NONE */
    RETURN(0);
}

/* fakecuda_set_capturing marks stream h as capturing (on != 0) or not. */
EXPORT CUresult fakecuda_set_capturing(void *h, int on) {
    ENTER("fakecuda_set_capturing");
    NEED_INIT();
    fstream *s; fctx *c;
    int r = resolve(h, &s, &c);
    if (r) RETURN(r);
    if (!s) RETURN(CUDA_ERROR_INVALID_VALUE);
    s->capturing = on != 0;
    RETURN(0);
}

/* ------------------------------------------------------------------- events */

static int ipc_event_slot(fevent *e);
static void ipc_recorded(fevent *e, fstream *s, op *o);

EXPORT CUresult cuEventCreate(void **pe, unsigned int flags) {
    ENTER("cuEventCreate");
    NEED_CTX();
    if (!pe || (flags & ~7u)) RETURN(CUDA_ERROR_INVALID_VALUE);
    if ((flags & 4) && !(flags & 2)) RETURN(CUDA_ERROR_INVALID_VALUE);
    fevent *e = calloc(1, sizeof *e);
    e->id = next_event_id++;
    e->ctx = tls_cur;
    e->flags = flags;
    if (nevents == capevents) {
        capevents = capevents ? 2 * capevents : 16;
        events = realloc(events, capevents * sizeof *events);
    }
    if ((flags & 4) && ipc_event_slot(e)) { free(e); RETURN(CUDA_ERROR_OUT_OF_MEMORY); }
    events[nevents++] = e;
    reg_add(e, H_EVENT);
    *pe = e;
    RETURN(0);
}

static void free_event(fevent *e) {
    for (int i = 0; i < nevents; i++)
        if (events[i] == e) { events[i] = events[--nevents]; break; }
    reg_del(e);
    free(e);
}

EXPORT CUresult cuEventDestroy_v2(void *h) {
    ENTER("cuEventDestroy_v2");
    NEED_CTX_STRICT();
    fevent *e = reg_find(h, H_EVENT);
    if (!e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    free_event(e);
    RETURN(0);
}

EXPORT CUresult cuEventRecord(void *h, void *stream) {
    ENTER("cuEventRecord");
    NEED_CTX_STRICT();
    fevent *e = reg_find(h, H_EVENT);
    if (!e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    fstream *s; fctx *c;
    int r = resolve(stream, &s, &c);
    if (r) RETURN(r);
    if (c != e->ctx) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (e->ipc_pid) RETURN(CUDA_ERROR_NOT_SUPPORTED); /* the fake records interprocess events in their own process only */
    e->recorded = 1;
    e->rec_gen++;
    e->stream_id = s ? s->id : 0;
    e->rec_handle = (uintptr_t)stream;
    log_order('r', (uintptr_t)stream, 0);
    op *o = new_op(OP_RECORD);
    o->ev_id = e->id;
    o->gen = e->rec_gen;
    ipc_recorded(e, s, o);
    submit(s, c, o);
    RETURN(0);
}

static int ipc_remote_sync(fevent *e);
static int ipc_remote_done(fevent *e);
static int ipc_skipping(void);

EXPORT CUresult cuEventSynchronize(void *h) {
    ENTER("cuEventSynchronize");
    NEED_CTX_STRICT();
    fevent *e = reg_find(h, H_EVENT);
    if (!e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (e->ipc_pid) RETURN(ipc_remote_sync(e));
    drain_event(e, e->rec_gen);
    RETURN(0);
}

EXPORT CUresult cuEventQuery(void *h) {
    ENTER("cuEventQuery");
    NEED_CTX_STRICT();
    fevent *e = reg_find(h, H_EVENT);
    if (!e) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (e->ipc_pid) RETURN(ipc_skipping() || ipc_remote_done(e) ? 0 : CUDA_ERROR_NOT_READY);
    if (e->done_gen >= e->rec_gen) RETURN(0);
    fstream *s = stream_by_id(e->stream_id);
    if (s && !s->busy) { tls_query = 1; step(s); tls_query = 0; }
    RETURN(CUDA_ERROR_NOT_READY);
}

static CUresult elapsed(float *ms, void *a, void *b) {
    fevent *s = reg_find(a, H_EVENT), *e = reg_find(b, H_EVENT);
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (!s || !e) return CUDA_ERROR_INVALID_HANDLE;
    if ((s->flags & 2) || (e->flags & 2) || !s->recorded || !e->recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (s->done_gen < s->rec_gen || e->done_gen < e->rec_gen) return CUDA_ERROR_NOT_READY;
    double d = (double)(e->t.tv_sec - s->t.tv_sec) * 1e3 + (double)(e->t.tv_nsec - s->t.tv_nsec) / 1e6;
    *ms = (float)d;
    return 0;
}
EXPORT CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
    ENTER("cuEventElapsedTime"); NEED_CTX_STRICT(); RETURN(elapsed(ms, a, b));
}
EXPORT CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) {
    ENTER("cuEventElapsedTime_v2"); NEED_CTX_STRICT(); RETURN(elapsed(ms, a, b));
}

/* -------------------------------------------------------- pointer attributes */

enum {
    PA_CONTEXT = 1, PA_MEMORY_TYPE, PA_DEVICE_POINTER, PA_HOST_POINTER, PA_P2P_TOKENS,
    PA_SYNC_MEMOPS, PA_BUFFER_ID, PA_IS_MANAGED, PA_DEVICE_ORDINAL, PA_IS_LEGACY_IPC,
    PA_RANGE_START, PA_RANGE_SIZE, PA_MAPPED,
};

/* attr_size: bytes the driver writes for an attribute (bools are C bool). */
static int attr_size(int attr) {
    switch (attr) {
    case PA_CONTEXT: case PA_DEVICE_POINTER: case PA_HOST_POINTER: case PA_BUFFER_ID:
    case PA_RANGE_START: case PA_RANGE_SIZE: return 8;
    case PA_MEMORY_TYPE: case PA_DEVICE_ORDINAL: return 4;
    case PA_SYNC_MEMOPS: case PA_IS_MANAGED: case PA_IS_LEGACY_IPC: case PA_MAPPED: return 1;
    }
    return 0;
}

static int attr_value(alloc *a, uintptr_t p, int attr, unsigned long long *v) {
    switch (attr) {
    case PA_CONTEXT: *v = (uintptr_t)a->ctx; return 0;
    case PA_MEMORY_TYPE: *v = (a->kind == K_HOST || a->kind == K_REGISTERED) ? 1 : 2; return 0;
    case PA_DEVICE_POINTER: *v = p; return 0;
    case PA_HOST_POINTER:
        if (a->kind == K_DEVICE) return CUDA_ERROR_INVALID_VALUE;
        *v = p;
        return 0;
    case PA_SYNC_MEMOPS: *v = 0; return 0;
    case PA_BUFFER_ID: *v = a->id; return 0;
    case PA_IS_MANAGED: *v = a->kind == K_MANAGED; return 0;
    case PA_DEVICE_ORDINAL: *v = (unsigned)a->dev; return 0;
    case PA_IS_LEGACY_IPC: *v = a->kind == K_DEVICE; return 0;
    case PA_RANGE_START: *v = a->base; return 0;
    case PA_RANGE_SIZE: *v = a->size; return 0;
    case PA_MAPPED: *v = 1; return 0;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static void put(void *data, int size, unsigned long long v) {
    if (size == 8) { memcpy(data, &v, 8); }
    else if (size == 4) { uint32_t u = (uint32_t)v; memcpy(data, &u, 4); }
    else { unsigned char b = (unsigned char)(v != 0); memcpy(data, &b, 1); }
}

EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr) {
    ENTER("cuPointerGetAttribute");
    NEED_CTX_STRICT();
    int size = attr_size(attr);
    if (!data || !size) RETURN(CUDA_ERROR_INVALID_VALUE);
    alloc *a = find_alloc((uintptr_t)ptr);
    if (!a) RETURN(CUDA_ERROR_INVALID_VALUE);
    unsigned long long v = 0;
    int r = attr_value(a, (uintptr_t)ptr, attr, &v);
    if (r) RETURN(r);
    put(data, size, v);
    RETURN(0);
}

EXPORT CUresult cuPointerGetAttributes(unsigned int n, int *attrs, void **data, CUdeviceptr ptr) {
    ENTER("cuPointerGetAttributes");
    NEED_CTX_STRICT();
    if (!attrs || !data) RETURN(CUDA_ERROR_INVALID_VALUE);
    for (unsigned i = 0; i < n; i++)
        if (!attr_size(attrs[i])) RETURN(CUDA_ERROR_INVALID_VALUE);
    alloc *a = find_alloc((uintptr_t)ptr);
    for (unsigned i = 0; i < n; i++) {
        if (!data[i]) continue;
        unsigned long long v = 0;
        if (a && attr_value(a, (uintptr_t)ptr, attrs[i], &v) != 0) v = 0;
        if (!a && attrs[i] == PA_DEVICE_ORDINAL) v = (unsigned)-2; /* CU_DEVICE_INVALID */
        put(data[i], attr_size(attrs[i]), v);
    }
    RETURN(0);
}

/* ------------------------------------------------------------------ modules */

static int param_size(const char *t) {
    if (!strncmp(t, "u8", 2) || !strncmp(t, "s8", 2) || !strncmp(t, "b8", 2)) return 1;
    if (!strncmp(t, "u16", 3) || !strncmp(t, "s16", 3) || !strncmp(t, "b16", 3) || !strncmp(t, "f16", 3)) return 2;
    if (!strncmp(t, "u32", 3) || !strncmp(t, "s32", 3) || !strncmp(t, "b32", 3) || !strncmp(t, "f32", 3)) return 4;
    if (!strncmp(t, "u64", 3) || !strncmp(t, "s64", 3) || !strncmp(t, "b64", 3) || !strncmp(t, "f64", 3)) return 8;
    return 0;
}

/* strip_comments copies PTX without // and block comments. */
static char *strip_comments(const char *src) {
    size_t n = strlen(src);
    char *out = malloc(n + 1), *o = out;
    for (size_t i = 0; i < n;) {
        if (src[i] == '/' && src[i + 1] == '/') {
            while (i < n && src[i] != '\n') i++;
        } else if (src[i] == '/' && src[i + 1] == '*') {
            i += 2;
            while (i < n && !(src[i] == '*' && src[i + 1] == '/')) i++;
            i += 2;
        } else {
            *o++ = src[i++];
        }
    }
    *o = 0;
    return out;
}

static void write_log(unsigned nopts, const int *opts, void **vals, int which, const char *msg) {
    /* which: 3 = info log, 5 = error log; the size option follows (+1). */
    char *buf = NULL;
    size_t *sizep = NULL, size = 0;
    for (unsigned i = 0; i < nopts; i++) {
        if (opts[i] == which) buf = vals[i];
        if (opts[i] == which + 1) { sizep = (size_t *)&vals[i]; size = (size_t)(uintptr_t)vals[i]; }
    }
    if (!buf || !sizep || size == 0) return;
    snprintf(buf, size, "%s", msg);
    size_t used = strlen(buf) + 1;
    *sizep = used;
}

/* lint_body checks that every statement inside a function body starts with
 * a directive, a label, a guard or an opcode PTX has: a cheap check that
 * catches typos, not a PTX parser. */
static const char *opcodes[] = {
    "abs", "add", "addc", "and", "atom", "bar", "bfe", "bfi", "bra", "brev", "brkpt", "call", "clz", "cnot",
    "cos", "cvt", "cvta", "div", "ex2", "exit", "fma", "fns", "isspacep", "ld", "ldu", "lg2", "mad", "madc",
    "max", "membar", "fence", "min", "mov", "mul", "mul24", "mad24", "neg", "not", "or", "popc", "prmt", "rcp",
    "red", "rem", "ret", "rsqrt", "sad", "selp", "set", "setp", "shf", "shfl", "shl", "shr", "sin", "slct",
    "sqrt", "st", "sub", "subc", "suld", "sust", "testp", "tex", "trap", "vote", "xor", "nanosleep", "activemask",
    "prefetch", "cp", "dp4a", "dp2a", "lop3", "bmsk", "szext", "copysign", "match", "redux", "elect", "getctarank",
    NULL,
};
static int lint_body(const char *t, char *log, size_t logn) {
    int depth = 0, line = 1;
    const char *p = t;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char buf[512];
        if (len >= sizeof buf) len = sizeof buf - 1;
        memcpy(buf, p, len);
        buf[len] = 0;
        char *q = buf;
        while (*q == ' ' || *q == '\t' || *q == '\r') q++;
        int opens = 0, closes = 0;
        for (char *c = q; *c; c++) { opens += *c == '{'; closes += *c == '}'; }
        if (depth > 0 && *q && *q != '{' && *q != '}' && *q != '.' && *q != '@') {
            char word[64];
            size_t k = 0;
            while (q[k] && q[k] != '.' && q[k] != ' ' && q[k] != '\t' && q[k] != ';' && q[k] != ':' && k < sizeof word - 1) { word[k] = q[k]; k++; }
            word[k] = 0;
            int label = q[k] == ':';
            int known = label;
            for (int i = 0; !known && opcodes[i]; i++) known = strcmp(word, opcodes[i]) == 0;
            if (!known) {
                snprintf(log, logn, "fakecuda: ptx: line %d: unknown instruction '%s'", line, word);
                return CUDA_ERROR_INVALID_PTX;
            }
        }
        depth += opens - closes;
        line++;
        if (!eol) break;
        p = eol + 1;
    }
    return 0;
}

static int parse_ptx(fmodule *m, const char *text, char *log, size_t logn) {
    char *t = strip_comments(text);
    int rc = 0;
    if (!strstr(t, ".version")) { snprintf(log, logn, "fakecuda: ptx: missing .version directive"); rc = CUDA_ERROR_INVALID_PTX; goto out; }
    if (!strstr(t, ".target")) { snprintf(log, logn, "fakecuda: ptx: missing .target directive"); rc = CUDA_ERROR_INVALID_PTX; goto out; }
    if (!strstr(t, ".address_size 64")) { snprintf(log, logn, "fakecuda: ptx: missing .address_size 64"); rc = CUDA_ERROR_INVALID_PTX; goto out; }
    int depth = 0;
    for (char *q = t; *q; q++) {
        if (*q == '{') depth++;
        if (*q == '}' && --depth < 0) break;
    }
    if (depth != 0) { snprintf(log, logn, "fakecuda: ptx: unbalanced braces"); rc = CUDA_ERROR_INVALID_PTX; goto out; }
    if ((rc = lint_body(t, log, logn)) != 0) goto out;
    for (char *q = strstr(t, ".entry"); q; q = strstr(q + 6, ".entry")) {
        char *p = q + 6;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        ffunc *f = calloc(1, sizeof *f);
        size_t k = 0;
        while (*p && *p != '(' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && k < sizeof f->name - 1) f->name[k++] = *p++;
        f->kernel = -1;
        char *open = strchr(p, '('), *close = open ? strchr(open, ')') : NULL, *brace = strchr(p, '{');
        if (open && close && (!brace || open < brace)) {
            for (char *pp = strstr(open, ".param"); pp && pp < close; pp = strstr(pp + 6, ".param")) {
                char *ty = pp + 6;
                while (*ty == ' ' || *ty == '\t') ty++;
                int sz = 0;
                if (!strncmp(ty, ".align", 6)) {
                    /* .param .align N .b8 name[SIZE] */
                    char *lb = strchr(ty, '[');
                    if (lb && lb < close) sz = atoi(lb + 1);
                } else if (*ty == '.') {
                    sz = param_size(ty + 1);
                }
                if (sz == 0 || f->nparams >= MAXPARAMS) {
                    snprintf(log, logn, "fakecuda: ptx: entry %s: cannot read parameter %d", f->name, f->nparams);
                    free(f);
                    rc = CUDA_ERROR_INVALID_PTX;
                    goto out;
                }
                f->psize[f->nparams++] = sz;
            }
        }
        for (int i = 0; i < NKERNELS; i++) {
            if (strcmp(kernels[i].name, f->name)) continue;
            int ok = kernels[i].n == f->nparams;
            for (int j = 0; ok && j < f->nparams; j++) ok = kernels[i].size[j] == f->psize[j];
            if (!ok) {
                char want[128] = "", got[128] = "";
                for (int j = 0; j < kernels[i].n; j++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", j ? "," : "", kernels[i].size[j]);
                for (int j = 0; j < f->nparams; j++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d", j ? "," : "", f->psize[j]);
                snprintf(log, logn, "fakecuda: ptx: entry %s has parameter sizes (%s), the fake implements (%s)", f->name, got, want);
                free(f);
                rc = CUDA_ERROR_INVALID_PTX;
                goto out;
            }
            f->kernel = i;
        }
        if (m->nfuncs >= 64) { free(f); break; }
        f->mod = m;
        m->funcs[m->nfuncs++] = f;
    }
    if (m->nfuncs == 0) { snprintf(log, logn, "fakecuda: ptx: no .entry found"); rc = CUDA_ERROR_INVALID_PTX; }
out:
    free(t);
    return rc;
}

static void free_module(fmodule *m) {
    for (int i = 0; i < m->nfuncs; i++) { reg_del(m->funcs[i]); free(m->funcs[i]); }
    reg_del(m);
    free(m);
}

EXPORT CUresult cuModuleLoadDataEx(void **pm, const void *image, unsigned int nopts, int *opts, void **vals) {
    ENTER("cuModuleLoadDataEx");
    NEED_CTX();
    if (!pm || !image || (nopts && (!opts || !vals))) RETURN(CUDA_ERROR_INVALID_VALUE);
    const unsigned char *b = image;
    if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') {
        write_log(nopts, opts, vals, 5, "fakecuda: cubin images are not supported, only PTX");
        RETURN(CUDA_ERROR_INVALID_IMAGE);
    }
    fmodule *m = calloc(1, sizeof *m);
    m->ctx = tls_cur;
    char log[512] = "";
    int r = parse_ptx(m, image, log, sizeof log);
    if (r) {
        for (int i = 0; i < m->nfuncs; i++) free(m->funcs[i]);
        free(m);
        write_log(nopts, opts, vals, 5, log);
        RETURN(r);
    }
    reg_add(m, H_MODULE);
    for (int i = 0; i < m->nfuncs; i++) reg_add(m->funcs[i], H_FUNC);
    snprintf(log, sizeof log, "fakecuda: loaded %d entries", m->nfuncs);
    write_log(nopts, opts, vals, 3, log);
    *pm = m;
    RETURN(0);
}

EXPORT CUresult cuModuleUnload(void *h) {
    ENTER("cuModuleUnload");
    NEED_CTX_STRICT();
    fmodule *m = reg_find(h, H_MODULE);
    if (!m) RETURN(CUDA_ERROR_INVALID_HANDLE);
    free_module(m);
    RETURN(0);
}

EXPORT CUresult cuModuleGetFunction(void **pf, void *h, const char *name) {
    ENTER("cuModuleGetFunction");
    NEED_CTX_STRICT();
    fmodule *m = reg_find(h, H_MODULE);
    if (!m) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!pf || !name) RETURN(CUDA_ERROR_INVALID_VALUE);
    for (int i = 0; i < m->nfuncs; i++)
        if (!strcmp(m->funcs[i]->name, name)) { *pf = m->funcs[i]; RETURN(0); }
    RETURN(CUDA_ERROR_NOT_FOUND);
}

EXPORT CUresult cuFuncGetAttribute(int *v, int attr, void *h) {
    ENTER("cuFuncGetAttribute");
    NEED_CTX_STRICT();
    ffunc *f = reg_find(h, H_FUNC);
    if (!f) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!v || attr < 0 || attr > 20) RETURN(CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case 0: *v = 1024; break;
    case 4: *v = 16; break;
    case 5: *v = 70; break;
    case 6: *v = 80; break;
    default: *v = 0;
    }
    RETURN(0);
}

EXPORT CUresult cuLaunchKernel(void *h, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shmem, void *stream, void **params, void **extra) {
    ENTER("cuLaunchKernel");
    NEED_CTX_STRICT();
    ffunc *f = reg_find(h, H_FUNC);
    if (!f) RETURN(CUDA_ERROR_INVALID_HANDLE);
    fstream *s; fctx *c;
    int r = resolve(stream, &s, &c);
    if (r) RETURN(r);
    if (c != f->mod->ctx) RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!gx || !gy || !gz || !bx || !by || !bz) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (gy > 65535 || gz > 65535 || bz > 64) RETURN(CUDA_ERROR_INVALID_VALUE);
    if ((unsigned long long)bx * by * bz > 1024) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (shmem > 49152) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (extra) RETURN(CUDA_ERROR_NOT_SUPPORTED);
    if (f->nparams && !params) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (f->kernel < 0) RETURN(CUDA_ERROR_NOT_SUPPORTED);
    op *o = new_op(OP_KERNEL);
    o->kernel = f->kernel;
    for (int i = 0; i < f->nparams; i++) {
        if (!params[i]) { free(o); RETURN(CUDA_ERROR_INVALID_VALUE); }
        memcpy(&o->params[i], params[i], (size_t)f->psize[i]); /* copied at launch, as the driver does */
    }
    submit(s, c, o);
    RETURN(0);
}

/* ------------------------------------------------- across processes (IPC)
 *
 * Pools created for POSIX file-descriptor handles (cuMemPoolCreate with
 * handleTypes 1) keep their memory in a memfd mapped MAP_SHARED: the
 * exported descriptor is a dup of it, and a process that imports it maps the
 * same pages, so what one process writes the other reads, as on a GPU.
 * The file starts with a header page {magic, pool id, device, size};
 * allocations (first fit, 256-byte aligned) follow it. Fabric handles are
 * not supported (CUDA_ERROR_NOT_SUPPORTED), as on a machine without them.
 * Export data of a pointer: {magic, pool id, offset, size}; as on the
 * real driver, only once the pool's handle was exported.
 *
 * Interprocess events keep {records queued, records executed} in a slot of
 * a per-process shared table (a memfd); a handle names {pid, fd, slot}, and
 * the opener maps the table through /proc/PID/fd/FD. A record of such an
 * event starts a thread that runs its stream up to the record after
 * FAKECUDA_IPC_DELAY_MS (default 0): as on a GPU, the work another process
 * waits for runs without this process synchronizing (the delay stands for
 * a slow producer). A stream that waits for an event opened from another
 * process queues a wait that, when it runs, polls the shared counter until
 * the record it saw executed, or the recording process is gone (a dead
 * process's work counts as finished, as its context was torn down), or
 * FAKECUDA_IPC_TIMEOUT_MS (default 60000) passed (CUDA_ERROR_LAUNCH_FAILED).
 * Opened events can be waited for, queried and synchronized, not recorded.
 * FAKECUDA_IPC_SKIP_WAITS=1 makes this process drop its waits for other
 * processes' events (the control of tests: a process that forgets them).
 *
 * Frees run in stream order, as on a GPU: a block of an IPC pool made here
 * reads 0xdd from the moment its cuMemFreeAsync executes (in every process
 * that maps it), and until then an allocation of the same rounded size on
 * the stream the free is queued on takes the block over at once, its work
 * queued behind the free's. So a producer whose free does not wait for its
 * consumer's "done" event overwrites memory the consumer still reads. An
 * allocation that finds no room runs its stream first (the frees queued
 * there give their blocks back) and looks again, as the driver serves an
 * allocation from memory freed earlier in its stream.
 *
 * The driver requires every importer's free of a pointer (completed) before
 * the exporter's. The pool's header keeps a table of the blocks imported
 * and not yet freed, one word {offset / IPC_ALIGN, pid} per importing
 * process and block (claimed and cleared with atomic operations, by the
 * importer alone; a dead process's entries count for nothing and are taken
 * over, a zombie's too): an importer adds its entry at cuMemPoolImportPointer and clears it
 * when its free executes. The exporter's free, when it executes (the
 * OP_FREE of cuMemFreeAsync, or cuMemFree), looks for another live
 * process's entry of the block: one is a violation, reported on stderr and
 * counted (fakecuda_ipc_violations), or fatal (abort) with
 * FAKECUDA_IPC_STRICT=1.
 */

#define IPC_HDR 65536
#define IPC_ALIGN 256
/* The table of mappings: words after the 64 bytes of the pool's header. */
#define IPC_MAP_FIRST 8
#define IPC_MAP_SLOTS (IPC_HDR / 8 - IPC_MAP_FIRST)
static const char ipc_pool_magic[8] = "FKIPCPOL";
static const char ipc_ptr_magic[8] = "FKIPCPTR";
static const char ipc_ev_magic[8] = "FKIPCEVT";

typedef struct { size_t off, size; int used; } ipcblock;

typedef struct fipcpool {
    fpool acct; /* what cuMemPoolGetAttribute reports (used bytes) */
    unsigned long long uid;
    int fd;      /* creator: the memfd (-1 for an imported pool) */
    int handles; /* handle types it was created for */
    int imported;
    int exported; /* its shareable handle was exported: only then its pointers can be */
    unsigned char *base;
    size_t size;
    ipcblock *blocks;
    int nblocks, capblocks;
    long reused; /* allocations served by a block whose free was pending on their stream */
    int destroyed; /* cuMemPoolDestroy ran: released with its last allocation */
} fipcpool;

static volatile unsigned long long *ipc_maps(fipcpool *p) {
    return (volatile unsigned long long *)(p->base - IPC_HDR) + IPC_MAP_FIRST;
}

static fpool *ipc_pool_acct(void *h) {
    fipcpool *p = reg_find(h, H_POOL);
    return p ? &p->acct : NULL;
}

/* ipc_poison: a block of an IPC pool made here is being freed (its
 * stream-ordered free runs now): it reads 0xdd until an allocation takes it
 * again, in this process and in every process that still maps it, as memory
 * that another allocation reused would. So a peer that reads after the
 * producer's free ran sees it: the free must wait for the peer's "done". */
static void ipc_check_unmapped(alloc *a);

static void ipc_poison(alloc *a) {
    if (a->ipool && !a->ipc_imported) {
        ipc_check_unmapped(a);
        memset((void *)a->base, 0xdd, a->size);
    }
}

/* ipc_dead: process pid is gone, a zombie (killed, not yet reaped: its
 * mappings were torn down with it), or exiting. A killed process's sockets
 * close while it exits, before it is a zombie, so a producer that frees
 * when its peer's connection ends can see the peer still there: the
 * kernel's PF_EXITING flag, set when the exit begins, says it will never
 * touch the mapping again. A process reaped between the kill(0) and the
 * read of its /proc entry is gone too (that race once counted a killed
 * consumer as live). */
static int ipc_dead(int pid) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == ESRCH;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return kill(pid, 0) != 0 && errno == ESRCH;
    buf[n] = 0;
    char *r = strrchr(buf, ')'); /* "pid (comm) S ppid pgrp session tty tpgid flags ..." */
    if (!r || r[1] != ' ') return 0;
    if (r[2] == 'Z' || r[2] == 'X') return 1;
    unsigned long flags = 0;
    if (sscanf(r + 3, " %*d %*d %*d %*d %*d %lu", &flags) != 1) return 0;
    return (flags & 0x4) != 0; /* PF_EXITING */
}

/* The mapping table of pool p (shared by the exporter and its importers). */
static volatile unsigned long long *ipc_maps(struct fipcpool *p);

static unsigned long long ipc_map_word(size_t off, int pid) {
    return (unsigned long long)(off / IPC_ALIGN + 1) << 32 | (unsigned)pid;
}

/* ipc_mapped records that this process maps the block at off of imported
 * pool p (once: an entry already there stays). */
static void ipc_mapped(struct fipcpool *p, size_t off) {
    volatile unsigned long long *t = ipc_maps(p);
    unsigned long long w = ipc_map_word(off, getpid());
    for (int i = 0; i < IPC_MAP_SLOTS; i++)
        if (__atomic_load_n(&t[i], __ATOMIC_ACQUIRE) == w) return;
    for (int i = 0; i < IPC_MAP_SLOTS; i++) {
        unsigned long long cur = __atomic_load_n(&t[i], __ATOMIC_ACQUIRE);
        if (cur != 0 && !ipc_dead((int)(cur & 0xffffffffu))) continue;
        if (__atomic_compare_exchange_n(&t[i], &cur, w, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    }
    static int warned;
    if (!warned++) fprintf(stderr, "fakecuda: the mapping table of an IPC pool is full: mappings go unchecked\n");
}

/* ipc_unmapped: this process's free of the block at off of imported pool p
 * executes. */
static void ipc_unmapped(struct fipcpool *p, size_t off) {
    volatile unsigned long long *t = ipc_maps(p);
    unsigned long long w = ipc_map_word(off, getpid());
    for (int i = 0; i < IPC_MAP_SLOTS; i++) {
        unsigned long long cur = w;
        if (__atomic_compare_exchange_n(&t[i], &cur, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    }
}

static long ipc_violations;
static int ipc_strict = -1;

/* ipc_check_unmapped: the exporter's free of a (a block of its IPC pool)
 * executes: no other live process may map it still. */
static void ipc_check_unmapped(alloc *a) {
    fipcpool *p = a->ipool;
    volatile unsigned long long *t = ipc_maps(p);
    size_t off = a->base - (uintptr_t)p->base;
    unsigned long long key = ipc_map_word(off, 0) >> 32;
    int me = getpid();
    for (int i = 0; i < IPC_MAP_SLOTS; i++) {
        unsigned long long cur = __atomic_load_n(&t[i], __ATOMIC_ACQUIRE);
        int pid = (int)(cur & 0xffffffffu);
        if (cur == 0 || cur >> 32 != key || pid == me || ipc_dead(pid)) continue;
        fprintf(stderr,
                "fakecuda: cuMemFreeAsync of IPC pool block at offset %zu while process %d still maps it: "
                "importers must free first\n",
                off, pid);
        ipc_violations++;
        if (ipc_strict < 0) {
            const char *v = getenv("FAKECUDA_IPC_STRICT");
            ipc_strict = v && atoi(v) ? 1 : 0;
        }
        if (ipc_strict) abort();
    }
}

/* ipc_del_alloc gives an allocation of an IPC pool back to it (answers 1),
 * or answers 0 for other memory. */
static int ipc_del_alloc(alloc *a) {
    if (!a->ipool) return 0;
    fipcpool *p = a->ipool;
    size_t off = a->base - (uintptr_t)p->base;
    if (a->ipc_imported) {
        /* FAKECUDA_IPC_UNMAP_DELAY_MS: an importer's free executes that
         * much later (a busy device), so that an exporter that frees
         * without waiting for it is caught by the check of that order. */
        static long unmap_delay = -1;
        if (unmap_delay < 0) unmap_delay = env_ms("FAKECUDA_IPC_UNMAP_DELAY_MS", 0);
        if (unmap_delay > 0) {
            struct timespec ts = {unmap_delay / 1000, (unmap_delay % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
        ipc_unmapped(p, off);
        return 1;
    }
    for (int i = 0; i < p->nblocks; i++)
        if (p->blocks[i].off == off && p->blocks[i].used) {
            p->blocks[i].used = 0;
            p->acct.used -= p->blocks[i].size;
            /* merge with free neighbours */
            if (i + 1 < p->nblocks && !p->blocks[i + 1].used) {
                p->blocks[i].size += p->blocks[i + 1].size;
                memmove(&p->blocks[i + 1], &p->blocks[i + 2], (p->nblocks - i - 2) * sizeof *p->blocks);
                p->nblocks--;
            }
            if (i > 0 && !p->blocks[i - 1].used) {
                p->blocks[i - 1].size += p->blocks[i].size;
                memmove(&p->blocks[i], &p->blocks[i + 1], (p->nblocks - i - 1) * sizeof *p->blocks);
                p->nblocks--;
            }
            break;
        }
    return 1;
}

static int ipc_carve(fipcpool *p, size_t n, size_t *off) {
    size_t need = (n + IPC_ALIGN - 1) / IPC_ALIGN * IPC_ALIGN;
    for (int i = 0; i < p->nblocks; i++) {
        ipcblock *b = &p->blocks[i];
        if (b->used || b->size < need) continue;
        if (b->size > need) {
            if (p->nblocks == p->capblocks) {
                p->capblocks *= 2;
                p->blocks = realloc(p->blocks, p->capblocks * sizeof *p->blocks);
                b = &p->blocks[i];
            }
            memmove(&p->blocks[i + 2], &p->blocks[i + 1], (p->nblocks - i - 1) * sizeof *p->blocks);
            p->blocks[i + 1].off = b->off + need;
            p->blocks[i + 1].size = b->size - need;
            p->blocks[i + 1].used = 0;
            p->nblocks++;
            b->size = need;
        }
        b->used = 1;
        p->acct.used += need;
        *off = b->off;
        return 0;
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* CUmemPoolProps: allocType, handleTypes, location {type, id}, win32 attrs,
 * maxSize, usage, reserved (88 bytes). */
typedef struct {
    int allocType, handleTypes, locType, locId;
    void *win32;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} fpoolprops;

EXPORT CUresult cuMemPoolCreate(void **pool, const fpoolprops *pp) {
    ENTER("cuMemPoolCreate");
    NEED_INIT();
    if (!pool || !pp) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (pp->allocType != 1 || pp->locType != 1) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (pp->locId < 0 || pp->locId >= ndev) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (pp->handleTypes & 8) RETURN(CUDA_ERROR_NOT_SUPPORTED); /* no fabric here */
    if (pp->handleTypes & ~1) RETURN(CUDA_ERROR_INVALID_VALUE);
    size_t size = pp->maxSize ? pp->maxSize : devmem;
    fipcpool *p = calloc(1, sizeof *p);
    p->acct.dev = pp->locId;
    p->handles = pp->handleTypes;
    p->fd = -1;
    unsigned long long uid = ((unsigned long long)getpid() << 32) ^ (unsigned long long)(uintptr_t)p ^ (unsigned long long)next_id++;
    p->uid = uid;
    if (pp->handleTypes & 1) {
        p->fd = memfd_create("fakecuda-pool", MFD_CLOEXEC);
        if (p->fd < 0 || ftruncate(p->fd, IPC_HDR + size) != 0) { free(p); RETURN(CUDA_ERROR_OUT_OF_MEMORY); }
        p->base = mmap(NULL, IPC_HDR + size, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
    } else {
        p->base = mmap(NULL, IPC_HDR + size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    if (p->base == MAP_FAILED) { if (p->fd >= 0) close(p->fd); free(p); RETURN(CUDA_ERROR_OUT_OF_MEMORY); }
    unsigned long long hdr[4] = {0, uid, (unsigned long long)pp->locId, size};
    memcpy(hdr, ipc_pool_magic, 8);
    memcpy(p->base, hdr, sizeof hdr);
    p->base += IPC_HDR;
    p->size = size;
    p->capblocks = 16;
    p->blocks = calloc(p->capblocks, sizeof *p->blocks);
    p->blocks[0].size = size;
    p->nblocks = 1;
    reg_add(p, H_POOL);
    *pool = p;
    RETURN(0);
}

/* ipc_pool_release_unused releases a destroyed pool (its mapping, its
 * memfd, its bookkeeping) once no allocation is left in it: a process that
 * imports and destroys pools for ever (a server of many peers) keeps no
 * memory of them. */
static void ipc_pool_release_unused(fipcpool *p) {
    if (!p->destroyed) return;
    for (int i = 0; i < nallocs; i++)
        if (allocs[i].ipool == p) return;
    munmap(p->base - IPC_HDR, p->size + IPC_HDR);
    if (p->fd >= 0) close(p->fd);
    free(p->blocks);
    free(p);
}

/* A destroyed pool's bookkeeping stays while memory allocated from it (or
 * imported from it) lives, which may be freed later, as the driver allows;
 * its handle goes at once. */
EXPORT CUresult cuMemPoolDestroy(void *h) {
    ENTER("cuMemPoolDestroy");
    NEED_INIT();
    fipcpool *p = reg_find(h, H_POOL);
    if (!p) RETURN(CUDA_ERROR_INVALID_VALUE);
    reg_del(p);
    p->destroyed = 1;
    ipc_pool_release_unused(p);
    RETURN(0);
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *ptr, size_t n, void *h, void *stream) {
    ENTER("cuMemAllocFromPoolAsync");
    NEED_CTX_STRICT();
    fstream *s;
    fctx *c;
    int r = resolve(stream, &s, &c);
    if (r) RETURN(r);
    if (!ptr || n == 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    fipcpool *p = reg_find(h, H_POOL);
    if (!p || p->imported) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (p->acct.dev != c->dev) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (s && s->capturing && p->handles) RETURN(CUDA_ERROR_NOT_SUPPORTED); /* graph allocations: no IPC */
    /* A block whose free is queued on this stream and not yet run serves
     * an allocation of the same rounded size at once, as the driver reuses
     * memory freed earlier in the same stream: the new owner's work runs
     * after everything queued before the free (its first fill of 0xcd
     * included, in stream order). */
    size_t need = (n + IPC_ALIGN - 1) / IPC_ALIGN * IPC_ALIGN;
    for (int i = 0; s && i < nallocs; i++) {
        alloc *a = &allocs[i];
        if (a->ipool != p || a->ipc_imported || !a->free_pending || a->free_stream != s->id) continue;
        if ((a->size + IPC_ALIGN - 1) / IPC_ALIGN * IPC_ALIGN != need) continue;
        /* Work queued before the free still runs on the old owner's bytes
         * (a copy from a tensor that was freed after it): the block keeps
         * the larger of the two sizes until OP_RESIZE, queued here, runs. */
        a->free_pending = 0;
        a->free_stream = 0;
        if (n > a->size) a->size = n;
        a->ctx = c;
        a->dev = c->dev;
        p->reused++;
        op *o = new_op(OP_RESIZE);
        o->dst = a->base;
        o->n = n;
        submit(s, c, o);
        memset_op(s, c, (CUdeviceptr)a->base, 0xcd, n, 0);
        *ptr = (CUdeviceptr)a->base;
        RETURN(0);
    }
    size_t off;
    r = ipc_carve(p, n, &off);
    if (r && s && s->head) {
        /* Memory freed earlier on this stream serves it too, whatever the
         * size: run the stream (its queued frees) and look again. */
        drain(s);
        r = ipc_carve(p, n, &off);
    }
    if (r) RETURN(r);
    memset(p->base + off, 0xcd, n); /* like uninitialized device memory */
    alloc *a = add_alloc((uintptr_t)(p->base + off), n, K_DEVICE, c);
    a->ipool = p;
    *ptr = (CUdeviceptr)(uintptr_t)(p->base + off);
    RETURN(0);
}

EXPORT CUresult cuMemPoolExportToShareableHandle(void *out, void *h, int type, unsigned long long flags) {
    ENTER("cuMemPoolExportToShareableHandle");
    NEED_INIT();
    fipcpool *p = reg_find(h, H_POOL);
    if (!out || flags) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (type == 8) RETURN(CUDA_ERROR_NOT_SUPPORTED);
    if (!p || p->imported || type != 1 || !(p->handles & 1)) RETURN(CUDA_ERROR_INVALID_VALUE);
    int fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    p->exported = 1;
    *(int *)out = fd;
    RETURN(0);
}

EXPORT CUresult cuMemPoolImportFromShareableHandle(void **pool, void *handle, int type, unsigned long long flags) {
    ENTER("cuMemPoolImportFromShareableHandle");
    NEED_INIT();
    if (!pool || flags) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (type == 8) RETURN(CUDA_ERROR_NOT_SUPPORTED);
    if (type != 1) RETURN(CUDA_ERROR_INVALID_VALUE);
    int fd = (int)(intptr_t)handle;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < IPC_HDR) RETURN(CUDA_ERROR_INVALID_VALUE);
    unsigned long long hdr[4];
    if (pread(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr || memcmp(hdr, ipc_pool_magic, 8) != 0)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if ((int)hdr[2] >= ndev) RETURN(CUDA_ERROR_INVALID_DEVICE);
    unsigned char *base = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    fipcpool *p = calloc(1, sizeof *p);
    p->acct.dev = (int)hdr[2];
    p->uid = hdr[1];
    p->fd = -1;
    p->imported = 1;
    p->base = base + IPC_HDR;
    p->size = st.st_size - IPC_HDR;
    reg_add(p, H_POOL);
    *pool = p;
    RETURN(0);
}

EXPORT CUresult cuMemPoolExportPointer(void *data, CUdeviceptr ptr) {
    ENTER("cuMemPoolExportPointer");
    NEED_INIT();
    if (!data) RETURN(CUDA_ERROR_INVALID_VALUE);
    alloc *a = find_alloc((uintptr_t)ptr);
    if (!a || !a->ipool || a->ipc_imported || a->base != (uintptr_t)ptr) RETURN(CUDA_ERROR_INVALID_VALUE);
    /* As the real driver (H100, 580): a pool's pointers export only after
     * the pool itself was exported. */
    if (!a->ipool->exported) RETURN(CUDA_ERROR_INVALID_VALUE);
    unsigned long long d[8] = {0};
    memcpy(d, ipc_ptr_magic, 8);
    d[1] = a->ipool->uid;
    d[2] = a->base - (uintptr_t)a->ipool->base;
    d[3] = a->size;
    memcpy(data, d, 64);
    RETURN(0);
}

EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *ptr, void *h, const void *data) {
    ENTER("cuMemPoolImportPointer");
    NEED_CTX();
    fipcpool *p = reg_find(h, H_POOL);
    if (!ptr || !data || !p || !p->imported) RETURN(CUDA_ERROR_INVALID_VALUE);
    unsigned long long d[8];
    memcpy(d, data, 64);
    if (memcmp(d, ipc_ptr_magic, 8) != 0 || d[1] != p->uid) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (d[2] > p->size || d[3] > p->size - d[2] || d[3] == 0) RETURN(CUDA_ERROR_INVALID_VALUE);
    uintptr_t base = (uintptr_t)(p->base + d[2]);
    alloc *a = find_alloc(base);
    if (a && a->ipool == p && a->base == base && !a->free_pending) RETURN(CUDA_ERROR_ALREADY_MAPPED);
    if (a && a->free_pending) del_alloc(a); /* imported again while its stream-ordered free waits: the free then finds nothing */
    a = add_alloc(base, d[3], K_DEVICE, tls_cur);
    a->dev = p->acct.dev;
    a->ipool = p;
    a->ipc_imported = 1;
    ipc_mapped(p, d[2]);
    *ptr = (CUdeviceptr)base;
    RETURN(0);
}

/* Interprocess events. */
#define IPC_EV_SLOTS 65536
static volatile unsigned long long *ipc_table; /* 2 counters per slot */
static int ipc_table_fd = -1;
static int ipc_table_next;
static long ipc_delay_ms = -1, ipc_timeout_ms = -1;

static long env_ms(const char *name, long def) {
    const char *v = getenv(name);
    return v ? atol(v) : def;
}

static int ipc_event_slot(fevent *e) {
    if (!ipc_table) {
        int fd = memfd_create("fakecuda-events", 0); /* no CLOEXEC: openers find it via /proc */
        if (fd < 0 || ftruncate(fd, IPC_EV_SLOTS * 16) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
        void *m = mmap(NULL, IPC_EV_SLOTS * 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) { close(fd); return CUDA_ERROR_OUT_OF_MEMORY; }
        ipc_table = m;
        ipc_table_fd = fd;
    }
    if (ipc_table_next >= IPC_EV_SLOTS) return CUDA_ERROR_OUT_OF_MEMORY;
    e->ipc = &ipc_table[2 * ipc_table_next++];
    return 0;
}

typedef struct { unsigned long long sid, ev_id, gen; } ipcrun;

static void *ipc_runner(void *arg) {
    ipcrun *r = arg;
    if (ipc_delay_ms > 0) {
        struct timespec ts = {ipc_delay_ms / 1000, (ipc_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&mu);
    drain_record(r->sid, r->ev_id, r->gen);
    pthread_mutex_unlock(&mu);
    free(r);
    return NULL;
}

/* ipc_recorded: e (of this process) is being recorded by o on s. */
static void ipc_recorded(fevent *e, fstream *s, op *o) {
    if (!e->ipc) return;
    if (ipc_delay_ms < 0) ipc_delay_ms = env_ms("FAKECUDA_IPC_DELAY_MS", 0);
    o->ipc_mark = e->ipc;
    __atomic_store_n(&e->ipc[0], o->gen, __ATOMIC_RELEASE);
    if (!s) return; /* an implicit stream runs it at once */
    ipcrun *r = malloc(sizeof *r);
    r->sid = s->id;
    r->ev_id = e->id;
    r->gen = o->gen;
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, ipc_runner, r) != 0) free(r);
    pthread_attr_destroy(&at);
}

static int ipc_gone(int pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

static int ipc_remote_done(fevent *e) {
    return __atomic_load_n(&e->ipc[1], __ATOMIC_ACQUIRE) >= __atomic_load_n(&e->ipc[0], __ATOMIC_ACQUIRE) || ipc_gone(e->ipc_pid);
}

/* ipc_poll waits, with the lock dropped, until *done reaches gen or pid is
 * gone; it answers CUDA_ERROR_LAUNCH_FAILED after the timeout. */
static int ipc_poll(volatile unsigned long long *done, unsigned long long gen, int pid) {
    if (ipc_timeout_ms < 0) ipc_timeout_ms = env_ms("FAKECUDA_IPC_TIMEOUT_MS", 60000);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (__atomic_load_n(done, __ATOMIC_ACQUIRE) < gen) {
        if (ipc_gone(pid)) return 0;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ipc_timeout_ms) return CUDA_ERROR_LAUNCH_FAILED;
        pthread_mutex_unlock(&mu);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&mu);
    }
    return 0;
}

static int ipc_remote_sync(fevent *e) {
    return ipc_poll(&e->ipc[1], __atomic_load_n(&e->ipc[0], __ATOMIC_ACQUIRE), e->ipc_pid);
}

/* A stream whose head is a wait on another process, or a wait for a
 * record of another stream that runs such a wait, runs nothing else
 * meanwhile: other threads that step it wait until that wait is over. */
static void ipc_wait_busy(fstream *s) {
    while (s->busy) {
        pthread_mutex_unlock(&mu);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&mu);
    }
}

static int ipc_wait_op(fstream *s, op *o) {
    s->busy = 1;
    int r = ipc_poll(o->ipc_done, o->gen, o->ipc_pid);
    s->busy = 0;
    return r;
}

static int ipc_skip_waits = -1;

/* ipc_skipping: FAKECUDA_IPC_SKIP_WAITS is set; a query of another
 * process's event then answers "done" at once, as its waits are dropped. */
static int ipc_skipping(void) {
    if (ipc_skip_waits < 0) ipc_skip_waits = env_ms("FAKECUDA_IPC_SKIP_WAITS", 0) != 0;
    return ipc_skip_waits;
}

static int ipc_remote_wait(fstream *s, fctx *c, fevent *e, uintptr_t h) {
    unsigned long long gen = __atomic_load_n(&e->ipc[0], __ATOMIC_ACQUIRE);
    if (!gen) return 0; /* never recorded: nothing to wait for */
    if (ipc_skip_waits < 0) ipc_skip_waits = env_ms("FAKECUDA_IPC_SKIP_WAITS", 0) != 0;
    if (ipc_skip_waits) return 0; /* the control of tests: a process that forgets its waits */
    log_order('w', h, 0);
    op *o = new_op(OP_WAIT);
    o->gen = gen;
    o->ipc_done = &e->ipc[1];
    o->ipc_pid = e->ipc_pid;
    if (!s) { /* an implicit stream waits now */
        int r = ipc_poll(o->ipc_done, gen, o->ipc_pid);
        free(o);
        return r;
    }
    o->ctx = c;
    if (s->tail) s->tail->next = o; else s->head = o;
    s->tail = o;
    s->npending++;
    return 0;
}

EXPORT CUresult cuIpcGetEventHandle(void *handle, void *h) {
    ENTER("cuIpcGetEventHandle");
    NEED_INIT();
    fevent *e = reg_find(h, H_EVENT);
    if (!handle) RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!e || !e->ipc || e->ipc_pid) RETURN(CUDA_ERROR_INVALID_HANDLE);
    unsigned long long d[8] = {0};
    memcpy(d, ipc_ev_magic, 8);
    d[1] = (unsigned long long)getpid();
    d[2] = (unsigned long long)ipc_table_fd;
    d[3] = (unsigned long long)((e->ipc - ipc_table) / 2);
    memcpy(handle, d, 64);
    RETURN(0);
}

typedef struct { char bytes[64]; } fipchandle;

/* Tables of other processes, mapped once per process. */
static struct { int pid; volatile unsigned long long *table; } ipc_peers[256];
static int nipc_peers;

EXPORT CUresult cuIpcOpenEventHandle(void **pe, fipchandle handle) {
    ENTER("cuIpcOpenEventHandle");
    NEED_CTX();
    unsigned long long d[8];
    memcpy(d, handle.bytes, 64);
    if (!pe || memcmp(d, ipc_ev_magic, 8) != 0 || d[3] >= IPC_EV_SLOTS) RETURN(CUDA_ERROR_INVALID_VALUE);
    int pid = (int)d[1];
    volatile unsigned long long *table = NULL;
    if (pid == getpid()) table = ipc_table;
    for (int i = 0; i < nipc_peers && !table; i++)
        if (ipc_peers[i].pid == pid) table = ipc_peers[i].table;
    if (!table) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%llu", pid, d[2]);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) RETURN(CUDA_ERROR_INVALID_VALUE);
        void *m = mmap(NULL, IPC_EV_SLOTS * 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED) RETURN(CUDA_ERROR_INVALID_VALUE);
        table = m;
        if (nipc_peers < 256) {
            ipc_peers[nipc_peers].pid = pid;
            ipc_peers[nipc_peers++].table = table;
        }
    }
    if (!table) RETURN(CUDA_ERROR_INVALID_VALUE);
    fevent *e = calloc(1, sizeof *e);
    e->id = next_event_id++;
    e->ctx = tls_cur;
    e->flags = 6;
    e->ipc = &table[2 * d[3]];
    e->ipc_pid = pid;
    if (nevents == capevents) {
        capevents = capevents ? 2 * capevents : 16;
        events = realloc(events, capevents * sizeof *events);
    }
    events[nevents++] = e;
    reg_add(e, H_EVENT);
    *pe = e;
    RETURN(0);
}

/* fakecuda_ipc_pool_reused: allocations of IPC pool h that took over a
 * block whose free was pending on their stream (-1: not one). */
EXPORT long fakecuda_ipc_pool_reused(void *h) {
    pthread_mutex_lock(&mu);
    fipcpool *p = reg_find(h, H_POOL);
    long n = p ? p->reused : -1;
    pthread_mutex_unlock(&mu);
    return n;
}

/* fakecuda_ipc_violations: frees of IPC pool blocks by this process (the
 * exporter) that executed while another live process still mapped the
 * block. */
EXPORT int fakecuda_ipc_violations(void) {
    pthread_mutex_lock(&mu);
    int n = (int)ipc_violations;
    pthread_mutex_unlock(&mu);
    return n;
}

/* fakecuda_ipc_pool_used: bytes allocated from IPC pool h (-1: not one). */
EXPORT long long fakecuda_ipc_pool_used(void *h) {
    pthread_mutex_lock(&mu);
    fipcpool *p = reg_find(h, H_POOL);
    long long n = p ? (long long)p->acct.used : -1;
    pthread_mutex_unlock(&mu);
    return n;
}

/* ----------------------------------------------------- context destruction */

static void destroy_ctx_resources(fctx *c) {
    for (int i = nstreams - 1; i >= 0; i--)
        if (streams[i]->ctx == c) drain(streams[i]);
    for (int i = nstreams - 1; i >= 0; i--)
        if (streams[i]->ctx == c) free_stream(streams[i]);
    for (int i = nevents - 1; i >= 0; i--)
        if (events[i]->ctx == c) free_event(events[i]);
    for (int i = nhandles - 1; i >= 0; i--)
        if (handles[i].kind == H_MODULE && ((fmodule *)handles[i].p)->ctx == c) {
            free_module(handles[i].p);
            i = nhandles; /* the registry changed under us: start over */
        }
    for (int i = nallocs - 1; i >= 0; i--)
        if (allocs[i].ctx == c) del_alloc(&allocs[i]);
    for (int i = 0; i < MAXDEV; i++) ctxs[i].peer[c->dev] = 0;
}

/* ------------------------------------------------------------ test controls */

EXPORT int fakecuda_inject(const char *fn, int code, int after_n) {
    if (!fn) return -1;
    pthread_mutex_lock(&mu);
    add_injection(fn, code, after_n);
    pthread_mutex_unlock(&mu);
    return 0;
}

EXPORT void fakecuda_clear_injections(void) {
    pthread_mutex_lock(&mu);
    ninjections = 0;
    pthread_mutex_unlock(&mu);
}

EXPORT long fakecuda_calls(const char *fn) {
    long n = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < ncounters; i++)
        if (!strcmp(counters[i].name, fn)) n = counters[i].calls;
    pthread_mutex_unlock(&mu);
    return n;
}

/* fakecuda_call_names writes the names of the entry points called since
 * the last reset, one per line with its count ("cuEventRecord 3\n"), into
 * buf (cap bytes, NUL-terminated), and returns how many there are: what a
 * path costs in driver calls, all of them at once. */
EXPORT int fakecuda_call_names(char *buf, size_t cap) {
    size_t at = 0;
    pthread_mutex_lock(&mu);
    int n = ncounters;
    for (int i = 0; i < ncounters && cap > 0; i++) {
        int w = snprintf(buf + at, cap - at, "%s %ld\n", counters[i].name, counters[i].calls);
        if (w < 0 || (size_t)w >= cap - at) break;
        at += (size_t)w;
    }
    pthread_mutex_unlock(&mu);
    if (cap > 0) buf[at < cap ? at : cap - 1] = 0;
    return n;
}

EXPORT void fakecuda_reset_calls(void) {
    pthread_mutex_lock(&mu);
    ncounters = 0;
    nolog = 0;
    pthread_mutex_unlock(&mu);
}

/* fakecuda_guard guards the n bytes at base whose mask byte is 1: every
 * such byte an executed operation writes (copies, memsets, kernels) counts a
 * hit. It replaces the previous guard (n == 0: none) and returns 0. */
EXPORT int fakecuda_guard(uintptr_t base, size_t n, const unsigned char *mask) {
    pthread_mutex_lock(&mu);
    free(guard_mask);
    guard_mask = NULL;
    guard_base = base;
    guard_n = n;
    guard_hits = 0;
    if (n && mask) {
        guard_mask = malloc(n);
        memcpy(guard_mask, mask, n);
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

/* fakecuda_guard_hits is the number of guarded bytes written so far. */
EXPORT long fakecuda_guard_hits(void) {
    pthread_mutex_lock(&mu);
    long n = guard_hits;
    pthread_mutex_unlock(&mu);
    return n;
}

/* fakecuda_order_log copies up to n entries of the ordering log (see
 * log_order) since the last fakecuda_reset_calls into out, three words
 * each: kind ('r' or 'w'), stream, and for a wait the stream of the awaited
 * record; it returns the number of entries logged. */
EXPORT int fakecuda_order_log(unsigned long long *out, int n) {
    pthread_mutex_lock(&mu);
    int k = nolog;
    for (int i = 0; i < k && i < n; i++) {
        out[3 * i] = (unsigned long long)olog[i].kind;
        out[3 * i + 1] = olog[i].stream;
        out[3 * i + 2] = olog[i].on;
    }
    pthread_mutex_unlock(&mu);
    return k;
}

/* fakecuda_live_allocations counts live allocations of a kind (0: all;
 * 1 device, 2 pinned host, 3 registered, 4 managed). */
EXPORT int fakecuda_live_allocations(int kind) {
    int n = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nallocs; i++)
        if (!kind || allocs[i].kind == kind) n++;
    pthread_mutex_unlock(&mu);
    return n;
}

EXPORT void fakecuda_set_strict_ctx(int on) {
    pthread_mutex_lock(&mu);
    strict_ctx = on;
    pthread_mutex_unlock(&mu);
}

/* fakecuda_pending counts operations queued on a stream (-1: not a stream). */
EXPORT int fakecuda_pending(void *h) {
    int n = -1;
    pthread_mutex_lock(&mu);
    fstream *s = reg_find(h, H_STREAM);
    if (s) n = s->npending;
    pthread_mutex_unlock(&mu);
    return n;
}

/* fakecuda_primary_refs reports a device's primary context reference count. */
EXPORT int fakecuda_primary_refs(int dev) {
    int n = -1;
    pthread_mutex_lock(&mu);
    if (dev >= 0 && dev < MAXDEV) n = ctxs[dev].refs;
    pthread_mutex_unlock(&mu);
    return n;
}

/* Field offsets of the copy descriptors, in declaration order, computed by
 * the C compiler: the tests compare them with Go's unsafe.Offsetof. */
EXPORT int fakecuda_offsets_memcpy2d(size_t *out, int n) {
    size_t o[] = {
        offsetof(CUDA_MEMCPY2D, srcXInBytes), offsetof(CUDA_MEMCPY2D, srcY), offsetof(CUDA_MEMCPY2D, srcMemoryType),
        offsetof(CUDA_MEMCPY2D, srcHost), offsetof(CUDA_MEMCPY2D, srcDevice), offsetof(CUDA_MEMCPY2D, srcArray),
        offsetof(CUDA_MEMCPY2D, srcPitch), offsetof(CUDA_MEMCPY2D, dstXInBytes), offsetof(CUDA_MEMCPY2D, dstY),
        offsetof(CUDA_MEMCPY2D, dstMemoryType), offsetof(CUDA_MEMCPY2D, dstHost), offsetof(CUDA_MEMCPY2D, dstDevice),
        offsetof(CUDA_MEMCPY2D, dstArray), offsetof(CUDA_MEMCPY2D, dstPitch), offsetof(CUDA_MEMCPY2D, WidthInBytes),
        offsetof(CUDA_MEMCPY2D, Height), sizeof(CUDA_MEMCPY2D),
    };
    int k = (int)(sizeof o / sizeof o[0]);
    for (int i = 0; i < k && i < n; i++) out[i] = o[i];
    return k;
}
EXPORT int fakecuda_offsets_memcpy3d(size_t *out, int n) {
    size_t o[] = {
        offsetof(CUDA_MEMCPY3D, srcXInBytes), offsetof(CUDA_MEMCPY3D, srcY), offsetof(CUDA_MEMCPY3D, srcZ),
        offsetof(CUDA_MEMCPY3D, srcLOD), offsetof(CUDA_MEMCPY3D, srcMemoryType), offsetof(CUDA_MEMCPY3D, srcHost),
        offsetof(CUDA_MEMCPY3D, srcDevice), offsetof(CUDA_MEMCPY3D, srcArray), offsetof(CUDA_MEMCPY3D, reserved0),
        offsetof(CUDA_MEMCPY3D, srcPitch), offsetof(CUDA_MEMCPY3D, srcHeight), offsetof(CUDA_MEMCPY3D, dstXInBytes),
        offsetof(CUDA_MEMCPY3D, dstY), offsetof(CUDA_MEMCPY3D, dstZ), offsetof(CUDA_MEMCPY3D, dstLOD),
        offsetof(CUDA_MEMCPY3D, dstMemoryType), offsetof(CUDA_MEMCPY3D, dstHost), offsetof(CUDA_MEMCPY3D, dstDevice),
        offsetof(CUDA_MEMCPY3D, dstArray), offsetof(CUDA_MEMCPY3D, reserved1), offsetof(CUDA_MEMCPY3D, dstPitch),
        offsetof(CUDA_MEMCPY3D, dstHeight), offsetof(CUDA_MEMCPY3D, WidthInBytes), offsetof(CUDA_MEMCPY3D, Height),
        offsetof(CUDA_MEMCPY3D, Depth), sizeof(CUDA_MEMCPY3D),
    };
    int k = (int)(sizeof o / sizeof o[0]);
    for (int i = 0; i < k && i < n; i++) out[i] = o[i];
    return k;
}
