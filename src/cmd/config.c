/*
 * config.c — `dtrain config`: resolves the cluster this process would join
 * (flags, TF_CONFIG, Slurm, MPI or local, see cluster/resolve.h), validates
 * it and prints what dtrain understood. Starts nothing. Exit 0 when the
 * cluster is valid, 2 when it is not (the error says why and how to fix it).
 *
 *   source:     TF_CONFIG
 *   cluster:
 *     chief:0     localhost:2000
 *     ps:0        localhost:2002
 *     worker:0    localhost:2001  <- this task
 *   task:       worker:0 at localhost:2001
 *   chief:      chief:0 at localhost:2000 (not this task)
 *   global id:  1
 *   replicas:   2 trainers (chief, master and workers), 1 ps
 *   master:     grpc://localhost:2001
 *   peers:      ps:0 at localhost:2002
 */
#include <stdio.h>
#include <string.h>

#include "cluster/resolve.h"
#include "cmd/cmd.h"

static const char *address_of(const struct dt_cluster *cl, struct dt_task_ref t)
{
	const char *a = dt_cluster_address(cl, t.job, t.index);
	return a ? a : "(no address: not listed in the cluster)";
}

static void print_cluster(const struct dt_cluster *cl)
{
	char ref[64];
	printf("source:     %s", dt_cluster_source_name(cl->source));
	if (cl->source_detail[0])
		printf(" (%s)", cl->source_detail);
	printf("\n");
	if (cl->shadowed) {
		/* What users set, named as they know it. */
		static const char *const set[DT_SOURCE_COUNT] = { "--ps_hosts/--worker_hosts", "TF_CONFIG", "SLURM_*",
								  "OMPI_*", "" };
		printf("ignored:   ");
		for (int s = 0; s < DT_SOURCE_COUNT; s++)
			if (cl->shadowed & (1u << s))
				printf(" %s", set[s]);
		printf(" (also set; %s comes first)\n", set[cl->source]);
	}
	printf("cluster:\n");
	if (dt_cluster_is_local(cl))
		printf("  (none: one local process)\n");
	for (int j = 0; j < DT_JOB_COUNT; j++) {
		const struct dt_cluster_job *job = &cl->jobs[j];
		for (int i = 0; i < job->slots; i++) {
			if (!job->addrs[i])
				continue;
			struct dt_task_ref t = { (enum dt_job)j, i };
			int me = t.job == cl->task.job && t.index == cl->task.index;
			printf("  %-12s%s%s\n", dt_task_ref_format(t, ref, sizeof(ref)), job->addrs[i],
			       me ? "  <- this task" : "");
		}
	}
	if (dt_cluster_is_local(cl))
		printf("task:       %s (local)\n", dt_task_ref_format(cl->task, ref, sizeof(ref)));
	else
		printf("task:       %s at %s\n", dt_task_ref_format(cl->task, ref, sizeof(ref)), address_of(cl, cl->task));
	if (dt_cluster_is_local(cl))
		printf("chief:      %s (this task)\n", dt_task_ref_format(cl->chief, ref, sizeof(ref)));
	else
		printf("chief:      %s at %s (%s)\n", dt_task_ref_format(cl->chief, ref, sizeof(ref)),
		       address_of(cl, cl->chief), cl->is_chief ? "this task" : "not this task");
	if (cl->global_id >= 0)
		printf("global id:  %d\n", cl->global_id);
	else
		printf("global id:  none (an evaluator is not part of the training cluster)\n");
	printf("replicas:   %d trainer%s (chief, master and workers), %d ps\n", cl->num_worker_replicas,
	       cl->num_worker_replicas == 1 ? "" : "s", cl->num_ps_replicas);
	printf("master:     %s\n", cl->master && *cl->master ? cl->master : "(in-process)");
	if (cl->rpc_layer)
		printf("rpc layer:  %s\n", cl->rpc_layer);
	if (cl->environment)
		printf("environment: %s (ignored)\n", cl->environment);
	if (cl->model_dir)
		printf("model dir:  %s\n", cl->model_dir);
	if (cl->npeers == 0) {
		printf("peers:      none\n");
		return;
	}
	for (int i = 0; i < cl->npeers; i++)
		printf("%s%s at %s\n", i ? "            " : "peers:      ", dt_task_ref_format(cl->peers[i], ref, sizeof(ref)),
		       address_of(cl, cl->peers[i]));
}

int dt_cmd_config(int argc, char **argv)
{
	struct dt_cluster_flags cf;
	dt_cluster_flags_init(&cf);
	struct dt_option opts[] = {
		DT_CLUSTER_OPTIONS(&cf),
		DT_OPT_END,
	};
	const char *usage = "dtrain config [cluster options]   (prints and checks the cluster; starts nothing)";
	struct dt_args args;
	int code;
	if (!dt_cmd_parse(opts, argc, argv, usage, &args, &code))
		return code;
	if (args.count > 0) {
		fprintf(stderr, "error: unexpected argument '%s'\n(see 'dtrain config --help')\n", args.items[0]);
		dt_args_release(&args);
		return 2;
	}
	dt_args_release(&args);

	struct dt_cluster cl;
	struct dt_err err = DT_ERR_INIT;
	if (dt_cluster_resolve(&cf, opts, &cl, &err) != DT_OK) {
		dt_cluster_release(&cl);
		return dt_cmd_report(&err);
	}
	print_cluster(&cl);
	dt_cluster_release(&cl);
	return 0;
}
