// carve tests: the half-precision part of the CUDA host emulation (included at the end of
// cuda_emu.h): the __half type of cuda_fp16.h with its conversions, and the cuBLAS mixed-
// precision GEMMs the fp16 runtime (runtime/carve_cuda_f16.cu) calls.
//
//   * __half: 16 bits, IEEE binary16. __float2half / __float2half_rn round to nearest even
//     (overflow to inf, NaN kept quiet), __half2float widens exactly, as cuda_fp16.h on a GPU
//     and on the host; __half_as_ushort / __ushort_as_half. No half arithmetic operators:
//     carve's kernels compute in float and store halves.
//   * cublasGemmEx, cublasGemmStridedBatchedEx with A and B CUDA_R_16F, C CUDA_R_16F or
//     CUDA_R_32F, computeType CUBLAS_COMPUTE_32F (alpha, beta float): the operands widened
//     exactly to float, the host GEMM's float accumulation (host_sgemm, as cublasSgemm here),
//     alpha and beta applied in float, one rounding when C is half. Tensor cores accumulate
//     half products in float32 as well; the order of summation differs, as between GPUs.
//     Other type combinations: CUBLAS_STATUS_NOT_SUPPORTED.
//   * The half operands of nvcuda::wmma (m16n16k16, fp32 accumulators; cuda_emu.h has the rest):
//     halves widened exactly.

#ifndef CARVE_CUDA_EMU_F16_H
#define CARVE_CUDA_EMU_F16_H

struct __half {
  unsigned short x;
};

namespace carve_emu {

// binary32 -> binary16, round to nearest even.
inline unsigned short f32_to_f16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const unsigned short sign = (unsigned short)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf, or NaN (quiet, top payload bits kept)
    return (unsigned short)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u));
  }
  if (a >= 0x477ff000u) {  // >= 65520 (half-way above 65504, whose last bit is odd): inf
    return (unsigned short)(sign | 0x7c00u);
  }
  if (a < 0x38800000u) {  // below 2^-14: a multiple of 2^-24 (exact scaling, then rint: nearest even)
    float v;
    std::memcpy(&v, &a, 4);
    return (unsigned short)(sign | (unsigned short)std::nearbyint(v * 16777216.0f));
  }
  uint32_t h = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) {
    h++;  // a carry into the exponent is right (up to 0x7bff + 1 = inf excluded above)
  }
  return (unsigned short)(sign | h);
}

// binary16 -> binary32, exact.
inline float f16_bits_to_f32(unsigned short h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1fu) {
    u = sign | 0x7f800000u | man << 13;
  } else if (exp != 0) {
    u = sign | (exp + 112u) << 23 | man << 13;
  } else if (man == 0) {
    u = sign;
  } else {
    exp = 113u;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      exp--;
    }
    u = sign | exp << 23 | (man & 0x3ffu) << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace carve_emu

inline __half __float2half(float f) { return __half{carve_emu::f32_to_f16_bits(f)}; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline float __half2float(__half h) { return carve_emu::f16_bits_to_f32(h.x); }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }

namespace carve_emu {

// Every half's float32 value (f16_bits_to_f32 of each bit pattern), built at start-up: one load per operand of the
// emulated wmma mma_sync, the hottest loop of the emulated fp16 convolutions, instead of the branchy widening.
inline const std::vector<float> f16_widened = [] {
  std::vector<float> t(65536);
  for (uint32_t h = 0; h < 65536; h++) t[h] = f16_bits_to_f32((unsigned short)h);
  return t;
}();

// wmma's half operands (cuda_emu.h's WmmaElem): stored as __half, read exactly.
template <>
struct WmmaElem<__half> {
  typedef __half storage;
  static float value(__half v) { return f16_widened[v.x]; }
};

}  // namespace carve_emu

// ---- cuBLAS mixed precision ----------------------------------------------------------------

// (cudaDataType_t, cublasComputeType_t and cublasGemmAlgo_t: cuda_emu.h)

namespace carve_emu {

// The `cols` columns of `rows` halves (column-major, leading dimension ld) widened to float, same layout.
inline void widen_half(const __half* src, int rows, int cols, int ld, std::vector<float>& dst) {
  dst.assign((size_t)ld * (cols > 0 ? cols - 1 : 0) + (size_t)rows, 0.0f);
  for (int j = 0; j < cols; j++) {
    for (int i = 0; i < rows; i++) dst[(size_t)j * ld + i] = __half2float(src[(size_t)j * ld + i]);
  }
}

}  // namespace carve_emu

inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void* alpha, const void* A, cudaDataType_t Atype,
                                                 int lda, long long strideA, const void* B, cudaDataType_t Btype,
                                                 int ldb, long long strideB, const void* beta, void* C,
                                                 cudaDataType_t Ctype, int ldc, long long strideC, int batch,
                                                 cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  (void)algo;
  if (!carve_emu::blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (Atype != CUDA_R_16F || Btype != CUDA_R_16F || (Ctype != CUDA_R_16F && Ctype != CUDA_R_32F) ||
      compute != CUBLAS_COMPUTE_32F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (!carve_emu::gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc, batch, alpha, beta)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool a_t = ta == CUBLAS_OP_T, b_t = tb == CUBLAS_OP_T;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const __half* a16 = static_cast<const __half*>(A);
  const __half* b16 = static_cast<const __half*>(B);
  const bool c_half = Ctype == CUDA_R_16F;
  return carve_emu::blas_enqueue(h, [=]() {
    std::vector<float> a, b, c((size_t)m * n);
    for (int q = 0; q < batch; q++) {
      carve_emu::widen_half(a16 + q * strideA, a_t ? k : m, a_t ? m : k, lda, a);
      carve_emu::widen_half(b16 + q * strideB, b_t ? n : k, b_t ? k : n, ldb, b);
      for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++) {
          const size_t at = (size_t)q * strideC + (size_t)j * ldc + i;
          const float prev =
              c_half ? __half2float(static_cast<const __half*>(C)[at]) : static_cast<const float*>(C)[at];
          c[(size_t)j * m + i] = be == 0.0f ? 0.0f : prev;
        }
      }
      carve_emu::host_sgemm(a_t, b_t, m, n, k, al, a.data(), lda, b.data(), ldb, be, c.data(), m);
      for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++) {
          const size_t at = (size_t)q * strideC + (size_t)j * ldc + i;
          const float v = c[(size_t)j * m + i];
          if (c_half) {
            static_cast<__half*>(C)[at] = __float2half(v);
          } else {
            static_cast<float*>(C)[at] = v;
          }
        }
      }
    }
  });
}

inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType_t Atype, int lda, const void* B,
                                   cudaDataType_t Btype, int ldb, const void* beta, void* C, cudaDataType_t Ctype,
                                   int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  if (Atype == CUDA_R_32F) {  // float32 operands (and TF32): cuda_emu.h
    return emu_gemm_ex_f32(h, ta, tb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, compute, algo);
  }
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc,
                                    0, 1, compute, algo);
}

#endif  // CARVE_CUDA_EMU_F16_H
