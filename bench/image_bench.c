/*
 * image_bench.c — decode throughput of the image_folder input pipeline.
 *
 *   build/bench-images DIR SIZE BATCHES
 *
 * Loads DIR as --problem=image_folder at SIZExSIZE (crop_to_aspect_ratio,
 * random flip) and times BATCHES batches of 32 through the pipeline with
 * no prefetch, so the figure is what the decoders alone deliver: images/s
 * with 1 and with 2 decoding threads. Compare with a training step's
 * consumption (examples/s of `dtrain train` on the same data).
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "data/pipeline.h"
#include "data/problem.h"

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s DIR SIZE BATCHES\n", argv[0]);
		return 2;
	}
	const int size = atoi(argv[2]), batches = atoi(argv[3]);
	for (int threads = 1; threads <= 2; threads++) {
		struct dt_data_options o;
		dt_data_options_init(&o);
		o.image_height = o.image_width = size;
		o.crop_to_aspect_ratio = 1;
		o.random_flip = 1;
		o.data_threads = threads;
		struct dt_dataset ds;
		struct dt_err err = DT_ERR_INIT;
		int64_t t0 = dt_now_ns();
		if (dt_problem_load("image_folder", argv[1], &o, DT_SPLIT_TRAIN, 1, &ds, &err)) {
			fprintf(stderr, "error: %s\n", err.msg);
			return 4;
		}
		double load_s = (double)(dt_now_ns() - t0) / 1e9;
		struct dt_pipeline_config c = { .data = &ds, .batch_size = 32, .seed = 1, .shard_count = 1 };
		struct dt_pipeline *p;
		if (dt_pipeline_new(&c, &p, &err)) {
			fprintf(stderr, "error: %s\n", err.msg);
			return 1;
		}
		t0 = dt_now_ns();
		for (int b = 0; b < batches; b++)
			(void)dt_pipeline_next(p);
		double s = (double)(dt_now_ns() - t0) / 1e9;
		printf("threads %d: load+check %u images %.2f s (%.0f images/s); decode+resize to %dx%d: %.0f images/s\n",
		       threads, ds.count, load_s, ds.count / load_s, size, size, batches * 32 / s);
		dt_pipeline_free(p);
		dt_dataset_release(&ds);
	}
	return 0;
}
