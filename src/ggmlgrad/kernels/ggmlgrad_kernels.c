/* ggmlgrad's vectorised activation kernels, run as ggml custom ops (ggml_map_custom1/2,
 * ggml_custom_4d).
 *
 * ggml's CPU backend computes tanh, sigmoid, exp and GELU with one libm call per element
 * (tanhf alone was ~10 ns an element here, 40x a ReLU). These loops use no libm call and no
 * branch, so the compiler vectorises them (AVX2/NEON): exp by Cody-Waite reduction and a
 * degree-6 polynomial (Cephes expf coefficients, about 1 ulp), tanh by (1 - e)/(1 + e),
 * e = exp(-2|x|) with 1 - e from expm1 (no cancellation), sigmoid by exp(-|x|) so that neither
 * tail cancels, GELU by an erfcx fit times one exp. NaN propagates and +-Inf gives the limits,
 * as torch and NumPy compute them. Backward passes are fused into one node each (tanh, GELU,
 * ReLU, log_softmax), and GELU's forward can hand its derivative to the backward (*_parts).
 *
 * Built by `python -m ggmlgrad build` beside the fast ggml; never required.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ggml.h"

/* On x86-64 with GCC and glibc every exported loop is compiled twice, for the build's AVX2 and for
 * AVX-512 (x86-64-v4), and the dynamic loader (an IFUNC) picks one by the CPU the process runs on:
 * the AVX-512 loops took tanh over 256x64 from 12.6 to 6.2 us (masked blends, 16 lanes) on an AMD
 * EPYC, with the same results to the bit (the same operations, wider; tests compare a build with
 * -DGK_NO_CLONES). ggml itself stays AVX2 (its softmax went scalar on short rows with AVX-512). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && defined(__GLIBC__) \
    && !defined(GK_NO_CLONES)
#define GK_VEC __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define GK_VEC
#endif

static inline float bits_to_float(int32_t i) { float f; memcpy(&f, &i, 4); return f; }

static inline int32_t float_to_bits(float f) { int32_t i; memcpy(&i, &f, 4); return i; }

/* y * 2**n for integer n in [-150, 128], by two normal powers of two applied one after the other
 * (neither exponent field overflows, and 2**128 itself is never formed). */
static inline float scale_by_exp2(float y, int32_t n) {
    int32_t a = n >> 1, b = n - a;
    return y * bits_to_float((a + 127) << 23) * bits_to_float((b + 127) << 23);
}

#define GK_SHIFTER 12582912.0f             /* 1.5 * 2^23: t's low mantissa bits hold round(x log2 e) */

/* The exp core shared by exp and tanh: x = n ln2 + r (*t holds n, see GK_SHIFTER) and the degree-6
 * polynomial p of exp(r) = 1 + r + p r^2 (Cephes expf coefficients); a NaN x gives NaN. Returns p. */
static inline float gk_exp_poly(float x, float * r_out, float * t_out) {
    float t = x * 1.44269504088896341f + GK_SHIFTER;
    float n = t - GK_SHIFTER;
    float r = x - n * 0.693359375f;        /* ln2 split: n*C1 is exact */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    *r_out = r;
    *t_out = t;
    return p;
}

/* exp(xc) for xc already clamped to [lo, hi] of gk_exp (finite, no NaN). */
static inline float gk_exp_clamped(float xc) {
    float r, t;
    const float p = gk_exp_poly(xc, &r, &t);
    return scale_by_exp2(p * r * r + r + 1.0f, float_to_bits(t) - float_to_bits(GK_SHIFTER));
}

static inline float gk_exp(float x) {
    const float hi = 88.72283935546875f, lo = -103.972084045410f;
    float xc = x < hi ? x : hi;            /* NaN becomes hi here (a finite detour): fixed last */
    xc = xc > lo ? xc : lo;
    float y = gk_exp_clamped(xc);
    y = x > hi ? INFINITY : y;
    y = x < lo ? 0.0f : y;
    return x == x ? y : x;
}

/* exp(x) for x <= 0 or NaN (-|x|, -x^2/2): no overflow side to guard, and NaN is the caller's to
 * keep (it comes out finite here), which saves five of gk_exp's operations an element. */
static inline float gk_exp_nonpos(float x) {
    const float lo = -103.972084045410f;
    float xc = x > lo ? x : lo;            /* NaN becomes lo */
    float y = gk_exp_clamped(xc);
    return x > lo ? y : 0.0f;
}

/* tanh(|x|) = (1 - e) / (1 + e), e = exp(-2|x|) = 2^n (1 + m), m = expm1(r) by the exp core's
 * reduction and polynomial: numerator (1 - 2^n) - 2^n m and denominator (1 + 2^n) + 2^n m each take
 * one rounding (2^n m is exact, and so is 1 - 2^n for the n that matter), so neither cancels near
 * 0 (n = 0 gives -m / (2 + m)) and one exp serves the whole range (1.91 ulp over all floats; a
 * polynomial below 0.625 beside the exp cost 40% more). -2|x| is clamped at -20, where tanh is 1 in
 * float32, so 2^n (n >= -29) is one normal power; the clamp keeps NaN, which the rest propagates. */
static inline float gk_tanh(float x) {
    float u = -2.0f * fabsf(x);
    u = -20.0f > u ? -20.0f : u;                           /* NaN stays NaN (the compare is false) */
    float r, t;
    const float p = gk_exp_poly(u, &r, &t);
    float m = p * (r * r) + r;                             /* expm1(r) */
    float s = bits_to_float((float_to_bits(t) - float_to_bits(GK_SHIFTER) + 127) << 23);   /* 2^n */
    float num = (1.0f - s) - s * m;
    float den = (1.0f + s) + s * m;
    return copysignf(num / den, x);                        /* odd: tanh(-0) is -0 */
}

static inline float gk_sigmoid(float x) {
    float e = gk_exp_nonpos(-fabsf(x));                    /* in (0, 1]: no overflow, no cancellation */
    float r = (1.0f / (1.0f + e));
    float y = x >= 0.0f ? r : e * r;
    return x == x ? y : x;
}

/* GELU, tanh approximation: 0.5 x (1 + tanh(u)) == x sigmoid(2u), which keeps the negative
 * tail accurate (1 + tanh(u) cancels there). */
static inline float gk_gelu_tanh(float x) {
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x * gk_sigmoid(2.0f * u);
}

/* exp(-x^2/2), one exp: x^2 = sq + lo exactly (fma), and exp(-lo/2) = 1 - lo/2 to float32
 * precision (|lo| <= ulp(sq)/2), so the rounding of x^2, which exp would magnify by x^2/2 in the
 * far tails, is taken back. Past x^2 = 256 the result is 0 and lo is dropped (it would be -Inf
 * for x^2 = Inf). */
static inline float gk_gauss(float x) {
    float sq = x * x;
    float lo = fmaf(x, x, -sq);
    lo = sq < 256.0f ? lo : 0.0f;
    return gk_exp_nonpos(-0.5f * sq) * (1.0f - 0.5f * lo);
}

/* erfcx(|x|/sqrt 2) = erfc(z) exp(z^2) for z = |x|/sqrt 2: t P(t) with t = 1/(1 + z/2), P of
 * degree 8 fitted to relative error (4.3e-8 in float64 over z in [0, 10], where the results that
 * use it leave float32's normal range; 2.6e-7 evaluated in float32, as with degree 9 or 10).
 * No exp: callers multiply by the Gaussian factor they share. x = +-Inf gives 0. */
static inline float gk_erfcx_half(float x) {
    float t = 1.0f / (1.0f + 0.35355339059327376f * fabsf(x));
    float p = -5.906921565e-02f;
    p = p * t + 2.845761688e-01f;
    p = p * t - 4.872023001e-01f;
    p = p * t + 2.780697877e-01f;
    p = p * t - 2.662738487e-02f;
    p = p * t + 2.026875543e-01f;
    p = p * t + 2.431036011e-01f;
    p = p * t + 2.823753290e-01f;
    p = p * t + 2.820864168e-01f;
    return t * p;
}

/* Phi(x), the standard normal CDF, from the Gaussian factor g = exp(-x^2/2): 0.5 erfc(|x|/sqrt 2)
 * for x < 0 and one minus it above, so neither tail cancels. x = +-Inf gives 1 and 0. */
static inline float gk_normal_cdf(float x, float g) {
    float e = 0.5f * gk_erfcx_half(x) * g;
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

/* The backward of the exact GELU: g times its derivative at x, one pass. */
static inline float gk_gelu_erf_backward(float g, float x) { return g * gk_gelu_erf_grad(x); }

/* The tanh form's derivative. With s = sigmoid(2u) = (1 + tanh u)/2, u = c (x + 0.044715 x^3):
 * d/dx x s = s + 2 x s (1 - s) u', u' = c (1 + 3 * 0.044715 x^2). s and 1 - s both come from
 * e = exp(-|2u|) (r = 1/(1 + e) is the larger), so neither tail cancels. */
static inline float gk_gelu_tanh_grad(float x) {
    float v = 1.5957691216057308f * (x + 0.044715f * x * x * x);          /* 2u */
    float e = gk_exp_nonpos(-fabsf(v));
    float r = (1.0f / (1.0f + e));
    float s = v >= 0.0f ? r : e * r;
    float sc = v >= 0.0f ? e * r : r;                                      /* 1 - s */
    float du = 1.5957691216057308f * (1.0f + 0.134145f * (x * x));         /* 2u'; Inf once x^2 is, as torch's */
    float d = s + x * (s * sc) * du;
    return x == x ? d : x;
}

static inline float gk_gelu_tanh_backward(float g, float x) { return g * gk_gelu_tanh_grad(x); }

/* tanh's backward from its output y: g (1 - y^2). */
static inline float gk_tanh_backward(float g, float y) { return g * (1.0f - y * y); }

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

/* 1/3 + s2/5 + s2^2/7 + s2^3/9: the atanh series' tail behind log's 2 s (1 + s2 (...)), s = (f-1)/(f+1). */
static inline float gk_atanh_tail(float s2) {
    float p = 1.0f / 9.0f;
    p = p * s2 + 1.0f / 7.0f;
    p = p * s2 + 0.2f;
    return p * s2 + 1.0f / 3.0f;
}

/* log(1 + e) for e in [0, 1]: log(u) of u = 1 + e by an atanh series on u's mantissa, times
 * e / (u - 1), which undoes the rounding of 1 + e (so tiny e give e itself). */
static inline float gk_log1p_unit(float e) {
    float u = 1.0f + e;
    float high = u > 1.41421356f ? 1.0f : 0.0f;
    float m = u * (1.0f - 0.5f * high);                   /* in [0.707, 1.415): m - 1 is exact */
    float sdiv = (m - 1.0f) / (m + 1.0f);
    float s2 = sdiv * sdiv;
    float p = gk_atanh_tail(s2) * s2 + 1.0f;
    float lg = high * 0.693147180559945f + 2.0f * sdiv * p;
    float d = u - 1.0f;
    return d == 0.0f ? e : lg * (e / d);
}

/* softplus(x) = log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): neither term overflows. */
static inline float gk_softplus(float x) {
    float pos = x > 0.0f ? x : 0.0f;
    float y = pos + gk_log1p_unit(gk_exp_nonpos(-fabsf(x)));
    return x == x ? y : x;
}

/* ReLU keeping NaN (torch's max(x, 0) propagates it; ggml's x > 0 ? x : 0 turns it into 0). */
static inline float gk_relu(float x) { return x > 0.0f ? x : (x == x ? 0.0f : x); }

/* ReLU's gradient from its output y: g where y != 0 (a NaN y passes g, as torch's y <= 0 ? 0 : g). */
static inline float gk_relu_grad(float g, float y) { return y <= 0.0f ? 0.0f : g; }

typedef float (*unary_fn)(float);

static inline int is_contiguous(const struct ggml_tensor * a) {
    return a->nb[0] == sizeof(float) && a->nb[1] == a->ne[0] * a->nb[0] && a->nb[2] == a->ne[1] * a->nb[1]
        && a->nb[3] == a->ne[2] * a->nb[2];
}

/* Rows of a (ne0 contiguous) split across the nth threads; dst is contiguous (custom1 makes it). */
static inline void run_unary(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth,
                             float (*f)(float)) {
    const int64_t ne0 = a->ne[0], nrows = a->ne[1] * a->ne[2] * a->ne[3];
    if (is_contiguous(a)) {
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

/* Two same-shape inputs (ne0 contiguous in both); dst contiguous (custom2 makes it). Whole
 * tensors split into equal slices when both are contiguous, else row by row. */
static inline void run_binary(struct ggml_tensor * dst, const struct ggml_tensor * a, const struct ggml_tensor * b,
                              int ith, int nth, float (*f)(float, float)) {
    const int64_t ne0 = a->ne[0], nrows = a->ne[1] * a->ne[2] * a->ne[3];
    if (is_contiguous(a) && is_contiguous(b)) {
        const int64_t n = ne0 * nrows, per = ((n + nth - 1) / nth + 15) & ~(int64_t)15;
        const int64_t start = per * ith < n ? per * ith : n;
        const int64_t count = n - start < per ? n - start : per;
        const float * restrict x = (const float *) a->data + start;
        const float * restrict y = (const float *) b->data + start;
        float * restrict out = (float *) dst->data + start;
        for (int64_t i = 0; i < count; ++i) out[i] = f(x[i], y[i]);
        return;
    }
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
    GK_VEC void ggmlgrad_##name(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth,   \
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
GK_EXPORT(gelu_tanh_grad, gk_gelu_tanh_grad)
GK_EXPORT(elu, gk_elu)
GK_EXPORT(relu, gk_relu)

#define GK_EXPORT2(name, fn)                                                                        \
    GK_VEC void ggmlgrad_##name(struct ggml_tensor * dst, const struct ggml_tensor * a, const struct ggml_tensor * b, \
                         int ith, int nth, void * userdata) {                                       \
        (void) userdata;                                                                            \
        run_binary(dst, a, b, ith, nth, fn);                                                        \
    }

GK_EXPORT2(relu_grad, gk_relu_grad)
GK_EXPORT2(tanh_backward, gk_tanh_backward)
GK_EXPORT2(gelu_erf_backward, gk_gelu_erf_backward)
GK_EXPORT2(gelu_tanh_backward, gk_gelu_tanh_backward)
GK_EXPORT(softplus, gk_softplus)

/* GELU's value and derivative in one pass, for a forward whose backward follows in the same
 * graph (a training step): dst (a ggml_custom_4d node of 2n floats) gets [y | d] for the n floats
 * of src[0], which must be contiguous; the backward is then g * d, one cheap node, instead of a
 * second pass of exp and erfc. */
/* x Phi(x) and Phi(x) + x phi(x) sharing Phi and the Gaussian. */
static inline float gk_gelu_erf_both(float x, float * d) {
    float g = gk_gauss(x);
    float cdf = gk_normal_cdf(x, g);
    float dd = cdf + x * (0.3989422804014327f * g);
    *d = x == x ? dd : x;
    return x * cdf;
}

/* x s and s + x s (1 - s) 2u', s = sigmoid(2u), sharing s (see gk_gelu_tanh_grad). */
static inline float gk_gelu_tanh_both(float x, float * d) {
    float v = 1.5957691216057308f * (x + 0.044715f * x * x * x);
    float e = gk_exp_nonpos(-fabsf(v));
    float r = 1.0f / (1.0f + e);
    float s = v >= 0.0f ? r : e * r;
    float sc = v >= 0.0f ? e * r : r;
    float du = 1.5957691216057308f * (1.0f + 0.134145f * (x * x));
    float dd = s + x * (s * sc) * du;
    *d = x == x ? dd : x;
    return x == x ? x * s : x;
}

#define GK_EXPORT_PARTS(name, both)                                                                 \
    GK_VEC void ggmlgrad_##name(struct ggml_tensor * dst, int ith, int nth, void * userdata) {              \
        (void) userdata;                                                                            \
        const struct ggml_tensor * a = dst->src[0];                                                 \
        const int64_t n = a->ne[0] * a->ne[1] * a->ne[2] * a->ne[3];                                \
        const int64_t per = ((n + nth - 1) / nth + 15) & ~(int64_t)15;                              \
        const int64_t start = per * ith < n ? per * ith : n;                                        \
        const int64_t count = n - start < per ? n - start : per;                                    \
        const float * restrict x = (const float *) a->data + start;                                 \
        float * restrict y = (float *) dst->data + start;                                           \
        float * restrict d = (float *) dst->data + n + start;                                       \
        for (int64_t i = 0; i < count; ++i) {                                                       \
            float di;                                                                               \
            y[i] = both(x[i], &di);                                                                 \
            d[i] = di;                                                                              \
        }                                                                                           \
    }

GK_EXPORT_PARTS(gelu_erf_parts, gk_gelu_erf_both)
GK_EXPORT_PARTS(gelu_tanh_parts, gk_gelu_tanh_both)

/* Row r of a (ne0 elements at unit stride) and of a contiguous dst. */
static inline const float * row_in(const struct ggml_tensor * a, int64_t r) {
    const int64_t i1 = r % a->ne[1], i2 = (r / a->ne[1]) % a->ne[2], i3 = r / (a->ne[1] * a->ne[2]);
    return (const float *) ((const char *) a->data + i1 * a->nb[1] + i2 * a->nb[2] + i3 * a->nb[3]);
}

/* log(s) for finite s >= 1 (a sum of exps whose largest term is 1): s = 2^k f, f in [0.707, 1.415),
 * log f by the atanh series of gk_log1p_unit, k ln 2 in two parts (about 1 ulp, no libm call, so a
 * loop over many sums vectorises). */
static inline float gk_log_ge1(float s) {
    int32_t b = float_to_bits(s);
    int32_t k = (b >> 23) - 127;
    float f = bits_to_float((b & 0x007fffff) | 0x3f800000);   /* in [1, 2) */
    int32_t high = f > 1.41421356f;
    f = high ? 0.5f * f : f;
    k += high;
    float sdiv = (f - 1.0f) / (f + 1.0f);
    float s2 = sdiv * sdiv;
    float p = gk_atanh_tail(s2);
    float kf = (float) k;
    float lo = kf * 1.42860677e-06f + (2.0f * sdiv) * (p * s2);    /* ln 2 = 0.693145752 + 1.42860677e-06 */
    return (kf * 0.693145752f + 2.0f * sdiv) + lo;
}

/* Rows are taken in blocks of up to GK_LSM_ROWS: the exps of a block run as one loop over its
 * contiguous output (vectorised across rows, which short rows of class logits are not), and so do
 * the logs of its sums. */
#define GK_LSM_ROWS 64
#define GK_LSM_SHORT 16      /* rows up to this long run column-wise passes */
#define GK_LSM_LONG 256      /* rows from this long take the backward's exps row by row (AVX2: 4% faster at 1000) */

/* log_softmax along rows: (x - m) - log(sum exp(x - m)), m the row max. A row holding NaN, or
 * whose max is infinite, is all NaN (as the composite of argmax, soft_max and log gives). One node
 * instead of eight, whose per-row loops cost ggml ~20 ns a row on short rows (class logits). */
GK_VEC void ggmlgrad_log_softmax_rows(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth,
                                      void * userdata) {
    (void) userdata;
    const int64_t ne0 = a->ne[0], nrows = a->ne[1] * a->ne[2] * a->ne[3];
    const int64_t per = (nrows + nth - 1) / nth, r0 = per * ith, r1 = r0 + per < nrows ? r0 + per : nrows;
    float mx[GK_LSM_ROWS], lse[GK_LSM_ROWS];
    int bad[GK_LSM_ROWS];
    const int by_columns = ne0 <= GK_LSM_SHORT && is_contiguous(a);
    for (int64_t b0 = r0; b0 < r1; b0 += GK_LSM_ROWS) {
        const int64_t nb = r1 - b0 < GK_LSM_ROWS ? r1 - b0 : GK_LSM_ROWS;
        float * restrict yb = (float *) dst->data + b0 * ne0;
        if (by_columns) {
            /* short rows: each pass runs down the block's columns, rows in the vector lanes (each
             * row's terms are still added in order) */
            const float * restrict xb = (const float *) a->data + b0 * ne0;
            for (int64_t j = 0; j < nb; ++j) { mx[j] = -INFINITY; bad[j] = 0; }
            for (int64_t i = 0; i < ne0; ++i)
                for (int64_t j = 0; j < nb; ++j) {
                    const float v = xb[j * ne0 + i];
                    mx[j] = v > mx[j] ? v : mx[j];
                    bad[j] |= v != v;
                }
            for (int64_t j = 0; j < nb; ++j) bad[j] |= isinf(mx[j]);
            for (int64_t j = 0; j < nb; ++j) lse[j] = 0.0f;
            for (int64_t i = 0; i < ne0; ++i)
                for (int64_t j = 0; j < nb; ++j) lse[j] += gk_exp(xb[j * ne0 + i] - mx[j]);
            for (int64_t j = 0; j < nb; ++j) lse[j] = bad[j] ? NAN : gk_log_ge1(lse[j] >= 1.0f ? lse[j] : 1.0f);
            for (int64_t i = 0; i < ne0; ++i)
                for (int64_t j = 0; j < nb; ++j) yb[j * ne0 + i] = (xb[j * ne0 + i] - mx[j]) - lse[j];
            continue;
        }
        for (int64_t j = 0; j < nb; ++j) {
            const float * restrict x = row_in(a, b0 + j);
            float * restrict y = yb + j * ne0;
            float m = -INFINITY;
            int nan = 0;
            for (int64_t i = 0; i < ne0; ++i) {
                m = x[i] > m ? x[i] : m;
                nan |= x[i] != x[i];
            }
            for (int64_t i = 0; i < ne0; ++i) y[i] = x[i] - m;
            mx[j] = m;
            bad[j] = nan || isinf(m);
        }
        const int64_t n = nb * ne0;
        for (int64_t k = 0; k < n; ++k) yb[k] = gk_exp(yb[k]);
        for (int64_t j = 0; j < nb; ++j) {
            const float * restrict y = yb + j * ne0;
            float sum = 0.0f;
            for (int64_t i = 0; i < ne0; ++i) sum += y[i];
            lse[j] = sum;
        }
        for (int64_t j = 0; j < nb; ++j) lse[j] = bad[j] ? NAN : gk_log_ge1(lse[j] >= 1.0f ? lse[j] : 1.0f);
        for (int64_t j = 0; j < nb; ++j) {
            const float * restrict x = row_in(a, b0 + j);
            float * restrict y = yb + j * ne0;
            const float m = mx[j], l = lse[j];
            for (int64_t i = 0; i < ne0; ++i) y[i] = (x[i] - m) - l;
        }
    }
}

/* Its backward from the output y: g - exp(y) sum(g) along each row (exp(y) is the softmax); the exps
 * of a block of rows run as one loop, as in the forward, below GK_LSM_LONG. */
GK_VEC void ggmlgrad_log_softmax_rows_backward(struct ggml_tensor * dst, const struct ggml_tensor * g,
                                               const struct ggml_tensor * y, int ith, int nth, void * userdata) {
    (void) userdata;
    const int64_t ne0 = g->ne[0], nrows = g->ne[1] * g->ne[2] * g->ne[3];
    const int64_t per = (nrows + nth - 1) / nth, r0 = per * ith, r1 = r0 + per < nrows ? r0 + per : nrows;
    const int by_columns = ne0 <= GK_LSM_SHORT && is_contiguous(g) && is_contiguous(y);
    float total[GK_LSM_ROWS];
    for (int64_t b0 = r0; b0 < r1; b0 += GK_LSM_ROWS) {
        const int64_t nb = r1 - b0 < GK_LSM_ROWS ? r1 - b0 : GK_LSM_ROWS;
        float * restrict ob = (float *) dst->data + b0 * ne0;
        if (by_columns) {
            const float * restrict gb = (const float *) g->data + b0 * ne0;
            const float * restrict yb = (const float *) y->data + b0 * ne0;
            for (int64_t j = 0; j < nb; ++j) total[j] = 0.0f;
            for (int64_t i = 0; i < ne0; ++i)
                for (int64_t j = 0; j < nb; ++j) total[j] += gb[j * ne0 + i];
            for (int64_t i = 0; i < ne0; ++i)
                for (int64_t j = 0; j < nb; ++j) ob[j * ne0 + i] = gb[j * ne0 + i] - gk_exp(yb[j * ne0 + i]) * total[j];
            continue;
        }
        if (ne0 >= GK_LSM_LONG) {       /* long rows: the exps inline, each row's loop is long enough */
            for (int64_t j = 0; j < nb; ++j) {
                const float * restrict gr = row_in(g, b0 + j);
                const float * restrict yr = row_in(y, b0 + j);
                float * restrict out = ob + j * ne0;
                float t = 0.0f;
                for (int64_t i = 0; i < ne0; ++i) t += gr[i];
                for (int64_t i = 0; i < ne0; ++i) out[i] = gr[i] - gk_exp(yr[i]) * t;
            }
            continue;
        }
        for (int64_t j = 0; j < nb; ++j) {
            const float * restrict yr = row_in(y, b0 + j);
            float * restrict out = ob + j * ne0;
            for (int64_t i = 0; i < ne0; ++i) out[i] = yr[i];
        }
        const int64_t n = nb * ne0;
        for (int64_t k = 0; k < n; ++k) ob[k] = gk_exp(ob[k]);
        for (int64_t j = 0; j < nb; ++j) {
            const float * restrict gr = row_in(g, b0 + j);
            float * restrict out = ob + j * ne0;
            float t = 0.0f;
            for (int64_t i = 0; i < ne0; ++i) t += gr[i];
            for (int64_t i = 0; i < ne0; ++i) out[i] = gr[i] - out[i] * t;
        }
    }
}

/* y = x w^T for a small inner size K (linear's product: w has ne0 = K, ne1 = N; x has ne0 = K,
 * ne1 = B; dst is N x B, contiguous). ggml's CPU mul_mat calls a dot product per output element,
 * ~5 ns each at K = 4 (a 32x4 by 4x32 product took 4.9 us). Here each thread transposes up to 64
 * rows of w into a K x 64 block and accumulates its rows of y as vectors, k in order (float32
 * multiply-adds, as BLAS does). Any strides; K above GK_SMALL_K_MAX takes a plain loop. */
#define GK_SMALL_K_MAX 16
#define GK_SMALL_K_COLS 64

static inline float at2(const struct ggml_tensor * t, int64_t i0, int64_t i1) {
    return *(const float *) ((const char *) t->data + i0 * t->nb[0] + i1 * t->nb[1]);
}

GK_VEC void ggmlgrad_matmul_small_k(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    const struct ggml_tensor * w = dst->src[0];
    const struct ggml_tensor * x = dst->src[1];
    const int64_t K = w->ne[0], N = w->ne[1], B = x->ne[1];
    const int64_t per = (B + nth - 1) / nth, r0 = per * ith, r1 = r0 + per < B ? r0 + per : B;
    float * restrict out = (float *) dst->data;
    if (K > GK_SMALL_K_MAX) {
        for (int64_t b = r0; b < r1; ++b)
            for (int64_t n = 0; n < N; ++n) {
                float acc = 0.0f;
                for (int64_t k = 0; k < K; ++k) acc = fmaf(at2(x, k, b), at2(w, k, n), acc);  /* as dot_rows' tail */
                out[b * N + n] = acc;
            }
        return;
    }
    float wt[GK_SMALL_K_MAX * GK_SMALL_K_COLS];
    float acc[GK_SMALL_K_COLS];
    for (int64_t n0 = 0; n0 < N && r0 < r1; n0 += GK_SMALL_K_COLS) {
        const int64_t nc = N - n0 < GK_SMALL_K_COLS ? N - n0 : GK_SMALL_K_COLS;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < nc; ++j) wt[k * GK_SMALL_K_COLS + j] = at2(w, k, n0 + j);
        for (int64_t b = r0; b < r1; ++b) {
            for (int64_t j = 0; j < nc; ++j) acc[j] = 0.0f;
            for (int64_t k = 0; k < K; ++k) {
                const float xk = at2(x, k, b);
                const float * restrict wk = wt + k * GK_SMALL_K_COLS;
                for (int64_t j = 0; j < nc; ++j) acc[j] += xk * wk[j];
            }
            float * restrict y = out + b * N + n0;
            for (int64_t j = 0; j < nc; ++j) y[j] = acc[j];
        }
    }
}

/* y = x w^T for a few rows of x (a batch-1 forward; w has ne0 = K, ne1 = N, x ne0 = K, ne1 = B, both
 * with unit stride along K; dst N x B, contiguous). ggml's CPU product runs one AVX2 dot product per
 * output (a 784x256 weight times one row: 12.2 us, NumPy's sgemv 9.3); here four rows of w share
 * each load of x, 16 floats a step in two 8-lane vectors (the width both clones have natively, so
 * both compile the same multiply-adds: the AVX-512 clone gave other bits with 16-lane vectors), and
 * each output's lanes are summed in a fixed order. Threads take slices of the outputs. */
typedef float gk_v8 __attribute__((vector_size(32)));
typedef float gk_v4 __attribute__((vector_size(16)));

/* (vectors by pointer: a vector argument would depend on the clone's calling convention) */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline float hsum8(const gk_v8 * a) {
    gk_v4 l4, h4;
    memcpy(&l4, a, sizeof l4);
    memcpy(&h4, (const char *) a + sizeof l4, sizeof h4);
    const gk_v4 s4 = l4 + h4;
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* Dot products of row x (K floats) with nr (1..4) rows of w starting at w0, stride ws floats
 * (always inlined: each clone of the caller gets its own instructions). */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void dot_rows(const float * restrict x, const float * restrict w0, int64_t ws, int64_t K, int nr,
                            float * out) {
    gk_v8 a[4][2] = {{{0}, {0}}, {{0}, {0}}, {{0}, {0}}, {{0}, {0}}};
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        gk_v8 x0, x1, w;
        memcpy(&x0, x + k, sizeof x0);
        memcpy(&x1, x + k + 8, sizeof x1);
        for (int r = 0; r < 4; ++r)
            if (r < nr) {
                memcpy(&w, w0 + r * ws + k, sizeof w);
                a[r][0] += w * x0;
                memcpy(&w, w0 + r * ws + k + 8, sizeof w);
                a[r][1] += w * x1;
            }
    }
    for (int r = 0; r < nr; ++r) {
        float tail = 0.0f;
        /* fmaf: an in-order sum the AVX-512 clone would vectorize with separate roundings */
        for (int64_t t = k; t < K; ++t) tail = fmaf(x[t], w0[r * ws + t], tail);
        const gk_v8 s = a[r][0] + a[r][1];
        out[r] = hsum8(&s) + tail;
    }
}

GK_VEC void ggmlgrad_matvec_rows(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    const struct ggml_tensor * w = dst->src[0];
    const struct ggml_tensor * x = dst->src[1];
    const int64_t K = w->ne[0], N = w->ne[1], B = x->ne[1], ws = w->nb[1] / sizeof(float);
    const int64_t per = ((N + nth - 1) / nth + 3) & ~(int64_t)3;
    const int64_t n0 = per * ith < N ? per * ith : N, n1 = n0 + per < N ? n0 + per : N;
    float * restrict out = (float *) dst->data;
    for (int64_t n = n0; n < n1; n += 4) {
        const int nr = n1 - n < 4 ? (int) (n1 - n) : 4;
        for (int64_t b = 0; b < B; ++b) {
            float r[4];
            dot_rows((const float *) ((const char *) x->data + b * x->nb[1]), (const float *) w->data + n * ws, ws,
                     K, nr, r);
            for (int i = 0; i < nr; ++i) out[b * N + n + i] = r[i];
        }
    }
}

/* Column sums: dst (C floats) = the sum of the R = n / C rows of src[0] (n floats, contiguous), a
 * bias gradient's sum over the batch. ggml's repeat_back adds one row at a time through a per-row
 * call (256x64: 5 us). Each column is summed in row order starting from +0, as repeat_back does
 * (the same bits); threads take slices of the columns, so the result does not depend on their
 * number. Blocks of 64 columns stay in registers across the rows. */
#define GK_COLUMN_BLOCK 64

static inline int64_t numel4(const struct ggml_tensor * t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void column_block(float * restrict out, const float * restrict x, int64_t C, int64_t R, int64_t w) {
    float acc[GK_COLUMN_BLOCK];
    for (int64_t j = 0; j < w; ++j) acc[j] = 0.0f;
    for (int64_t r = 0; r < R; ++r) {
        const float * restrict row = x + r * C;
        for (int64_t j = 0; j < w; ++j) acc[j] += row[j];
    }
    for (int64_t j = 0; j < w; ++j) out[j] = acc[j];
}

GK_VEC void ggmlgrad_column_sum(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    const struct ggml_tensor * a = dst->src[0];
    const int64_t C = numel4(dst), R = C ? numel4(a) / C : 0;
    const int64_t per = ((C + nth - 1) / nth + 15) & ~(int64_t)15;
    const int64_t c0 = per * ith < C ? per * ith : C, c1 = c0 + per < C ? c0 + per : C;
    float * restrict out = (float *) dst->data;
    const float * restrict x = (const float *) a->data;
    int64_t c = c0;
    for (; c + GK_COLUMN_BLOCK <= c1; c += GK_COLUMN_BLOCK) column_block(out + c, x + c, C, R, GK_COLUMN_BLOCK);
    if (c < c1) column_block(out + c, x + c, C, R, c1 - c);
}

/* dst = src[0] + src[1] with src[1] (C floats, contiguous) added to every row of C floats of the
 * contiguous src[0]: linear's bias. ggml needs the bias repeated to a merged row first and then a
 * broadcast add (256x64: 1.7 + 3.5 us); here one pass. Threads take slices of the rows. */
GK_VEC void ggmlgrad_add_rows(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    const struct ggml_tensor * a = dst->src[0];
    const int64_t C = numel4(dst->src[1]), R = C ? numel4(a) / C : 0;
    const int64_t per = (R + nth - 1) / nth, r0 = per * ith, r1 = r0 + per < R ? r0 + per : R;
    const float * restrict b = (const float *) dst->src[1]->data;
    for (int64_t r = r0; r < r1; ++r) {
        const float * restrict x = (const float *) a->data + r * C;
        float * restrict y = (float *) dst->data + r * C;
        for (int64_t c = 0; c < C; ++c) y[c] = x[c] + b[c];
    }
}

/* The ABI this file was built for, checked by the loader before any kernel runs. */
int ggmlgrad_kernels_abi(void) { return 3; }
size_t ggmlgrad_kernels_tensor_size(void) { return sizeof(struct ggml_tensor); }

/* Cross-entropy against class indices (logits x: ne0 = C classes, ne1 = rows, rows contiguous;
 * targets int32, one per row), averaged over the counted rows: targets in [0, C) other than the
 * ignore index (passed as userdata). ggml built this from a one-hot (cast, repeat, sub, abs, step),
 * CROSS_ENTROPY_LOSS (an expf call per element) and its backward: about 25 us for 256 rows of 8.
 * Per counted row, loss = log(sum exp(x - m)) - (x[t] - m), m the row max, as torch's log_softmax
 * then gather: a -inf target logit gives +inf, a row holding NaN or with an infinite max gives NaN.
 * Rows are taken GK_CE_CHUNK floats at a time: x - m for the chunk, then one vectorised exp over it. */
#define GK_CE_CHUNK 4096

static inline int ce_counted(int32_t t, int64_t c, int32_t ignore) { return t >= 0 && t < c && t != ignore; }

/* For rows r0..r1 (r1 - r0 <= GK_CE_CHUNK / C): e[] = exp(x - m) per element, m[] the row maxima and
 * bad[] whether a row's softmax is NaN (it holds NaN, or its max is infinite). */
static inline void ce_exp_rows(const struct ggml_tensor * x, int64_t r0, int64_t r1, float * restrict e,
                               float * restrict m, int * restrict bad) {
    const int64_t c = x->ne[0];
    for (int64_t r = r0; r < r1; ++r) {
        const float * restrict xr = (const float *) ((const char *) x->data + r * x->nb[1]);
        float mx = -INFINITY;
        int nan = 0;
        for (int64_t i = 0; i < c; ++i) {
            mx = xr[i] > mx ? xr[i] : mx;
            nan |= xr[i] != xr[i];
        }
        m[r - r0] = mx;
        bad[r - r0] = nan || isinf(mx);
        float * restrict er = e + (r - r0) * c;
        for (int64_t i = 0; i < c; ++i) er[i] = xr[i] - mx;
    }
    const int64_t n = (r1 - r0) * c;
    for (int64_t i = 0; i < n; ++i) e[i] = gk_exp_nonpos(e[i]);   /* <= 0; a NaN row is marked bad */
}

/* The mean loss (dst: 1 float). One thread: the sum runs over rows in order (float64). */
GK_VEC void ggmlgrad_ce_index_mean(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) nth;
    if (ith != 0) return;
    const struct ggml_tensor * x = dst->src[0];
    const int32_t * restrict idx = (const int32_t *) dst->src[1]->data;
    const int32_t ignore = (int32_t) (intptr_t) userdata;
    const int64_t c = x->ne[0], rows = x->ne[1], per = GK_CE_CHUNK / c;
    float e[GK_CE_CHUNK], m[GK_CE_CHUNK];
    int bad[GK_CE_CHUNK];
    double total = 0.0;
    int64_t count = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        const int64_t r1 = r0 + per < rows ? r0 + per : rows;
        ce_exp_rows(x, r0, r1, e, m, bad);
        for (int64_t r = r0; r < r1; ++r) {
            const int32_t t = idx[r];
            if (!ce_counted(t, c, ignore)) continue;
            ++count;
            const float * restrict er = e + (r - r0) * c;
            float s = 0.0f;
            for (int64_t i = 0; i < c; ++i) s += er[i];
            const float xt = *(const float *) ((const char *) x->data + r * x->nb[1] + t * sizeof(float));
            total += bad[r - r0] ? (double) NAN : (double) (logf(s) - (xt - m[r - r0]));
        }
    }
    *(float *) dst->data = (float) (total / (double) count);   /* no counted row: 0/0, NaN (torch) */
}

/* Its gradient (dst: the logits' shape, contiguous): g / count * (softmax(x) - onehot(t)) on counted
 * rows, 0 on the others; dst->src = {g (1 float), x, targets}. Threads take slices of rows. */
GK_VEC void ggmlgrad_ce_index_backward(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    const struct ggml_tensor * x = dst->src[1];
    const int32_t * restrict idx = (const int32_t *) dst->src[2]->data;
    const int32_t ignore = (int32_t) (intptr_t) userdata;
    const int64_t c = x->ne[0], rows = x->ne[1], per = GK_CE_CHUNK / c;
    int64_t count = 0;
    for (int64_t r = 0; r < rows; ++r) count += ce_counted(idx[r], c, ignore);
    const float scale = *(const float *) dst->src[0]->data / (float) count;
    const int64_t slice = (rows + nth - 1) / nth, a = slice * ith < rows ? slice * ith : rows;
    const int64_t b = a + slice < rows ? a + slice : rows;
    float e[GK_CE_CHUNK], m[GK_CE_CHUNK];
    int bad[GK_CE_CHUNK];
    for (int64_t r0 = a; r0 < b; r0 += per) {
        const int64_t r1 = r0 + per < b ? r0 + per : b;
        ce_exp_rows(x, r0, r1, e, m, bad);
        for (int64_t r = r0; r < r1; ++r) {
            float * restrict out = (float *) dst->data + r * c;
            const int32_t t = idx[r];
            if (!ce_counted(t, c, ignore)) {   /* 0, or NaN where the softmax is (torch: -softmax * 0) */
                const float z = bad[r - r0] ? NAN : 0.0f;
                for (int64_t i = 0; i < c; ++i) out[i] = z;
                continue;
            }
            const float * restrict er = e + (r - r0) * c;
            float s = 0.0f;
            for (int64_t i = 0; i < c; ++i) s += er[i];
            const float k = bad[r - r0] ? NAN : scale / s;
            for (int64_t i = 0; i < c; ++i) out[i] = er[i] * k;
            out[t] -= bad[r - r0] ? 0.0f : scale;
        }
    }
}

/* AdamW, in place, with ggml_opt_step_adamw's rule and hyperparameters (dst is a view of the
 * parameter; dst->src = {w, g, m, v, the 7 floats alpha, beta1, beta2, eps, wd, 1/(1-beta1^t),
 * 1/(1-beta2^t)}, all contiguous float32): ggml's loop runs per row with pointers that may alias,
 * here the slices are restrict and the square roots and divisions go 16 lanes at a time.
 * Threads take equal slices. */
GK_VEC void ggmlgrad_adamw(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    const struct ggml_tensor * w = dst->src[0];
    const float * hp = (const float *) dst->src[4]->data;
    const float alpha = hp[0], beta1 = hp[1], beta2 = hp[2], eps = hp[3], wd = hp[4], beta1h = hp[5],
                beta2h = hp[6], keep = 1.0f - alpha * wd;
    const int64_t n = w->ne[0] * w->ne[1] * w->ne[2] * w->ne[3];
    const int64_t per = ((n + nth - 1) / nth + 15) & ~(int64_t) 15;
    const int64_t a = per * ith < n ? per * ith : n, count = n - a < per ? n - a : per;
    float * restrict p = (float *) w->data + a;
    const float * restrict g = (const float *) dst->src[1]->data + a;
    float * restrict m = (float *) dst->src[2]->data + a;
    float * restrict v = (float *) dst->src[3]->data + a;
    for (int64_t i = 0; i < count; ++i) {
        const float mi = m[i] * beta1 + g[i] * (1.0f - beta1);
        const float vi = v[i] * beta2 + g[i] * g[i] * (1.0f - beta2);
        m[i] = mi;
        v[i] = vi;
        const float mh = mi * beta1h;
        const float vh = sqrtf(vi * beta2h) + eps;
        p[i] = p[i] * keep - alpha * mh / vh;
    }
}

/* y = x w^T for few outputs (N <= 16: class logits, a value head) and a moderate inner size
 * (K <= GK_SMALL_N_K_MAX); w has ne0 = K, ne1 = N, x ne0 = K, ne1 = B (unit stride along K for
 * both); dst N x B, contiguous. BLAS takes no product with N < 32 and ggml's tinyBLAS ran 256x64
 * by 64x8 in ~5 us. Here w is transposed into K rows of two 8-lane vectors, and eight rows of x
 * go at a time (independent multiply-add chains), each output summed over k in order (the same
 * 8-lane operations in both clones). Threads take slices of the rows. */
#define GK_SMALL_N_MAX 16
#define GK_SMALL_N_K_MAX 512

GK_VEC void ggmlgrad_matmul_small_n(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    const struct ggml_tensor * w = dst->src[0];
    const struct ggml_tensor * x = dst->src[1];
    const int64_t K = w->ne[0], N = w->ne[1], B = x->ne[1];
    const int64_t per = (B + nth - 1) / nth, r0 = per * ith, r1 = r0 + per < B ? r0 + per : B;
    if (r0 >= r1) return;
    gk_v8 wt[GK_SMALL_N_K_MAX][2];
    memset(wt, 0, (size_t) K * sizeof wt[0]);
    for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) wt[k][n >> 3][n & 7] = at2(w, k, n);
    const int halves = N > 8 ? 2 : 1;
    float * restrict out = (float *) dst->data;
    for (int64_t b0 = r0; b0 < r1; b0 += 8) {
        const int nr = r1 - b0 < 8 ? (int) (r1 - b0) : 8;
        const float * xr[8];
        for (int r = 0; r < 8; ++r)   /* rows past the slice read row b0 again (their sums are not stored) */
            xr[r] = (const float *) ((const char *) x->data + (b0 + (r < nr ? r : 0)) * x->nb[1]);
        for (int h = 0; h < halves; ++h) {
            gk_v8 acc[8] = {{0}, {0}, {0}, {0}, {0}, {0}, {0}, {0}};
            for (int64_t k = 0; k < K; ++k) {
                const gk_v8 wk = wt[k][h];
                for (int r = 0; r < 8; ++r) acc[r] += xr[r][k] * wk;
            }
            for (int r = 0; r < nr; ++r) {
                const int64_t n0 = 8 * h, nn = N - n0 < 8 ? N - n0 : 8;
                for (int64_t j = 0; j < nn; ++j) out[(b0 + r) * N + n0 + j] = acc[r][j];
            }
        }
    }
}
