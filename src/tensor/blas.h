/*
 * blas.h — OpenBLAS, loaded so that it always runs its fastest kernels.
 *
 * Debian's OpenBLAS 0.3.21 picks its kernels once, when the library is
 * loaded, from the CPU id; it does not know recent Xeons and falls back to
 * SSE3 kernels that are 5x slower (docs/BLAS.md, shared reference
 * performance.md finding 1). The environment variable OPENBLAS_CORETYPE
 * overrides the choice but is only read at load time. So libdtrain does not
 * link OpenBLAS: it dlopen()s it on first use, after choosing the core from
 * the CPU's features and putting it in the environment (children inherit
 * it). A user's own OPENBLAS_CORETYPE always wins.
 *
 * Threads: one pool per process. OpenBLAS's pool is that pool; its size is
 * --threads (OPENBLAS_NUM_THREADS is set before loading, so no extra idle
 * threads are created), and dt_blas_set_threads() changes it later.
 *
 * All functions are thread-safe; dt_blas_load() is idempotent.
 */
#ifndef DT_TENSOR_BLAS_H
#define DT_TENSOR_BLAS_H

#include "base/err.h"

struct dt_blas_info {
	const char *core;      /* OpenBLAS's kernel set, e.g. "SkylakeX" */
	const char *config;    /* openblas_get_config() */
	const char *core_source; /* "environment", "dtrain (CPU has AVX-512)", "OpenBLAS autodetect" */
	int threads;
};

/* Loads OpenBLAS with `threads` threads (<= 0: 1). Later calls only adjust
 * the thread count. Fails if the library cannot be found. */
enum dt_status dt_blas_load(int threads, struct dt_err *err) DT_MUST_CHECK;
void dt_blas_set_threads(int threads);
/* Loads with defaults if needed; never NULL fields after a successful load. */
struct dt_blas_info dt_blas_info(void);

/* The core dtrain would choose for this CPU (NULL: leave it to OpenBLAS). */
const char *dt_blas_preferred_core(void);

/*
 * Row-major single-precision GEMM: C = alpha * op(A) * op(B) + beta * C,
 * op(A) is (M, K), op(B) is (K, N), C is (M, N); lda/ldb/ldc are row strides.
 * Loads OpenBLAS on first call (aborts with a message if it cannot: every
 * command loads it explicitly first and reports the error properly).
 */
void dt_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
	      const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
