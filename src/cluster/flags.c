/*
 * flags.c — the cluster flags: TensorFlow's low-level form (seed 003) builds
 * a cluster; t2t-trainer's flags are checked against whatever cluster was
 * resolved, so a launch script that disagrees with its TF_CONFIG fails at
 * start-up instead of training the wrong topology.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "cluster/internal.h"
#include "cluster/resolve.h"

void dt_cluster_flags_init(struct dt_cluster_flags *f)
{
	*f = (struct dt_cluster_flags){
		.ps_hosts = "",
		.worker_hosts = "",
		.job_name = "",
		.task_index = 0,
		.master = "",
		.ps_replicas = 0,
		.worker_replicas = 1,
		.worker_id = 0,
		.worker_gpu = 1,
		.ps_gpu = 0,
		.sync = 0,
		.schedule = "continuous_train_and_eval",
		.worker_job = "/job:localhost",
		.port_base = 8888,
	};
}

/* t2t's T2TExperiment methods (utils/trainer_lib.py). */
static const char *const schedules[] = {
	"train", "continuous_train_and_eval", "train_and_evaluate", "train_eval_and_decode", "evaluate",
	"evaluate_on_train_data", "continuous_eval", "continuous_eval_on_train_data", "test", "run_std_server",
	"decode", "continuous_decode", "continuous_decode_on_train_data", "continuous_decode_on_eval_data",
	"continuous_decode_from_file",
	"evaluate_on_dev_data", /* not t2t's: a text problem's dev split (cmd/train.c) */
};

int dt_schedule_known(const char *name)
{
	for (size_t i = 0; i < DT_ARRAY_LEN(schedules); i++)
		if (strcmp(name, schedules[i]) == 0)
			return 1;
	return 0;
}

static int is_eval_schedule(const char *s)
{
	return strcmp(s, "evaluate") == 0 || strcmp(s, "evaluate_on_train_data") == 0 ||
	       strcmp(s, "evaluate_on_dev_data") == 0 ||
	       strcmp(s, "continuous_eval") == 0 || strcmp(s, "continuous_eval_on_train_data") == 0;
}

int dt__flag_given(const struct dt_option *opts, const char *name, int differs)
{
	const struct dt_option *o = opts ? dt_opts_find(opts, name) : NULL;
	return differs || (o && o->was_set);
}

static int str_differs(const char *value, const char *def)
{
	return strcmp(value ? value : "", def) != 0;
}

#define GIVEN_STR(f, opts, field, def) dt__flag_given(opts, #field, str_differs((f)->field, def))
#define GIVEN_INT(f, opts, field, def) dt__flag_given(opts, #field, (f)->field != (def))

enum dt_status dt__flags_check_ranges(const struct dt_cluster_flags *f, struct dt_err *err)
{
	enum dt_status st;
	if (f->task_index < 0) {
		st = dt_err_set(err, DT_USAGE, "--task_index=%d: Task index must be non-negative number.", f->task_index);
		dt_err_hint(err, "task indices count from 0 within each job");
		return st;
	}
	if (f->ps_replicas < 0)
		return dt_err_set(err, DT_USAGE, "--ps_replicas=%d is negative", f->ps_replicas);
	if (f->worker_replicas < 1)
		return dt_err_set(err, DT_USAGE, "--worker_replicas=%d: at least one task must train", f->worker_replicas);
	if (f->worker_id < 0)
		return dt_err_set(err, DT_USAGE, "--worker_id=%d is negative", f->worker_id);
	if (f->worker_gpu < 0 || f->ps_gpu < 0)
		return dt_err_set(err, DT_USAGE, "--%s=%d is negative", f->worker_gpu < 0 ? "worker_gpu" : "ps_gpu",
				  f->worker_gpu < 0 ? f->worker_gpu : f->ps_gpu);
	if (f->port_base < 1 || f->port_base > 65535)
		return dt_err_set(err, DT_USAGE, "--port_base=%d is outside 1-65535", f->port_base);
	const char *sched = f->schedule ? f->schedule : "";
	if (!dt_schedule_known(sched)) {
		st = dt_err_set(err, DT_USAGE, "Experiment has no method %.80s, from --schedule", sched);
		const char *near = dt_nearest(sched, schedules, DT_ARRAY_LEN(schedules));
		if (near)
			dt_err_hint(err, "did you mean --schedule=%s?", near);
		else
			dt_err_hint(err, "schedules: train, continuous_train_and_eval, continuous_eval, run_std_server, ...");
		return st;
	}
	return DT_OK;
}

/* Splits "a,b,c" (keeping empty items, as Python's split(",") does) and adds
 * each address to `job`. */
static enum dt_status add_hosts(struct dt_cluster *out, enum dt_job job, const char *list, const char *flag,
				struct dt_err *err)
{
	int index = 0;
	const char *p = list;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char *item = dt_xmalloc(len + 1);
		memcpy(item, p, len);
		item[len] = '\0';
		enum dt_status st = dt_cluster_add(out, job, index++, item, flag, err);
		free(item);
		if (st)
			return st;
		if (!comma)
			return DT_OK;
		p = comma + 1;
	}
}

enum dt_status dt__cluster_from_flags(const struct dt_cluster_flags *f, struct dt_cluster *out, struct dt_task_given *task, struct dt_err *err)
{
	enum dt_status st;
	if (f->ps_hosts && *f->ps_hosts && (st = add_hosts(out, DT_JOB_PS, f->ps_hosts, "--ps_hosts", err)))
		return st;
	if (f->worker_hosts && *f->worker_hosts &&
	    (st = add_hosts(out, DT_JOB_WORKER, f->worker_hosts, "--worker_hosts", err)))
		return st;
	if (!f->job_name || !*f->job_name) {
		st = dt_err_set(err, DT_CONFIG, "--job_name is required with --ps_hosts/--worker_hosts");
		dt_err_hint(err, "say which task this process is: --job_name=worker --task_index=0 (or --job_name=ps)");
		return st;
	}
	snprintf(out->source_detail, sizeof(out->source_detail), "--ps_hosts/--worker_hosts");
	task->type = f->job_name;
	task->has_index = 1;
	task->index = f->task_index;
	return DT_OK;
}

enum dt_status dt__flags_merge_task(const struct dt_cluster_flags *f, const struct dt_option *opts,
				    const struct dt_cluster *cl, struct dt_task_given *task, struct dt_err *err)
{
	int type_given = GIVEN_STR(f, opts, job_name, "");
	int index_given = GIVEN_INT(f, opts, task_index, 0);
	const char *src = cl->source == DT_SOURCE_TF_CONFIG ? "TF_CONFIG \"task\"" : cl->source_detail;
	enum dt_status st;
	if (type_given) {
		if (task->type && *task->type && strcmp(task->type, f->job_name) != 0) {
			st = dt_err_set(err, DT_CONFIG, "--job_name=%.60s disagrees with %s, which makes this task a %.60s",
					f->job_name, src, task->type);
			dt_err_hint(err, "drop --job_name (the %s names the task) or make the two agree",
				    cl->source == DT_SOURCE_TF_CONFIG ? "TF_CONFIG" : "launcher");
			return st;
		}
		task->type = f->job_name;
	}
	if (index_given) {
		if (task->has_index && task->index != f->task_index) {
			st = dt_err_set(err, DT_CONFIG, "--task_index=%d disagrees with %s, which gives index %lld",
					f->task_index, src, task->index);
			dt_err_hint(err, "drop --task_index (the %s numbers the task) or make the two agree",
				    cl->source == DT_SOURCE_TF_CONFIG ? "TF_CONFIG" : "launcher");
			return st;
		}
		task->has_index = 1;
		task->index = f->task_index;
	}
	return DT_OK;
}

/* How the source spells the cluster and the task, for "disagrees with". */
static const char *cluster_key(const struct dt_cluster *cl, enum dt_job job)
{
	switch (cl->source) {
	case DT_SOURCE_FLAGS:
		return job == DT_JOB_PS ? "--ps_hosts" : "--worker_hosts";
	case DT_SOURCE_TF_CONFIG:
		return "TF_CONFIG \"cluster\"";
	case DT_SOURCE_SLURM:
		return "the Slurm step";
	case DT_SOURCE_MPI:
		return "the Open MPI launch";
	case DT_SOURCE_LOCAL:
	case DT_SOURCE_COUNT:
		break;
	}
	return "the local process (no cluster given)";
}

static const char *task_key(const struct dt_cluster *cl)
{
	switch (cl->source) {
	case DT_SOURCE_FLAGS:
		return "--job_name/--task_index";
	case DT_SOURCE_TF_CONFIG:
		return "TF_CONFIG \"task\"";
	case DT_SOURCE_SLURM:
		return "the Slurm rank (SLURM_PROCID)";
	case DT_SOURCE_MPI:
		return "the MPI rank (OMPI_COMM_WORLD_RANK)";
	case DT_SOURCE_LOCAL:
	case DT_SOURCE_COUNT:
		break;
	}
	return "the local process (no cluster given)";
}

static int is_trainer(enum dt_job job)
{
	return job == DT_JOB_CHIEF || job == DT_JOB_MASTER || job == DT_JOB_WORKER;
}

/* Strips one pair of surrounding single quotes: make-configs prints
 * --worker_job='/job:master' for a shell, which removes them. */
static void unquote(const char *s, char *buf, size_t cap)
{
	size_t len = strlen(s);
	if (len >= 2 && s[0] == '\'' && s[len - 1] == '\'')
		snprintf(buf, cap, "%.*s", (int)(len - 2), s + 1);
	else
		snprintf(buf, cap, "%s", s);
}

enum dt_status dt_cluster_check_flags(const struct dt_cluster_flags *f, const struct dt_option *opts,
				      const struct dt_cluster *cl, struct dt_err *err)
{
	enum dt_status st = dt__flags_check_ranges(f, err);
	if (st)
		return st;
	char me[64];
	dt_task_ref_format(cl->task, me, sizeof(me));
	const char *hint_drop = "drop the flag (dtrain reads it from the cluster) or make the two agree";
	enum dt_job job = cl->task.job;

	if (GIVEN_INT(f, opts, ps_replicas, 0) && f->ps_replicas != cl->num_ps_replicas) {
		st = dt_err_set(err, DT_CONFIG, "--ps_replicas=%d disagrees with %s, which has %d ps task%s", f->ps_replicas,
				cluster_key(cl, DT_JOB_PS), cl->num_ps_replicas, cl->num_ps_replicas == 1 ? "" : "s");
		dt_err_hint(err, "%s", hint_drop);
		return st;
	}
	if (GIVEN_INT(f, opts, worker_replicas, 1) && job != DT_JOB_EVALUATOR &&
	    f->worker_replicas != cl->num_worker_replicas) {
		st = dt_err_set(err, DT_CONFIG,
				"--worker_replicas=%d disagrees with %s, which has %d chief/master/worker task%s",
				f->worker_replicas, cluster_key(cl, DT_JOB_WORKER), cl->num_worker_replicas,
				cl->num_worker_replicas == 1 ? "" : "s");
		dt_err_hint(err, "%s", hint_drop);
		return st;
	}
	if (GIVEN_INT(f, opts, worker_id, 0) && is_trainer(job)) {
		int has_chief = cl->jobs[DT_JOB_CHIEF].slots || cl->jobs[DT_JOB_MASTER].slots;
		int want = job == DT_JOB_WORKER ? cl->task.index + has_chief : 0;
		if (f->worker_id != want) {
			st = dt_err_set(err, DT_CONFIG, "--worker_id=%d disagrees with %s, which makes this task %s (worker id %d)",
					f->worker_id, task_key(cl), me, want);
			dt_err_hint(err, "t2t counts trainers globally: the chief or master is 0 and worker i is i+%d",
				    has_chief);
			return st;
		}
	}
	if (GIVEN_STR(f, opts, master, "") && strcmp(f->master, cl->master ? cl->master : "") != 0) {
		if (cl->master && *cl->master)
			st = dt_err_set(err, DT_CONFIG,
					"--master=%.200s disagrees with %s, which makes this task %s with session target %s",
					f->master, task_key(cl), me, cl->master);
		else
			st = dt_err_set(err, DT_CONFIG,
					"--master=%.200s disagrees with %s: this task (%s) runs in-process, without a session target",
					f->master, task_key(cl), me);
		dt_err_hint(err, "t2t passes --master=grpc://<this task's address>; %s", hint_drop);
		return st;
	}
	if (GIVEN_INT(f, opts, sync, 0) && f->sync && is_trainer(job)) {
		if (cl->num_ps_replicas == 0) {
			st = dt_err_set(err, DT_CONFIG,
					"--sync computes on the ps tasks (t2t's in-graph sync), but %s has no ps job",
					cluster_key(cl, DT_JOB_PS));
			dt_err_hint(err, "list the machines that compute under \"ps\" (t2t: one master, the ps are the workers), "
					 "or drop --sync");
			return st;
		}
		/* Fewer ps than trainers is fine: with chief/workers, --sync trains
		 * through the ps (SyncReplicasOptimizer, train/sync_roles.h); only
		 * t2t's one-master layout computes on the ps. */
	}
	if (GIVEN_STR(f, opts, schedule, "continuous_train_and_eval")) {
		const char *s = f->schedule;
		const char *want = NULL;
		if (job == DT_JOB_PS && strcmp(s, "run_std_server") != 0)
			want = "a ps task serves variables: --schedule=run_std_server";
		else if (job == DT_JOB_EVALUATOR && !is_eval_schedule(s))
			want = "an evaluator evaluates: --schedule=continuous_eval";
		else if (job != DT_JOB_PS && strcmp(s, "run_std_server") == 0)
			want = "run_std_server is for ps tasks; trainers use --schedule=train";
		if (want) {
			st = dt_err_set(err, DT_CONFIG, "--schedule=%.80s disagrees with %s, which makes this task %s", s,
					task_key(cl), me);
			dt_err_hint(err, "%s", want);
			return st;
		}
	}
	if (GIVEN_STR(f, opts, worker_job, "/job:localhost") && (is_trainer(job) || cl->source == DT_SOURCE_LOCAL)) {
		char have[128], want[64];
		unquote(f->worker_job, have, sizeof(have));
		if (dt_cluster_is_local(cl))
			snprintf(want, sizeof(want), "/job:localhost");
		else
			snprintf(want, sizeof(want), "/job:%s", dt_job_name(job));
		if (strcmp(have, want) != 0) {
			st = dt_err_set(err, DT_CONFIG, "--worker_job=%.100s disagrees with %s, which makes this task %s", have,
					task_key(cl), me);
			dt_err_hint(err, "use --worker_job='%s' or drop it", want);
			return st;
		}
	}
	return DT_OK;
}
