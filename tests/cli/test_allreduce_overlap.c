/* Multi-worker mirrored training with the gradient all-reduce started
 * during the backward pass (train/allreduce_role.c) ends with exactly the
 * variables of the same job with the all-reduce after the backward pass
 * (DTRAIN_ALLREDUCE_NO_OVERLAP=1, a debug switch): the same buckets in the
 * same order, reduced once each gradient is final. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_procs.h"
#include "dt_test.h"

#define TASK_WAIT_S 240.0

/* Runs two workers (`dtrain train <args> --output_dir=DIR`) with `extra_env`
 * (may be NULL) on both; checks that worker 0 logged `expect`; returns the
 * final checkpoint's "crc32c X" (of every tensor's bytes) in crc. */
static void run_job(const char *const *args, const char *dir, const char *extra_env, const char *expect, char *crc,
		    size_t cap)
{
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	char out_flag[700];
	snprintf(out_flag, sizeof(out_flag), "--output_dir=%s", dir);
	const char *argv[24] = { "dtrain", "train" };
	int n = 2;
	for (int k = 0; args[k] && n < 22; k++)
		argv[n++] = args[k];
	argv[n++] = out_flag;
	argv[n] = NULL;
	const char *env[] = { extra_env, NULL };
	for (int i = 0; i < 2; i++)
		cluster_start(&c, "worker", i, NULL, argv, env);
	for (int i = 0; i < 2; i++)
		EXPECT_EXIT(&c, &c.tasks[i], 0, TASK_WAIT_S);
	char *err0 = task_read(&c.tasks[0], 1);
	DT_CHECK_CONTAINS(err0, expect);
	free(err0);

	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "ckpt", "verify", dir, NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	const char *p = strstr(r.out, "crc32c ");
	DT_CHECK(p != NULL);
	snprintf(crc, cap, "%.15s", p);
	dt_run_release(&r);
}

/* lenet: the dense layers' bucket (231 KiB) is reduced while the
 * convolutions run backward; momentum and dropout, so any gradient read
 * before it is final would change the end result. The overlapped run also
 * checks the replicas against each other every 20 steps. */
DT_TEST_TIMEOUT(allreduce, overlapped_and_after_backward_end_with_the_same_variables, 300)
{
	char a_dir[600], b_dir[600], a_crc[32], b_crc[32];
	dt_test_path(a_dir, sizeof(a_dir), "overlap");
	dt_test_path(b_dir, sizeof(b_dir), "after");
	const char *args[] = { "--model=lenet", "--problem=fashion_mnist", "--train_steps=60", "--log_every=0",
			       "--hparams=optimizer=momentum,momentum=0.9,batch_size=32,dropout=0.3",
			       "--check_replicas_every=20", "--noeval", NULL };
	run_job(args, a_dir, NULL, "2 buckets, from the end: 231 KiB (dense_3..dense_1), 10 KiB (conv_2..conv_1); "
				   "started during the backward pass", a_crc, sizeof(a_crc));
	run_job(args, b_dir, "DTRAIN_ALLREDUCE_NO_OVERLAP=1", "after the backward pass (DTRAIN_ALLREDUCE_NO_OVERLAP)",
		b_crc, sizeof(b_crc));
	fprintf(stderr, "final checkpoint: overlapped %s, after backward %s\n", a_crc, b_crc);
	DT_CHECK_STR_EQ(a_crc, b_crc);
}
