#include "train/ps_units.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"
#include "distribute/ps_positions.h"
#include "net/loop.h"

enum dt_status dt_ps_units_start(struct dt_ps_units *u, const char *dir, int64_t nu, int trainers, int index,
				 int64_t *epoch, int64_t *taken, struct dt_err *err)
{
	memset(u, 0, sizeof(*u));
	u->index = index;
	struct dt_units_layout saved;
	struct dt_units_pos *at = NULL;
	int have = 0;
	char path[DT_CKPT_PATH_MAX];
	int64_t step = 0;
	enum dt_ckpt_poll poll = DT_CKPT_POLL_NONE;
	struct dt_err e = DT_ERR_INIT;
	if (dir && *dir && !dt_ckpt_latest_path(dir, path, sizeof(path), &step, &poll, &e) &&
	    poll == DT_CKPT_POLL_FOUND) {
		struct dt_st_file *f = NULL;
		if (!dt_st_open(path, &f, &e)) {
			const char *l = dt_st_meta(f, "pipeline_units");
			enum dt_status st = l ? dt_units_parse(l, dt_st_meta(f, "pipeline_units_base"),
							       dt_st_meta(f, "pipeline_units_at"), &saved, &at, err)
					      : DT_OK;
			dt_st_free(f);
			if (st)
				return dt_err_prefix(err, "%s", path);
			have = l != NULL;
		}
	}
	struct dt_units_pos mine = { DT_UNITS_UNKNOWN, 0 };
	if (have && saved.nu != nu) {
		dt_units_release(&saved);
		free(at);
		enum dt_status st = dt_err_set(err, DT_CKPT, "%s: its data positions are in epochs of %lld batches, this "
					       "run's have %lld", path, (long long)saved.nu, (long long)nu);
		dt_err_hint(err, "resume with the dataset and batch_size that wrote it");
		return st;
	}
	if (have && saved.trainers == trainers) {
		u->layout = saved;
		u->from = at;
		mine = at[index];
		dt_info("data: units of %lld batches an epoch, trainer %d of %d, continuing from the checkpoint's "
			"position (epoch %lld, %lld of its batches)", (long long)nu, index, trainers,
			(long long)mine.epoch, (long long)mine.taken);
	} else {
		if (have) {
			dt_units_merge(&saved, at, trainers, &u->layout);
			dt_info("data: %d trainers resume a checkpoint of %d: the batches of epoch %lld on that nobody read "
				"yet dealt to %d, then whole epochs", trainers, saved.trainers, (long long)u->layout.first,
				trainers);
			dt_units_release(&saved);
			free(at);
		} else {
			dt_units_init(&u->layout, trainers, nu);
		}
		dt_info("data: units of %lld batches an epoch, trainer %d of %d: batches %d, %d + %d, ... of each epoch's "
			"order%s", (long long)nu, index, trainers, index, index, trainers,
			have ? " of the batches nobody read yet" : "");
		u->from = dt_xcalloc((size_t)trainers, sizeof(*u->from));
		for (int j = 0; j < trainers; j++)
			u->from[j].epoch = DT_UNITS_UNKNOWN;
	}
	if (nu < trainers) {
		dt_ps_units_release(u);
		return dt_err_set(err, DT_CONFIG, "%d trainers but only %lld batches an epoch", trainers, (long long)nu);
	}
	dt_units_normalize(&u->layout, index, &mine);
	*epoch = mine.epoch;
	*taken = mine.taken;
	return DT_OK;
}

void dt_ps_units_release(struct dt_ps_units *u)
{
	dt_units_release(&u->layout);
	free(u->from);
	for (int i = 0; i < 3; i++)
		free(u->text[i]);
	memset(u, 0, sizeof(*u));
}

enum dt_status dt_ps_units_meta(struct dt_ps_units *u, struct dt_conn *c0, int64_t deadline, struct dt_err *err)
{
	struct dt_ps_positions t;
	enum dt_status st = dt_ps_positions_get(c0, &t, deadline, err);
	if (st)
		return st;
	const int m = u->layout.trainers;
	struct dt_units_pos *pos = dt_xcalloc((size_t)m, sizeof(*pos));
	for (int j = 0; j < m; j++)
		pos[j] = t.trainers == m && t.at[j].epoch >= 0 ? (struct dt_units_pos){ t.at[j].epoch, t.at[j].taken }
							       : u->from[j];
	dt_ps_positions_release(&t);
	/* The latest known, for the next checkpoint if ps:0 forgets (a ps:0
	 * restarted and restored has an empty table until each trainer's next round). */
	memcpy(u->from, pos, (size_t)m * sizeof(*pos));
	for (int i = 0; i < 3; i++)
		free(u->text[i]);
	dt_units_format(&u->layout, pos, &u->text[0], &u->text[1], &u->text[2]);
	free(pos);
	static const char *const keys[3] = { "pipeline_units", "pipeline_units_base", "pipeline_units_at" };
	for (int i = 0; i < 3; i++)
		u->kv[i] = (struct dt_ckpt_kv){ keys[i], u->text[i] };
	return DT_OK;
}

static int stop_now(void *arg)
{
	return *(int *)arg;
}

int dt_ps_units_wait_final(struct dt_ps_units *u, struct dt_conn *c0, int64_t step, int64_t deadline)
{
	const int m = u->layout.trainers;
	int missing = m;
	for (int round = 0; round < 10000 && dt_now_ns() < deadline; round++) {
		struct dt_ps_positions t;
		struct dt_err e = DT_ERR_INIT;
		if (dt_ps_positions_get(c0, &t, deadline, &e))
			return missing;
		missing = 0;
		for (int j = 0; j < m; j++)
			missing += !(t.trainers == m && t.at[j].epoch >= 0 && t.at[j].step >= step);
		dt_ps_positions_release(&t);
		if (!missing)
			return 0;
		/* 20 ms of the loop (heartbeats flow) before asking again */
		int never = 0;
		int64_t until = dt_now_ns() + 20000000;
		enum dt_status waited = dt_loop_run_until(dt_conn_loop(c0), stop_now, &never,
							  until < deadline ? until : deadline, "the trainers' last positions",
							  NULL);
		(void)waited; /* a timeout here is the pause itself */
	}
	return missing;
}
