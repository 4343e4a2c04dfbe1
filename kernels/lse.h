/* Log-sum-exp arithmetic of partial attention outputs (kernels/README.md, Numerics), host and
 * device. A partial output is (O, L) with O normalised and L = log(sum of exp(scores)); the
 * empty partial is (0, -inf). */
#ifndef DCP_KERNELS_LSE_H
#define DCP_KERNELS_LSE_H

#include "include/base/hd.h"

#include <math.h>

/* Weights that merge partials with log-sums l[0..n) (n >= 1): on return w[i] is the
 * factor of O_i in the merged O, and the merged log-sum is returned. If every l[i] is -inf
 * the result is -inf and every weight 0 (the merged O is then 0). A NaN l[i] (a partial
 * that met NaN or Inf inputs) makes the result and every weight NaN: a poisoned partial
 * never merges into a valid-looking output. */
DCP_HD float dcp_lse_weights(const float *l, int n, float *w)
{
    float m = -INFINITY;
    int nan = 0;
    for (int i = 0; i < n; i++) {
        nan |= l[i] != l[i];
        m = l[i] > m ? l[i] : m;
    }
    if (nan) {
        for (int i = 0; i < n; i++) w[i] = NAN;
        return NAN;
    }
    if (m == -INFINITY) {
        for (int i = 0; i < n; i++) w[i] = 0.0f;
        return -INFINITY;
    }
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        w[i] = expf(l[i] - m); /* exp(-inf) = 0 */
        sum += w[i];
    }
    for (int i = 0; i < n; i++) w[i] /= sum;
    return m + logf(sum);
}

#endif
