// Checks carve_attention (Ultralytics Attention core) against a double-precision
// loop, within a bound of the kernel's float rounding: n = 1 and odd n (several
// row blocks, key counts that are not a multiple of the 32-key block), heads 1..3,
// odd key/head dims and head_dims that are not a multiple of the 32-channel
// accumulation chunk, strides wider than the channels for qkv, out and v_out,
// writes confined to each head's slice, scratch used only up to
// carve_attention_scratch_floats, and identical results with 0 or 2 threads.
// Every path the CPU has runs each case: the portable kernel (its target_clones)
// and, on x86-64, the AVX2 + FMA and AVX-512 intrinsics kernels, whose score
// blocks (24 keys + a last 8 or 16; 32 keys), weighted-sum chunks (24 or 32
// channels, masked tails) and 8 / 16-lane softmax get n, key counts and
// head_dims around those sizes; carve_attention itself (the path it picks) must
// equal the best path. The variants run by name (runtime/carve_attention_isa.h);
// the selector must pick each instruction set's. Bad arguments are refused with
// CARVE_ERR_INVALID_ARGUMENT and write nothing.

#include "carve_attention_isa.h"
#include "simd_paths.h"
#include "test_common.h"

// The variants this build has, by carve_isa (NULL: none).
static const carve_attention_fn k_variant[CARVE_TEST_ISAS] = CARVE_TEST_VARIANTS(carve_attention);

static const int k_levels = 3;  // the x86-64 levels; elsewhere only the portable one exists

static double worst[3];      // largest error / its float-rounding bound seen, per path
static double worst_rel[3];  // largest error / sum_j attn_j |v_j| seen, per path

static void run_path(const float* qkv, pthreadpool_t pool2, size_t n, size_t heads, size_t kd, size_t hd,
                     size_t qkv_pad, size_t out_pad, size_t v_pad, int simd, float* best_out);

static void run_case(test_rng* rng, pthreadpool_t pool2, size_t n, size_t heads, size_t kd,
                     size_t hd, size_t qkv_pad, size_t out_pad, size_t v_pad, float amplitude) {
  const size_t qkv_stride = heads * (2 * kd + hd) + qkv_pad, out_stride = heads * hd + out_pad;
  float* qkv = malloc(n * qkv_stride * sizeof(float));
  float* best = malloc(n * out_stride * sizeof(float));
  float* api = malloc(n * out_stride * sizeof(float));
  float* scratch = malloc(carve_attention_scratch_floats(n, heads, kd) * sizeof(float));
  CHECK(qkv && best && api && scratch);
  for (size_t i = 0; i < n * qkv_stride; i++) {
    qkv[i] = rng_normal(rng) * amplitude;
  }
  for (int simd = 0; simd < k_levels; simd++) {
    if (HAVE_VARIANT(k_variant, simd)) {
      run_path(qkv, pool2, n, heads, kd, hd, qkv_pad, out_pad, v_pad, simd, best);
    }
  }
  // The public entry point runs the best path.
  fill_canary(api, n * out_stride);
  CHECK(carve_attention(qkv, qkv_stride, n, heads, kd, hd, 1.0f / sqrtf((float)kd), api, out_stride, NULL, 0,
                        scratch, NULL) == CARVE_OK);
  CHECK(memcmp(api, best, n * out_stride * sizeof(float)) == 0);
  free(qkv);
  free(best);
  free(api);
  free(scratch);
}

static void run_path(const float* qkv, pthreadpool_t pool2, size_t n, size_t heads, size_t kd, size_t hd,
                     size_t qkv_pad, size_t out_pad, size_t v_pad, int simd, float* best_out) {
  const size_t per_head = 2 * kd + hd;
  const size_t qkv_stride = heads * per_head + qkv_pad;
  const size_t out_stride = heads * hd + out_pad, v_stride = heads * hd + v_pad;
  const float scale = 1.0f / sqrtf((float)kd);
  const size_t scratch_floats = carve_attention_scratch_floats(n, heads, kd);
  CHECK(scratch_floats >= n * heads);

  float* out0 = malloc(n * out_stride * sizeof(float));
  float* out2 = malloc(n * out_stride * sizeof(float));
  float* v0 = malloc(n * v_stride * sizeof(float));
  float* v2 = malloc(n * v_stride * sizeof(float));
  float* scratch = malloc((scratch_floats + 16) * sizeof(float));
  double* s = malloc(n * sizeof(double));
  double* err_s = malloc(n * sizeof(double));
  CHECK(out0 && out2 && v0 && v2 && scratch && s && err_s);
  fill_canary(out0, n * out_stride);
  fill_canary(out2, n * out_stride);
  fill_canary(v0, n * v_stride);
  fill_canary(v2, n * v_stride);
  fill_canary(scratch, scratch_floats + 16);

  CHECK(k_variant[simd](qkv, qkv_stride, n, heads, kd, hd, scale, out0, out_stride, v0, v_stride, scratch, NULL) ==
        CARVE_OK);
  for (size_t i = scratch_floats; i < scratch_floats + 16; i++) {
    CHECK(is_canary(scratch[i]));
  }
  CHECK(k_variant[simd](qkv, qkv_stride, n, heads, kd, hd, scale, out2, out_stride, v2, v_stride, scratch, pool2) ==
        CARVE_OK);
  CHECK(memcmp(out0, out2, n * out_stride * sizeof(float)) == 0);
  CHECK(memcmp(v0, v2, n * v_stride * sizeof(float)) == 0);

  // Against the exact result (double), within a first-order bound of float
  // rounding in the kernel (u = 2^-24 per operation; a sum of m terms in float
  // is off by at most m u times the sum of its terms' magnitudes):
  //   score s_j = (sum_d q_d k_jd) * scale: kd u sum_d |q_d k_jd| scale + 2 u |s_j|;
  //   p_j = exp(s_j - max): a relative error of e_j = err(s_j) + err(max) +
  //   u |s_j - max| + 2 u (exp_u10: 1 ulp), which moves out by at most 2 max_j e_j
  //   of magnitude = sum_j attn_j |v_j|;
  //   the softmax sum and the weighted sums (n terms each), the final product: (2 n + 8) u.
  const double u = 0x1p-24;
  for (size_t h = 0; h < heads; h++) {
    const float* base = qkv + h * per_head;
    for (size_t i = 0; i < n; i++) {
      double m = -INFINITY, err_m = 0.0;
      for (size_t j = 0; j < n; j++) {
        double dot = 0.0, abs_dot = 0.0;
        for (size_t d = 0; d < kd; d++) {
          const double t = (double)base[i * qkv_stride + d] * base[j * qkv_stride + kd + d];
          dot += t;
          abs_dot += fabs(t);
        }
        s[j] = dot * scale;
        err_s[j] = (double)kd * u * abs_dot * scale + 2.0 * u * fabs(s[j]);
        if (s[j] > m) {
          m = s[j];
          err_m = err_s[j];
        }
      }
      double sum = 0.0, e_max = 0.0;
      for (size_t j = 0; j < n; j++) {
        const double e = err_s[j] + err_m + u * fabs(s[j] - m) + 2.0 * u;
        e_max = e > e_max ? e : e_max;
        s[j] = exp(s[j] - m);
        sum += s[j];
      }
      for (size_t e = 0; e < hd; e++) {
        double ref = 0.0, magnitude = 0.0;
        for (size_t j = 0; j < n; j++) {
          const double v = base[j * qkv_stride + 2 * kd + e];
          ref += s[j] / sum * v;
          magnitude += s[j] / sum * fabs(v);
        }
        const float got = out0[i * out_stride + h * hd + e];
        const double err = fabs((double)got - ref);
        const double tol = magnitude * (2.0 * e_max + (2.0 * (double)n + 8.0) * u) + 1e-30;
        CHECK_MSG(err <= tol, "%s: n=%zu heads=%zu kd=%zu hd=%zu h=%zu i=%zu e=%zu got=%.9g ref=%.9g",
                  carve_isa_name((carve_isa)simd), n, heads, kd, hd, h, i, e, (double)got, ref);
        if (err / tol > worst[simd]) {
          worst[simd] = err / tol;
        }
        if (err / (magnitude + 1e-30) > worst_rel[simd]) {
          worst_rel[simd] = err / (magnitude + 1e-30);
        }
        CHECK(v0[i * v_stride + h * hd + e] == base[i * qkv_stride + 2 * kd + e]);
      }
    }
  }
  // Padding columns untouched.
  for (size_t i = 0; i < n; i++) {
    for (size_t c = heads * hd; c < out_stride; c++) {
      CHECK(is_canary(out0[i * out_stride + c]));
    }
    for (size_t c = heads * hd; c < v_stride; c++) {
      CHECK(is_canary(v0[i * v_stride + c]));
    }
  }

  // v_out may be NULL; out must not change.
  fill_canary(out2, n * out_stride);
  CHECK(k_variant[simd](qkv, qkv_stride, n, heads, kd, hd, scale, out2, out_stride, NULL, 0, scratch, pool2) ==
        CARVE_OK);
  CHECK(memcmp(out0, out2, n * out_stride * sizeof(float)) == 0);
  memcpy(best_out, out0, n * out_stride * sizeof(float));

  free(out0);
  free(out2);
  free(v0);
  free(v2);
  free(scratch);
  free(s);
  free(err_s);
}

// Bad arguments: CARVE_ERR_INVALID_ARGUMENT, nothing written.
static void test_refusals(void) {
  float qkv[4 * 12] = {0}, out[4 * 8], v[4 * 8], scratch[1024];
  fill_canary(out, 4 * 8);
  fill_canary(v, 4 * 8);
  const carve_status bad = CARVE_ERR_INVALID_ARGUMENT;
  // n 4, heads 2, key_dim 1, head_dim 4: qkv stride >= 12, out / v stride >= 8
  CHECK(carve_attention(NULL, 12, 4, 2, 1, 4, 1.0f, out, 8, v, 8, scratch, NULL) == bad);     // qkv
  CHECK(carve_attention(qkv, 12, 4, 2, 1, 4, 1.0f, NULL, 8, v, 8, scratch, NULL) == bad);     // out
  CHECK(carve_attention(qkv, 12, 4, 2, 1, 4, 1.0f, out, 8, v, 8, NULL, NULL) == bad);         // scratch
  CHECK(carve_attention(qkv, 12, 0, 2, 1, 4, 1.0f, out, 8, v, 8, scratch, NULL) == bad);      // n 0
  CHECK(carve_attention(qkv, 12, 4, 0, 1, 4, 1.0f, out, 8, v, 8, scratch, NULL) == bad);      // heads 0
  CHECK(carve_attention(qkv, 12, 4, 2, 0, 4, 1.0f, out, 8, v, 8, scratch, NULL) == bad);      // key_dim 0
  CHECK(carve_attention(qkv, 12, 4, 2, 1, 0, 1.0f, out, 8, v, 8, scratch, NULL) == bad);      // head_dim 0
  CHECK(carve_attention(qkv, 11, 4, 2, 1, 4, 1.0f, out, 8, v, 8, scratch, NULL) == bad);      // qkv stride
  CHECK(carve_attention(qkv, 12, 4, 2, 1, 4, 1.0f, out, 7, v, 8, scratch, NULL) == bad);      // out stride
  CHECK(carve_attention(qkv, 12, 4, 2, 1, 4, 1.0f, out, 8, v, 7, scratch, NULL) == bad);      // v stride
  for (size_t i = 0; i < 4 * 8; i++) {
    CHECK(is_canary(out[i]) && is_canary(v[i]));
  }
  CHECK(carve_attention(qkv, 12, 4, 2, 1, 4, 1.0f, out, 8, NULL, 7, scratch, NULL) == CARVE_OK);  // no v_out
  CHECK(out[0] == 0.0f && is_canary(v[0]));
}

int main(void) {
  CHECK_SELECT(carve_attention_select, k_variant);
  test_refusals();
  test_rng rng = {2024};
  pthreadpool_t pool2 = make_pool2();
  size_t cases = 0;
  //                   n  heads kd  hd  pads       amplitude
  run_case(&rng, pool2, 1, 1, 1, 1, 0, 0, 0, 1.0f), cases++;
  run_case(&rng, pool2, 1, 3, 2, 3, 1, 2, 3, 1.0f), cases++;
  run_case(&rng, pool2, 35, 1, 4, 8, 0, 0, 0, 1.0f), cases++;
  run_case(&rng, pool2, 35, 2, 3, 5, 7, 1, 2, 2.0f), cases++;
  run_case(&rng, pool2, 33, 3, 5, 7, 3, 5, 0, 1.0f), cases++;
  run_case(&rng, pool2, 20, 2, 32, 64, 0, 0, 0, 1.0f), cases++;
  run_case(&rng, pool2, 17, 1, 2, 130, 4, 3, 2, 1.0f), cases++;   // 8 chunks of v and 2 channels
  run_case(&rng, pool2, 100, 2, 32, 64, 64, 0, 0, 3.0f), cases++;  // peaky softmax
  run_case(&rng, pool2, 400, 2, 32, 64, 0, 128, 0, 1.0f), cases++; // 20x20 P5 at 640
  run_case(&rng, pool2, 400, 4, 32, 64, 5, 0, 3, 1.0f), cases++;   // yolo26s/m/l
  run_case(&rng, pool2, 100, 6, 32, 64, 0, 0, 0, 2.0f), cases++;   // yolo26x at 320
  run_case(&rng, pool2, 64, 1, 16, 32, 1, 1, 1, 1.0f), cases++;    // n a multiple of 64: no 32-key block
  run_case(&rng, pool2, 65, 2, 16, 128, 0, 0, 0, 1.0f), cases++;   // 96 padded keys: 64 + 32
  run_case(&rng, pool2, 97, 1, 32, 48, 2, 0, 0, 1.0f), cases++;    // 3 channel vectors
  run_case(&rng, pool2, 31, 2, 8, 17, 0, 3, 0, 1.0f), cases++;     // 2 vectors, the second 1 lane
  run_case(&rng, pool2, 129, 1, 32, 127, 0, 0, 0, 1.0f), cases++;  // 64 + 63 channels
  run_case(&rng, pool2, 36, 1, 4, 16, 0, 0, 0, 30.0f), cases++;    // scores far apart: exp underflows to 0
  pthreadpool_destroy(pool2);
  for (int simd = 0; simd < k_levels; simd++) {
    if (HAVE_VARIANT(k_variant, simd)) {
      printf("runtime_attention: %s: %zu cases ok, worst error = %.3f of the float-rounding bound, "
             "%.3g relative to sum_j attn_j |v_j|\n", carve_isa_name((carve_isa)simd), cases, worst[simd], worst_rel[simd]);
    }
  }
  return 0;
}
