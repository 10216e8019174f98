/* t2t's transformer on t2t's text problems through the CLI: one process, two
 * all-reduce workers and async parameter servers each train
 * transformer_test on algorithmic_reverse_binary40 and their loss falls;
 * the progress and eval lines carry t2t's metrics by t2t's names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_procs.h"
#include "dt_test.h"

#define TASK_WAIT_S 60.0

/* Short warm-up and a smaller token batch, so a few hundred steps learn
 * something in seconds on a loaded machine. */
#define TEXT_ARGS                                                                                        \
	"--model=transformer", "--hparams_set=transformer_test", "--problem=algorithmic_reverse_binary40", \
		"--hparams=batch_size=1024,learning_rate_warmup_steps=100,learning_rate_constant=0.5", "--log_every=25"

/* The loss of the first and of the last progress line in `log`. */
static void first_last_loss(const char *log, double *first, double *last)
{
	*first = *last = -1;
	for (const char *p = log; (p = strstr(p, " loss ")) != NULL; p += 6) {
		double v = atof(p + 6);
		if (*first < 0)
			*first = v;
		*last = v;
	}
}

static void check_loss_falls(const char *who, const char *err)
{
	double first, last;
	first_last_loss(err, &first, &last);
	fprintf(stderr, "%s: loss %.4f at the first progress line, %.4f at the last\n", who, first, last);
	DT_CHECK(first > 0);
	DT_CHECK(last > 0);
	DT_CHECK(last < first - 0.05);
}

DT_TEST_TIMEOUT(train_text, transformer_on_reverse_binary40_loss_falls, 90)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", TEXT_ARGS, "--train_steps=300", NULL }, NULL, TASK_WAIT_S);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "generated from the seed (length 40)");
	DT_CHECK_CONTAINS(r.err, " accuracy_per_sequence ");
	DT_CHECK_CONTAINS(r.err, " neg_log_perplexity ");
	DT_CHECK_CONTAINS(r.err, " tokens/s");
	DT_CHECK_CONTAINS(r.out, "eval (test split, 10000 examples) at global step 300: accuracy = ");
	DT_CHECK_CONTAINS(r.out, "accuracy_per_sequence = ");
	check_loss_falls("local", r.err);
	/* Per-token accuracy above chance on held-out sequences. */
	const char *a = strstr(r.out, "accuracy = ");
	DT_CHECK(a != NULL);
	DT_CHECK(atof(a + 11) > 0.52);
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(train_text, an_image_model_on_a_text_problem_is_refused, 30)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=mlp", "--problem=algorithmic_sort_problem",
					 "--train_steps=1", NULL }, NULL, 20);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "model 'mlp' reads images, and this problem is text: use --model=transformer");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--problem=text2text_tmpdir",
					 "--train_steps=1", NULL }, NULL, 20);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "problem 'text2text_tmpdir' needs --data_dir");
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(train_text, two_allreduce_workers_train_the_transformer, 90)
{
	const char *args[] = { TEXT_ARGS, "--train_steps=200", "--connect_timeout=30", NULL };
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	EXPECT_EXIT(&c, w0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w1, 0, 30);
	char *out0 = task_read(w0, 0), *err0 = task_read(w0, 1);
	DT_CHECK_CONTAINS(out0, "at global step 200: accuracy = ");
	DT_CHECK_CONTAINS(out0, "accuracy_per_sequence = ");
	DT_CHECK_CONTAINS(err0, "gradient all-reduce");
	check_loss_falls("2 all-reduce workers", err0);
	free(out0), free(err0);
}

DT_TEST_TIMEOUT(train_text, async_ps_trains_the_transformer, 90)
{
	const char *args[] = { TEXT_ARGS, "--train_steps=300", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, (const char *[]){ "--schedule=run_std_server", TEXT_ARGS,
									      NULL });
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_EXIT(&c, chief, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps0, 0, 30);
	char *out = task_read(chief, 0), *cerr = task_read(chief, 1), *werr = task_read(worker, 1);
	DT_CHECK_CONTAINS(out, "eval (test split, 10000 examples) at global step ");
	DT_CHECK_CONTAINS(out, "accuracy_per_sequence = ");
	DT_CHECK_CONTAINS(werr, "(global ");
	check_loss_falls("async ps chief", cerr);
	free(out), free(cerr), free(werr);
}
