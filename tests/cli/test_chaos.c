/* The chaos suite (tests/cli/chaos.h, docs/TESTING.md): randomized failures
 * injected into real multi-process runs on loopback, one test per mode. In
 * CI a fixed seed (7) and three failures per mode; by hand any seed and count
 * (DTRAIN_CHAOS_SEED, DTRAIN_CHAOS_FAILURES, DTRAIN_CHAOS_PROFILE=full),
 * or scripts/chaos.sh for a long run with a table of outcomes. */
#include "chaos.h"
#include "dt_test.h"

#define CI_SEED 7
#define CI_FAILURES 3

static void run(enum chaos_mode mode)
{
	struct chaos_profile p = chaos_profile_from_env();
	struct chaos_totals t;
	chaos_run_mode(mode, chaos_seed_from_env(CI_SEED), chaos_failures_from_env(CI_FAILURES), &p, &t);
}

DT_TEST_TIMEOUT(chaos, async_ps, 590)
{
	run(CHAOS_ASYNC);
}

DT_TEST_TIMEOUT(chaos, sync_ps, 590)
{
	run(CHAOS_SYNC);
}

DT_TEST_TIMEOUT(chaos, allreduce, 590)
{
	run(CHAOS_ALLREDUCE);
}

DT_TEST_TIMEOUT(chaos, in_graph, 590)
{
	run(CHAOS_INGRAPH);
}
