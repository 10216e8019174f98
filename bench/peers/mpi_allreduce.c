/*
 * mpi_allreduce.c — Open MPI's MPI_Allreduce timed exactly like
 * bench/allreduce_bench.c times dtrain (bench/allreduce builds it with mpicc
 * and runs it with mpirun, once over --mca btl tcp,self and once with the
 * default shared-memory transport).
 *
 *   mpirun -np N ./mpi_allreduce LABEL SAMPLES MIN_SAMPLE_MS SIZE...
 *
 * float32 SUM in place; per size 3 warm-ups, rank 0 picks `inner` so a
 * sample lasts >= MIN_SAMPLE_MS and broadcasts it, SAMPLES samples; time per
 * call = max over ranks, median sample reported. Rank 0 prints one JSON line
 * per size with "impl": LABEL.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, n;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (argc < 5) {
		if (rank == 0)
			fprintf(stderr, "usage: mpi_allreduce LABEL SAMPLES MIN_SAMPLE_MS SIZE...\n");
		MPI_Finalize();
		return 2;
	}
	const char *label = argv[1];
	int samples = atoi(argv[2]), min_ms = atoi(argv[3]);
	size_t maxb = 0;
	for (int i = 4; i < argc; i++)
		if ((size_t)atoll(argv[i]) > maxb)
			maxb = (size_t)atoll(argv[i]);
	float *buf = calloc(maxb / 4 + 1, sizeof(float));
	double *t = calloc((size_t)samples, sizeof(double));
	for (int a = 4; a < argc; a++) {
		int count = (int)(atoll(argv[a]) / 4);
		for (int w = 0; w < 3; w++)
			MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (int w = 0; w < 3; w++)
			MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		double per = (MPI_Wtime() - t0) / 3;
		double want = min_ms / 1e3 / (per > 1e-7 ? per : 1e-7);
		int inner = want < 1 ? 1 : want > 100000 ? 100000 : (int)ceil(want);
		MPI_Bcast(&inner, 1, MPI_INT, 0, MPI_COMM_WORLD);
		for (int s = 0; s < samples; s++) {
			double s0 = MPI_Wtime();
			for (int i = 0; i < inner; i++)
				MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			double us = (MPI_Wtime() - s0) * 1e6 / inner, mx;
			MPI_Allreduce(&us, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
			t[s] = mx;
		}
		if (rank == 0) {
			qsort(t, (size_t)samples, sizeof(double), cmp_double);
			double us = t[samples / 2];
			double bus = 2.0 * (n - 1) / n * (double)count * 4 / (us * 1e-6) / 1e9;
			printf("{\"impl\": \"%s\", \"ranks\": %d, \"bytes\": %d, \"us\": %.2f, \"busbw_gbs\": %.3f, "
			       "\"min_us\": %.2f, \"max_us\": %.2f, \"inner\": %d}\n",
			       label, n, count * 4, us, bus, t[0], t[samples - 1], inner);
			fflush(stdout);
		}
	}
	free(buf);
	free(t);
	MPI_Finalize();
	return 0;
}
