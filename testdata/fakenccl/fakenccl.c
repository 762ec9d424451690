/*
 * fakenccl: a fake libnccl.so.2 for tests without a GPU.
 *
 * It implements, over the fake driver's device memory (testdata/fakecuda:
 * device memory there is host memory of the process), the NCCL entry points
 * that package github.com/dlbridge/dlbridge/nccl uses, with NCCL's symbol
 * names and C signatures, across real processes, so that the binding, the
 * rendezvous and the failure handling run as they would against NCCL.
 *
 * Build:  gcc -shared -fPIC -O2 -ffp-contract=off -o libnccl.so.2 fakenccl.c -lpthread -ldl
 * Use:    DLBRIDGE_LIBNCCL=/path/to/libnccl.so.2 with DLBRIDGE_LIBCUDA at the fake driver.
 *
 * Model (documented so tests can rely on it):
 *   - A unique id holds "FAKENCCL" and 16 random bytes. The ranks of a
 *     communicator meet in a POSIX shared-memory object named after them
 *     (/fakenccl-<hex>; a split child adds its own suffix): per rank a slot
 *     with its pid and counters, per ordered pair of ranks a mailbox, and
 *     FAKENCCL_BUF_BYTES (default 1 MiB) of data per slot and per mailbox.
 *     An operation moving more bytes than that is ncclInvalidArgument.
 *     Rank 0 unlinks the object once every rank has joined.
 *   - Initialization registers the rank and waits for the others: at the
 *     call for a blocking communicator, in a thread for a nonblocking one
 *     (ncclConfig_t.blocking = 0: ncclCommGetAsyncError answers
 *     ncclInProgress until all joined), at ncclGroupEnd inside a group.
 *   - Blocking communicators (the default, as NCCL's): a collective, a
 *     send/receive or a group returns once its work is queued on the
 *     stream; initialization and ncclCommFinalize wait in the call, and
 *     ncclCommAbort from another thread ends that wait (the call fails;
 *     the communicator is freed once the call returned, as every call
 *     holds a reference: a call made after the abort uses freed memory,
 *     as with NCCL).
 *     ncclCommGetAsyncError of a blocking communicator only reads its
 *     state and may be called from any thread at any time.
 *   - Operations run on the caller's stream, in its order, through the fake
 *     driver's fakecuda_launch_poll: when the stream reaches one, it posts
 *     this rank's data and completes once the peers' data are there (the
 *     collectives of a communicator are numbered in call order, as NCCL
 *     requires every rank to call them in the same order; sends and
 *     receives are numbered per pair of ranks). A synchronization of the
 *     stream waits for the peers; a query answers not ready meanwhile.
 *   - Nonblocking communicators behave as NCCL 2.28's: a collective, or
 *     the ncclGroupEnd of a group, answers ncclInProgress, and
 *     ncclCommGetAsyncError answers ncclInProgress until NCCL's launch
 *     thread is done (here: the second query), which that query joins (it
 *     takes a while). A call on the communicator meanwhile fails, as
 *     NCCL's: "Attempt to use communicator before the previous operation
 *     returned ncclSuccess" (ncclInvalidArgument, and the communicator's
 *     asynchronous error).
 *   - A communicator takes one call at a time: NCCL's are not safe for
 *     concurrent calls (2.28's ncclCommGetAsyncError joins and frees the
 *     launch thread; two callers free it twice). Two calls of one
 *     communicator that overlap in time (ncclCommAbort excepted, which
 *     NCCL lets another thread call, and a blocking communicator's
 *     ncclCommGetAsyncError) make its asynchronous error
 *     ncclInternalError, so that a caller that lets them overlap fails.
 *   - Failures: ncclCommAbort completes every queued operation of the
 *     communicator at once (its buffers untouched), as NCCL's kernels exit
 *     on abort. A peer that exits goes unnoticed, as over NVLink and
 *     shared memory, where NCCL's kernels wait for it for ever: only an
 *     abort ends the wait. FAKENCCL_PEER_CHECK=1 models the network
 *     transport instead: while an operation waits, the peers' pids are
 *     checked every few milliseconds, and a peer that exited makes
 *     ncclCommGetAsyncError answer ncclRemoteError and the operation
 *     complete, as NCCL's proxy reports a closed connection.
 *   - Reductions compute in rank order (rank 0's value first), in the
 *     element type (float16 and bfloat16 through float).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
    ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7,
    ncclTimeout = 8, ncclNumResults = 9
} ncclResult_t;

enum { T_I8, T_U8, T_I32, T_U32, T_I64, T_U64, T_F16, T_F32, T_F64, T_BF16, NTYPES };
static const int tsize[NTYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
enum { R_SUM, R_PROD, R_MAX, R_MIN, R_AVG, NREDOPS };

#define UID_BYTES 128
typedef struct { char internal[UID_BYTES]; } ncclUniqueId;
#define MAGIC 0x46414b45u /* "FAKE" */
#define MAXRANKS 64

/* ------------------------------------------------------------ last error */

static char last_err[512]; /* global: the binding may ask from another thread */
static void set_err(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_err, sizeof last_err, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ fake driver */

typedef int (*poll_fn)(void *arg, int blocking);
static int (*cu_get_device)(int *);
static int (*cu_stream_query)(void *);
static int (*launch_poll)(void *, poll_fn, void *);
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

/* The fake driver is the library the process already loaded: the binding
 * opened DLBRIDGE_LIBCUDA (RTLD_NOLOAD finds it without loading a second copy). */
static void cu_load(void) {
    const char *path = getenv("DLBRIDGE_LIBCUDA");
    if (!path || !*path) path = "libcuda.so.1";
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen(path, RTLD_NOW);
    if (!h) return;
    cu_get_device = (int (*)(int *))dlsym(h, "cuCtxGetDevice");
    cu_stream_query = (int (*)(void *))dlsym(h, "cuStreamQuery");
    launch_poll = (int (*)(void *, poll_fn, void *))dlsym(h, "fakecuda_launch_poll");
}

static ncclResult_t need_driver(void) {
    pthread_once(&cu_once, cu_load);
    if (!cu_get_device || !cu_stream_query || !launch_poll) {
        set_err("fake NCCL: the fake CUDA driver (testdata/fakecuda, fakecuda_launch_poll) is not loaded; set DLBRIDGE_LIBCUDA");
        return ncclUnhandledCudaError;
    }
    return ncclSuccess;
}

/* ------------------------------------------------------------ shared memory */

typedef struct {
    volatile int64_t pid;
    volatile int joined;
    int pad;
    volatile uint64_t posted, consumed;         /* collectives */
    volatile uint64_t ctl_posted, ctl_consumed; /* host-side exchanges (split) */
    int64_t ctl[4];
    char pad2[128 - 80];
} rslot;

typedef struct {
    volatile uint64_t posted, consumed, bytes;
} pslot;

typedef struct {
    volatile uint32_t magic;
    int nranks;
    uint64_t cap;
} shdr;

typedef struct comm {
    char name[200];
    int nranks, rank, dev, blocking;
    char *base;
    size_t size;
    uint64_t cap;
    uint64_t coll_seq, ctl_seq;
    uint64_t send_seq[MAXRANKS], recv_seq[MAXRANKS];
    int nsplit;
    volatile int aborted;
    volatile int async;
    volatile int inflight; /* queued operations not yet complete */
    volatile int finalizing;
    volatile int calls;     /* calls of the communicator running now */
    const char *volatile in_call; /* the one that entered first */
    volatile int launching; /* a nonblocking launch not yet joined */
    int polls;              /* ncclCommGetAsyncError calls since it began */
    int refs; /* the caller's (until destroy or abort) and one per queued batch */
    struct timespec last_check;
} comm;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static shdr *hdr(comm *c) { return (shdr *)c->base; }
static rslot *rs(comm *c, int r) { return (rslot *)(c->base + 4096) + r; }
static pslot *ps(comm *c, int from, int to) {
    return (pslot *)(c->base + 4096 + MAXRANKS * sizeof(rslot)) + from * c->nranks + to;
}
static size_t data_off(void) { return 4096 + MAXRANKS * sizeof(rslot) + MAXRANKS * MAXRANKS * sizeof(pslot); }
static char *coll_data(comm *c, int r) { return c->base + data_off() + (size_t)r * c->cap; }
static char *p2p_data(comm *c, int from, int to) {
    return c->base + data_off() + (size_t)c->nranks * c->cap + ((size_t)from * c->nranks + to) * c->cap;
}

static uint64_t buf_bytes(void) {
    const char *e = getenv("FAKENCCL_BUF_BYTES");
    long long v = e ? atoll(e) : 0;
    return v > 0 ? (uint64_t)v : (1u << 20);
}

static void release(comm *c) {
    pthread_mutex_lock(&mu);
    int left = --c->refs;
    pthread_mutex_unlock(&mu);
    if (left == 0) {
        if (c->base) munmap(c->base, c->size);
        free(c);
    }
}

static int peer_alive(int64_t pid) { return pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH; }

static int peer_check = -1;

/* check_peers: a rank that exited makes the communicator's asynchronous
 * error ncclRemoteError (at most every 5 ms). */
static void check_peers(comm *c) {
    if (peer_check < 0) {
        const char *e = getenv("FAKENCCL_PEER_CHECK");
        peer_check = e && *e && strcmp(e, "0") != 0;
    }
    if (!peer_check || c->async == ncclRemoteError) return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long ms = (now.tv_sec - c->last_check.tv_sec) * 1000LL + (now.tv_nsec - c->last_check.tv_nsec) / 1000000;
    if (ms < 5) return;
    c->last_check = now;
    for (int r = 0; r < c->nranks; r++) {
        int64_t pid = rs(c, r)->pid;
        if (r != c->rank && pid > 0 && !peer_alive(pid)) {
            set_err("fake NCCL: rank %d (pid %lld) of the communicator exited", r, (long long)pid);
            c->async = ncclRemoteError;
            return;
        }
    }
}

static void pin(comm *c);

/* enter and leave bracket a call of communicator c (see the model): an
 * overlapping call makes the asynchronous error ncclInternalError, and
 * enter answers 0. leave is called either way. The call holds a reference:
 * an ncclCommAbort from another thread meanwhile (which NCCL allows, to end
 * a call that waits) frees the communicator only once the call left it. */
static int enter(comm *c, const char *fn) {
    pin(c);
    if (__atomic_fetch_add(&c->calls, 1, __ATOMIC_ACQ_REL) == 0) {
        c->in_call = fn;
        return 1;
    }
    set_err("fake NCCL: %s while another call of the same communicator (%s) runs in another thread "
            "(NCCL's calls of a communicator must not overlap)", fn, c->in_call ? c->in_call : "?");
    __atomic_store_n(&c->async, ncclInternalError, __ATOMIC_RELEASE);
    return 0;
}
static void leave(comm *c) {
    __atomic_sub_fetch(&c->calls, 1, __ATOMIC_ACQ_REL);
    release(c);
}

/* launched: a nonblocking communicator's call queued work; it is in
 * progress until ncclCommGetAsyncError has joined the launch. */
static void launched(comm *c) {
    c->polls = 0;
    c->launching = 1;
    __atomic_store_n(&c->async, ncclInProgress, __ATOMIC_RELEASE);
}

/* ready: NCCL's check at the start of a call of a nonblocking
 * communicator: the previous one must have returned ncclSuccess. */
static ncclResult_t ready(comm *c) {
    if (c->blocking || __atomic_load_n(&c->async, __ATOMIC_ACQUIRE) != ncclInProgress) return ncclSuccess;
    set_err("fake NCCL: Attempt to use communicator before the previous operation returned ncclSuccess");
    __atomic_store_n(&c->async, ncclInvalidArgument, __ATOMIC_RELEASE);
    return ncclInvalidArgument;
}

/* broken: the communicator can no longer complete operations. */
static int broken(comm *c) { return c->aborted || (c->async != ncclSuccess && c->async != ncclInProgress); }

static ncclResult_t join_register(comm *c, const char *name, int nranks, int rank, int dev) {
    if (nranks < 1 || nranks > MAXRANKS) {
        set_err("fake NCCL: nranks %d out of range [1, %d]", nranks, MAXRANKS);
        return ncclInvalidArgument;
    }
    if (rank < 0 || rank >= nranks) {
        set_err("fake NCCL: rank %d out of range [0, %d)", rank, nranks);
        return ncclInvalidArgument;
    }
    snprintf(c->name, sizeof c->name, "%s", name);
    c->nranks = nranks;
    c->rank = rank;
    c->dev = dev;
    c->cap = buf_bytes();
    c->size = data_off() + (size_t)(nranks + nranks * nranks) * c->cap;
    c->refs = 1;
    int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
    if (fd < 0) {
        set_err("fake NCCL: shm_open %s: %s", name, strerror(errno));
        return ncclSystemError;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size < c->size && ftruncate(fd, (off_t)c->size) != 0) {
        set_err("fake NCCL: ftruncate %s: %s", name, strerror(errno));
        close(fd);
        return ncclSystemError;
    }
    c->base = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c->base == MAP_FAILED) {
        c->base = NULL;
        set_err("fake NCCL: mmap %s: %s", name, strerror(errno));
        return ncclSystemError;
    }
    shdr *h = hdr(c);
    uint32_t zero = 0;
    if (__atomic_compare_exchange_n(&h->magic, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        h->nranks = nranks;
        h->cap = c->cap;
        __atomic_store_n(&h->magic, MAGIC, __ATOMIC_RELEASE);
    }
    while (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != MAGIC) usleep(50);
    if (h->nranks != nranks || h->cap != c->cap) {
        set_err("fake NCCL: rank %d joins with nranks %d (buffer %llu bytes) a communicator of %d ranks (buffer %llu)",
                rank, nranks, (unsigned long long)c->cap, h->nranks, (unsigned long long)h->cap);
        return ncclInvalidArgument;
    }
    int expect = 0;
    if (!__atomic_compare_exchange_n(&rs(c, rank)->joined, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        set_err("fake NCCL: rank %d joined twice", rank);
        return ncclInvalidUsage;
    }
    rs(c, rank)->pid = getpid();
    return ncclSuccess;
}

/* join_wait waits until every rank joined, the communicator is aborted,
 * or a joined peer exited. */
static ncclResult_t join_wait(comm *c) {
    for (;;) {
        if (c->aborted) {
            set_err("fake NCCL: communicator aborted during initialization");
            return ncclInvalidUsage;
        }
        int all = 1;
        for (int r = 0; r < c->nranks; r++)
            if (!__atomic_load_n(&rs(c, r)->joined, __ATOMIC_ACQUIRE)) all = 0;
        if (all) break;
        check_peers(c);
        if (c->async == ncclRemoteError) return ncclRemoteError;
        usleep(200);
    }
    if (c->rank == 0) shm_unlink(c->name);
    return ncclSuccess;
}

/* pin takes a reference for a call that waits: ncclCommAbort from another
 * thread (which drops the caller's) must not free the communicator under
 * it. */
static void pin(comm *c) {
    pthread_mutex_lock(&mu);
    c->refs++;
    pthread_mutex_unlock(&mu);
}

static void release(comm *c);

/* blocking_join: a blocking communicator's initialization waits in the
 * call, which an abort from another thread ends. */
static ncclResult_t blocking_join(comm *c) {
    pin(c);
    ncclResult_t r = join_wait(c);
    c->async = r;
    release(c);
    return r;
}

static void *join_thread(void *arg) {
    comm *c = arg;
    ncclResult_t r = join_wait(c);
    __atomic_store_n(&c->async, r, __ATOMIC_RELEASE);
    release(c);
    return NULL;
}

/* ------------------------------------------------------------ groups */

enum { K_ALLREDUCE, K_BCAST, K_REDUCE, K_ALLGATHER, K_RS, K_SEND, K_RECV };

typedef struct {
    int kind;
    comm *c;
    const void *send;
    void *recv;
    size_t count;
    int dtype, op, root, peer;
    uint64_t seq;
    int state, done;
    void *stream;
} part;

typedef struct batch {
    part *parts;
    int n;
    void *stream;
    struct batch *next;
} batch;

static batch *pending; /* every queued batch of the process, under mu */

static __thread int group_depth;
static __thread part *gparts;
static __thread int ngparts, capgparts;
static __thread comm **ginits;
static __thread int nginits, capginits;
static __thread ncclResult_t group_err;

EXPORT ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

/* ------------------------------------------------------------ reductions */

static float h2f(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) {
        if (m == 0) u = s;
        else {
            e = 127 - 15 + 1;
            while (!(m & 0x400)) { m <<= 1; e--; }
            u = s | (e << 23) | ((m & 0x3ff) << 13);
        }
    } else if (e == 31) u = s | 0x7f800000 | (m << 13);
    else u = s | ((e + 127 - 15) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f2h(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    uint32_t m = u & 0x7fffff;
    if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
    if (e >= 31) return (uint16_t)(s | 0x7c00);
    if (e <= 0) {
        if (e < -10) return (uint16_t)s;
        m |= 0x800000;
        int shift = 14 - e;
        uint32_t v = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (v & 1))) v++;
        return (uint16_t)(s | v);
    }
    uint32_t v = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (v & 1))) v++;
    return (uint16_t)(s | v);
}

static float b2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f2b(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

#define RED(T, a, b, op) ((op) == R_PROD ? (T)((a) * (b)) : (op) == R_MAX ? ((a) > (b) ? (a) : (b)) : (op) == R_MIN ? ((a) < (b) ? (a) : (b)) : (T)((a) + (b)))

/* reduce_into: dst = dst (op) src, elementwise. */
static void reduce_into(void *dst, const void *src, size_t n, int t, int op) {
#define LOOP(T) do { T *d = dst; const T *s = src; for (size_t i = 0; i < n; i++) d[i] = RED(T, d[i], s[i], op); } while (0)
    switch (t) {
    case T_I8: LOOP(int8_t); break;
    case T_U8: LOOP(uint8_t); break;
    case T_I32: LOOP(int32_t); break;
    case T_U32: LOOP(uint32_t); break;
    case T_I64: LOOP(int64_t); break;
    case T_U64: LOOP(uint64_t); break;
    case T_F32: LOOP(float); break;
    case T_F64: LOOP(double); break;
    case T_F16: {
        uint16_t *d = dst; const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) { float a = h2f(d[i]), b = h2f(s[i]); d[i] = f2h(RED(float, a, b, op)); }
        break;
    }
    case T_BF16: {
        uint16_t *d = dst; const uint16_t *s = src;
        for (size_t i = 0; i < n; i++) { float a = b2f(d[i]), b = b2f(s[i]); d[i] = f2b(RED(float, a, b, op)); }
        break;
    }
    }
#undef LOOP
}

static void divide(void *dst, size_t n, int t, int by) {
#define DIV(T) do { T *d = dst; for (size_t i = 0; i < n; i++) d[i] = (T)(d[i] / by); } while (0)
    switch (t) {
    case T_I8: DIV(int8_t); break;
    case T_U8: DIV(uint8_t); break;
    case T_I32: DIV(int32_t); break;
    case T_U32: DIV(uint32_t); break;
    case T_I64: DIV(int64_t); break;
    case T_U64: DIV(uint64_t); break;
    case T_F32: DIV(float); break;
    case T_F64: DIV(double); break;
    case T_F16: { uint16_t *d = dst; for (size_t i = 0; i < n; i++) d[i] = f2h(h2f(d[i]) / by); break; }
    case T_BF16: { uint16_t *d = dst; for (size_t i = 0; i < n; i++) d[i] = f2b(b2f(d[i]) / by); break; }
    }
#undef DIV
}

/* reduce_slots: dst = the reduction over ranks, in rank order, of n
 * elements at byte offset off of every rank's collective slot. */
static void reduce_slots(comm *c, void *dst, size_t off, size_t n, int t, int op) {
    size_t b = n * tsize[t];
    memmove(dst, coll_data(c, 0) + off, b);
    for (int r = 1; r < c->nranks; r++) reduce_into(dst, coll_data(c, r) + off, n, t, op);
    if (op == R_AVG) divide(dst, n, t, c->nranks);
}

/* ------------------------------------------------------------ progress */

static int all_at_least(comm *c, int field, uint64_t v) {
    for (int r = 0; r < c->nranks; r++) {
        uint64_t x = field ? __atomic_load_n(&rs(c, r)->posted, __ATOMIC_ACQUIRE)
                           : __atomic_load_n(&rs(c, r)->consumed, __ATOMIC_ACQUIRE);
        if (x < v) return 0;
    }
    return 1;
}

/* advance moves p on as far as the peers allow; 1 once it is complete. */
static int advance(part *p) {
    comm *c = p->c;
    if (broken(c)) return 1;
    size_t es = tsize[p->dtype], n = p->count, b = n * es;
    if (p->kind == K_SEND) {
        pslot *m = ps(c, c->rank, p->peer);
        if (__atomic_load_n(&m->consumed, __ATOMIC_ACQUIRE) < p->seq - 1) return 0;
        memmove(p2p_data(c, c->rank, p->peer), p->send, b);
        m->bytes = b;
        __atomic_store_n(&m->posted, p->seq, __ATOMIC_RELEASE);
        return 1;
    }
    if (p->kind == K_RECV) {
        pslot *m = ps(c, p->peer, c->rank);
        if (__atomic_load_n(&m->posted, __ATOMIC_ACQUIRE) < p->seq) return 0;
        if (m->bytes != b) {
            set_err("fake NCCL: rank %d receives %zu bytes from rank %d, which sent %llu", c->rank, b, p->peer,
                    (unsigned long long)m->bytes);
            c->async = ncclInvalidUsage;
            return 1;
        }
        memmove(p->recv, p2p_data(c, p->peer, c->rank), b);
        __atomic_store_n(&m->consumed, p->seq, __ATOMIC_RELEASE);
        return 1;
    }
    rslot *me = rs(c, c->rank);
    if (p->state == 0) {
        if (!all_at_least(c, 0, p->seq - 1)) return 0;
        size_t in = b;
        if (p->kind == K_RS) in = b * c->nranks;
        if (p->kind != K_BCAST || c->rank == p->root) memmove(coll_data(c, c->rank), p->send, in);
        __atomic_store_n(&me->posted, p->seq, __ATOMIC_RELEASE);
        p->state = 1;
    }
    if (!all_at_least(c, 1, p->seq)) return 0;
    switch (p->kind) {
    case K_ALLREDUCE: reduce_slots(c, p->recv, 0, n, p->dtype, p->op); break;
    case K_REDUCE: if (c->rank == p->root) reduce_slots(c, p->recv, 0, n, p->dtype, p->op); break;
    case K_BCAST: memmove(p->recv, coll_data(c, p->root), b); break;
    case K_ALLGATHER:
        for (int r = 0; r < c->nranks; r++) memmove((char *)p->recv + r * b, coll_data(c, r), b);
        break;
    case K_RS: reduce_slots(c, p->recv, c->rank * b, n, p->dtype, p->op); break;
    }
    __atomic_store_n(&me->consumed, p->seq, __ATOMIC_RELEASE);
    return 1;
}

/* help runs the other streams with queued operations one step each: one
 * process driving several devices waits on one stream for peers queued
 * on another, which the lazy fake driver runs only when asked. */
static void help(batch *self) {
    void *streams[64];
    int n = 0;
    pthread_mutex_lock(&mu);
    for (batch *b = pending; b && n < 64; b = b->next)
        if (b != self && b->stream != self->stream) streams[n++] = b->stream;
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < n; i++) cu_stream_query(streams[i]);
}

static int batch_poll(void *arg, int blocking) {
    batch *b = arg;
    int left = 0;
    for (int i = 0; i < b->n; i++) {
        part *p = &b->parts[i];
        if (!p->done) p->done = advance(p);
        if (!p->done) {
            left++;
            check_peers(p->c);
        }
    }
    if (left) {
        if (blocking) help(b);
        return 1;
    }
    pthread_mutex_lock(&mu);
    for (batch **q = &pending; *q; q = &(*q)->next)
        if (*q == b) { *q = b->next; break; }
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < b->n; i++) {
        __atomic_sub_fetch(&b->parts[i].c->inflight, 1, __ATOMIC_ACQ_REL);
        release(b->parts[i].c);
    }
    free(b->parts);
    free(b);
    return 0;
}

/* launch queues parts (all of one stream) as one batch on that stream. */
static ncclResult_t launch(part *parts, int n) {
    batch *b = calloc(1, sizeof *b);
    b->parts = malloc(n * sizeof *parts);
    memcpy(b->parts, parts, n * sizeof *parts);
    b->n = n;
    b->stream = parts[0].stream;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n; i++) {
        parts[i].c->refs++;
        __atomic_add_fetch(&parts[i].c->inflight, 1, __ATOMIC_ACQ_REL);
    }
    b->next = pending;
    pending = b;
    pthread_mutex_unlock(&mu);
    int r = launch_poll(b->stream, batch_poll, b);
    if (r != 0) {
        set_err("fake NCCL: fakecuda_launch_poll on stream %p: CUDA error %d", b->stream, r);
        b->n = n;
        for (int i = 0; i < n; i++) b->parts[i].done = 1;
        batch_poll(b, 0);
        return ncclUnhandledCudaError;
    }
    return ncclSuccess;
}

static ncclResult_t flush_group(void) {
    ncclResult_t ret = group_err;
    int nonblocking_init = 0;
    for (int i = 0; i < nginits; i++) {
        comm *c = ginits[i];
        if (c->blocking) {
            ncclResult_t r = blocking_join(c);
            if (r && !ret) ret = r;
        } else {
            pthread_t t;
            pthread_mutex_lock(&mu);
            c->refs++;
            pthread_mutex_unlock(&mu);
            c->async = ncclInProgress;
            pthread_create(&t, NULL, join_thread, c);
            pthread_detach(t);
            nonblocking_init = 1;
        }
    }
    nginits = 0;
    /* One batch per stream, in call order within it. */
    int n = ngparts;
    char *taken = calloc(n ? n : 1, 1);
    part *one = malloc((n ? n : 1) * sizeof *one);
    int nonblocking_ops = 0;
    for (int i = 0; i < n && !ret; i++) {
        if (taken[i]) continue;
        int k = 0;
        for (int j = i; j < n; j++)
            if (!taken[j] && gparts[j].stream == gparts[i].stream) { one[k++] = gparts[j]; taken[j] = 1; }
        ncclResult_t r = launch(one, k);
        if (r && !ret) ret = r;
    }
    for (int i = 0; i < n && !ret; i++)
        if (!gparts[i].c->blocking) {
            launched(gparts[i].c);
            nonblocking_ops = 1;
        }
    free(taken);
    free(one);
    ngparts = 0;
    group_err = ncclSuccess;
    if (!ret && (nonblocking_init || nonblocking_ops)) return ncclInProgress;
    return ret;
}

EXPORT ncclResult_t ncclGroupEnd(void) {
    if (group_depth <= 0) {
        set_err("fake NCCL: ncclGroupEnd without ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--group_depth > 0) return ncclSuccess;
    return flush_group();
}

static ncclResult_t enqueue_checked(part p);

static ncclResult_t enqueue(part p) {
    ncclResult_t r = need_driver();
    if (r) return r;
    comm *c = p.c;
    if (!c) {
        set_err("fake NCCL: NULL communicator");
        return ncclInvalidArgument;
    }
    int ok = enter(c, "a collective or send/receive");
    if (ok) r = enqueue_checked(p);
    leave(c);
    return ok ? r : ncclInternalError;
}

static ncclResult_t enqueue_checked(part p) {
    comm *c = p.c;
    ncclResult_t r;
    if ((r = ready(c))) return r;
    if (c->aborted) {
        set_err("fake NCCL: communicator aborted");
        return ncclInvalidUsage;
    }
    if (p.dtype < 0 || p.dtype >= NTYPES) {
        set_err("fake NCCL: data type %d not supported", p.dtype);
        return ncclInvalidArgument;
    }
    if (p.op < 0 || p.op >= NREDOPS) {
        set_err("fake NCCL: reduction %d not supported", p.op);
        return ncclInvalidArgument;
    }
    size_t b = p.count * tsize[p.dtype];
    if (p.kind == K_RS) b *= c->nranks;
    if (b > c->cap) {
        set_err("fake NCCL: %zu bytes exceed FAKENCCL_BUF_BYTES=%llu", b, (unsigned long long)c->cap);
        return ncclInvalidArgument;
    }
    if ((p.kind == K_BCAST || p.kind == K_REDUCE) && (p.root < 0 || p.root >= c->nranks)) {
        set_err("fake NCCL: root %d out of range [0, %d)", p.root, c->nranks);
        return ncclInvalidArgument;
    }
    if ((p.kind == K_SEND || p.kind == K_RECV) && (p.peer < 0 || p.peer >= c->nranks)) {
        set_err("fake NCCL: peer %d out of range [0, %d)", p.peer, c->nranks);
        return ncclInvalidArgument;
    }
    if (p.kind == K_SEND) p.seq = ++c->send_seq[p.peer];
    else if (p.kind == K_RECV) p.seq = ++c->recv_seq[p.peer];
    else p.seq = ++c->coll_seq;
    if (group_depth > 0) {
        if (ngparts == capgparts) {
            capgparts = capgparts ? 2 * capgparts : 16;
            gparts = realloc(gparts, capgparts * sizeof *gparts);
        }
        gparts[ngparts++] = p;
        return ncclSuccess;
    }
    if ((r = launch(&p, 1))) return r;
    if (c->blocking) return ncclSuccess;
    launched(c);
    return ncclInProgress;
}

#define PART(...) ((part){__VA_ARGS__})

EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int t, int op, comm *c, void *st) {
    return enqueue(PART(.kind = K_ALLREDUCE, .c = c, .send = s, .recv = r, .count = n, .dtype = t, .op = op, .stream = st));
}
EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int t, int root, comm *c, void *st) {
    return enqueue(PART(.kind = K_BCAST, .c = c, .send = s, .recv = r, .count = n, .dtype = t, .root = root, .stream = st));
}
EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, comm *c, void *st) {
    return enqueue(PART(.kind = K_REDUCE, .c = c, .send = s, .recv = r, .count = n, .dtype = t, .op = op, .root = root, .stream = st));
}
EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int t, comm *c, void *st) {
    return enqueue(PART(.kind = K_ALLGATHER, .c = c, .send = s, .recv = r, .count = n, .dtype = t, .stream = st));
}
EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, comm *c, void *st) {
    return enqueue(PART(.kind = K_RS, .c = c, .send = s, .recv = r, .count = n, .dtype = t, .op = op, .stream = st));
}
EXPORT ncclResult_t ncclSend(const void *s, size_t n, int t, int peer, comm *c, void *st) {
    return enqueue(PART(.kind = K_SEND, .c = c, .send = s, .count = n, .dtype = t, .peer = peer, .stream = st));
}
EXPORT ncclResult_t ncclRecv(void *r, size_t n, int t, int peer, comm *c, void *st) {
    return enqueue(PART(.kind = K_RECV, .c = c, .recv = r, .count = n, .dtype = t, .peer = peer, .stream = st));
}

/* ------------------------------------------------------------ communicators */

static void uid_name(const ncclUniqueId *id, char *out, size_t n) {
    static const char hex[] = "0123456789abcdef";
    char h[33];
    for (int i = 0; i < 16; i++) {
        h[2 * i] = hex[((unsigned char)id->internal[8 + i]) >> 4];
        h[2 * i + 1] = hex[((unsigned char)id->internal[8 + i]) & 15];
    }
    h[32] = 0;
    snprintf(out, n, "/fakenccl-%s", h);
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, "FAKENCCL", 8);
    if (getrandom(id->internal + 8, 16, 0) != 16) {
        set_err("fake NCCL: getrandom: %s", strerror(errno));
        return ncclSystemError;
    }
    return ncclSuccess;
}

/* config_blocking reads ncclConfig_t.blocking as NCCL does: by the size and
 * version the caller wrote, NCCL_CONFIG_UNDEF_INT meaning the default (1). */
static ncclResult_t config_blocking(const void *cfg, int *blocking) {
    *blocking = 1;
    if (!cfg) return ncclSuccess;
    size_t size;
    unsigned magic, version;
    memcpy(&size, cfg, 8);
    memcpy(&magic, (const char *)cfg + 8, 4);
    memcpy(&version, (const char *)cfg + 12, 4);
    if (magic != 0xcafebeefu) {
        set_err("fake NCCL: ncclConfig_t not initialized (magic %#x)", magic);
        return ncclInvalidArgument;
    }
    int b;
    if (size >= 20 && version >= 21400) {
        memcpy(&b, (const char *)cfg + 16, 4);
        if (b != INT_MIN) *blocking = b != 0;
    }
    return ncclSuccess;
}

static ncclResult_t init_rank(comm **out, const char *name, int nranks, int rank, int dev, int blocking) {
    comm *c = calloc(1, sizeof *c);
    c->blocking = blocking;
    ncclResult_t r = join_register(c, name, nranks, rank, dev);
    if (r) {
        if (c->base) munmap(c->base, c->size);
        free(c);
        return r;
    }
    *out = c;
    if (group_depth > 0) {
        if (nginits == capginits) {
            capginits = capginits ? 2 * capginits : 8;
            ginits = realloc(ginits, capginits * sizeof *ginits);
        }
        ginits[nginits++] = c;
        c->async = ncclInProgress;
        return ncclSuccess;
    }
    if (blocking) return blocking_join(c);
    c->async = ncclInProgress;
    c->refs++;
    pthread_t t;
    pthread_create(&t, NULL, join_thread, c);
    pthread_detach(t);
    return ncclInProgress;
}

EXPORT ncclResult_t ncclCommInitRankScalable(comm **out, int nranks, int rank, int nid, ncclUniqueId *ids, void *cfg) {
    ncclResult_t r = need_driver();
    if (r) return r;
    if (!out || !ids || nid != 1) {
        set_err("fake NCCL: ncclCommInitRankScalable needs a communicator pointer and exactly one unique id (got %d)", nid);
        return ncclInvalidArgument;
    }
    *out = NULL;
    if (memcmp(ids[0].internal, "FAKENCCL", 8) != 0) {
        set_err("fake NCCL: the unique id was not made by this library");
        return ncclInvalidArgument;
    }
    int blocking, dev = 0;
    if ((r = config_blocking(cfg, &blocking))) return r;
    if (cu_get_device(&dev) != 0) {
        set_err("fake NCCL: no current CUDA context (cuCtxGetDevice failed)");
        return ncclUnhandledCudaError;
    }
    char name[200];
    uid_name(&ids[0], name, sizeof name);
    return init_rank(out, name, nranks, rank, dev, blocking);
}

EXPORT ncclResult_t ncclCommInitRankConfig(comm **out, int nranks, ncclUniqueId id, int rank, void *cfg) {
    return ncclCommInitRankScalable(out, nranks, rank, 1, &id, cfg);
}

EXPORT ncclResult_t ncclCommInitRank(comm **out, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankScalable(out, nranks, rank, 1, &id, NULL);
}

EXPORT ncclResult_t ncclCommInitAll(comm **comms, int ndev, const int *devlist) {
    ncclResult_t r = need_driver();
    if (r) return r;
    if (!comms || ndev < 1) {
        set_err("fake NCCL: ncclCommInitAll needs ndev >= 1 (got %d)", ndev);
        return ncclInvalidArgument;
    }
    ncclUniqueId id;
    if ((r = ncclGetUniqueId(&id))) return r;
    char name[200];
    uid_name(&id, name, sizeof name);
    for (int i = 0; i < ndev; i++) {
        comms[i] = calloc(1, sizeof(comm));
        comms[i]->blocking = 1;
        if ((r = join_register(comms[i], name, ndev, i, devlist ? devlist[i] : i))) return r;
    }
    for (int i = 0; i < ndev; i++) {
        if ((r = join_wait(comms[i]))) return r;
        comms[i]->async = ncclSuccess;
    }
    return ncclSuccess;
}

static ncclResult_t split(comm *c, int color, int key, comm **out, void *cfg);

EXPORT ncclResult_t ncclCommSplit(comm *c, int color, int key, comm **out, void *cfg) {
    if (!c || !out) return ncclInvalidArgument;
    *out = NULL;
    int ok = enter(c, "ncclCommSplit");
    ncclResult_t r = ok ? ready(c) : ncclInternalError;
    if (ok && !r) r = split(c, color, key, out, cfg);
    leave(c);
    return r;
}

static ncclResult_t split(comm *c, int color, int key, comm **out, void *cfg) {
    int blocking = c->blocking;
    ncclResult_t r;
    if (cfg && (r = config_blocking(cfg, &blocking))) return r;
    /* Exchange (color, key) over the control slots, on the host. */
    uint64_t seq = ++c->ctl_seq;
    for (;;) {
        if (broken(c)) {
            set_err("fake NCCL: split of a broken communicator");
            return c->async ? c->async : ncclInvalidUsage;
        }
        int ok = 1;
        for (int q = 0; q < c->nranks; q++)
            if (__atomic_load_n(&rs(c, q)->ctl_consumed, __ATOMIC_ACQUIRE) < seq - 1) ok = 0;
        if (ok) break;
        check_peers(c);
        usleep(100);
    }
    rslot *me = rs(c, c->rank);
    me->ctl[0] = color;
    me->ctl[1] = key;
    __atomic_store_n(&me->ctl_posted, seq, __ATOMIC_RELEASE);
    for (;;) {
        if (broken(c)) {
            set_err("fake NCCL: split of a broken communicator");
            return c->async ? c->async : ncclInvalidUsage;
        }
        int ok = 1;
        for (int q = 0; q < c->nranks; q++)
            if (__atomic_load_n(&rs(c, q)->ctl_posted, __ATOMIC_ACQUIRE) < seq) ok = 0;
        if (ok) break;
        check_peers(c);
        usleep(100);
    }
    int64_t colors[MAXRANKS], keys[MAXRANKS];
    for (int q = 0; q < c->nranks; q++) {
        colors[q] = rs(c, q)->ctl[0];
        keys[q] = rs(c, q)->ctl[1];
    }
    __atomic_store_n(&me->ctl_consumed, seq, __ATOMIC_RELEASE);
    /* Fault injection: FAKENCCL_SPLIT_DELAY_MS holds the return of rank
     * FAKENCCL_SPLIT_DELAY_RANK (of the communicator split) after the
     * exchange, as a rank descheduled there would be: the others are done
     * with the split and may already have left. */
    const char *dms = getenv("FAKENCCL_SPLIT_DELAY_MS"), *drk = getenv("FAKENCCL_SPLIT_DELAY_RANK");
    if (dms && drk && atoi(drk) == c->rank) usleep((useconds_t)atoi(dms) * 1000);
    int nsplit = ++c->nsplit;
    if (color < 0) return ncclSuccess; /* NCCL_SPLIT_NOCOLOR */
    int n = 0, newrank = 0;
    for (int q = 0; q < c->nranks; q++) {
        if (colors[q] != color) continue;
        n++;
        if (keys[q] < key || (keys[q] == key && q < c->rank)) newrank++;
    }
    char name[200];
    snprintf(name, sizeof name, "%.150s.%d.%d", c->name, nsplit, color);
    return init_rank(out, name, n, newrank, c->dev, blocking);
}

EXPORT ncclResult_t ncclCommGetAsyncError(comm *c, ncclResult_t *r) {
    if (!c || !r) return ncclInvalidArgument;
    if (c->blocking) {
        /* NCCL's only reads the error state (no launch thread to join):
         * any thread may ask at any time, as torch.distributed's watchdog
         * does while the main thread issues operations. */
        if (c->inflight > 0) check_peers(c);
        *r = (ncclResult_t)__atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
        return ncclSuccess;
    }
    int ok = enter(c, "ncclCommGetAsyncError");
    if (c->inflight > 0) check_peers(c);
    if (ok && c->launching && __atomic_load_n(&c->async, __ATOMIC_ACQUIRE) == ncclInProgress && ++c->polls >= 2) {
        usleep(100); /* joining NCCL's launch thread */
        c->launching = 0;
        __atomic_store_n(&c->async, ncclSuccess, __ATOMIC_RELEASE);
    }
    int a = __atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
    if (a == ncclSuccess && c->finalizing && c->inflight > 0) a = ncclInProgress;
    leave(c);
    *r = (ncclResult_t)a;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommFinalize(comm *c) {
    if (!c) return ncclInvalidArgument;
    int ok = enter(c, "ncclCommFinalize");
    ncclResult_t r = ok ? ready(c) : ncclInternalError;
    pin(c); /* held to the end: an abort from another thread may come */
    leave(c);
    if (r) {
        release(c);
        return r;
    }
    c->finalizing = 1;
    if (!c->blocking) {
        r = c->inflight > 0 ? ncclInProgress : ncclSuccess;
        release(c);
        return r;
    }
    while (c->inflight > 0 && !broken(c)) {
        pthread_mutex_lock(&mu);
        void *s = NULL;
        for (batch *b = pending; b; b = b->next)
            for (int i = 0; i < b->n; i++)
                if (b->parts[i].c == c) s = b->stream;
        pthread_mutex_unlock(&mu);
        if (s) cu_stream_query(s);
        usleep(50);
    }
    /* An abort from another thread ends the wait, as NCCL's. */
    ncclResult_t res = !broken(c) ? ncclSuccess : c->aborted ? ncclInvalidUsage : (ncclResult_t)c->async;
    if (c->aborted) set_err("fake NCCL: communicator aborted during ncclCommFinalize");
    release(c);
    return res;
}

EXPORT ncclResult_t ncclCommDestroy(comm *c) {
    if (!c) return ncclInvalidArgument;
    release(c);
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommAbort(comm *c) {
    if (!c) return ncclInvalidArgument;
    c->aborted = 1;
    shm_unlink(c->name);
    release(c);
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCount(const comm *c, int *n) {
    if (!c || !n) return ncclInvalidArgument;
    *n = c->nranks;
    return ncclSuccess;
}
EXPORT ncclResult_t ncclCommCuDevice(const comm *c, int *d) {
    if (!c || !d) return ncclInvalidArgument;
    *d = c->dev;
    return ncclSuccess;
}
EXPORT ncclResult_t ncclCommUserRank(const comm *c, int *r) {
    if (!c || !r) return ncclInvalidArgument;
    *r = c->rank;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGetVersion(int *v) {
    if (!v) return ncclInvalidArgument;
    *v = 22800;
    return ncclSuccess;
}

EXPORT const char *ncclGetErrorString(ncclResult_t r) {
    static const char *msg[] = {"no error", "unhandled cuda error", "unhandled system error", "internal error",
                                "invalid argument", "invalid usage", "remote process exited or there was a network error",
                                "NCCL operation in progress", "timeout"};
    return (unsigned)r < ncclNumResults ? msg[r] : "unknown result code";
}

EXPORT const char *ncclGetLastError(comm *c) {
    (void)c;
    return last_err;
}
