/* Decode attention straight over the paged KV pool, float32, on the CPU.
 *
 * One query per sequence (a decode step). Query head h reads KV head h / R.
 * Each sequence walks its pages once, all heads together: a page's keys are
 * one contiguous block (page_size x kv_heads x dim), read front to back (the
 * hardware prefetcher follows; prefetching the next page by hand measured no
 * faster); then an online softmax per head
 * (running max m, running sum l, the weighted sum of values acc). So every
 * key and value row is read once, from where it lives in the pool: no copy
 * of the context, no mask. (Walking one KV head at a time read a third of
 * each row per pass and ran at a third of the memory bandwidth.) Loops are written so the compiler vectorises
 * them without -ffast-math: dot products keep LANES partial sums, and exp is
 * a Cephes-style polynomial (relative error about 2e-7) instead of expf.
 *
 * Built and loaded by penelope_engine/model/cpu_kernels.py.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define LANES 8
#define MAX_HEADS 64
#define MAX_DIM 256
#define MAX_PAGE 256

static void exp_inplace(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        v = v < -87.3f ? -87.3f : v; /* exp(-87.3) ~ 1e-38: the smallest normal */
        float fx = v * 1.44269504088896341f + 0.5f;
        float fl = floorf(fx);
        float r = v - fl * 0.693359375f + fl * 2.12194440e-4f;
        float z = r * r;
        float y = 1.9875691500e-4f;
        y = y * r + 1.3981999507e-3f;
        y = y * r + 8.3334519073e-3f;
        y = y * r + 4.1665795894e-2f;
        y = y * r + 1.6666665459e-1f;
        y = y * r + 5.0000001201e-1f;
        y = y * z + r + 1.0f;
        int32_t bits = ((int32_t)fl + 127) << 23;
        float pow2n;
        memcpy(&pow2n, &bits, sizeof pow2n);
        x[i] = y * pow2n;
    }
}

/* q [B, H, D]; k, v [slots, Hkv, D]; pages [B, P] page ids; lens [B] keys each query
 * sees (positions 0 .. lens-1); out [B, H, D]. Requires D % LANES == 0, D <= MAX_DIM,
 * H <= MAX_HEADS, page_size <= MAX_PAGE (the caller checks). */
void penelope_paged_decode_f32(const float *q, const float *k, const float *v,
                               const int64_t *pages, int64_t num_pages, const int64_t *lens,
                               int64_t batch, int64_t heads, int64_t kv_heads, int64_t dim,
                               int64_t page_size, float scale, float *out, int threads) {
    const int64_t ratio = heads / kv_heads;
    const int64_t row = kv_heads * dim; /* floats of one token's keys (or values) */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t b = 0; b < batch; b++) {
        float m[MAX_HEADS], l[MAX_HEADS];
        float acc[MAX_HEADS * MAX_DIM];
        float s[MAX_HEADS * MAX_PAGE];
        float tile[MAX_HEADS * MAX_PAGE * LANES];
        const float *qb = q + b * heads * dim;
        const int64_t len = lens[b];
        for (int64_t h = 0; h < heads; h++) {
            m[h] = -FLT_MAX;
            l[h] = 0.0f;
        }
        memset(acc, 0, sizeof(float) * heads * dim);
        for (int64_t p = 0; p * page_size < len; p++) {
            const int64_t n = len - p * page_size < page_size ? len - p * page_size : page_size;
            const float *kp = k + pages[b * num_pages + p] * page_size * row;
            const float *vp = v + pages[b * num_pages + p] * page_size * row;
            for (int64_t t = 0; t < n; t++) {
                for (int64_t h = 0; h < heads; h++) {
                    const float *kr = kp + t * row + (h / ratio) * dim;
                    const float *qr = qb + h * dim;
                    float *lane = tile + (h * page_size + t) * LANES;
                    for (int j = 0; j < LANES; j++) lane[j] = qr[j] * kr[j];
                    for (int64_t i = LANES; i < dim; i += LANES)
                        for (int j = 0; j < LANES; j++) lane[j] += qr[i + j] * kr[i + j];
                }
            }
            for (int64_t h = 0; h < heads; h++) {
                const float *th = tile + h * page_size * LANES;
                float *sh = s + h * page_size;
                for (int64_t t = 0; t < n; t++) {
                    const float *lane = th + t * LANES;
                    sh[t] = (((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                             ((lane[4] + lane[5]) + (lane[6] + lane[7]))) * scale;
                }
                float top = m[h];
                for (int64_t t = 0; t < n; t++) top = sh[t] > top ? sh[t] : top;
                float shrink = m[h] - top;
                exp_inplace(&shrink, 1);
                m[h] = top;
                l[h] *= shrink;
                float *ah = acc + h * dim;
                for (int64_t d = 0; d < dim; d++) ah[d] *= shrink;
                for (int64_t t = 0; t < n; t++) sh[t] -= top;
                exp_inplace(sh, n);
                for (int64_t t = 0; t < n; t++) l[h] += sh[t];
            }
            for (int64_t t = 0; t < n; t++) {
                for (int64_t h = 0; h < heads; h++) {
                    const float *vr = vp + t * row + (h / ratio) * dim;
                    const float w = s[h * page_size + t];
                    float *ah = acc + h * dim;
                    for (int64_t d = 0; d < dim; d++) ah[d] += w * vr[d];
                }
            }
        }
        for (int64_t h = 0; h < heads; h++) {
            float *o = out + (b * heads + h) * dim;
            const float inv = 1.0f / l[h];
            for (int64_t d = 0; d < dim; d++) o[d] = acc[h * dim + d] * inv;
        }
    }
}
