/* t2t's transformer in the modes test_train_text.c does not cover: mirrored
 * replicas in one process, synchronous ps with the shared embedding and
 * softmax weights, t2t's one-master layout (in-graph replicas on std
 * servers), and an evaluator task following a run's checkpoints with t2t's
 * metric names in its summaries (approx_bleu_score on text2text_tmpdir). The
 * ps chief's --eval_every with tables moving by rows equals the evaluator's
 * figures for the same checkpoint. clip_grad_norm clips locally and after
 * the all-reduce. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_util.h"
#include "cluster_procs.h"
#include "dt_test.h"

#define TASK_WAIT_S 60.0

#define TEXT_ARGS                                                                                        \
	"--model=transformer", "--hparams_set=transformer_test", "--problem=algorithmic_reverse_binary40", \
		"--hparams=batch_size=1024,learning_rate_warmup_steps=100,learning_rate_constant=0.5", "--log_every=25"

/* The loss of the first and of the last progress line in `log`. */
static void check_loss_falls(const char *who, const char *log)
{
	double first = -1, last = -1;
	for (const char *p = log; (p = strstr(p, " loss ")) != NULL; p += 6) {
		double v = atof(p + 6);
		if (first < 0)
			first = v;
		last = v;
	}
	fprintf(stderr, "%s: loss %.4f at the first progress line, %.4f at the last\n", who, first, last);
	DT_CHECK(first > 0);
	DT_CHECK(last > 0);
	DT_CHECK(last < first - 0.05);
}

/* The final evaluation on stdout carries t2t's metric names. */
static void check_final_eval(const char *out, const char *step)
{
	char want[96];
	snprintf(want, sizeof(want), "(test split, 10000 examples) at global step %s: accuracy = ", step);
	DT_CHECK_CONTAINS(out, want);
	DT_CHECK_CONTAINS(out, "accuracy_per_sequence = ");
	DT_CHECK_CONTAINS(out, "neg_log_perplexity = ");
}

DT_TEST_TIMEOUT(train_text_modes, mirrored_replicas_train_the_transformer, 90)
{
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", TEXT_ARGS, "--train_steps=200", "--replicas=2", NULL }, NULL,
		    TASK_WAIT_S);
	if (r.exit_code)
		fprintf(stderr, "%s", r.err);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "mirrored: 2 replicas on threads split each batch of 1024 tokens");
	DT_CHECK(cli_check_t2t_lines("2 mirrored replicas", r.err) >= 8); /* the replicas' text figures summed */
	check_final_eval(r.out, "200");
	check_loss_falls("2 mirrored replicas", r.err);
	dt_run_release(&r);
}

DT_TEST_TIMEOUT(train_text_modes, sync_ps_trains_the_transformer_with_shared_weights, 150)
{
	const char *args[] = { TEXT_ARGS, "--train_steps=200", "--sync", NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, (const char *[]){ "--schedule=run_std_server", TEXT_ARGS,
									      NULL });
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_EXIT(&c, chief, 0, 2 * TASK_WAIT_S); /* the barrier is slow on a loaded machine */
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps0, 0, 30);
	char *out = task_read(chief, 0), *cerr = task_read(chief, 1), *werr = task_read(worker, 1);
	DT_CHECK_CONTAINS(cerr, "synchronous: 2 of 2 trainers per step");
	DT_CHECK(cli_check_t2t_lines("sync ps chief", cerr) >= 3); /* each trainer's own steps' figures */
	DT_CHECK(cli_check_t2t_lines("sync ps worker", werr) >= 3);
	DT_CHECK(!strstr(cerr, "dec.emb/weights (embedding) moves by rows")); /* shared: every logit reads it */
	check_final_eval(out, "200");
	check_loss_falls("sync ps chief, shared weights", cerr);
	free(out), free(cerr), free(werr);
}

/* t2t's one-master layout: the std servers compute (tests/cli/test_sync_train.c's start). */
DT_TEST_TIMEOUT(train_text_modes, in_graph_master_trains_the_transformer_on_two_std_servers, 120)
{
	struct cluster c;
	cluster_init(&c, "master", 0, 2);
	cluster_output_dir(&c, "in_graph");
	const char *std_args[] = { "--schedule=run_std_server", TEXT_ARGS, NULL };
	struct task *ps0 = cluster_start_train(&c, "ps", 0, std_args);
	struct task *ps1 = cluster_start_train(&c, "ps", 1, std_args);
	struct task *master = cluster_start_train(&c, "master", 0,
						  (const char *[]){ "--sync", TEXT_ARGS, "--train_steps=200", c.out_flag,
								    "--schedule=train_and_evaluate",
								    NULL });
	EXPECT_EXIT(&c, master, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, ps0, 0, 30);
	EXPECT_EXIT(&c, ps1, 0, 30);
	char *out = task_read(master, 0), *merr = task_read(master, 1), *perr = task_read(ps1, 1);
	DT_CHECK_CONTAINS(merr, "in-graph synchronous training: 2 std server(s)");
	DT_CHECK_CONTAINS(perr, "in-graph replica 1-1 of 2 for master:0");
	DT_CHECK_CONTAINS(perr, "computed 200 in-graph replica steps");
	check_final_eval(out, "200");
	check_loss_falls("in-graph master", merr);
	/* The master's lines are every mode's (the std servers reply with the
	 * token figures): t2t's metrics and tokens/s, not the image line's
	 * `acc` over sequences. */
	DT_CHECK(!strstr(merr, " acc "));
	DT_CHECK(cli_check_t2t_lines("in-graph master", merr) >= 8);
	/* Per token, not per sequence: above it, and above chance at the end. */
	const char *last = NULL;
	for (const char *p = merr; (p = strstr(p, " accuracy ")) != NULL; p++)
		last = p;
	const char *seq = last ? strstr(last, " accuracy_per_sequence ") : NULL;
	DT_CHECK(seq != NULL);
	if (seq) {
		const double tok = atof(last + strlen(" accuracy ")), per_seq = atof(seq + strlen(" accuracy_per_sequence "));
		fprintf(stderr, "in-graph master: last accuracy %.4f, per sequence %.4f\n", tok, per_seq);
		DT_CHECK(tok > 0.52);
		DT_CHECK(tok > per_seq);
	}
	cli_check_t2t_summaries("in-graph master", c.out_dir, "algorithmic_reverse_binary40", 0);
	char eval_dir[700];
	snprintf(eval_dir, sizeof(eval_dir), "%s/eval", c.out_dir); /* train_and_evaluate's, after its last save */
	cli_check_t2t_summaries("in-graph master's evaluation", eval_dir, "algorithmic_reverse_binary40", 0);
	free(out), free(merr), free(perr);
}

/* An evaluator task beside a transformer run: every checkpoint evaluated,
 * t2t's names on stdout and in eval/'s summaries. */
DT_TEST_TIMEOUT(train_text_modes, an_evaluator_follows_the_transformer_checkpoints, 120)
{
	char out_dir[600], out_flag[640];
	snprintf(out_dir, sizeof(out_dir), "%s/run", dt_test_tmpdir());
	snprintf(out_flag, sizeof(out_flag), "--output_dir=%s", out_dir);
	const char *ev_argv[] = { "dtrain", "train", "--schedule=continuous_eval", "--eval_mode=every", TEXT_ARGS,
				  "--train_steps=200", "--eval_timeout_secs=60", out_flag, NULL };
	struct task ev;
	task_start(&ev, "evaluator", ev_argv, NULL);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", TEXT_ARGS, "--train_steps=200", "--save_checkpoints_steps=100",
					 out_flag, NULL }, NULL, TASK_WAIT_S);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	const int ev_exit = task_wait(&ev, 60);
	if (ev_exit != 0)
		tasks_dump(&ev, 1);
	DT_CHECK_INT_EQ(ev_exit, 0);
	char *out = task_read(&ev, 0);
	check_final_eval(out, "100");
	check_final_eval(out, "200");
	DT_CHECK(!strstr(out, "approx_bleu_score"));
	free(out);
	char eval_dir[700];
	snprintf(eval_dir, sizeof(eval_dir), "%s/eval", out_dir);
	cli_check_t2t_summaries("evaluator", eval_dir, "algorithmic_reverse_binary40", 0);
	cli_check_t2t_summaries("one process's training", out_dir, "algorithmic_reverse_binary40", 0);

	/* A translation-shaped problem (text2text_tmpdir): approx_bleu_score too. */
	char data[700], path[760], flag_data[720], flag_out[720];
	snprintf(data, sizeof(data), "%s/t2t_data", dt_test_tmpdir());
	snprintf(flag_data, sizeof(flag_data), "--data_dir=%s", data);
	snprintf(flag_out, sizeof(flag_out), "--output_dir=%s/t2t_run", dt_test_tmpdir());
	DT_CHECK(mkdir(data, 0755) == 0);
	static const char *const words[] = { "the", "cat", "dog", "sat", "on", "a", "red", "mat" };
	for (int split = 0; split < 2; split++) {
		char in[8192] = "", tg[8192] = "";
		for (int i = 0; i < (split ? 20 : 200); i++) {
			const int n = 2 + i % 4;
			for (int k = 0; k < n; k++) {
				strcat(in, words[(i + 3 * k) % 8]), strcat(in, k + 1 < n ? " " : "\n");
				strcat(tg, words[(i + 3 * (n - 1 - k)) % 8]), strcat(tg, k + 1 < n ? " " : "\n");
			}
		}
		snprintf(path, sizeof(path), "%s/inputs.%s.txt", data, split ? "eval" : "train");
		dt_test_write_file(path, in, strlen(in));
		snprintf(path, sizeof(path), "%s/targets.%s.txt", data, split ? "eval" : "train");
		dt_test_write_file(path, tg, strlen(tg));
	}
	const char *t2t[] = { "--model=transformer", "--hparams_set=transformer_test", "--problem=text2text_tmpdir",
			      "--hparams=batch_size=128", flag_data, flag_out };
	dt_test_run(&r, (const char *[]){ "dtrain", "train", t2t[0], t2t[1], t2t[2], t2t[3], t2t[4], t2t[5],
					 "--train_steps=20", "--noeval", NULL }, NULL, TASK_WAIT_S);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--schedule=evaluate", t2t[0], t2t[1], t2t[2], t2t[3],
					 t2t[4], t2t[5], NULL }, NULL, TASK_WAIT_S);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.out, "at global step 20: accuracy = ");
	DT_CHECK_CONTAINS(r.out, "approx_bleu_score = ");
	dt_run_release(&r);
	snprintf(eval_dir, sizeof(eval_dir), "%s/t2t_run/eval", dt_test_tmpdir());
	cli_check_t2t_summaries("text2text_tmpdir's evaluation", eval_dir, "text2text_tmpdir", 1);
	snprintf(eval_dir, sizeof(eval_dir), "%s/t2t_run", dt_test_tmpdir());
	cli_check_t2t_summaries("text2text_tmpdir's training", eval_dir, "text2text_tmpdir", 1);
}

/* The figures of "eval at step S: accuracy A accuracy_per_sequence P
 * neg_log_perplexity N loss L" (the chief's) or of "at global step S:
 * accuracy = A, accuracy_per_sequence = P, neg_log_perplexity = N, loss = L"
 * (the evaluator's) after `at`; returns how many were read. */
static int eval_figures(const char *text, const char *at, double f[4])
{
	const char *p = strstr(text, at);
	if (!p)
		return 0;
	p += strlen(at);
	return sscanf(p, " accuracy%*[ =]%lf%*[ ,]accuracy_per_sequence%*[ =]%lf%*[ ,]neg_log_perplexity%*[ =]%lf"
			 "%*[ ,]loss%*[ =]%lf",
		      &f[0], &f[1], &f[2], &f[3]);
}

/* DISTRIBUTED.md "Sparse rows": both tables move by rows, and the chief's
 * --eval_every evaluation at step 100 pulls them whole first, so its
 * figures are those the evaluator finds in the step-100 checkpoint. One
 * trainer: nothing moves the ps between the checkpoint and the evaluation. */
DT_TEST_TIMEOUT(train_text_modes, ps_chief_mid_run_eval_with_sparse_rows_equals_the_checkpoints, 150)
{
	const char *sparse = "--hparams=batch_size=1024,learning_rate_warmup_steps=100,learning_rate_constant=0.5,"
			     "shared_embedding_and_softmax_weights=false";
	struct cluster c;
	cluster_init(&c, "chief", 0, 1);
	cluster_output_dir(&c, "sparse_eval");
	const char *common[] = { "--model=transformer", "--hparams_set=transformer_test",
				 "--problem=algorithmic_reverse_binary40", sparse };
	struct task *ps0 = cluster_start_train(&c, "ps", 0, (const char *[]){ "--schedule=run_std_server", common[0],
									      common[1], common[2], common[3], NULL });
	struct task *chief = cluster_start_train(&c, "chief", 0,
						 (const char *[]){ common[0], common[1], common[2], common[3],
								   "--train_steps=200", "--save_checkpoints_steps=100",
								   "--eval_every=100", "--log_every=50", c.out_flag, NULL });
	EXPECT_EXIT(&c, chief, 0, 2 * TASK_WAIT_S);
	EXPECT_EXIT(&c, ps0, 0, 30);
	char *cerr = task_read(chief, 1);
	DT_CHECK_CONTAINS(cerr, "dec.emb/weights (embedding) moves by rows");
	double mid[4], ckpt[4];
	DT_CHECK_INT_EQ(eval_figures(cerr, "eval at step 100:", mid), 4);
	free(cerr);
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--schedule=continuous_eval", "--eval_mode=every", common[0],
					 common[1], common[2], common[3], "--train_steps=200", c.out_flag, NULL }, NULL,
		    TASK_WAIT_S);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_INT_EQ(eval_figures(r.out, "at global step 100:", ckpt), 4);
	dt_run_release(&r);
	fprintf(stderr, "step 100: chief's mid-run eval accuracy %.4f loss %.4f, the checkpoint's %.4f %.4f\n", mid[0],
		mid[3], ckpt[0], ckpt[3]);
	for (int i = 0; i < 4; i++)
		DT_CHECK(mid[i] == ckpt[i]); /* the same 4 printed decimals */
}

#define CLIP_ARGS                                                                                          \
	"--model=transformer", "--hparams_set=transformer_test", "--problem=algorithmic_reverse_binary40", \
		"--log_every=25", "--train_steps=200"
#define CLIP_HP "--hparams=batch_size=1024,learning_rate_warmup_steps=100,learning_rate_constant=0.5"

/* The progress lines of a log (from the first " loss "): what two runs
 * compare to tell whether they took the same steps. */
static const char *progress(const char *log)
{
	const char *p = strstr(log, " loss ");
	return p ? p : "";
}

/* t2t's clip_grad_norm through the one engine: a local run with a threshold
 * under every step's norm says where it clips, counts every step clipped in
 * its progress lines and trains (Adam follows the direction), and takes
 * other steps than the same run without it (the clipping is applied, not
 * only parsed); two all-reduce workers clip the all-reduced mean. */
DT_TEST_TIMEOUT(train_text_modes, clip_grad_norm_clips_locally_and_after_the_all_reduce, 150)
{
	struct dt_run off, on;
	dt_test_run(&off, (const char *[]){ "dtrain", "train", CLIP_ARGS, CLIP_HP, NULL }, NULL, TASK_WAIT_S);
	dt_test_run(&on, (const char *[]){ "dtrain", "train", CLIP_ARGS, CLIP_HP ",clip_grad_norm=0.001", NULL }, NULL,
		    TASK_WAIT_S);
	if (off.exit_code || on.exit_code)
		fprintf(stderr, "%s\n%s", off.err, on.err);
	DT_CHECK_INT_EQ(off.exit_code, 0);
	DT_CHECK_INT_EQ(on.exit_code, 0);
	DT_CHECK(!strstr(off.err, "clip_grad_norm"));
	DT_CHECK_CONTAINS(on.err, "clip_grad_norm=0.001: the gradient is scaled to global norm <= 0.001 before the "
				  "update (after the replicas' reduce; with --deterministic, the fixed-point mean)");
	DT_CHECK_CONTAINS(on.err, " step 200/200 loss "); /* each window's norms: every step over 0.001 */
	DT_CHECK_CONTAINS(on.err, ", clipped 25 of 25 steps) ");
	DT_CHECK(!strstr(off.err, " grad_norm "));
	check_final_eval(on.out, "200");
	check_loss_falls("local, clip_grad_norm=0.001", on.err);
	DT_CHECK(strcmp(progress(off.err), progress(on.err)) != 0);
	dt_run_release(&off);
	dt_run_release(&on);

	const char *args[] = { CLIP_ARGS, CLIP_HP ",clip_grad_norm=0.001", "--connect_timeout=30", NULL };
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	EXPECT_EXIT(&c, w0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w1, 0, 30);
	char *out0 = task_read(w0, 0), *err0 = task_read(w0, 1);
	DT_CHECK_CONTAINS(err0, "clip_grad_norm=0.001: the gradient is scaled to global norm <= 0.001 after the "
				"all-reduce, once every bucket has arrived");
	DT_CHECK_CONTAINS(err0, ", clipped 25 of 25 steps) ");
	check_final_eval(out0, "200");
	check_loss_falls("2 all-reduce workers, clip_grad_norm=0.001", err0);
	free(out0), free(err0);
}
