/* t2t's transformer on t2t's text problems through the CLI: one process, two
 * all-reduce workers and async parameter servers each train
 * transformer_test on algorithmic_reverse_binary40 and their loss falls;
 * the progress and eval lines carry t2t's metrics by t2t's names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
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

/* The smallest and largest examples/s of the progress lines in `log`. */
static void window_rates(const char *log, double *lo, double *hi)
{
	*lo = -1, *hi = -1;
	for (const char *p = log; (p = strstr(p, " examples/s ")) != NULL; p++) {
		const char *at = p;
		while (at > log && ((at[-1] >= '0' && at[-1] <= '9') || at[-1] == '.'))
			at--;
		const double v = atof(at);
		*lo = *lo < 0 || v < *lo ? v : *lo;
		*hi = v > *hi ? v : *hi;
	}
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
	DT_CHECK(!strstr(r.err, "approx_bleu_score")); /* t2t's algorithmic problems do not report it */
	DT_CHECK_CONTAINS(r.err, " tokens/s");
	DT_CHECK_CONTAINS(r.out, "eval (test split, 10000 examples) at global step 300: accuracy = ");
	DT_CHECK_CONTAINS(r.out, "accuracy_per_sequence = ");
	check_loss_falls("local", r.err);
	DT_CHECK(cli_check_t2t_lines("local", r.err) >= 10);
	/* The summary's examples/s counts sequences, not batch_size's tokens
	 * (it was 1024 x steps/s): a run's mean lies within its windows'. */
	const char *summary = strstr(r.err, " steps in ");
	DT_CHECK(summary != NULL);
	const char *colon = summary ? strstr(summary, ": ") : NULL;
	const double summary_eps = colon ? atof(colon + 2) : -1;
	double lo, hi;
	window_rates(r.err, &lo, &hi);
	fprintf(stderr, "summary %.0f examples/s, progress windows %.0f to %.0f\n", summary_eps, lo, hi);
	DT_CHECK(lo > 0);
	DT_CHECK(summary_eps >= lo / 1.5);
	DT_CHECK(summary_eps <= hi * 1.5);
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
	struct cluster c;
	cluster_init(&c, NULL, 2, 0);
	cluster_output_dir(&c, "allreduce");
	const char *args[] = { TEXT_ARGS, "--train_steps=200", "--connect_timeout=30", c.out_flag, NULL };
	struct task *w1 = cluster_start_train(&c, "worker", 1, args);
	struct task *w0 = cluster_start_train(&c, "worker", 0, args);
	EXPECT_EXIT(&c, w0, 0, TASK_WAIT_S);
	EXPECT_EXIT(&c, w1, 0, 30);
	char *out0 = task_read(w0, 0), *err0 = task_read(w0, 1), *err1 = task_read(w1, 1);
	DT_CHECK_CONTAINS(out0, "at global step 200: accuracy = ");
	DT_CHECK_CONTAINS(out0, "accuracy_per_sequence = ");
	DT_CHECK_CONTAINS(err0, "gradient all-reduce");
	check_loss_falls("2 all-reduce workers", err0);
	cli_check_t2t_summaries("all-reduce chief (worker 0)", c.out_dir, "algorithmic_reverse_binary40", 0);
	/* every worker's progress lines: t2t's metrics and tokens/s (summed over the ring) */
	DT_CHECK(cli_check_t2t_lines("all-reduce worker 0", err0) >= 7);
	DT_CHECK(cli_check_t2t_lines("all-reduce worker 1", err1) >= 7);
	free(out0), free(err0), free(err1);
}

DT_TEST_TIMEOUT(train_text, async_ps_trains_the_transformer, 90)
{
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	cluster_output_dir(&c, "async_ps");
	const char *args[] = { TEXT_ARGS, "--train_steps=300", c.out_flag, NULL };
	struct task *ps0 = cluster_start_train(&c, "ps", 0, (const char *[]){ "--schedule=run_std_server", TEXT_ARGS,
									      c.out_flag, NULL });
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
	cli_check_t2t_summaries("async ps chief", c.out_dir, "algorithmic_reverse_binary40", 0);
	/* every trainer's progress lines: t2t's metrics and tokens/s (its own steps') */
	DT_CHECK(cli_check_t2t_lines("async ps chief", cerr) >= 3);
	DT_CHECK(cli_check_t2t_lines("async ps worker", werr) >= 3);
	free(out), free(cerr), free(werr);
}

/* Sparse rows (DISTRIBUTED.md): with the softmax's own weights both
 * embedding tables move by rows, through async and through sync ps. */
#define SPARSE_ARGS                                                                                       \
	"--model=transformer", "--hparams_set=transformer_test", "--problem=algorithmic_reverse_binary40", \
		"--hparams=batch_size=1024,learning_rate_warmup_steps=100,learning_rate_constant=0.5,"   \
		"shared_embedding_and_softmax_weights=false",                                              \
		"--log_every=25"

static void sparse_ps_run(const char *sync)
{
	const char *args[] = { SPARSE_ARGS, "--train_steps=300", sync, NULL };
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	struct task *ps0 = cluster_start_train(&c, "ps", 0, (const char *[]){ "--schedule=run_std_server", SPARSE_ARGS,
									      NULL });
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_EXIT(&c, chief, 0, 2 * TASK_WAIT_S); /* the sync barrier is slow on a loaded machine */
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, ps0, 0, 30);
	char *out = task_read(chief, 0), *cerr = task_read(chief, 1), *werr = task_read(worker, 1);
	DT_CHECK_CONTAINS(cerr, "enc.emb/weights (embedding) moves by rows");
	DT_CHECK_CONTAINS(cerr, "dec.emb/weights (embedding) moves by rows");
	DT_CHECK_CONTAINS(werr, "dec.emb/weights (embedding) moves by rows");
	DT_CHECK(!strstr(cerr, "softmax/weights (embedding) moves by rows")); /* every row is a logit's */
	if (sync)
		DT_CHECK_CONTAINS(cerr, "synchronous: 2 of 2 trainers per step");
	DT_CHECK_CONTAINS(out, "eval (test split, 10000 examples) at global step ");
	check_loss_falls(sync ? "sync ps chief, sparse rows" : "async ps chief, sparse rows", cerr);
	free(out), free(cerr), free(werr);
}

DT_TEST_TIMEOUT(train_text, async_ps_moves_embedding_rows, 150) { sparse_ps_run(NULL); }
DT_TEST_TIMEOUT(train_text, sync_ps_moves_embedding_rows, 150) { sparse_ps_run("--sync"); }

/* The ps SIGKILLed and restarted mid-run while both tables move by rows:
 * whichever of a trainer's row pull or its round meets the closed
 * connection first, the step goes through the ps recovery (the chief
 * restores the newest checkpoint) and the run ends at its step count. */
DT_TEST_TIMEOUT(train_text, a_ps_lost_while_tables_move_by_rows_is_recovered, 150)
{
	struct cluster c;
	cluster_init(&c, "chief", 1, 1);
	cluster_output_dir(&c, "rows_psdies");
	const char *ps_argv[] = { "dtrain", "train", "--schedule=run_std_server", SPARSE_ARGS, NULL };
	const char *args[] = { SPARSE_ARGS, "--train_steps=600", "--save_checkpoints_steps=100", c.out_flag,
			       "--connect_timeout=60", NULL };
	struct task *ps = cluster_start(&c, "ps", 0, "ps0", ps_argv, NULL);
	struct task *worker = cluster_start_train(&c, "worker", 0, args);
	struct task *chief = cluster_start_train(&c, "chief", 0, args);
	EXPECT_LOG(&c, chief, "I step 200 (global ", TASK_WAIT_S);
	task_kill(ps);
	struct task *again = cluster_start(&c, "ps", 0, "ps0_again", ps_argv, NULL);
	EXPECT_EXIT(&c, chief, 0, 2 * TASK_WAIT_S);
	EXPECT_EXIT(&c, worker, 0, 30);
	EXPECT_EXIT(&c, again, 0, 30);
	char *cerr = task_read(chief, 1), *werr = task_read(worker, 1);
	DT_CHECK_CONTAINS(cerr, "dec.emb/weights (embedding) moves by rows");
	DT_CHECK_CONTAINS(cerr, "lost ps:0 at 127.0.0.1:");
	DT_CHECK_CONTAINS(cerr, "reconnected to ps:0 (a new process)");
	DT_CHECK_CONTAINS(werr, "reconnected to ps:0 (a new process)");
	DT_CHECK_CONTAINS(cerr, "onto the parameter servers: global step ");
	DT_CHECK_CONTAINS(cerr, "ended the run on 1 parameter server(s) at global step 600");
	DT_CHECK(!strstr(cerr, "training stopped") && !strstr(werr, "training stopped"));
	/* Which path met the loss is the scheduler's: said, not required. */
	const char *via = "embedding rows: ";
	fprintf(stderr, "the loss met by a row pull: chief %s, worker %s\n", strstr(cerr, via) ? "yes" : "no",
		strstr(werr, via) ? "yes" : "no");
	check_loss_falls("async ps chief, sparse rows, ps restarted", cerr);
	free(cerr), free(werr);
}

/* Every output line is a sequence of the problem's symbols (binary here). */
static int lines_of_symbols(const char *text, int want_lines)
{
	int lines = 0;
	for (const char *p = text; *p; p++) {
		if (*p == '\n')
			lines++;
		else if (*p != '0' && *p != '1' && *p != ' ')
			return -1;
	}
	return lines == want_lines ? lines : -1;
}

DT_TEST_TIMEOUT(train_text, decode_greedy_beam_files_and_stdin_from_the_newest_checkpoint, 120)
{
	char out_dir[600], in_path[700], to_path[700], cmd[4096];
	snprintf(out_dir, sizeof(out_dir), "%s/run", dt_test_tmpdir());
	snprintf(in_path, sizeof(in_path), "%s/in.txt", dt_test_tmpdir());
	snprintf(to_path, sizeof(to_path), "%s/out.txt", dt_test_tmpdir());
	char flag_out[700], flag_from[760], flag_to[760];
	snprintf(flag_out, sizeof(flag_out), "--output_dir=%s", out_dir);
	snprintf(flag_from, sizeof(flag_from), "--decode_from_file=%s", in_path);
	snprintf(flag_to, sizeof(flag_to), "--decode_to_file=%s", to_path);
	struct dt_run r;
	/* No checkpoint yet: exit 4, saying so. */
	dt_test_run(&r, (const char *[]){ "dtrain", "decode", "--hparams_set=transformer_test",
					 "--problem=algorithmic_reverse_binary40", flag_out, NULL }, NULL, 30);
	DT_CHECK_INT_EQ(r.exit_code, 4);
	DT_CHECK_CONTAINS(r.err, "no checkpoint in");
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", TEXT_ARGS, "--train_steps=100", flag_out, NULL }, NULL,
		    TASK_WAIT_S);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	const char text[] = "1 0 0 1 1\n0 1\n1 1 1 0 0 0 1\n";
	dt_test_write_file(in_path, text, strlen(text));
	/* Greedy and beam search, each through the fast decoder (the default)
	 * and the graph over the whole prefix (cache=0): the same decodes. */
	const char *beams[] = { "--decode_hparams=beam_size=1", "--decode_hparams=beam_size=1,cache=0",
				"--decode_hparams=beam_size=4,alpha=0.6", "--decode_hparams=beam_size=4,alpha=0.6,cache=0" };
	char *greedy = NULL, *fast = NULL;
	for (int i = 0; i < 4; i++) {
		dt_test_run(&r, (const char *[]){ "dtrain", "decode", "--hparams_set=transformer_test",
						 "--hparams=batch_size=1024,learning_rate_warmup_steps=100,"
						 "learning_rate_constant=0.5",
						 "--problem=algorithmic_reverse_binary40", flag_out, flag_from, flag_to,
						 beams[i], NULL }, NULL, 60);
		DT_CHECK_INT_EQ(r.exit_code, 0);
		DT_CHECK_CONTAINS(r.err, "(global step 100)");
		DT_CHECK_CONTAINS(r.err, i >= 2 ? "beam search" : "greedy");
		DT_CHECK_CONTAINS(r.err, i % 2 ? "the whole graph per step (cache=0)" : "cached keys and values");
		DT_CHECK_CONTAINS(r.err, "decoded 3 line(s)");
		FILE *f = fopen(to_path, "r");
		DT_CHECK(f != NULL);
		char buf[8192];
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		DT_CHECK_INT_EQ(lines_of_symbols(buf, 3), 3);
		if (i == 0)
			greedy = strdup(buf);
		if (i % 2 == 0) {
			free(fast);
			fast = strdup(buf);
		} else {
			DT_CHECK_STR_EQ(buf, fast);
		}
		dt_run_release(&r);
	}
	free(fast);
	/* Interactive: lines from stdin, decodes on stdout; greedy by default,
	 * the same as the file's; a bad symbol costs its line only. */
	snprintf(cmd, sizeof(cmd),
		 "printf '1 0 0 1 1\\n7\\n0 1\\n1 1 1 0 0 0 1\\n' | '%s' decode --hparams_set=transformer_test "
		 "--hparams=batch_size=1024,learning_rate_warmup_steps=100,learning_rate_constant=0.5 "
		 "--problem=algorithmic_reverse_binary40 '%s'",
		 dt_test_dtrain_bin(), flag_out);
	dt_test_run(&r, (const char *[]){ "/bin/sh", "-c", cmd, NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "symbol '7' is not one of 0 to 1");
	DT_CHECK_STR_EQ(r.out, greedy);
	dt_run_release(&r);
	/* t2t's --decode_interactive: its commands (dl= taken, ns= and it=
	 * refused with a message, q quits: the line after it is not decoded)
	 * print no decode; bad lines cost themselves only. */
	const char *model_flags = "--hparams_set=transformer_test --hparams=batch_size=1024,learning_rate_warmup_steps=100,"
				  "learning_rate_constant=0.5 --problem=algorithmic_reverse_binary40";
	snprintf(cmd, sizeof(cmd),
		 "printf '1 0 0 1 1\\nns=3\\ndl=x\\n7\\nit=image\\ndl=50\\n0 1\\n1 1 1 0 0 0 1\\nq\\n1 1\\n' | "
		 "'%s' decode --decode_interactive %s '%s'", dt_test_dtrain_bin(), model_flags, flag_out);
	dt_test_run(&r, (const char *[]){ "/bin/sh", "-c", cmd, NULL }, NULL, 60);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_STR_EQ(r.out, greedy);
	DT_CHECK_CONTAINS(r.err, "error: line 2: 'ns=3': dtrain decodes text by greedy search");
	DT_CHECK_CONTAINS(r.err, "error: line 3: 'dl=x': the decode length is a whole number of tokens");
	DT_CHECK_CONTAINS(r.err, "error: line 4: symbol '7' is not one of 0 to 1");
	DT_CHECK_CONTAINS(r.err, "error: line 5: 'it=image'");
	dt_run_release(&r);
	/* One line in, its decode out before the next line is read: the
	 * feeder waits (at most 30 s) for the first decode in the output file
	 * before it sends the second line, then ends the input (EOF, exit 0). */
	char got[700];
	snprintf(got, sizeof(got), "%s/interactive.out", dt_test_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "( printf '1 0 0 1 1\\n'; i=0; while [ ! -s '%s' ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
		 "echo \"feeder waited $i\" >&2; printf '0 1\\n' ) | '%s' decode --decode_interactive %s '%s' > '%s'; "
		 "echo \"exit $?\" >&2",
		 got, dt_test_dtrain_bin(), model_flags, flag_out, got);
	dt_test_run(&r, (const char *[]){ "/bin/sh", "-c", cmd, NULL }, NULL, 60);
	DT_CHECK_CONTAINS(r.err, "exit 0");
	const char *waited = strstr(r.err, "feeder waited ");
	DT_CHECK(waited != NULL && atoi(waited + strlen("feeder waited ")) < 300);
	char *decoded = cli_read_file(got);
	DT_CHECK(decoded != NULL);
	const char *first = greedy ? strchr(greedy, '\n') : NULL; /* greedy's first two lines are these inputs' */
	const char *second = first ? strchr(first + 1, '\n') : NULL;
	DT_CHECK(second != NULL);
	if (decoded && second) {
		char want[8192];
		snprintf(want, sizeof(want), "%.*s", (int)(second + 1 - greedy), greedy);
		DT_CHECK_STR_EQ(decoded, want);
	}
	free(decoded);
	dt_run_release(&r);
	/* Files and --decode_interactive do not mix. */
	dt_test_run(&r, (const char *[]){ "dtrain", "decode", "--decode_interactive", flag_from,
					 "--problem=algorithmic_reverse_binary40", flag_out, NULL }, NULL, 30);
	DT_CHECK_INT_EQ(r.exit_code, 2);
	DT_CHECK_CONTAINS(r.err, "--decode_interactive reads stdin and writes stdout: drop --decode_from_file");
	dt_run_release(&r);
	free(greedy);
}

/* t2t's dev split (sort: length 20, twice the training length) through the
 * evaluator, with as many positions as its longest example. */
DT_TEST_TIMEOUT(train_text, evaluate_on_dev_data_reports_the_dev_length_split, 120)
{
	char flag_out[700];
	snprintf(flag_out, sizeof(flag_out), "--output_dir=%s/run", dt_test_tmpdir());
	struct dt_run r;
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--model=transformer", "--hparams_set=transformer_test",
					 "--problem=algorithmic_sort_problem", "--hparams=batch_size=512,max_length=12",
					 "--train_steps=20", "--noeval", flag_out, NULL }, NULL, TASK_WAIT_S);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	dt_run_release(&r);
	dt_test_run(&r, (const char *[]){ "dtrain", "train", "--schedule=evaluate_on_dev_data", "--model=transformer",
					 "--hparams_set=transformer_test", "--problem=algorithmic_sort_problem",
					 "--hparams=batch_size=512,max_length=12", flag_out, NULL }, NULL, TASK_WAIT_S);
	DT_CHECK_INT_EQ(r.exit_code, 0);
	DT_CHECK_CONTAINS(r.err, "evaluator: dev split (10000 examples)");
	DT_CHECK_CONTAINS(r.out, "eval (dev split, 10000 examples) at global step 20: accuracy = ");
	DT_CHECK_CONTAINS(r.out, "neg_log_perplexity = ");
	dt_run_release(&r);
}
