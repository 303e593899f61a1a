// The reduction template: every op of the reduce op spec family that folds rows
// of a contiguous [rows, cols] input (kernels/reductions.cpp moves the reduced
// dims last), in every dtype, and the scans along a row.
//
// Host defines (kernels/reductions.cpp): CT (accumulation type: float, double or
// long), CT_FLOAT, K(x), IN_T / LOAD(p, o), OUT_T / STORE(p, i, v), optional
// OUT2_T / STORE2(p, i, v) (a second output: an index, or var_mean's mean),
// RED_<op> or SCAN_<op>. p0: the op's number (correction, ord).
//
// Reductions: one work-group per row; each item folds a strided slice of the
// row into an Acc (in index order, so ties keep the first index), then the
// group merges the Accs as a tree in local memory (pairwise, as the CPU's sum).

#define REDUCE_GROUP 64

typedef struct {
  CT a;    // the value: sum, product, extremum, mean, running max
  CT b;    // var's M2, logsumexp's scaled sum
  long i;  // extremum's index, count, all/any
} Acc;

#if CT_FLOAT
#define EW_ISNAN(x) isnan(x)
#else
#define EW_ISNAN(x) 0
#endif

// max/min: NaN wins (the first NaN), then the larger/smaller value, then the first index
#if defined(RED_max) || defined(RED_argmax)
#define BETTER(x, y) ((EW_ISNAN(x) && !EW_ISNAN(y)) || (x) > (y))
#define EXTREMUM 1
#elif defined(RED_min) || defined(RED_argmin)
#define BETTER(x, y) ((EW_ISNAN(x) && !EW_ISNAN(y)) || (x) < (y))
#define EXTREMUM 1
#endif
#define SAME(x, y) ((x) == (y) || (EW_ISNAN(x) && EW_ISNAN(y)))

inline Acc acc_init(void) {
  Acc r;
  r.a = K(0.0);
  r.b = K(0.0);
  r.i = 0;
#if defined(RED_prod)
  r.a = K(1.0);
#elif defined(EXTREMUM)
  r.i = -1;
#elif defined(RED_all)
  r.i = 1;
#elif defined(RED_logsumexp)
  r.a = -INFINITY;
#endif
  return r;
}

inline void acc_step(Acc* r, CT v, long idx, CT p0) {
#if defined(RED_sum) || defined(RED_mean)
  r->a += v;
#elif defined(RED_nansum)
  if (!EW_ISNAN(v)) r->a += v;
#elif defined(RED_prod)
  r->a *= v;
#elif defined(EXTREMUM)
  if (r->i < 0 || BETTER(v, r->a)) {
    r->a = v;
    r->i = idx;
  }
#elif defined(RED_all)
  r->i = r->i && (v != 0);
#elif defined(RED_any)
  r->i = r->i || (v != 0);
#elif defined(RED_count_nonzero)
  r->i += (v != 0);
#elif defined(RED_var)
  // Welford: a mean, b M2, i count
  r->i += 1;
  const CT d = v - r->a;
  r->a += d / (CT)r->i;
  r->b += d * (v - r->a);
#elif defined(RED_logsumexp)
  // a running max, b the sum of exp(x - a)
  if (isnan(v) || isnan(r->a)) {
    r->a = NAN;
  } else if (v == r->a) {
    r->b += K(1.0);
  } else if (v > r->a) {
    r->b = r->b * exp(r->a - v) + K(1.0);
    r->a = v;
  } else {
    r->b += exp(v - r->a);
  }
#elif defined(RED_norm)
  const CT x = fabs(v);
#if NORM_KIND == 1
  if (r->i == 0 || isnan(x) || x > r->a) r->a = isnan(r->a) ? r->a : x;
  r->i = 1;
#elif NORM_KIND == 2
  if (r->i == 0 || isnan(x) || x < r->a) r->a = isnan(r->a) ? r->a : x;
  r->i = 1;
#elif NORM_KIND == 3
  r->a += x != K(0.0) ? K(1.0) : K(0.0);
#elif NORM_KIND == 4
  r->a += x;
#elif NORM_KIND == 5
  r->a += x * x;
#else
  r->a += pow(x, p0);
#endif
#endif
}

inline void acc_merge(Acc* r, const Acc* o) {
#if defined(RED_sum) || defined(RED_mean) || defined(RED_nansum)
  r->a += o->a;
#elif defined(RED_prod)
  r->a *= o->a;
#elif defined(EXTREMUM)
  if (o->i >= 0 && (r->i < 0 || BETTER(o->a, r->a) || (SAME(o->a, r->a) && o->i < r->i))) *r = *o;
#elif defined(RED_all)
  r->i = r->i && o->i;
#elif defined(RED_any)
  r->i = r->i || o->i;
#elif defined(RED_count_nonzero)
  r->i += o->i;
#elif defined(RED_var)
  if (o->i == 0) return;
  if (r->i == 0) {
    *r = *o;
    return;
  }
  const long n = r->i + o->i;
  const CT d = o->a - r->a;
  r->a += d * ((CT)o->i / (CT)n);
  r->b += o->b + d * d * ((CT)r->i * (CT)o->i / (CT)n);
  r->i = n;
#elif defined(RED_logsumexp)
  if (isnan(o->a) || isnan(r->a)) {
    r->a = NAN;
  } else if (o->b == K(0.0)) {
  } else if (r->b == K(0.0)) {
    *r = *o;
  } else if (o->a == r->a) {
    r->b += o->b;
  } else if (o->a > r->a) {
    r->b = r->b * exp(r->a - o->a) + o->b;
    r->a = o->a;
  } else {
    r->b += o->b * exp(o->a - r->a);
  }
#elif defined(RED_norm)
#if NORM_KIND == 1
  if (o->i && (r->i == 0 || isnan(o->a) || o->a > r->a)) r->a = isnan(r->a) ? r->a : o->a;
  r->i |= o->i;
#elif NORM_KIND == 2
  if (o->i && (r->i == 0 || isnan(o->a) || o->a < r->a)) r->a = isnan(r->a) ? r->a : o->a;
  r->i |= o->i;
#else
  r->a += o->a;
#endif
#endif
}

__kernel __attribute__((reqd_work_group_size(REDUCE_GROUP, 1, 1)))
void reduce_rows(BUF(uchar, out), BUF(uchar, out2), BUF(const uchar, in), ulong rows, ulong cols, CT p0) {
  __local Acc partial[REDUCE_GROUP];
  const ulong row = get_group_id(0);
  const uint lid = get_local_id(0);
  Acc acc = acc_init();
  if (row < rows) {
    __global const IN_T* x = (__global const IN_T*)AT(const uchar, in) + row * cols;
    for (ulong c = lid; c < cols; c += REDUCE_GROUP) acc_step(&acc, LOAD(x, c), (long)c, p0);
  }
  partial[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint step = REDUCE_GROUP / 2; step > 0; step >>= 1) {
    if (lid < step) {
      Acc mine = partial[lid];
      const Acc other = partial[lid + step];
      acc_merge(&mine, &other);
      partial[lid] = mine;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid != 0 || row >= rows) return;
  const Acc r = partial[0];
  __global OUT_T* o = (__global OUT_T*)AT(uchar, out);
#if defined(RED_mean)
  STORE(o, row, r.a / (CT)cols);
#elif defined(RED_argmax) || defined(RED_argmin)
  STORE(o, row, r.i);
#elif defined(EXTREMUM)
  STORE(o, row, r.a);
#ifdef OUT2_T
  STORE2((__global OUT2_T*)AT(uchar, out2), row, r.i);
#endif
#elif defined(RED_all) || defined(RED_any) || defined(RED_count_nonzero)
  STORE(o, row, r.i);
#elif defined(RED_var)
  // p0: the correction; divided by max(0, N - correction), as the CPU
  CT denom = (CT)r.i - p0;
  denom = denom > K(0.0) ? denom : K(0.0);
  const CT var = r.b / denom;
#if STD
  STORE(o, row, sqrt(var));
#else
  STORE(o, row, var);
#endif
#ifdef OUT2_T
  STORE2((__global OUT2_T*)AT(uchar, out2), row, r.i ? r.a : NAN);  // the mean of nothing is NaN
#endif
#elif defined(RED_logsumexp)
  STORE(o, row, isinf(r.a) || isnan(r.a) ? r.a : r.a + log(r.b));
#elif defined(RED_norm)
#if NORM_KIND == 5
  STORE(o, row, sqrt(r.a));
#elif NORM_KIND == 0
  STORE(o, row, pow(r.a, K(1.0) / p0));
#else
  STORE(o, row, r.a);
#endif
#else
  STORE(o, row, r.a);
#endif
}

// Scans along each row, one item per row, in order (cumsum, cumprod, cummax,
// cummin with their indices, logcumsumexp). SCAN_T: the running value's type
// (double for float inputs when the device has it, as the CPU accumulates).
__kernel void scan_rows(BUF(uchar, out), BUF(uchar, out2), BUF(const uchar, in), ulong rows, ulong cols, CT p0) {
  const ulong row = get_global_id(0);
  if (row >= rows) return;
  __global const IN_T* x = (__global const IN_T*)AT(const uchar, in) + row * cols;
  __global OUT_T* o = (__global OUT_T*)AT(uchar, out) + row * cols;
#if defined(SCAN_cumsum)
  SCAN_T s = 0;
  for (ulong c = 0; c < cols; ++c) {
    s += (SCAN_T)LOAD(x, c);
    STORE(o, c, s);
  }
#elif defined(SCAN_cumprod)
  SCAN_T s = 1;
  for (ulong c = 0; c < cols; ++c) {
    s *= (SCAN_T)LOAD(x, c);
    STORE(o, c, s);
  }
#elif defined(SCAN_cummax) || defined(SCAN_cummin)
  __global long* ix = (__global long*)AT(uchar, out2) + row * cols;
  CT best = K(0.0);
  long at = 0;
  for (ulong c = 0; c < cols; ++c) {
    const CT v = LOAD(x, c);
    // NaN sticks; ties move to the later index, as the CPU's cummax/cummin
#if defined(SCAN_cummax)
    const int take = c == 0 || EW_ISNAN(v) || (!EW_ISNAN(best) && v >= best);
#else
    const int take = c == 0 || EW_ISNAN(v) || (!EW_ISNAN(best) && v <= best);
#endif
    if (take) {
      best = v;
      at = (long)c;
    }
    STORE(o, c, best);
    ix[c] = at;
  }
#elif defined(SCAN_logcumsumexp)
  SCAN_T m = -INFINITY, s = 0;
  for (ulong c = 0; c < cols; ++c) {
    const SCAN_T v = (SCAN_T)LOAD(x, c);
    if (isnan(v) || isnan(m)) {
      m = NAN;
    } else if (v == m) {
      s += 1;
    } else if (v > m) {
      s = s * exp(m - v) + 1;
      m = v;
    } else {
      s += exp(v - m);
    }
    STORE(o, c, (isinf(m) || isnan(m)) ? m : m + log(s));
  }
#endif
}
