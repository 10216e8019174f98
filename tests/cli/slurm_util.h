/*
 * slurm_util.h — a private one-node Slurm for a CLI test
 * (test_cluster_cli.c, test_launch_emit.c), started with
 * tests/slurm/start-cluster.sh in the test's temp dir and stopped, with
 * whatever else came from it, within a bounded time.
 *
 * A process "came from" the test's Slurm when its environment or command
 * line names the test's directory (start-cluster.sh puts it in both).
 */
#ifndef DT_TEST_SLURM_UTIL_H
#define DT_TEST_SLURM_UTIL_H

#include <stddef.h>

#include "dt_test.h"

/* Makes "<tmpdir>/slurm" (its path goes into dir, cap bytes) and runs
 * tests/slurm/start-cluster.sh there with slurmctld and slurmd on two free
 * loopback ports, for at most 30 s. r holds the outcome (release it with
 * dt_run_release): exit 77 or timed_out when Slurm cannot start here, 0 when
 * it runs; call slurm_stop(dir, ...) in every case. */
void slurm_start(struct dt_run *r, char *dir, size_t cap);

/* Stops what start-cluster.sh started in `dir` (the pids it recorded in
 * slurmd.pid, slurmctld.pid, munged.pid) with SIGTERM, after letting a
 * running step end (at most 10 s; then at most 10 s for everything that
 * came from this Slurm to end), then SIGKILLs what is left. Appends to
 * `report` (cap bytes, NUL-terminated) each task (not a Slurm or munge
 * daemon, which is only noted on stderr) that needed SIGKILL, and any
 * process that survived it; leaves it as it was otherwise. */
void slurm_stop(const char *dir, char *report, size_t cap);

#endif
