// memcpy_bw: the CUDA C baseline for `dlbridge bandwidth`.
//
// It times cudaMemcpy between host and device memory for pinned
// (cudaMallocHost) and pageable (malloc, touched first) host buffers, in both
// directions, for sizes from 4 KiB to 1 GiB (powers of 4), and prints one
// tab-separated row per measurement:
//
//   # memcpy_bw v1 device="NVIDIA H100 80GB HBM3" driver=13000 runtime=13000
//   size	path	dir	gbps
//   4096	pinned	h2d	1.234
//   ...
//
// `dlbridge bandwidth -baseline FILE` reads this table and prints its
// figures beside its own. Lines starting with '#' are comments. GB/s is
// 1e9 bytes per second of wall-clock time over back-to-back synchronous
// cudaMemcpy calls (the same way dlbridge times its own transfers), the best
// of three rounds.
//
// Build and run on the GPU machine:
//   nvcc -O2 -o memcpy_bw bench/cuda/memcpy_bw.cu && ./memcpy_bw > baseline.tsv
// Options: -max BYTES (largest size, default 1 GiB), -min BYTES (default 4 KiB),
// -device N (default 0).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(call)                                                           \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      fprintf(stderr, "memcpy_bw: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
              cudaGetErrorString(e_));                                        \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

// seconds per cudaMemcpy of n bytes, best of three rounds of reps copies.
static double time_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  // Enough repetitions that a round moves at least 1 GiB (and at least 3).
  size_t reps = (size_t(1) << 30) / n;
  if (reps < 3) reps = 3;
  if (reps > 2000) reps = 2000;
  CHECK(cudaMemcpy(dst, src, n, kind));  // warm-up
  double best = 1e30;
  for (int round = 0; round < 3; round++) {
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < reps; i++) CHECK(cudaMemcpy(dst, src, n, kind));
    auto t1 = std::chrono::steady_clock::now();
    double s = std::chrono::duration<double>(t1 - t0).count() / double(reps);
    if (s < best) best = s;
  }
  return best;
}

int main(int argc, char** argv) {
  size_t minSize = size_t(4) << 10, maxSize = size_t(1) << 30;
  int dev = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-max") && i + 1 < argc) maxSize = strtoull(argv[++i], 0, 0);
    else if (!strcmp(argv[i], "-min") && i + 1 < argc) minSize = strtoull(argv[++i], 0, 0);
    else if (!strcmp(argv[i], "-device") && i + 1 < argc) dev = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: memcpy_bw [-min BYTES] [-max BYTES] [-device N]\n");
      return 2;
    }
  }
  if (minSize == 0 || maxSize < minSize) {
    fprintf(stderr, "memcpy_bw: need 0 < -min <= -max\n");
    return 2;
  }
  CHECK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  int drv = 0, rt = 0;
  CHECK(cudaDriverGetVersion(&drv));
  CHECK(cudaRuntimeGetVersion(&rt));
  printf("# memcpy_bw v1 device=\"%s\" driver=%d runtime=%d\n", prop.name, drv, rt);
  printf("size\tpath\tdir\tgbps\n");
  fflush(stdout);

  void *d = 0, *pinned = 0;
  CHECK(cudaMalloc(&d, maxSize));
  CHECK(cudaMallocHost(&pinned, maxSize));
  char* pageable = (char*)malloc(maxSize);
  if (!pageable) {
    fprintf(stderr, "memcpy_bw: malloc(%zu) failed\n", maxSize);
    return 1;
  }
  memset(pageable, 1, maxSize);  // touch every page: no first-touch faults in the timing
  memset(pinned, 1, maxSize);
  CHECK(cudaMemset(d, 2, maxSize));

  for (size_t n = minSize; n <= maxSize; n *= 4) {
    struct {
      const char* path;
      void* host;
    } hosts[2] = {{"pinned", pinned}, {"pageable", pageable}};
    for (auto& h : hosts) {
      double up = time_copy(d, h.host, n, cudaMemcpyHostToDevice);
      printf("%zu\t%s\th2d\t%.3f\n", n, h.path, double(n) / up / 1e9);
      double down = time_copy(h.host, d, n, cudaMemcpyDeviceToHost);
      printf("%zu\t%s\td2h\t%.3f\n", n, h.path, double(n) / down / 1e9);
      fflush(stdout);
    }
    if (n > maxSize / 4) break;  // n*4 would pass maxSize (or overflow)
  }
  CHECK(cudaFree(d));
  CHECK(cudaFreeHost(pinned));
  free(pageable);
  return 0;
}
