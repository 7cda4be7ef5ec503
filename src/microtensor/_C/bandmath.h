/* Loops of kernels.pyx over a band of neighbouring float32 lines with unit steps, in C so
 * that they are compiled, as the layer kernels are, for x86-64-v3 (AVX2 + FMA) and for the
 * baseline (target_clones): the same arithmetic, in the same order, as the Cython loops
 * they stand for.  Element j of line i is x[i * ss + j]. */
#ifndef MICROTENSOR_BANDMATH_H
#define MICROTENSOR_BANDMATH_H

#include "nnmath.h"

/* `add_rows` of one run of lines: acc[j] += the sum over `n` lines of x[i * ss + j], in
 * double, line after line. */
MT_CLONES static void mt_add_rows_f32(double* restrict acc, const float* restrict x,
                                      ptrdiff_t ss, ptrdiff_t n, ptrdiff_t width) {
    for (ptrdiff_t i = 0; i < n; i++) {
        const float* row = x + i * ss;
        MT_SIMD
        for (ptrdiff_t j = 0; j < width; j++)
            acc[j] += row[j];
    }
}

/* Sums of `rows` short contiguous float32 rows of `n` elements, rows `ss` apart, into
 * out[i * so]: each in double, over 8 interleaved lanes combined in a fixed order (one
 * row at a time in SIMD, where `block_sum`'s 16 float lanes would mostly hold one or two
 * elements of a short row). */
MT_CLONES static void mt_short_row_sums_f32(float* restrict out, ptrdiff_t so,
        const float* restrict x, ptrdiff_t ss, ptrdiff_t rows, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < rows; i++) {
        const float* row = x + i * ss;
        double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        double tail = 0;
        ptrdiff_t j = 0;
        for (; j + 8 <= n; j += 8)
            for (int l = 0; l < 8; l++)
                lane[l] += row[j + l];
        for (; j < n; j++)
            tail += row[j];
        out[i * so] = (float)((((lane[0] + lane[4]) + (lane[1] + lane[5]))
                               + ((lane[2] + lane[6]) + (lane[3] + lane[7]))) + tail);
    }
}

/* log_softmax's backward (`log_softmax_backward_band`): o = g - exp(y) * (g summed along
 * the lines), `total` holding the sums; `o` may be `g` itself. */
MT_CLONES static void mt_log_softmax_backward_band_f32(float* o, ptrdiff_t so,
        const float* g, ptrdiff_t sg, const float* y, ptrdiff_t sy, ptrdiff_t n,
        ptrdiff_t width, double* total) {
    for (ptrdiff_t j = 0; j < width; j++)
        total[j] = 0;
    mt_add_rows_f32(total, g, sg, n, width);
    for (ptrdiff_t i = 0; i < n; i++) {
        const float* g_row = g + i * sg;
        const float* y_row = y + i * sy;
        float* out_row = o + i * so;
        MT_SIMD
        for (ptrdiff_t j = 0; j < width; j++)
            out_row[j] = (float)(g_row[j] - mt_expf(y_row[j]) * total[j]);
    }
}

/* softmax / log_softmax (`softmax_band`): `peak` and `total` hold the band's running
 * maxima and sums (in double); exp(x - peak) waits in `o` for softmax's last pass. */
MT_CLONES static void mt_softmax_band_f32(float* o, ptrdiff_t so, const float* x,
        ptrdiff_t ss, ptrdiff_t n, ptrdiff_t width, int log_of, float* peak,
        double* total) {
    for (ptrdiff_t j = 0; j < width; j++) {
        peak[j] = x[j];
        total[j] = 0;
    }
    for (ptrdiff_t i = 1; i < n; i++) {
        const float* row = x + i * ss;
        MT_SIMD
        for (ptrdiff_t j = 0; j < width; j++) {
            float value = row[j];
            peak[j] = (value > peak[j]) | (value != value) ? value : peak[j];  /* NaN wins */
        }
    }
    for (ptrdiff_t i = 0; i < n; i++) {
        const float* row = x + i * ss;
        float* out_row = o + i * so;
        if (log_of) {
            MT_SIMD
            for (ptrdiff_t j = 0; j < width; j++)
                total[j] += mt_expf(row[j] - peak[j]);
        } else {
            MT_SIMD
            for (ptrdiff_t j = 0; j < width; j++) {
                float e = mt_expf(row[j] - peak[j]);
                out_row[j] = e;
                total[j] += e;
            }
        }
    }
    for (ptrdiff_t j = 0; j < width; j++)
        total[j] = log_of ? log(total[j]) : 1 / total[j];
    for (ptrdiff_t i = 0; i < n; i++) {
        const float* row = x + i * ss;
        float* out_row = o + i * so;
        if (log_of) {
            MT_SIMD
            for (ptrdiff_t j = 0; j < width; j++)
                out_row[j] = (float)((row[j] - peak[j]) - total[j]);
        } else {
            MT_SIMD
            for (ptrdiff_t j = 0; j < width; j++)
                out_row[j] = (float)(out_row[j] * total[j]);
        }
    }
}

#endif
