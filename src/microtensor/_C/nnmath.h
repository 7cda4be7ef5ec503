/* Loops of the layer kernels (nnkernels.pyx) over contiguous rows, float and double.
 *
 * float32 uses vectorisable approximations of exp (Cephes' polynomial, about 1 ulp) and of
 * erf (Eigen's rational function, as XLA's), so that GCC turns each loop into SIMD code;
 * float64 calls libm for accuracy.  Each loop is compiled twice (target_clones): for
 * x86-64-v3 (AVX2 + FMA) and for the baseline, the loader picking the one the CPU runs.
 */
#ifndef MICROTENSOR_NNMATH_H
#define MICROTENSOR_NNMATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define MT_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MT_CLONES
#endif
/* forced: GCC does not otherwise inline a baseline function into the AVX2 clone */
#define MT_INLINE static inline __attribute__((always_inline))

#define MT_SQRT1_2 0.70710678118654752440
#define MT_1_OVER_SQRT_2PI 0.39894228040143267794
#define MT_GELU_K 0.79788456080286535588   /* sqrt(2 / pi) */
#define MT_GELU_C 0.044715

/* exp for any float: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by Cephes' polynomial, 2^n as
 * two exponent-field products so that n may reach the denormal and overflow range; below
 * -104 the result is 0, above 89 inf; NaN stays NaN.  n is rounded by adding 1.5 * 2^23
 * (its bits then hold n): GCC does not vectorise a float-to-int conversion after the
 * clamp. */
MT_INLINE float mt_expf(float x) {
    float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
    union { int32_t i; float f; } k, s1, s2;
    k.f = xc * 1.44269504088896341f + 12582912.0f;
    float fn = k.f - 12582912.0f;
    int32_t n = k.i - 0x4B400000;
    float r = xc - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t half = n >> 1;
    s1.i = (half + 127) << 23;
    s2.i = (n - half + 127) << 23;
    return x != x ? x : p * s1.f * s2.f;
}

/* erf in float: Eigen's rational approximation on [-4, 4], +-1 beyond. */
MT_INLINE float mt_erff(float x) {
    float xc = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);
    float z = xc * xc;
    float num = -2.72614225801306e-10f;
    num = num * z + 2.77068142495902e-08f;
    num = num * z + -2.10102402082508e-06f;
    num = num * z + -5.69250639462346e-05f;
    num = num * z + -7.34990630326855e-04f;
    num = num * z + -2.95459980854025e-03f;
    num = num * z + -1.60960333262415e-02f;
    float den = -1.45660718464996e-05f;
    den = den * z + -2.13374055278905e-04f;
    den = den * z + -1.68282697438203e-03f;
    den = den * z + -7.37332916720468e-03f;
    den = den * z + -1.42647390514189e-02f;
    return xc * num / den;
}

/* tanh from exp of a non-positive argument (no overflow, no cancellation of large values) */
MT_INLINE float mt_tanhf(float x) {
    float e = mt_expf(-2.0f * fabsf(x));
    float t = (1.0f - e) / (1.0f + e);
    return x < 0.0f ? -t : t;
}

#define MT_SIMD _Pragma("omp simd")

/* Rows shorter than MT_SHORT_ROW (the classes of a small classifier) run a block of rows
 * at a time, MT_BLOCK elements: exp as one vectorised pass over the whole block, the
 * per-row maxima and sums as plain loops.  A vector loop (and its reduction) per row of
 * ten elements costs about three times as much. */
#define MT_SHORT_ROW 32
#define MT_BLOCK 2048

/* Each kernel below is instantiated for (float, f32, mt_expf, mt_erff, mt_tanhf, logf)
 * and (double, f64, exp, erf, tanh, log). */
#define MT_KERNELS(T, SFX, EXP, ERF, TANH, LOG)                                             \
                                                                                            \
/* softmax (or log_softmax) of short rows (1 <= n < MT_SHORT_ROW), a block at a time */     \
MT_INLINE void mt_softmax_short_##SFX(T* out, const T* x, ptrdiff_t rows, ptrdiff_t n,      \
                                      int log_of) {                                         \
    T e[MT_BLOCK];                                                                          \
    ptrdiff_t per_block = MT_BLOCK / n;                                                     \
    for (ptrdiff_t r0 = 0; r0 < rows; r0 += per_block) {                                    \
        ptrdiff_t m = rows - r0 < per_block ? rows - r0 : per_block;                        \
        const T* xb = x + r0 * n;                                                           \
        T* ob = out + r0 * n;                                                               \
        for (ptrdiff_t r = 0; r < m; r++) {                                                 \
            T peak = xb[r * n];                                                             \
            for (ptrdiff_t i = 1; i < n; i++)                                               \
                peak = xb[r * n + i] > peak ? xb[r * n + i] : peak;                         \
            for (ptrdiff_t i = 0; i < n; i++) ob[r * n + i] = xb[r * n + i] - peak;         \
        }                                                                                   \
        MT_SIMD                                                                             \
        for (ptrdiff_t k = 0; k < m * n; k++) e[k] = EXP(ob[k]);                            \
        for (ptrdiff_t r = 0; r < m; r++) {                                                 \
            T total = 0;                                                                    \
            for (ptrdiff_t i = 0; i < n; i++) total += e[r * n + i];                        \
            if (log_of) {                                                                   \
                T shift = LOG(total);                                                       \
                for (ptrdiff_t i = 0; i < n; i++) ob[r * n + i] -= shift;                   \
            } else {                                                                        \
                T scale = 1 / total;                                                        \
                for (ptrdiff_t i = 0; i < n; i++) ob[r * n + i] = e[r * n + i] * scale;     \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
}                                                                                           \
                                                                                            \
/* softmax (or log_softmax) of each of `rows` rows of `n` */                                \
MT_CLONES static void mt_softmax_##SFX(T* out, const T* x, ptrdiff_t rows, ptrdiff_t n,     \
                                       int log_of) {                                        \
    if (n > 0 && n < MT_SHORT_ROW) {                                                        \
        mt_softmax_short_##SFX(out, x, rows, n, log_of);                                    \
        return;                                                                             \
    }                                                                                       \
    for (ptrdiff_t r = 0; r < rows; r++, out += n, x += n) {                                \
        T peak = x[0];                                                                      \
        _Pragma("omp simd reduction(max:peak)")                                             \
        for (ptrdiff_t i = 0; i < n; i++) peak = x[i] > peak ? x[i] : peak;                 \
        T total = 0;                                                                        \
        if (log_of) {                                                                       \
            _Pragma("omp simd reduction(+:total)")                                          \
            for (ptrdiff_t i = 0; i < n; i++) {                                             \
                out[i] = x[i] - peak;                                                       \
                total += EXP(out[i]);                                                       \
            }                                                                               \
            T shift = LOG(total);                                                           \
            MT_SIMD                                                                         \
            for (ptrdiff_t i = 0; i < n; i++) out[i] -= shift;                              \
        } else {                                                                            \
            _Pragma("omp simd reduction(+:total)")                                          \
            for (ptrdiff_t i = 0; i < n; i++) {                                             \
                out[i] = EXP(x[i] - peak);                                                  \
                total += out[i];                                                            \
            }                                                                               \
            T scale = 1 / total;                                                            \
            MT_SIMD                                                                         \
            for (ptrdiff_t i = 0; i < n; i++) out[i] *= scale;                              \
        }                                                                                   \
    }                                                                                       \
}                                                                                           \
                                                                                            \
/* out = y * (g - sum(g * y)) per row: softmax's gradient from its output y */              \
MT_CLONES static void mt_softmax_backward_##SFX(T* out, const T* g, const T* y,             \
                                                ptrdiff_t rows, ptrdiff_t n) {              \
    for (ptrdiff_t r = 0; r < rows; r++, out += n, g += n, y += n) {                        \
        T dot = 0;                                                                          \
        _Pragma("omp simd reduction(+:dot)")                                                \
        for (ptrdiff_t i = 0; i < n; i++) dot += g[i] * y[i];                               \
        MT_SIMD                                                                             \
        for (ptrdiff_t i = 0; i < n; i++) out[i] = y[i] * (g[i] - dot);                     \
    }                                                                                       \
}                                                                                           \
                                                                                            \
/* log_softmax's gradient of short rows (1 <= n < MT_SHORT_ROW), a block at a time */       \
MT_INLINE void mt_log_softmax_backward_short_##SFX(T* out, const T* g, const T* y,          \
                                                   ptrdiff_t rows, ptrdiff_t n) {           \
    T e[MT_BLOCK];                                                                          \
    ptrdiff_t per_block = MT_BLOCK / n;                                                     \
    for (ptrdiff_t r0 = 0; r0 < rows; r0 += per_block) {                                    \
        ptrdiff_t m = rows - r0 < per_block ? rows - r0 : per_block;                        \
        const T* gb = g + r0 * n;                                                           \
        const T* yb = y + r0 * n;                                                           \
        T* ob = out + r0 * n;                                                               \
        MT_SIMD                                                                             \
        for (ptrdiff_t k = 0; k < m * n; k++) e[k] = EXP(yb[k]);                            \
        for (ptrdiff_t r = 0; r < m; r++) {                                                 \
            T total = 0;                                                                    \
            for (ptrdiff_t i = 0; i < n; i++) total += gb[r * n + i];                       \
            for (ptrdiff_t i = 0; i < n; i++)                                               \
                ob[r * n + i] = gb[r * n + i] - e[r * n + i] * total;                       \
        }                                                                                   \
    }                                                                                       \
}                                                                                           \
                                                                                            \
/* out = g - exp(y) * sum(g) per row: log_softmax's gradient from its output y */           \
MT_CLONES static void mt_log_softmax_backward_##SFX(T* out, const T* g, const T* y,         \
                                                    ptrdiff_t rows, ptrdiff_t n) {          \
    if (n > 0 && n < MT_SHORT_ROW) {                                                        \
        mt_log_softmax_backward_short_##SFX(out, g, y, rows, n);                            \
        return;                                                                             \
    }                                                                                       \
    for (ptrdiff_t r = 0; r < rows; r++, out += n, g += n, y += n) {                        \
        T total = 0;                                                                        \
        _Pragma("omp simd reduction(+:total)")                                              \
        for (ptrdiff_t i = 0; i < n; i++) total += g[i];                                    \
        MT_SIMD                                                                             \
        for (ptrdiff_t i = 0; i < n; i++) out[i] = g[i] - EXP(y[i]) * total;                \
    }                                                                                       \
}                                                                                           \
                                                                                            \
/* mean and 1 / sqrt(biased variance + eps) of one row (two passes: no cancellation) */     \
static inline void mt_row_stats_##SFX(const T* x, ptrdiff_t n, double eps, T* mean,         \
                                      T* rstd) {                                            \
    T total = 0, squares = 0;                                                               \
    _Pragma("omp simd reduction(+:total)")                                                  \
    for (ptrdiff_t i = 0; i < n; i++) total += x[i];                                        \
    T m = total / n;                                                                        \
    _Pragma("omp simd reduction(+:squares)")                                                \
    for (ptrdiff_t i = 0; i < n; i++) squares += (x[i] - m) * (x[i] - m);                   \
    *mean = m;                                                                              \
    *rstd = (T)(1.0 / sqrt((double)(squares / n) + eps));                                   \
}                                                                                           \
                                                                                            \
/* layer_norm of rows of n: (x - mean) * rstd * w + b (w, b may be NULL) */                 \
MT_CLONES static void mt_layer_norm_##SFX(T* out, const T* x, const T* w, const T* b,       \
                                          ptrdiff_t rows, ptrdiff_t n, double eps) {        \
    for (ptrdiff_t r = 0; r < rows; r++, out += n, x += n) {                                \
        T mean, rstd;                                                                       \
        mt_row_stats_##SFX(x, n, eps, &mean, &rstd);                                        \
        MT_SIMD                                                                             \
        for (ptrdiff_t i = 0; i < n; i++)                                                   \
            out[i] = (x[i] - mean) * rstd * (w ? w[i] : (T)1) + (b ? b[i] : (T)0);          \
    }                                                                                       \
}                                                                                           \
                                                                                            \
/* layer_norm's gradients: gx = rstd (gw - mean(gw) - xhat mean(gw xhat)) with gw = g * w;  \
 * gweight (if not NULL) and gbias accumulate sum over rows of g * xhat and of g. */        \
MT_CLONES static void mt_layer_norm_backward_##SFX(T* gx, T* gweight, T* gbias,             \
        const T* g, const T* x, const T* w, ptrdiff_t rows, ptrdiff_t n, double eps) {      \
    for (ptrdiff_t r = 0; r < rows; r++, gx += n, g += n, x += n) {                         \
        T mean, rstd, sum_gw = 0, sum_gw_xhat = 0;                                          \
        mt_row_stats_##SFX(x, n, eps, &mean, &rstd);                                        \
        _Pragma("omp simd reduction(+:sum_gw)")                                             \
        for (ptrdiff_t i = 0; i < n; i++) sum_gw += g[i] * (w ? w[i] : (T)1);               \
        _Pragma("omp simd reduction(+:sum_gw_xhat)")                                        \
        for (ptrdiff_t i = 0; i < n; i++)                                                   \
            sum_gw_xhat += g[i] * (w ? w[i] : (T)1) * ((x[i] - mean) * rstd);               \
        T a = sum_gw / n, c = sum_gw_xhat / n;                                              \
        MT_SIMD                                                                             \
        for (ptrdiff_t i = 0; i < n; i++) {                                                 \
            T xhat = (x[i] - mean) * rstd;                                                  \
            gx[i] = rstd * (g[i] * (w ? w[i] : (T)1) - a - xhat * c);                       \
            gbias[i] += g[i];                                                               \
        }                                                                                   \
        if (gweight) {                                                                      \
            MT_SIMD                                                                         \
            for (ptrdiff_t i = 0; i < n; i++) gweight[i] += g[i] * ((x[i] - mean) * rstd);  \
        }                                                                                   \
    }                                                                                       \
}                                                                                           \
                                                                                            \
/* out = g * (1 - y * y): tanh's gradient from its output y */                              \
MT_CLONES static void mt_tanh_backward_##SFX(T* out, const T* g, const T* y, ptrdiff_t n) { \
    MT_SIMD                                                                                 \
    for (ptrdiff_t i = 0; i < n; i++) out[i] = g[i] * (1 - y[i] * y[i]);                    \
}                                                                                           \
                                                                                            \
/* out = y <= 0 ? 0 : g: relu's gradient from its output y (a select, so that an infinite  \
   or NaN g where y <= 0 gives 0, and a NaN y passes g, as PyTorch's threshold_backward) */ \
MT_CLONES static void mt_relu_backward_##SFX(T* out, const T* g, const T* y, ptrdiff_t n) { \
    MT_SIMD                                                                                 \
    for (ptrdiff_t i = 0; i < n; i++) out[i] = y[i] <= 0 ? (T)0 : g[i];                     \
}                                                                                           \
                                                                                            \
/* GELU, exact (erf) or with the tanh approximation */                                      \
MT_CLONES static void mt_gelu_##SFX(T* out, const T* x, ptrdiff_t n, int tanh_mode) {       \
    if (tanh_mode) {                                                                        \
        MT_SIMD                                                                             \
        for (ptrdiff_t i = 0; i < n; i++) {                                                 \
            T v = x[i];                                                                     \
            out[i] = (T)0.5 * v * (1 + TANH((T)MT_GELU_K * (v + (T)MT_GELU_C * v * v * v))); \
        }                                                                                   \
    } else {                                                                                \
        MT_SIMD                                                                             \
        for (ptrdiff_t i = 0; i < n; i++)                                                   \
            out[i] = (T)0.5 * x[i] * (1 + ERF(x[i] * (T)MT_SQRT1_2));                       \
    }                                                                                       \
}                                                                                           \
                                                                                            \
/* out = g * GELU'(x) */                                                                    \
MT_CLONES static void mt_gelu_backward_##SFX(T* out, const T* g, const T* x, ptrdiff_t n,   \
                                             int tanh_mode) {                               \
    if (tanh_mode) {                                                                        \
        MT_SIMD                                                                             \
        for (ptrdiff_t i = 0; i < n; i++) {                                                 \
            T v = x[i], v2 = v * v;                                                         \
            T t = TANH((T)MT_GELU_K * (v + (T)MT_GELU_C * v2 * v));                         \
            T du = (T)MT_GELU_K * (1 + 3 * (T)MT_GELU_C * v2);                              \
            out[i] = g[i] * ((T)0.5 * (1 + t) + (T)0.5 * v * (1 - t * t) * du);             \
        }                                                                                   \
    } else {                                                                                \
        MT_SIMD                                                                             \
        for (ptrdiff_t i = 0; i < n; i++) {                                                 \
            T v = x[i];                                                                     \
            out[i] = g[i] * ((T)0.5 * (1 + ERF(v * (T)MT_SQRT1_2))                          \
                             + v * (T)MT_1_OVER_SQRT_2PI * EXP((T)-0.5 * v * v));           \
        }                                                                                   \
    }                                                                                       \
}

/* The positions [*lo, *hi) that pooling window `i` covers inside a dim of `size` (its
 * first position in range, one past its last), stepping by `dil`. */
static inline void mt_pool_window(ptrdiff_t i, ptrdiff_t stride, ptrdiff_t pad, ptrdiff_t k,
                                  ptrdiff_t dil, ptrdiff_t size, ptrdiff_t *lo, ptrdiff_t *hi) {
    ptrdiff_t start = i * stride - pad, end = start + (k - 1) * dil + 1;
    while (start < 0) start += dil;
    *lo = start;
    *hi = end > size ? size : end;
}

/* 2-d max pooling of `planes` planes (h, w) into (oh, ow): each window's maximum (the
 * first, or the last NaN) and its flat index in the plane, positions outside the plane
 * (padding) skipped, as PyTorch's kernel; a window of -inf only points at its first
 * position inside the plane.  The `_nhwc` kernel pools `batch` images stored channels
 * last, (h, w, channels) each, into (oh, ow, channels): the same windows, in the same
 * order, for all channels at once, the positions kept in `at` (`channels` of type P,
 * which must hold h * w: int32 lanes as wide as float32's let the channel loop
 * vectorise). */
#define MT_MAX_POOL(T, SFX, P)                                                                 \
static void mt_max_pool2d_##SFX(T* out, int64_t* indices, const T* x, ptrdiff_t planes,     \
        ptrdiff_t h, ptrdiff_t w, ptrdiff_t oh, ptrdiff_t ow, ptrdiff_t kh, ptrdiff_t kw,   \
        ptrdiff_t sh, ptrdiff_t sw, ptrdiff_t ph, ptrdiff_t pw, ptrdiff_t dh, ptrdiff_t dw) { \
    ptrdiff_t r0, r1, c0, c1;                                                               \
    for (ptrdiff_t p = 0; p < planes; p++, x += h * w) {                                    \
        for (ptrdiff_t i = 0; i < oh; i++) {                                                \
            mt_pool_window(i, sh, ph, kh, dh, h, &r0, &r1);                                 \
            for (ptrdiff_t j = 0; j < ow; j++, out++, indices++) {                          \
                mt_pool_window(j, sw, pw, kw, dw, w, &c0, &c1);                             \
                ptrdiff_t best_at = r0 * w + c0;                                            \
                T best = -INFINITY;                                                         \
                for (ptrdiff_t r = r0; r < r1; r += dh)                                     \
                    for (ptrdiff_t c = c0; c < c1; c += dw) {                               \
                        T v = x[r * w + c];                                                 \
                        if (v > best || v != v) {                                           \
                            best = v;                                                       \
                            best_at = r * w + c;                                            \
                        }                                                                   \
                    }                                                                       \
                *out = best;                                                                \
                *indices = best_at;                                                         \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
}                                                                                           \
                                                                                            \
MT_CLONES static void mt_max_pool2d_nhwc_##SFX(T* restrict out, int64_t* restrict indices,  \
        P* restrict at, const T* restrict x, ptrdiff_t batch, ptrdiff_t channels,           \
        ptrdiff_t h, ptrdiff_t w, ptrdiff_t oh, ptrdiff_t ow, ptrdiff_t kh, ptrdiff_t kw,   \
        ptrdiff_t sh, ptrdiff_t sw, ptrdiff_t ph, ptrdiff_t pw, ptrdiff_t dh, ptrdiff_t dw) { \
    ptrdiff_t r0, r1, c0, c1;                                                               \
    for (ptrdiff_t b = 0; b < batch; b++, x += h * w * channels) {                          \
        for (ptrdiff_t i = 0; i < oh; i++) {                                                \
            mt_pool_window(i, sh, ph, kh, dh, h, &r0, &r1);                                 \
            for (ptrdiff_t j = 0; j < ow; j++, out += channels, indices += channels) {      \
                mt_pool_window(j, sw, pw, kw, dw, w, &c0, &c1);                             \
                for (ptrdiff_t k = 0; k < channels; k++) {                                  \
                    out[k] = -INFINITY;                                                     \
                    at[k] = (P)(r0 * w + c0);                                               \
                }                                                                           \
                for (ptrdiff_t r = r0; r < r1; r += dh)                                     \
                    for (ptrdiff_t c = c0; c < c1; c += dw) {                               \
                        const T* px = x + (r * w + c) * channels;                           \
                        P here = (P)(r * w + c);                                            \
                        MT_SIMD                                                             \
                        for (ptrdiff_t k = 0; k < channels; k++) {                          \
                            T v = px[k], best = out[k];                                     \
                            P take = v > best || v != v;                                    \
                            out[k] = take ? v : best;                                       \
                            at[k] = take ? here : at[k];                                    \
                        }                                                                   \
                    }                                                                       \
                for (ptrdiff_t k = 0; k < channels; k++) indices[k] = at[k];                \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
}                                                                                           \
                                                                                            \
/* max pooling's gradient: each plane of `grad_input` (zeroed here) gets the `per_plane`    \
 * values of `grad` added at their `indices`; 0, or 1 (and nothing more written) at the    \
 * first index outside the plane.  The `_nhwc` kernel: `batch` images stored channels      \
 * last, each of `plane_size` positions of `channels` values. */                           \
static int mt_max_pool_backward_##SFX(T* grad_input, const T* grad, const int64_t* indices, \
        ptrdiff_t planes, ptrdiff_t plane_size, ptrdiff_t per_plane) {                      \
    memset(grad_input, 0, sizeof(T) * planes * plane_size);                                 \
    for (ptrdiff_t p = 0; p < planes; p++, grad_input += plane_size) {                      \
        for (ptrdiff_t i = 0; i < per_plane; i++, grad++, indices++) {                      \
            if (*indices < 0 || *indices >= plane_size) return 1;                           \
            grad_input[*indices] += *grad;                                                  \
        }                                                                                   \
    }                                                                                       \
    return 0;                                                                               \
}                                                                                           \
                                                                                            \
static int mt_max_pool_backward_nhwc_##SFX(T* grad_input, const T* grad,                    \
        const int64_t* indices, ptrdiff_t batch, ptrdiff_t channels, ptrdiff_t plane_size,  \
        ptrdiff_t per_plane) {                                                              \
    memset(grad_input, 0, sizeof(T) * batch * plane_size * channels);                       \
    for (ptrdiff_t b = 0; b < batch; b++, grad_input += plane_size * channels) {            \
        for (ptrdiff_t i = 0; i < per_plane; i++, grad += channels, indices += channels) {  \
            for (ptrdiff_t k = 0; k < channels; k++) {                                      \
                if (indices[k] < 0 || indices[k] >= plane_size) return 1;                   \
                grad_input[indices[k] * channels + k] += grad[k];                           \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    return 0;                                                                               \
}

/* col2im of a unit-stride transposed convolution: each of `planes` rows of `flat`
 * (`total` long, zeroed here) is the sum of its `k` blocks (`len` long) of `blocks`, block
 * j added from position starts[j]. */
#define MT_COL2IM(T, SFX)                                                                   \
static void mt_col2im_##SFX(T* flat, const T* blocks, const int64_t* starts,                \
        ptrdiff_t planes, ptrdiff_t total, ptrdiff_t k, ptrdiff_t len) {                    \
    memset(flat, 0, sizeof(T) * planes * total);                                            \
    for (ptrdiff_t p = 0; p < planes; p++, flat += total)                                   \
        for (ptrdiff_t j = 0; j < k; j++, blocks += len) {                                  \
            T* row = flat + starts[j];                                                      \
            _Pragma("omp simd")                                                             \
            for (ptrdiff_t i = 0; i < len; i++) row[i] += blocks[i];                        \
        }                                                                                   \
}

/* im2col of a 2-d convolution of x (n, c, h, w): element (b, ch, i, j, y, z) of the
 * columns is x[b, ch, y * sh + i * dh, z * sw + j * dw]; `positions_major` lays them out
 * as (n * oh * ow, c * kh * kw), else as (n, c * kh * kw, oh * ow).  Unit steps copy
 * whole runs (memcpy). */
#define MT_IM2COL(T, SFX)                                                                   \
static void mt_im2col_##SFX(T* out, const T* x, ptrdiff_t n, ptrdiff_t c, ptrdiff_t h,      \
        ptrdiff_t w, ptrdiff_t kh, ptrdiff_t kw, ptrdiff_t oh, ptrdiff_t ow, ptrdiff_t sh,  \
        ptrdiff_t sw, ptrdiff_t dh, ptrdiff_t dw, int positions_major) {                    \
    if (positions_major) {                                                                  \
        for (ptrdiff_t b = 0; b < n; b++)                                                   \
            for (ptrdiff_t y = 0; y < oh; y++)                                              \
                for (ptrdiff_t z = 0; z < ow; z++)                                          \
                    for (ptrdiff_t ch = 0; ch < c; ch++)                                    \
                        for (ptrdiff_t i = 0; i < kh; i++) {                                \
                            const T* row = x + ((b * c + ch) * h + y * sh + i * dh) * w     \
                                + z * sw;                                                   \
                            if (dw == 1) memcpy(out, row, sizeof(T) * kw);                  \
                            else for (ptrdiff_t j = 0; j < kw; j++) out[j] = row[j * dw];   \
                            out += kw;                                                      \
                        }                                                                   \
        return;                                                                             \
    }                                                                                       \
    for (ptrdiff_t b = 0; b < n; b++)                                                       \
        for (ptrdiff_t ch = 0; ch < c; ch++)                                                \
            for (ptrdiff_t i = 0; i < kh; i++)                                              \
                for (ptrdiff_t j = 0; j < kw; j++)                                          \
                    for (ptrdiff_t y = 0; y < oh; y++) {                                    \
                        const T* row = x + ((b * c + ch) * h + y * sh + i * dh) * w         \
                            + j * dw;                                                       \
                        if (sw == 1) memcpy(out, row, sizeof(T) * ow);                      \
                        else for (ptrdiff_t z = 0; z < ow; z++) out[z] = row[z * sw];       \
                        out += ow;                                                          \
                    }                                                                       \
}

/* 2-d average pooling of `planes` planes (h, w) into (oh, ow), as PyTorch's kernel: each
 * window's sum over its positions inside the plane, divided by `divisor` when not 0,
 * else by the window's size clipped to the padded plane (`count_pad`) or to the plane.
 * `backward`: instead, each (oh, ow) value of `out` over that divisor added to its
 * window's positions in the (h, w) plane of `x` (zeroed here). */
#define MT_AVG_POOL(T, SFX)                                                                 \
static void mt_avg_pool2d_##SFX(T* out, T* x, ptrdiff_t planes, ptrdiff_t h, ptrdiff_t w,   \
        ptrdiff_t oh, ptrdiff_t ow, ptrdiff_t kh, ptrdiff_t kw, ptrdiff_t sh, ptrdiff_t sw, \
        ptrdiff_t ph, ptrdiff_t pw, int count_pad, ptrdiff_t divisor, int backward) {       \
    if (backward) memset(x, 0, sizeof(T) * planes * h * w);                                 \
    for (ptrdiff_t p = 0; p < planes; p++, x += h * w) {                                    \
        for (ptrdiff_t i = 0; i < oh; i++) {                                                \
            ptrdiff_t r0 = i * sh - ph, r1 = r0 + kh;                                       \
            if (r1 > h + ph) r1 = h + ph;                                                   \
            ptrdiff_t padded_rows = r1 - r0;                                                \
            if (r0 < 0) r0 = 0;                                                             \
            if (r1 > h) r1 = h;                                                             \
            for (ptrdiff_t j = 0; j < ow; j++, out++) {                                     \
                ptrdiff_t c0 = j * sw - pw, c1 = c0 + kw;                                   \
                if (c1 > w + pw) c1 = w + pw;                                               \
                ptrdiff_t count = padded_rows * (c1 - c0);                                  \
                if (c0 < 0) c0 = 0;                                                         \
                if (c1 > w) c1 = w;                                                         \
                if (divisor != 0) count = divisor;                                          \
                else if (!count_pad) count = (r1 - r0) * (c1 - c0);                        \
                if (backward) {                                                             \
                    T share = *out / (T)count;                                              \
                    for (ptrdiff_t r = r0; r < r1; r++)                                     \
                        for (ptrdiff_t c = c0; c < c1; c++) x[r * w + c] += share;          \
                } else {                                                                    \
                    T sum = 0;                                                              \
                    for (ptrdiff_t r = r0; r < r1; r++)                                     \
                        for (ptrdiff_t c = c0; c < c1; c++) sum += x[r * w + c];            \
                    *out = sum / (T)count;                                                  \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
}

/* Batch normalisation over a C-contiguous (outer, C, inner) array: a channels-last input is
 * (rows, C, 1), a contiguous one (N, C, spatial).  Sums are in double.
 * mt_bn_sums: s1[c] = sum(x - shift[c]) and s2[c] = sum((x - shift[c])^2), shifted by a
 * value near each channel's mean so that the variance s2/n - (s1/n)^2 does not cancel;
 * with g: s1[c] = sum(g) and s2[c] = sum(g (x - shift[c])) (the backward's sums).
 * mt_bn_apply: out = kx[c] x + k0[c], plus kg[c] g with g (the backward's input gradient). */
#define MT_BATCH_NORM(T, SFX)                                                               \
MT_CLONES static void mt_bn_sums_##SFX(const T* x, const T* g, ptrdiff_t outer,            \
        ptrdiff_t C, ptrdiff_t inner, const double* shift, double* s1, double* s2) {        \
    for (ptrdiff_t c = 0; c < C; c++) s1[c] = s2[c] = 0;                                    \
    for (ptrdiff_t o = 0; o < outer; o++) {                                                 \
        const T* xo = x + o * C * inner;                                                    \
        const T* go = g ? g + o * C * inner : NULL;                                         \
        if (inner == 1 && go) {                                                             \
            MT_SIMD                                                                         \
            for (ptrdiff_t c = 0; c < C; c++) {                                             \
                s1[c] += go[c];                                                             \
                s2[c] += (double)go[c] * ((double)xo[c] - shift[c]);                        \
            }                                                                               \
        } else if (inner == 1) {                                                            \
            MT_SIMD                                                                         \
            for (ptrdiff_t c = 0; c < C; c++) {                                             \
                double d = (double)xo[c] - shift[c];                                        \
                s1[c] += d;                                                                 \
                s2[c] += d * d;                                                             \
            }                                                                               \
        } else {                                                                            \
            for (ptrdiff_t c = 0; c < C; c++) {                                             \
                const T* xc = xo + c * inner;                                               \
                double a = 0, b = 0, sh = shift[c];                                         \
                if (go) {                                                                   \
                    const T* gc = go + c * inner;                                           \
                    _Pragma("omp simd reduction(+:a, b)")                                   \
                    for (ptrdiff_t i = 0; i < inner; i++) {                                 \
                        a += gc[i];                                                         \
                        b += (double)gc[i] * ((double)xc[i] - sh);                          \
                    }                                                                       \
                } else {                                                                    \
                    _Pragma("omp simd reduction(+:a, b)")                                   \
                    for (ptrdiff_t i = 0; i < inner; i++) {                                 \
                        double d = (double)xc[i] - sh;                                      \
                        a += d;                                                             \
                        b += d * d;                                                         \
                    }                                                                       \
                }                                                                           \
                s1[c] += a;                                                                 \
                s2[c] += b;                                                                 \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
}                                                                                           \
                                                                                            \
MT_CLONES static void mt_bn_apply_##SFX(T* out, const T* x, const T* g, ptrdiff_t outer,   \
        ptrdiff_t C, ptrdiff_t inner, const T* kx, const T* kg, const T* k0) {              \
    for (ptrdiff_t o = 0; o < outer; o++) {                                                 \
        ptrdiff_t base = o * C * inner;                                                     \
        if (inner == 1) {                                                                   \
            if (g) {                                                                        \
                MT_SIMD                                                                     \
                for (ptrdiff_t c = 0; c < C; c++)                                           \
                    out[base + c] = x[base + c] * kx[c] + g[base + c] * kg[c] + k0[c];      \
            } else {                                                                        \
                MT_SIMD                                                                     \
                for (ptrdiff_t c = 0; c < C; c++)                                           \
                    out[base + c] = x[base + c] * kx[c] + k0[c];                            \
            }                                                                               \
            continue;                                                                       \
        }                                                                                   \
        for (ptrdiff_t c = 0; c < C; c++) {                                                 \
            ptrdiff_t at = base + c * inner;                                                \
            T a = kx[c], b = k0[c];                                                         \
            if (g) {                                                                        \
                T w = kg[c];                                                                \
                MT_SIMD                                                                     \
                for (ptrdiff_t i = 0; i < inner; i++)                                       \
                    out[at + i] = x[at + i] * a + g[at + i] * w + b;                        \
            } else {                                                                        \
                MT_SIMD                                                                     \
                for (ptrdiff_t i = 0; i < inner; i++) out[at + i] = x[at + i] * a + b;      \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
}

/* The maximum over box windows of planes (R, D, H, W), C-contiguous, and its flat index in
 * the plane: output (i, j, k)'s window spans [lo_d[i], hi_d[i]) x [lo_h[j], hi_h[j]) x
 * [lo_w[k], hi_w[k]); each bound array holds one row of bounds for every plane (shared) or
 * one per plane (per_plane_*).  PyTorch's rule: a value replaces the maximum when it is
 * greater or NaN (the first maximum, or the last NaN); an empty window gives -inf at its
 * start. */
#define MT_WINDOW_MAX(T, SFX)                                                               \
MT_CLONES static void mt_window_max_##SFX(T* out, int64_t* index, const T* x, ptrdiff_t R,  \
        ptrdiff_t D, ptrdiff_t H, ptrdiff_t W, ptrdiff_t OD, ptrdiff_t OH, ptrdiff_t OW,    \
        const int64_t* lo_d, const int64_t* hi_d, const int64_t* lo_h, const int64_t* hi_h, \
        const int64_t* lo_w, const int64_t* hi_w, int per_plane_d, int per_plane_h,         \
        int per_plane_w) {                                                                  \
    for (ptrdiff_t r = 0; r < R; r++) {                                                     \
        const T* plane = x + r * D * H * W;                                                 \
        const int64_t *ld = lo_d + (per_plane_d ? r * OD : 0), *hd = hi_d + (per_plane_d ? r * OD : 0); \
        const int64_t *lh = lo_h + (per_plane_h ? r * OH : 0), *hh = hi_h + (per_plane_h ? r * OH : 0); \
        const int64_t *lw = lo_w + (per_plane_w ? r * OW : 0), *hw = hi_w + (per_plane_w ? r * OW : 0); \
        for (ptrdiff_t i = 0; i < OD; i++)                                                  \
        for (ptrdiff_t j = 0; j < OH; j++)                                                  \
        for (ptrdiff_t k = 0; k < OW; k++) {                                                \
            int64_t at = (ld[i] * H + lh[j]) * W + lw[k];                                   \
            T best = -INFINITY;                                                             \
            for (int64_t a = ld[i]; a < hd[i]; a++)                                         \
            for (int64_t b = lh[j]; b < hh[j]; b++) {                                       \
                const T* row = plane + (a * H + b) * W;                                     \
                for (int64_t c = lw[k]; c < hw[k]; c++) {                                   \
                    T v = row[c];                                                           \
                    if (v > best || v != v) {                                               \
                        best = v;                                                           \
                        at = (a * H + b) * W + c;                                           \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
            *out++ = best;                                                                  \
            *index++ = at;                                                                  \
        }                                                                                   \
    }                                                                                       \
}

MT_WINDOW_MAX(float, f32)
MT_WINDOW_MAX(double, f64)
MT_BATCH_NORM(float, f32)
MT_BATCH_NORM(double, f64)
MT_AVG_POOL(float, f32)
MT_AVG_POOL(double, f64)
MT_IM2COL(float, f32)
MT_IM2COL(double, f64)
MT_COL2IM(float, f32)
MT_COL2IM(double, f64)

MT_KERNELS(float, f32, mt_expf, mt_erff, mt_tanhf, logf)
MT_MAX_POOL(float, f32, int32_t)
MT_KERNELS(double, f64, exp, erf, tanh, log)
MT_MAX_POOL(double, f64, int64_t)

#endif
