// The functions bench_gofunc.py calls through nanobind, beside the same
// functions in dlbridge and in tvm-ffi (tvmffi_peers.cc). Built by
// scripts/build-peers.sh.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

namespace nb = nanobind;

// Any array of any device: nanobind takes it through DLPack (or the buffer
// protocol) and checks nothing more, as tvm-ffi's TensorView.
using Any = nb::ndarray<>;
// gofunc.scale's schema: float32, one dimension, C order, host memory;
// out writable (a read-only array does not match a non-const element type).
using Out = nb::ndarray<float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using In = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

NB_MODULE(nanobind_peers, m) {
  m.def("noop2", [](Any, Any) {});
  m.def("noop9", [](Any, Any, Any, Any, Any, Any, Any, Any, Any) {});
  m.def("nothing", []() {});
  m.def("scale", [](Out out, In x, float factor) {
    if (out.shape(0) != x.shape(0)) throw nb::value_error("scale: want two 1-d arrays of one length");
    float* o = out.data();
    const float* in = x.data();
    for (size_t i = 0, n = x.shape(0); i < n; i++) o[i] = in[i] * factor;
  });
}
