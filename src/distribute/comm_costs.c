/*
 * comm_costs.c — the α (per step) and β (per byte moved) the cost model
 * (coll_algo.c) prices every algorithm with, settled once at the rendezvous
 * and the same bits on every rank, so that every rank picks the same
 * algorithm without a message.
 *
 * Three sources, in this order:
 *   given     a rank's config (cost_alpha_us, cost_beta_ps) or
 *             DTRAIN_COLLECTIVE_COSTS=ALPHA_US,BETA_PS: the mean over the
 *             ranks that give them (tests; links the model misjudges);
 *   measured  when some link is to another host (cost_kind TCP remote: its
 *             rate is not known in advance — a 1 Gbit/s link's β is 8000
 *             ps a byte, a 10 Gbit/s one's 800), or a rank asks
 *             (measure_costs, DTRAIN_COLLECTIVE_COSTS=measure);
 *   compiled  the table below, for shared memory and loopback TCP, whose
 *             costs are the machine's and do not depend on a wire.
 *
 * Measuring: recursive doubling (the fewest hops, and the same bits on every
 * rank) of PROBE_SMALL bytes — a warm-up and PROBE_SMALL_TIMED timed, the
 * median kept (a step's usual latency, wake-ups included, not its luckiest)
 * — then of PROBE_LARGE bytes back to back until the ranks have spent
 * PROBE_LARGE_MS on them on average (at least PROBE_LARGE_MIN, at most
 * PROBE_LARGE_MAX calls; each rank adds its time so far to the first float,
 * so the sum that comes back tells every rank alike when to stop), the
 * median of the last three kept. Back to back, because a link shaped by a
 * token bucket passes its burst (netns-hosts.sh: 1 ms of the rate, at least
 * 64 KB; 1.25 MB at 10 Gbit/s) at memory speed: the first 256 KiB calls
 * there measure the bucket, not the rate a training step's buckets see.
 * Recursive doubling's time is s·α + m·(s·β + g·γ) (s steps, g adds of m),
 * so the two points give the slope, β = (slope −
 * g·γ)/s, and α = (T_small − m_small·slope)/s. Each rank fits its own; one
 * more all-reduce sums the fits and every rank divides by n: recursive
 * doubling leaves every rank the same bits, so every rank prices alike.
 * Cost: about 5–20 ms (at 1 Gbit/s, 4 ranks: 4 calls of 2 steps of 256
 * KiB).
 */
#include "distribute/comm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"

/* The compiled α and β per link kind, in picoseconds (docs/COLLECTIVES.md
 * "Cost model constants", where each was measured):
 *   tcp loopback: a 4-byte all-reduce by recursive doubling, one step,
 *     18-21 us; halving-doubling's slope 256 KB-4 MB, 260-670 ps a byte;
 *   tcp remote: a remote link is always measured (or given), so this row
 *     only prices the model until then, and in tests that set the kind by
 *     hand: bench/allreduce_hosts' 10 Gbit/s links on a loaded 2-vCPU
 *     host, 60 us a step and 3.1 ns a byte;
 *   shared memory: a 4 KB all-reduce of 2 ranks, 1-6 us with the peer
 *     running; halving-doubling's slope 256 KB-4 MB, 250 ps a byte. */
static const struct link_cost {
	const char *name;
	double alpha_ps, beta_ps;
} LINK_COSTS[] = {
	[DT__COST_TCP_LOOPBACK] = { "tcp loopback", 20000000.0, 400.0 },
	[DT__COST_TCP_REMOTE] = { "tcp remote", 60000000.0, 3000.0 },
	[DT__COST_SHM] = { "shared memory", 5000000.0, 250.0 },
};

#define PROBE_SMALL 4u           /* one float: the step's latency */
#define PROBE_SMALL_TIMED 5
#define PROBE_LARGE (256u << 10) /* above the crossovers that matter */
#define PROBE_LARGE_MIN 4        /* a warm-up and three */
#define PROBE_LARGE_MAX 16
#define PROBE_LARGE_MS 5.0f
/* Floors for a fit that noise pushed below anything a link can do (a
 * negative slope, a step faster than a wake-up). */
#define ALPHA_FLOOR_PS 1000000.0
#define BETA_FLOOR_PS 50.0

enum dt_status dt__comm_costs_config(struct dt_comm *c, const struct dt_comm_config *cfg, struct dt_err *err)
{
	if (cfg->cost_alpha_us < 0 || cfg->cost_beta_ps < 0 || !isfinite(cfg->cost_alpha_us) ||
	    !isfinite(cfg->cost_beta_ps) || (cfg->cost_alpha_us > 0) != (cfg->cost_beta_ps > 0))
		return dt_err_set(err, DT_CONFIG,
				  "link costs alpha %g us, beta %g ps/byte: give both, each > 0 (or neither, to use the "
				  "compiled or measured ones)",
				  cfg->cost_alpha_us, cfg->cost_beta_ps);
	c->want_alpha_us = cfg->cost_alpha_us;
	c->want_beta_ps = cfg->cost_beta_ps;
	c->want_measure = cfg->measure_costs != 0;
	const char *env = getenv("DTRAIN_COLLECTIVE_COSTS");
	if (c->want_alpha_us > 0 || c->want_measure || !env || !env[0])
		return DT_OK; /* the config first */
	if (strcmp(env, "measure") == 0) {
		c->want_measure = 1;
		return DT_OK;
	}
	double a = 0, b = 0;
	char tail = 0;
	if (sscanf(env, "%lf,%lf%c", &a, &b, &tail) != 2 || !(a > 0) || !(b > 0) || !isfinite(a) || !isfinite(b))
		return dt_err_set(err, DT_CONFIG,
				  "DTRAIN_COLLECTIVE_COSTS='%s': give ALPHA_US,BETA_PS, both > 0 (e.g. 50,8000 for a "
				  "1 Gbit/s link), or 'measure'",
				  env);
	c->want_alpha_us = a;
	c->want_beta_ps = b;
	return DT_OK;
}

void dt__comm_costs_compiled(struct dt_comm *c)
{
	c->alpha_ps = LINK_COSTS[c->cost_kind].alpha_ps;
	c->beta_ps = LINK_COSTS[c->cost_kind].beta_ps;
	c->costs_from = DT__COSTS_COMPILED;
}

const char *dt__comm_costs_name(const struct dt_comm *c)
{
	return LINK_COSTS[c->cost_kind].name;
}

/* Sums v (α in µs, β in ps a byte) over the ranks and takes the mean over
 * `k` of them: the same bits on every rank. */
static enum dt_status agree(struct dt_comm *c, float v[2], int k, int64_t deadline, struct dt_err *err)
{
	enum dt_status st = dt__allreduce_doubling(c, v, 2, "dtrain/link-costs", deadline, err);
	if (st)
		return st;
	c->alpha_ps = (double)v[0] / k * 1e6;
	c->beta_ps = (double)v[1] / k;
	return DT_OK;
}

static void log_costs(const struct dt_comm *c, int k)
{
	dt_info("link costs %s (%s links, %d of %d ranks): alpha %.1f us, beta %.0f ps/byte (about %.2f Gbit/s); "
		"the cost model prices every collective with them",
		c->costs_from == DT__COSTS_MEASURED ? "measured" : "given", dt__comm_costs_name(c), k, c->n,
		c->alpha_ps / 1e6, c->beta_ps, 8.0 / c->beta_ps * 1e3);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *t, int k)
{
	qsort(t, (size_t)k, sizeof(*t), cmp_double);
	return t[k / 2];
}

/* One probe all-reduce of `count` floats, timed, in picoseconds. */
static enum dt_status probe(struct dt_comm *c, float *buf, size_t count, int64_t deadline, double *ps,
			    struct dt_err *err)
{
	int64_t t0 = dt_now_ns();
	enum dt_status st = dt__allreduce_doubling(c, buf, count, "dtrain/link-probe", deadline, err);
	*ps = (double)(dt_now_ns() - t0) * 1e3;
	return st;
}

/*
 * Where halving-doubling overtakes recursive doubling, timed rather than
 * priced. On links between hosts a step's time is not always α + m·β: on
 * bench/allreduce_hosts' 1 Gbit/s veth links (idle host, 4 ranks) any step
 * of 4 KB or less took 36-45 us, and above that the wire time hid the
 * latency, so one α could not place both 4 KB (doubling 73 us, halving-
 * doubling 179) and 16 KB (doubling 277, halving-doubling 210) — the model
 * kept doubling at 16 KB. So both are timed at CROSS_SIZES, each back to
 * back until the ranks spent CROSS_MS on it (a token bucket refilled while
 * the smaller sizes ran would pass the first calls at memory speed: with 4
 * timed calls 16 KB came out faster by doubling), the median of the last
 * CROSS_TIMED; every rank's medians are summed by one all-reduce, and the
 * crossover is the smallest size from which halving-doubling's sum is
 * below CROSS_MARGIN of doubling's at every larger size timed. None in
 * range keeps doubling to the largest size timed and leaves the rest to
 * the model. The sums are the same on every rank, so is the decision.
 * With 2 ranks 128 and 256 KB are timed too: there both algorithms send
 * the same bytes, and on the emulated 10 Gbit/s hosts doubling's one
 * exchange ran at the wire's time at 256 KB where the model's
 * halving-doubling (priced for doubling's add after its step) did not
 * (COLLECTIVES.md, "Bytes on the wire"); under load the opposite was seen,
 * which the timing sees too. With more ranks doubling sends more bytes (512
 * KB a rank against 384 at 4 ranks, 256 KB), and one noisy timing there
 * chose doubling to 256 KB at 1.8x the time.
 * Cost: 5 (2 ranks: 7) sizes x 2 algorithms x at least 2 ms (4 to 32 calls
 * each), about 25 ms at 1 Gbit/s, 4 ranks.
 */
#define CROSS_SIZES_N 7
#define CROSS_SIZES_MANY 5 /* those timed with more than 2 ranks */
static const size_t CROSS_SIZES[CROSS_SIZES_N] = { 4096, 8192, 16384, 32768, 65536, 131072, 262144 };
#define CROSS_TIMED 3   /* the median of the last three */
#define CROSS_MAX 32
#define CROSS_MS 2.0f
/* halving-doubling must win by 5%: a near tie stays with doubling (half the
 * steps, less CPU), and a tie's noise does not flip the choice between runs
 * (10 Gbit/s, 2 ranks, 64 KB: 79 against 80 us in one run, doubling 55 in
 * the bench against halving-doubling's 79 in another) */
#define CROSS_MARGIN 0.95f

static enum dt_status time_the_crossover(struct dt_comm *c, int64_t deadline, struct dt_err *err)
{
	c->doubling_below_bytes = c->halving_from_bytes = 0;
	const int nsizes = c->n == 2 ? CROSS_SIZES_N : CROSS_SIZES_MANY; /* the same on every rank */
	float *buf = dt_xcalloc(CROSS_SIZES[nsizes - 1] / sizeof(float), sizeof(float));
	float sums[2 * CROSS_SIZES_N];
	enum dt_status st = DT_OK;
	for (int i = 0; i < nsizes && !st; i++) {
		const size_t count = CROSS_SIZES[i] / sizeof(float);
		for (int a = 0; a < 2 && !st; a++) {
			const enum dt_comm_algorithm alg = a == 0 ? DT_COMM_ALG_DOUBLING : DT_COMM_ALG_HALVING;
			/* back to back until the ranks spent CROSS_MS on this pair
			 * on average (a token bucket refilled by the smaller sizes
			 * before would pass the first calls at memory speed), the
			 * stop agreed through the first float as the large probe's */
			double t[CROSS_MAX], spent_ms = 0;
			int k = 0;
			while (!st && k < CROSS_MAX) {
				memset(buf, 0, CROSS_SIZES[i]);
				buf[0] = (float)spent_ms;
				int64_t t0 = dt_now_ns();
				st = dt__allreduce_by(c, alg, buf, count, "dtrain/link-probe", deadline, err);
				t[k] = (double)(dt_now_ns() - t0) / 1e3;
				spent_ms += t[k++] / 1e3;
				if (!st && k >= CROSS_TIMED + 1 && buf[0] / (float)c->n >= CROSS_MS)
					break;
			}
			if (!st)
				sums[2 * i + a] = (float)median(t + k - CROSS_TIMED, CROSS_TIMED);
		}
	}
	free(buf);
	if (!st)
		st = dt__allreduce_doubling(c, sums, 2 * (size_t)nsizes, "dtrain/link-costs", deadline, err);
	if (st)
		return st;
	for (int i = 0; i < nsizes; i++)
		dt_debug("timed at %zu bytes, the mean over %d ranks: recursive doubling %.1f us, halving-doubling %.1f us",
			 CROSS_SIZES[i], c->n, (double)sums[2 * i] / c->n, (double)sums[2 * i + 1] / c->n);
	int from = nsizes;
	while (from > 0 && sums[2 * (from - 1) + 1] < CROSS_MARGIN * sums[2 * (from - 1)])
		from--;
	if (from < nsizes) {
		c->doubling_below_bytes = c->halving_from_bytes = CROSS_SIZES[from];
		dt_info("recursive doubling against halving-doubling, timed over %d ranks: halving-doubling from %zu bytes "
			"up (%.0f us against doubling's %.0f there, the mean over ranks), recursive doubling below",
			c->n, c->halving_from_bytes, (double)sums[2 * from + 1] / c->n, (double)sums[2 * from] / c->n);
	} else {
		c->doubling_below_bytes = CROSS_SIZES[nsizes - 1] + 1;
		dt_info("recursive doubling against halving-doubling, timed over %d ranks: doubling at every size to %zu "
			"bytes; the model decides above", c->n, CROSS_SIZES[nsizes - 1]);
	}
	return DT_OK;
}

enum dt_status dt__comm_measure_costs(struct dt_comm *c, int64_t deadline, struct dt_err *err)
{
	float *buf = dt_xcalloc(PROBE_LARGE / sizeof(float), sizeof(float));
	double t[PROBE_LARGE_MAX], t_small = 0, t_large = 0, spent_ms = 0;
	enum dt_status st = DT_OK;
	/* the step's latency: the median of PROBE_SMALL_TIMED after a warm-up */
	for (int i = 0; i <= PROBE_SMALL_TIMED && !st; i++)
		st = probe(c, buf, PROBE_SMALL / sizeof(float), deadline, &t[i > 0 ? i - 1 : 0], err);
	if (!st)
		t_small = median(t, PROBE_SMALL_TIMED);
	/* the sustained rate: back to back until the ranks spent PROBE_LARGE_MS
	 * on average (each rank puts its time so far in the first float; the
	 * sum comes back the same on every rank, so all stop after the same
	 * call), the median of the last three */
	int k = 0;
	while (!st && k < PROBE_LARGE_MAX) {
		memset(buf, 0, PROBE_LARGE);
		buf[0] = (float)spent_ms;
		st = probe(c, buf, PROBE_LARGE / sizeof(float), deadline, &t[k], err);
		spent_ms += t[k++] / 1e9;
		if (!st && k >= PROBE_LARGE_MIN && buf[0] / (float)c->n >= PROBE_LARGE_MS)
			break;
	}
	free(buf);
	if (st)
		return dt_err_prefix(err, "measuring the links' costs for the cost model (docs/COLLECTIVES.md)");
	t_large = median(t + k - 3, 3);
	/* recursive doubling's work: s steps each moving m, g passes of m
	 * adding (fold_in's and one per round; no copies: it sends the caller's
	 * buffer and receives into scratch) */
	int p = 1, lg = 0;
	while (p <= c->n / 2)
		p *= 2, lg++;
	int f = c->n != p, s = lg + 2 * f, g = lg + f;
	double slope = (t_large - t_small) / (double)(PROBE_LARGE - PROBE_SMALL);
	double beta = (slope - g * DT__GAMMA_PS) / s, alpha = (t_small - PROBE_SMALL * slope) / s;
	dt_debug("link costs on rank %d: %.1f us for %u bytes, %.1f us for %u bytes by recursive doubling (%d steps): "
		 "alpha %.1f us, beta %.0f ps/byte",
		 c->rank, t_small / 1e6, PROBE_SMALL, t_large / 1e6, PROBE_LARGE, s, alpha / 1e6, beta);
	dt_debug("link costs on rank %d: %d probes of %u bytes in %.1f ms", c->rank, k, PROBE_LARGE, spent_ms);
	float v[2] = { (float)(fmax(alpha, ALPHA_FLOOR_PS) / 1e6), (float)fmax(beta, BETA_FLOOR_PS) };
	st = agree(c, v, c->n, deadline, err);
	if (st)
		return dt_err_prefix(err, "agreeing the links' measured costs");
	if ((st = time_the_crossover(c, deadline, err)))
		return dt_err_prefix(err, "timing recursive doubling against halving-doubling");
	return DT_OK;
}

enum dt_status dt__comm_costs_agree(struct dt_comm *c, int measure, int given, int64_t deadline, struct dt_err *err)
{
	dt__comm_costs_compiled(c);
	if (c->n == 1)
		return DT_OK;
	enum dt_status st;
	if (given > 0) {
		int mine = c->want_alpha_us > 0 && c->want_beta_ps > 0;
		float v[2] = { mine ? (float)c->want_alpha_us : 0.0f, mine ? (float)c->want_beta_ps : 0.0f };
		st = agree(c, v, given, deadline, err);
		if (st)
			return dt_err_prefix(err, "agreeing the given link costs");
		c->costs_from = DT__COSTS_GIVEN;
		log_costs(c, given);
		return DT_OK;
	}
	if (measure == 0 && c->cost_kind != DT__COST_TCP_REMOTE)
		return DT_OK;
	st = dt__comm_measure_costs(c, deadline, err);
	if (st)
		return st;
	c->costs_from = DT__COSTS_MEASURED;
	log_costs(c, c->n);
	return DT_OK;
}
