// CUDA implementation of kubetune::fp8_mm_add_ (kernels/fp8.h): out += a b^T as one cuBLASLt FP8
// GEMM with row-wise ("outer vector") scales that reads `out` as its C matrix (beta = 1).
// at::_scaled_mm makes the same GEMM with beta = 0 only, so a sum into an existing tensor (the
// LoRA sum, an input gradient's other parts) cost a separate pass reading and writing all of it.
//
// The call mirrors LibTorch's at::cuda::blas::scaled_gemm for row-wise scales: cuBLASLt is
// column-major, so the row-major product out[M, N] = a[M, K] b[N, K]^T is computed as
// out^T = b a^T, with b as the transposed first operand (its scales along cuBLASLt's M) and a as
// the second. LibTorch's cuBLASLt handle and workspace are used.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>
#include <torch/library.h>

#include <cstdint>

namespace kubetune::kernels {
namespace {

void check_cublas(cublasStatus_t status, const char* what) {
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "fp8_mm_add_: ", what,
              " failed: ", cublasLtGetStatusString(status));
}

// cuBLASLt's descriptors, destroyed with their owners.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  MatmulDesc() {
    check_cublas(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(d); }
  template <typename V>
  void set(cublasLtMatmulDescAttributes_t attribute, const V& value) {
    check_cublas(cublasLtMatmulDescSetAttribute(d, attribute, &value, sizeof(value)), "attribute");
  }
};

struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  Layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
    check_cublas(cublasLtMatrixLayoutCreate(&d, type, rows, cols, ld), "layout");
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(d); }
};

struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  explicit Preference(size_t workspace) {
    check_cublas(cublasLtMatmulPreferenceCreate(&d), "preference");
    set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace);
  }
  ~Preference() { cublasLtMatmulPreferenceDestroy(d); }
  template <typename V>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, const V& value) {
    check_cublas(cublasLtMatmulPreferenceSetAttribute(d, attribute, &value, sizeof(value)),
                 "preference");
  }
};

// The alignment `p` has, in bytes, up to 256: cuBLASLt assumes 256 unless told, and a tensor that
// is a view at an offset (a chunk of rows) has less.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  uint32_t alignment = 1;
  while (alignment < 256 && address % (2 * alignment) == 0) alignment *= 2;
  return alignment;
}

cudaDataType_t cuda_type_of(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return CUDA_R_16BF;
    case at::kHalf:
      return CUDA_R_16F;
    case at::kFloat:
      return CUDA_R_32F;
    default:
      TORCH_CHECK(false, "fp8_mm_add_: out must be bf16, fp16 or fp32, got ", t);
  }
}

void fp8_mm_add_cuda(const at::Tensor& out, const at::Tensor& a, const at::Tensor& a_scales,
                     const at::Tensor& b, const at::Tensor& b_scales, bool fast_accumulate) {
  c10::cuda::CUDAGuard guard(out.device());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (m == 0 || n == 0 || k == 0) return;  // nothing to add
  MatmulDesc desc;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, b_scales.data_ptr());
  desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, a_scales.data_ptr());
  const cublasLtMatmulMatrixScale_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, outer);
  desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, outer);
  desc.set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(fast_accumulate));
  // b [N, K] row-major is K x N column-major, transposed; a [M, K] is K x M; out [M, N] is N x M.
  const Layout a_layout(CUDA_R_8F_E4M3, k, n, k), b_layout(CUDA_R_8F_E4M3, k, m, k),
      out_layout(cuda_type_of(out.scalar_type()), n, m, n);
  const size_t workspace_size = at::cuda::getCUDABlasLtWorkspaceSize();
  Preference preference(workspace_size);
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(b.data_ptr()));
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(a.data_ptr()));
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(out.data_ptr()));
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(out.data_ptr()));
  cublasLtHandle_t handle = at::cuda::getCurrentCUDABlasLtHandle();
  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  check_cublas(cublasLtMatmulAlgoGetHeuristic(handle, desc.d, a_layout.d, b_layout.d, out_layout.d,
                                              out_layout.d, preference.d, 1, &heuristic, &found),
               "heuristic");
  TORCH_CHECK(found > 0, "fp8_mm_add_: cuBLASLt has no FP8 GEMM for ", m, "x", k, " times ", k, "x",
              n, " added to a ", out.scalar_type(), " matrix");
  const float alpha = 1.f, beta = 1.f;
  check_cublas(cublasLtMatmul(handle, desc.d, &alpha, b.data_ptr(), a_layout.d, a.data_ptr(),
                              b_layout.d, &beta, out.data_ptr(), out_layout.d, out.data_ptr(),
                              out_layout.d, &heuristic.algo, at::cuda::getCUDABlasLtWorkspace(),
                              workspace_size, at::cuda::getCurrentCUDAStream()),
               "cublasLtMatmul");
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) { m.impl("fp8_mm_add_", fp8_mm_add_cuda); }

}  // namespace kubetune::kernels
