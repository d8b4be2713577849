// GEMMs through cuBLASLt for the linear layers: y[M][N] = x[M][K] W[N][K]^T, bf16 in and
// out, fp32 accumulation. In cuBLAS's column-major terms that is Y^T (N x M) = W (as K x N,
// transposed) times X^T (K x M): "TN" with m = N, n = M, k = K.
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "kernels.h"

#ifdef SLUICE_CAL_HAVE_CUBLASLT
#include <cublasLt.h>

namespace sluice::calib::gpu {

namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cuBLASLt ") + what + " failed (status " + std::to_string(int(s)) + ")");
}

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

constexpr std::size_t kWorkspaceBytes = 32u << 20;

}  // namespace

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<std::tuple<int, int, int>, Plan> plans;
};

Gemm::Gemm() : impl_(new Impl) {
  check(cublasLtCreate(&impl_->handle), "create");
  if (cudaMalloc(&impl_->workspace, kWorkspaceBytes) != cudaSuccess) {
    cublasLtDestroy(impl_->handle);
    delete impl_;
    throw std::runtime_error("cuBLASLt workspace allocation failed");
  }
}

Gemm::~Gemm() {
  for (auto& [shape, p] : impl_->plans) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  cudaFree(impl_->workspace);
  cublasLtDestroy(impl_->handle);
  delete impl_;
}

void Gemm::prepare(int m, int k, int n) {
  const auto key = std::make_tuple(m, k, n);
  if (impl_->plans.count(key)) return;
  Plan p;
  check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
  check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
  check(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, n, k), "layout W");
  check(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, m, k), "layout x");
  check(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, n, m, n), "layout y");
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const std::uint64_t ws = kWorkspaceBytes;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
        "workspace preference");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const auto st = cublasLtMatmulAlgoGetHeuristic(impl_->handle, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    throw std::runtime_error("cuBLASLt has no algorithm for M=" + std::to_string(m) + " K=" + std::to_string(k) +
                             " N=" + std::to_string(n));
  p.algo = result.algo;
  impl_->plans.emplace(key, p);
}

cudaError_t Gemm::run(const bf16_t* x, const bf16_t* w, bf16_t* y, int m, int k, int n, cudaStream_t stream) {
  const auto it = impl_->plans.find(std::make_tuple(m, k, n));
  if (it == impl_->plans.end()) return cudaErrorInvalidValue;
  const Plan& p = it->second;
  const float alpha = 1.f, beta = 0.f;
  const auto st = cublasLtMatmul(impl_->handle, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo,
                                 impl_->workspace, kWorkspaceBytes, stream);
  return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

std::string Gemm::version() { return std::to_string(cublasLtGetVersion()); }

}  // namespace sluice::calib::gpu
#else
// Built without cuBLASLt (CMake did not find it): every GEMM request fails with this message,
// so the GEMM checks fail and gemm.csv / ceilings.csv are not written.
namespace sluice::calib::gpu {

struct Gemm::Impl {};
Gemm::Gemm() : impl_(nullptr) {}
Gemm::~Gemm() = default;
void Gemm::prepare(int, int, int) {
  throw std::runtime_error("sluice-calibrate was built without cuBLASLt (not found with the CUDA toolkit)");
}
cudaError_t Gemm::run(const bf16_t*, const bf16_t*, bf16_t*, int, int, int, cudaStream_t) {
  return cudaErrorNotSupported;
}
std::string Gemm::version() { return "not built"; }

}  // namespace sluice::calib::gpu
#endif
