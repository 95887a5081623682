/* ggmlgrad's vectorised activation kernels, run as ggml custom ops (ggml_map_custom1).
 *
 * ggml's CPU backend computes tanh, sigmoid, exp and GELU with one libm call per element
 * (tanhf alone was ~10 ns an element here, 40x a ReLU). These loops use no libm call and no
 * branch, so the compiler vectorises them (AVX2/NEON): exp by Cody-Waite reduction and a
 * degree-6 polynomial (Cephes expf coefficients, about 1 ulp), tanh by an odd polynomial
 * below 0.625 and 1 - 2/(exp(2|x|)+1) above, sigmoid by exp(-|x|) so that neither tail
 * cancels. NaN propagates and +-Inf gives the limits, as torch and NumPy compute them.
 *
 * Built by `python -m ggmlgrad build` beside the fast ggml; never required.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ggml.h"

static inline float bits_to_float(int32_t i) { float f; memcpy(&f, &i, 4); return f; }

/* y * 2**n for integer-valued n in [-150, 128], by two normal powers of two applied one after
 * the other (neither exponent field overflows, and 2**128 itself is never formed). */
static inline float scale_by_exp2(float y, float n) {
    float h = floorf(n * 0.5f);
    int32_t a = (int32_t)h, b = (int32_t)(n - h);
    return y * bits_to_float((a + 127) << 23) * bits_to_float((b + 127) << 23);
}

static inline float gk_exp(float x) {
    const float hi = 88.72283935546875f, lo = -103.972084045410f;
    float xc = x > hi ? hi : (x < lo ? lo : x);            /* NaN passes the compares: fixed below */
    xc = xc == xc ? xc : 0.0f;
    float n = floorf(xc * 1.44269504088896341f + 0.5f);
    float r = xc - n * 0.693359375f;                       /* ln2 split: n*C1 is exact */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = scale_by_exp2(p * r * r + r + 1.0f, n);
    y = x > hi ? INFINITY : y;
    y = x < lo ? 0.0f : y;
    return x == x ? y : x;
}

static inline float gk_tanh(float x) {
    /* on |x|, sign restored last: odd, and tanh(-0) stays -0 */
    float ax = fabsf(x);
    float z = ax * ax;
    float s = -5.70498872745e-3f;
    s = s * z + 2.06390887954e-2f;
    s = s * z - 5.37397155531e-2f;
    s = s * z + 1.33314422036e-1f;
    s = s * z - 3.33332819422e-1f;
    s = s * z * ax + ax;
    float e = gk_exp(2.0f * ax);
    float l = 1.0f - 2.0f / (e + 1.0f);
    return copysignf(ax < 0.625f ? s : l, x);      /* NaN: l is NaN (exp of NaN) */
}

static inline float gk_sigmoid(float x) {
    float e = gk_exp(-fabsf(x));                           /* in (0, 1]: no overflow, no cancellation */
    float r = 1.0f / (1.0f + e);
    float y = x >= 0.0f ? r : e * r;
    return x == x ? y : x;
}

/* GELU, tanh approximation: 0.5 x (1 + tanh(u)) == x sigmoid(2u), which keeps the negative
 * tail accurate (1 + tanh(u) cancels there). */
static inline float gk_gelu_tanh(float x) {
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x * gk_sigmoid(2.0f * u);
}

/* exp(-x^2/2) with x^2 split into exact hi + lo parts, so the exponent carries no rounding that
 * exp would magnify by x^2/2 in the far tails (past x^2 = 256 the result is 0 and lo is dropped,
 * which also keeps it from overflowing for huge x). */
static inline float gk_gauss(float x) {
    float sq = x * x;
    float lo = fmaf(x, x, -sq);
    lo = sq < 256.0f ? lo : 0.0f;
    return gk_exp(-0.5f * sq) * gk_exp(-0.5f * lo);
}

/* erfc(|x|/sqrt 2) / exp(-x^2/2): Numerical Recipes' erfcc fit (fractional error < 1.2e-7
 * everywhere) without its Gaussian factor, which callers share. */
static inline float gk_erfc_scaled(float x) {
    float t = 1.0f / (1.0f + 0.5f * 0.70710678118654752f * fabsf(x));
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return t * gk_exp(p);
}

/* Phi(x), the standard normal CDF, from the Gaussian factor g = exp(-x^2/2): no cancellation in
 * either tail. x = +-Inf gives 1 and 0. */
static inline float gk_normal_cdf(float x, float g) {
    float e = 0.5f * gk_erfc_scaled(x) * g;
    return x < 0.0f ? e : 1.0f - e;
}

/* GELU, exact: x Phi(x) (torch's default, approximate='none'). */
static inline float gk_gelu_erf(float x) { return x * gk_normal_cdf(x, gk_gauss(x)); }

/* Its derivative: Phi(x) + x phi(x), phi the normal density (NaN at +-Inf, as torch's 0 * Inf). */
static inline float gk_gelu_erf_grad(float x) {
    float g = gk_gauss(x);
    float d = gk_normal_cdf(x, g) + x * (0.3989422804014327f * g);
    return x == x ? d : x;
}

/* exp(x) - 1 without cancellation: a Taylor polynomial for |x| < 0.5 (error below 1e-8 of x),
 * exp(x) - 1 beyond (relative error under 2 ulp there). */
static inline float gk_expm1(float x) {
    float p = 1.0f / 40320.0f;
    p = p * x + 1.0f / 5040.0f;
    p = p * x + 1.0f / 720.0f;
    p = p * x + 1.0f / 120.0f;
    p = p * x + 1.0f / 24.0f;
    p = p * x + 1.0f / 6.0f;
    p = p * x + 0.5f;
    float small = (p * x) * x + x;
    float large = gk_exp(x) - 1.0f;
    return fabsf(x) < 0.5f ? small : large;
}

/* ELU with alpha 1: x where x > 0, else exp(x) - 1 (other alphas are composed around it). */
static inline float gk_elu(float x) { return x > 0.0f ? x : gk_expm1(x); }

/* log(1 + e) for e in [0, 1]: log(u) of u = 1 + e by an atanh series on u's mantissa, times
 * e / (u - 1), which undoes the rounding of 1 + e (so tiny e give e itself). */
static inline float gk_log1p_unit(float e) {
    float u = 1.0f + e;
    float high = u > 1.41421356f ? 1.0f : 0.0f;
    float m = u * (1.0f - 0.5f * high);                   /* in [0.707, 1.415): m - 1 is exact */
    float sdiv = (m - 1.0f) / (m + 1.0f);
    float s2 = sdiv * sdiv;
    float p = 1.0f / 9.0f;
    p = p * s2 + 1.0f / 7.0f;
    p = p * s2 + 0.2f;
    p = p * s2 + 1.0f / 3.0f;
    p = p * s2 + 1.0f;
    float lg = high * 0.693147180559945f + 2.0f * sdiv * p;
    float d = u - 1.0f;
    return d == 0.0f ? e : lg * (e / d);
}

/* softplus(x) = log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): neither term overflows. */
static inline float gk_softplus(float x) {
    float pos = x > 0.0f ? x : 0.0f;
    float y = pos + gk_log1p_unit(gk_exp(-fabsf(x)));
    return x == x ? y : x;
}

/* ReLU keeping NaN (torch's max(x, 0) propagates it; ggml's x > 0 ? x : 0 turns it into 0). */
static inline float gk_relu(float x) { return x > 0.0f ? x : (x == x ? 0.0f : x); }

/* ReLU's gradient from its output y: g where y != 0 (a NaN y passes g, as torch's y <= 0 ? 0 : g). */
static inline float gk_relu_grad(float g, float y) { return y <= 0.0f ? 0.0f : g; }

typedef float (*unary_fn)(float);

/* Rows of a (ne0 contiguous) split across the nth threads; dst is contiguous (custom1 makes it). */
static inline void run_unary(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth,
                             float (*f)(float)) {
    const int64_t ne0 = a->ne[0], nrows = a->ne[1] * a->ne[2] * a->ne[3];
    if (a->nb[0] == sizeof(float) && a->nb[1] == ne0 * sizeof(float) && a->nb[2] == a->ne[1] * a->nb[1]
        && a->nb[3] == a->ne[2] * a->nb[2]) {
        const int64_t n = ne0 * nrows, per = ((n + nth - 1) / nth + 15) & ~(int64_t)15;
        const int64_t start = per * ith < n ? per * ith : n;
        const int64_t count = n - start < per ? n - start : per;
        const float * restrict x = (const float *) a->data + start;
        float * restrict y = (float *) dst->data + start;
        for (int64_t i = 0; i < count; ++i) y[i] = f(x[i]);
        return;
    }
    for (int64_t r = ith; r < nrows; r += nth) {
        const int64_t i1 = r % a->ne[1], i2 = (r / a->ne[1]) % a->ne[2], i3 = r / (a->ne[1] * a->ne[2]);
        const char * src = (const char *) a->data + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3];
        float * y = (float *) dst->data + r * ne0;
        for (int64_t i0 = 0; i0 < ne0; ++i0) y[i0] = f(*(const float *) (src + i0 * a->nb[0]));
    }
}

/* Two same-shape inputs, row by row (ne0 contiguous in both); dst contiguous (custom2 makes it). */
static inline void run_binary(struct ggml_tensor * dst, const struct ggml_tensor * a, const struct ggml_tensor * b,
                              int ith, int nth, float (*f)(float, float)) {
    const int64_t ne0 = a->ne[0], nrows = a->ne[1] * a->ne[2] * a->ne[3];
    for (int64_t r = ith; r < nrows; r += nth) {
        const int64_t i1 = r % a->ne[1], i2 = (r / a->ne[1]) % a->ne[2], i3 = r / (a->ne[1] * a->ne[2]);
        const float * restrict x = (const float *) ((const char *) a->data + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3]);
        const float * restrict y = (const float *) ((const char *) b->data + i1 * b->nb[1] + i2 * b->nb[2] + i3 * b->nb[3]);
        float * restrict out = (float *) dst->data + r * ne0;
        for (int64_t i0 = 0; i0 < ne0; ++i0) out[i0] = f(x[i0], y[i0]);
    }
}

/* One exported entry per function: the loop body inlines f, so each loop vectorises. */
#define GK_EXPORT(name, fn)                                                                         \
    void ggmlgrad_##name(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth,   \
                         void * userdata) {                                                         \
        (void) userdata;                                                                            \
        run_unary(dst, a, ith, nth, fn);                                                            \
    }

GK_EXPORT(exp, gk_exp)
GK_EXPORT(tanh, gk_tanh)
GK_EXPORT(sigmoid, gk_sigmoid)
GK_EXPORT(gelu_tanh, gk_gelu_tanh)
GK_EXPORT(gelu_erf, gk_gelu_erf)
GK_EXPORT(gelu_erf_grad, gk_gelu_erf_grad)
GK_EXPORT(elu, gk_elu)
GK_EXPORT(relu, gk_relu)

void ggmlgrad_relu_grad(struct ggml_tensor * dst, const struct ggml_tensor * g, const struct ggml_tensor * y,
                        int ith, int nth, void * userdata) {
    (void) userdata;
    run_binary(dst, g, y, ith, nth, gk_relu_grad);
}
GK_EXPORT(softplus, gk_softplus)

/* The ABI this file was built for, checked by the loader before any kernel runs. */
int ggmlgrad_kernels_abi(void) { return 2; }
size_t ggmlgrad_kernels_tensor_size(void) { return sizeof(struct ggml_tensor); }
