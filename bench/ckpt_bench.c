/*
 * ckpt_bench — checkpoint save time beside writing and fsyncing the same
 * bytes raw, in the same run (target: save ≤ 1.2 × raw; issue 7).
 *
 * The model is `mb` MiB of float32 in four variables of shape (R, 1024) (no
 * optimizer slots, so the checkpoint's tensor bytes equal the raw bytes).
 * One rep of each, interleaved (raw, ckpt, raw, ckpt, ...):
 *   raw   open, write the parameter buffer in one call, fsync, close
 *   ckpt  dt_ckpt_save: CRC-32C, header, temp file, fsync, rename, fsync
 *         dir, state file (temp, fsync, rename, fsync dir); keep_max 0
 * Files of the previous rep are deleted outside the timed region. The
 * directory must be on a real disk (a tmpfs makes fsync free).
 *
 * Usage: ckpt_bench MB REPS DIR
 * Prints one JSON object per line, then the medians and their ratio:
 *   {"what": "raw"|"ckpt", "mb": 100, "rep": 0, "ms": ...}
 *   {"mb": 100, "raw_ms": ..., "ckpt_ms": ..., "ratio": ...}
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "train/checkpoint.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double raw_write(const char *path, const void *buf, size_t len)
{
	int64_t t0 = dt_now_ns();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "ckpt_bench: cannot create '%s': %s\n", path, strerror(errno));
		exit(1);
	}
	const char *p = buf;
	size_t left = len;
	while (left > 0) {
		ssize_t w = write(fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			fprintf(stderr, "ckpt_bench: cannot write '%s': %s\n", path, strerror(errno));
			exit(1);
		}
		p += w;
		left -= (size_t)w;
	}
	if (fsync(fd) != 0 || close(fd) != 0) {
		fprintf(stderr, "ckpt_bench: cannot fsync '%s': %s\n", path, strerror(errno));
		exit(1);
	}
	return (double)(dt_now_ns() - t0) / 1e6;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: ckpt_bench MB REPS DIR\n");
		return 2;
	}
	int mb = atoi(argv[1]), reps = atoi(argv[2]);
	const char *dir = argv[3];
	if (mb < 1 || reps < 1 || reps > 1000) {
		fprintf(stderr, "ckpt_bench: MB >= 1 and 1 <= REPS <= 1000\n");
		return 2;
	}
	const int cols = 1024, nvars = 4;
	size_t total = (size_t)mb << 20;
	size_t rows = total / sizeof(float) / cols / nvars;
	if (rows == 0)
		rows = 1;
	size_t count = rows * cols * nvars;
	float *params = dt_xalloc_aligned(count, sizeof(float));
	for (size_t i = 0; i < count; i++)
		params[i] = (float)(i % 9973) * 1e-3f;
	struct dt_variable vars[4];
	memset(vars, 0, sizeof(vars));
	for (int v = 0; v < nvars; v++) {
		snprintf(vars[v].name, sizeof(vars[v].name), "layer_%d/kernel", v + 1);
		vars[v].ndim = 2;
		vars[v].shape[0] = (int64_t)rows;
		vars[v].shape[1] = cols;
		vars[v].offset = (size_t)v * rows * cols;
		vars[v].count = rows * cols;
	}
	struct dt_ckpt_contents c;
	memset(&c, 0, sizeof(c));
	c.vars = vars;
	c.num_vars = nvars;
	c.params = params;
	c.num_params = count;
	c.optimizer = DT_OPTIM_SGD;

	double *raw = dt_xcalloc((size_t)reps, sizeof(double)), *ck = dt_xcalloc((size_t)reps, sizeof(double));
	char raw_path[4096], prev[DT_CKPT_PATH_MAX] = "";
	snprintf(raw_path, sizeof(raw_path), "%s/raw.bin", dir);
	for (int r = 0; r < reps; r++) {
		raw[r] = raw_write(raw_path, params, count * sizeof(float));
		unlink(raw_path);
		printf("{\"what\": \"raw\", \"mb\": %d, \"rep\": %d, \"ms\": %.1f}\n", mb, r, raw[r]);
		struct dt_ckpt_saved out;
		struct dt_err err = DT_ERR_INIT;
		c.global_step = r + 1;
		int64_t t0 = dt_now_ns();
		if (dt_ckpt_save(dir, &c, 0, &out, &err)) {
			fprintf(stderr, "ckpt_bench: %s\n", err.msg);
			return 1;
		}
		ck[r] = (double)(dt_now_ns() - t0) / 1e6;
		if (prev[0])
			unlink(prev);
		snprintf(prev, sizeof(prev), "%s", out.path);
		printf("{\"what\": \"ckpt\", \"mb\": %d, \"rep\": %d, \"ms\": %.1f, \"bytes\": %llu}\n", mb, r, ck[r],
		       (unsigned long long)out.bytes);
		fflush(stdout);
	}
	unlink(prev);
	double mr = median(raw, reps), mc = median(ck, reps);
	printf("{\"mb\": %d, \"raw_ms\": %.1f, \"ckpt_ms\": %.1f, \"ratio\": %.3f}\n", mb, mr, mc, mc / mr);
	free(raw);
	free(ck);
	free(params);
	return 0;
}
