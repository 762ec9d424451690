// The functions bench_gofunc.py calls through apache/tvm-ffi, beside the same
// functions in dlbridge (pytest.noop2, pytest.noop9, pytest.nothing,
// gofunc.scale) and in nanobind (nanobind_peers.cpp). Exported the way
// tvm-ffi's quickstart exports a function, loaded with tvm_ffi.load_module.
// Built by scripts/build-peers.sh.
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/tvm_ffi.h>

namespace dlbridge_peers {

using tvm::ffi::TensorView;

// The empty bodies: what is left is the call itself (tvm-ffi's Python
// layer converts each tensor and, for torch CUDA tensors, sets the caller's
// stream before the body runs).
void Noop2(TensorView, TensorView) {}

void Noop9(TensorView, TensorView, TensorView, TensorView, TensorView, TensorView, TensorView,
           TensorView, TensorView) {}

void Nothing() {}

// StreamOf returns the stream tvm-ffi set for x's device during the call:
// bench_gofunc.py checks it is the caller's, so that the empty functions
// are measured doing the stream work a kernel launch needs.
int64_t StreamOf(TensorView x) {
  return reinterpret_cast<int64_t>(TVMFFIEnvGetStream(x.device().device_type, x.device().device_id));
}

// Scale writes x * factor into out, with the checks gofunc.scale's schema
// makes ("out: float32 [N] C writable, x: float32 [N] C"), on host memory.
void Scale(TensorView out, TensorView x, double factor) {
  const DLDataType f32{kDLFloat, 32, 1};
  TVM_FFI_CHECK(out.device().device_type == kDLCPU && x.device().device_type == kDLCPU, ValueError)
      << "scale: want host arrays";
  TVM_FFI_CHECK(out.dtype() == f32 && x.dtype() == f32, TypeError) << "scale: want float32";
  TVM_FFI_CHECK(out.ndim() == 1 && x.ndim() == 1 && out.size(0) == x.size(0), ValueError)
      << "scale: want two 1-d arrays of one length";
  TVM_FFI_CHECK(out.IsContiguous() && x.IsContiguous(), ValueError) << "scale: want contiguous";
  float* o = static_cast<float*>(out.data_ptr());
  const float* in = static_cast<const float*>(x.data_ptr());
  const float f = static_cast<float>(factor);
  for (int64_t i = 0, n = x.size(0); i < n; i++) o[i] = in[i] * f;
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(noop2, dlbridge_peers::Noop2)
TVM_FFI_DLL_EXPORT_TYPED_FUNC(noop9, dlbridge_peers::Noop9)
TVM_FFI_DLL_EXPORT_TYPED_FUNC(nothing, dlbridge_peers::Nothing)
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scale, dlbridge_peers::Scale)
TVM_FFI_DLL_EXPORT_TYPED_FUNC(stream_of, dlbridge_peers::StreamOf)

}  // namespace dlbridge_peers
