/* data/units.h: an epoch's units dealt to trainers, and the layout for
 * another trainer count made from where they are: every unit of an epoch
 * read exactly once across any number of changes; the checkpoint's text. */
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "data/units.h"
#include "dt_test.h"

enum { NU = 37, EPOCHS = 6 };

/* Trainer j of l reads `n` units from *p, counting each in seen[epoch][unit]. */
static void read_units(const struct dt_units_layout *l, int j, struct dt_units_pos *p, int n, int seen[][NU])
{
	int64_t list[NU];
	for (int i = 0; i < n; i++) {
		dt_units_normalize(l, j, p);
		if (p->epoch >= EPOCHS)
			return;
		const int has = dt_units_unread_list(l, p->epoch, list);
		const int64_t u = dt_units_at(l, j, p->taken, has ? list : NULL);
		DT_CHECK(u >= 0 && u < NU);
		seen[p->epoch][u]++;
		p->taken++;
	}
}

DT_TEST(units, without_a_base_trainer_j_reads_the_slices_j)
{
	struct dt_units_layout l;
	dt_units_init(&l, 3, 10);
	DT_CHECK(dt_units_share(&l, 0, 0) == 4 && dt_units_share(&l, 1, 0) == 3 && dt_units_share(&l, 2, 0) == 3);
	DT_CHECK(dt_units_at(&l, 1, 2, NULL) == 7);
	struct dt_units_pos p = { DT_UNITS_UNKNOWN, 0 };
	dt_units_normalize(&l, 2, &p);
	DT_CHECK(p.epoch == 0 && p.taken == 0);
	p.taken = 3;
	dt_units_normalize(&l, 2, &p);
	DT_CHECK(p.epoch == 1 && p.taken == 0);
	dt_units_release(&l);
}

/* Random trainer counts (1..5), each stage reading a random number of units
 * per trainer at uneven speeds, the layout merged and passed through its
 * checkpoint text between stages: every unit of every epoch finished is read
 * exactly once, and none twice in the one in flight. */
DT_TEST(units, every_unit_is_read_once_per_epoch_across_changes_of_the_trainer_count)
{
	struct dt_rng rng;
	dt_rng_derive(&rng, 5, "units", 0);
	for (int round = 0; round < 200; round++) {
		static int seen[EPOCHS][NU];
		memset(seen, 0, sizeof(seen));
		struct dt_units_layout l;
		dt_units_init(&l, 1 + (int)(dt_rng_next(&rng) % 5), NU);
		struct dt_units_pos *pos = calloc((size_t)l.trainers, sizeof(*pos));
		for (int j = 0; j < l.trainers; j++)
			pos[j].epoch = DT_UNITS_UNKNOWN;
		for (int stage = 0; stage < 6; stage++) {
			for (int j = 0; j < l.trainers; j++)
				if (dt_rng_next(&rng) % 4) /* some never report in a stage */
					read_units(&l, j, &pos[j], (int)(dt_rng_next(&rng) % 30), seen);
			char *a, *b, *c;
			dt_units_format(&l, pos, &a, &b, &c);
			struct dt_units_layout back;
			struct dt_units_pos *bpos;
			struct dt_err err = DT_ERR_INIT;
			DT_CHECK(dt_units_parse(a, b, c, &back, &bpos, &err) == DT_OK);
			char *a2, *b2, *c2;
			dt_units_format(&back, bpos, &a2, &b2, &c2);
			DT_CHECK(strcmp(a, a2) == 0 && strcmp(b, b2) == 0 && strcmp(c, c2) == 0);
			free(a), free(b), free(c), free(a2), free(b2), free(c2);
			const int m = 1 + (int)(dt_rng_next(&rng) % 5);
			struct dt_units_layout next;
			dt_units_merge(&back, bpos, m, &next);
			dt_units_release(&back);
			free(bpos);
			dt_units_release(&l);
			l = next;
			free(pos);
			pos = calloc((size_t)m, sizeof(*pos));
			for (int j = 0; j < m; j++)
				pos[j].epoch = DT_UNITS_UNKNOWN;
		}
		int64_t done = l.first; /* every epoch before the layout's first is finished */
		for (int64_t e = 0; e < EPOCHS; e++)
			for (int u = 0; u < NU; u++) {
				DT_CHECK(seen[e][u] <= 1);
				if (e < done && seen[e][u] != 1)
					dt_test_fail(__FILE__, __LINE__, "round %d: unit %d of finished epoch %lld read %d times",
						     round, u, (long long)e, seen[e][u]);
			}
		dt_units_release(&l);
		free(pos);
	}
}

DT_TEST(units, the_checkpoint_text_is_checked)
{
	struct dt_units_layout l;
	struct dt_units_pos *pos;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK(dt_units_parse("2:10:0", "0:ff01", "0:3,1:0", &l, &pos, &err) == DT_OK);
	DT_CHECK(l.n == 1 && l.base[0].unread == 1 && pos[1].epoch == 1);
	dt_units_release(&l);
	free(pos);
	const char *bad[][3] = {
		{ "0:10:0", "", "" },                 /* no trainers */
		{ "3:2:0", "", "0:0,0:0,0:0" },       /* fewer units than trainers */
		{ "2:10", "", "0:0,0:0" },            /* no first epoch */
		{ "2:10:0", "0:ff", "0:0,0:0" },      /* a bitmap one byte short */
		{ "2:10:0", "0:ff04", "0:0,0:0" },    /* a bit past the last unit */
		{ "2:10:0", "0:ffzz", "0:0,0:0" },    /* not hex */
		{ "2:10:0", "1:ff00;1:ff00", "0:0,0:0" }, /* epochs not increasing */
		{ "2:10:1", "0:ff00", "0:0,0:0" },    /* a base before the first epoch */
		{ "2:10:0", "", "0:0" },              /* one position of two */
		{ "2:10:0", "", "0:0,0:11" },         /* more taken than units */
		{ "2:10:0", "", "0:0,0:0," },         /* trailing bytes */
		{ "2:010:0", "", "0:0,0:0" },         /* a leading zero: not as written (fuzz_ps_positions) */
		{ "2:10:0", "", "-0:0,0:0" },         /* "-0" */
		{ "+2:10:0", "", "0:0,0:0" },         /* a '+' */
		{ "2:10:0", "0:ff00;", "0:0,0:0" },   /* a trailing ';' */
		{ NULL, "", "" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err = (struct dt_err)DT_ERR_INIT;
		DT_CHECK(dt_units_parse(bad[i][0], bad[i][1], bad[i][2], &l, &pos, &err) == DT_CKPT);
		DT_CHECK(pos == NULL && l.base == NULL);
	}
}
