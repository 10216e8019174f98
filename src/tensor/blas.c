#include "tensor/blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/log.h"

/* CBLAS enum values (from cblas.h, fixed by the CBLAS standard). */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef void (*sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha,
			 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
typedef void (*set_threads_fn)(int);
typedef int (*get_threads_fn)(void);
typedef char *(*get_string_fn)(void);

/* Loaded once, then read-only except the thread count. */
static struct {
	pthread_mutex_t lock;
	int loaded;
	sgemm_fn sgemm;
	set_threads_fn set_threads;
	get_threads_fn get_threads;
	get_string_fn corename;
	get_string_fn config;
	const char *core_source;
} blas = { .lock = PTHREAD_MUTEX_INITIALIZER };

const char *dt_blas_preferred_core(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
		return "SkylakeX";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "Haswell";
#endif
	return NULL;
}

static enum dt_status load_locked(int threads, struct dt_err *err)
{
	const char *user_core = getenv("OPENBLAS_CORETYPE");
	if (user_core && *user_core) {
		blas.core_source = "OPENBLAS_CORETYPE from the environment";
	} else {
		const char *core = dt_blas_preferred_core();
		if (core) {
			setenv("OPENBLAS_CORETYPE", core, 1);
			blas.core_source = "chosen by dtrain from the CPU's features";
		} else {
			blas.core_source = "OpenBLAS's own detection";
		}
	}
	if (!getenv("OPENBLAS_NUM_THREADS")) {
		char n[16];
		snprintf(n, sizeof(n), "%d", threads);
		setenv("OPENBLAS_NUM_THREADS", n, 1);
	}
	static const char *const names[] = { "libopenblas.so.0", "libopenblas.so" };
	void *h = NULL;
	for (size_t i = 0; i < DT_ARRAY_LEN(names) && !h; i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
	if (!h)
		return dt_err_set(err, DT_RUNTIME, "cannot load OpenBLAS (libopenblas.so.0): %s", dlerror());
	blas.sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
	blas.set_threads = (set_threads_fn)dlsym(h, "openblas_set_num_threads");
	blas.get_threads = (get_threads_fn)dlsym(h, "openblas_get_num_threads");
	blas.corename = (get_string_fn)dlsym(h, "openblas_get_corename");
	blas.config = (get_string_fn)dlsym(h, "openblas_get_config");
	if (!blas.sgemm || !blas.set_threads || !blas.get_threads || !blas.corename || !blas.config)
		return dt_err_set(err, DT_RUNTIME, "the loaded BLAS library is not OpenBLAS (missing openblas_* symbols)");
	blas.loaded = 1;
	return DT_OK;
}

enum dt_status dt_blas_load(int threads, struct dt_err *err)
{
	if (threads <= 0)
		threads = 1;
	pthread_mutex_lock(&blas.lock);
	enum dt_status st = DT_OK;
	int first = !blas.loaded;
	if (first)
		st = load_locked(threads, err);
	pthread_mutex_unlock(&blas.lock);
	if (st)
		return st;
	if (blas.get_threads() != threads)
		blas.set_threads(threads);
	if (first)
		dt_debug("blas: OpenBLAS core %s (%s), %d thread(s)", blas.corename(), blas.core_source, threads);
	return DT_OK;
}

void dt_blas_set_threads(int threads)
{
	struct dt_err err = DT_ERR_INIT;
	if (dt_blas_load(threads, &err) != DT_OK) {
		fprintf(stderr, "fatal: %s\n", err.msg);
		abort();
	}
}

static void ensure_loaded(void)
{
	if (__atomic_load_n(&blas.loaded, __ATOMIC_ACQUIRE))
		return;
	struct dt_err err = DT_ERR_INIT;
	pthread_mutex_lock(&blas.lock);
	enum dt_status st = blas.loaded ? DT_OK : load_locked(1, &err);
	pthread_mutex_unlock(&blas.lock);
	if (st) {
		fprintf(stderr, "fatal: %s\n", err.msg);
		abort();
	}
}

struct dt_blas_info dt_blas_info(void)
{
	ensure_loaded();
	struct dt_blas_info info = { blas.corename(), blas.config(), blas.core_source, blas.get_threads() };
	return info;
}

void dt_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
	      const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	ensure_loaded();
	blas.sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS, trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS,
		   M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
