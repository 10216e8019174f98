/* The all-reduce bucket plan (train/allreduce_buckets.h): every parameter
 * in exactly one bucket, from the end of the buffer backwards; the plans
 * of the three models as docs/DISTRIBUTED.md gives them; big layers cut. */
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "nn/hparams.h"
#include "models/builtin.h"
#include "nn/model.h"
#include "train/allreduce_buckets.h"

static struct dt_model *model(const char *name)
{
	struct dt_err err = DT_ERR_INIT;
	struct dt_hparams hp;
	DT_CHECK_OK(dt_hparams_from_set(dt_hparams_default_set(name), &hp, &err), &err);
	struct dt_model *m = NULL;
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &hp, 28, 28, 1, 10, 4, &m, &err), &err);
	return m;
}

/* Plans m with bucket_mb, checks the coverage and returns the description. */
static int plan(struct dt_model *m, double bucket_mb, char *desc, size_t cap, size_t *largest)
{
	struct dt_allreduce_bucket *b = NULL;
	int n = dt_allreduce_plan_buckets(m, bucket_mb, &b);
	DT_CHECK(n >= 1);
	size_t end = dt_model_num_params(m);
	*largest = 0;
	for (int k = 0; k < n; k++) {
		DT_CHECK(b[k].count > 0);
		DT_CHECK_UINT_EQ(b[k].offset + b[k].count, end);
		end = b[k].offset;
		if (b[k].count > *largest)
			*largest = b[k].count;
	}
	DT_CHECK_UINT_EQ(end, 0);
	dt_allreduce_describe_buckets(m, b, n, desc, cap);
	free(b);
	return n;
}

DT_TEST(allreduce_buckets, default_plans_of_the_three_models)
{
	const char *names[] = { "mlp", "lenet", "cnn" };
	const char *want[] = {
		"1 bucket, from the end: 919 KiB (dense_3..dense_1)",
		"2 buckets, from the end: 231 KiB (dense_3..dense_1), 10 KiB (conv_2..conv_1)",
		"2 buckets, from the end: 1574 KiB (dense_2..dense_1), 74 KiB (conv_2..conv_1)",
	};
	for (int i = 0; i < 3; i++) {
		struct dt_model *m = model(names[i]);
		char desc[512];
		size_t largest;
		plan(m, 0, desc, sizeof(desc), &largest);
		DT_CHECK_STR_EQ(desc, want[i]);
		dt_model_free(m);
	}
}

/* Small buckets: a layer larger than bucket_mb is cut, no bucket exceeds
 * twice the cap, and the coverage still holds. */
DT_TEST(allreduce_buckets, small_buckets_cut_big_layers)
{
	struct dt_model *m = model("cnn");
	char desc[2048];
	size_t largest;
	int n = plan(m, 0.1, desc, sizeof(desc), &largest);
	DT_CHECK(n > 10); /* dense_1 alone is 1.5 MiB */
	DT_CHECK(largest * sizeof(float) <= 2 * 0.1 * 1024 * 1024);
	DT_CHECK_CONTAINS(desc, "(dense_1)");
	dt_model_free(m);
}
