/* Placement of variables over parameter servers (distribute/placement.c). */
#include <stdlib.h>
#include <string.h>

#include "dt_test.h"
#include "distribute/placement.h"

/* Lays out variables back to back as a model's flat buffer does. */
static int make_vars(struct dt_variable *vars, const int64_t (*shapes)[2], int n)
{
	size_t offset = 0;
	for (int i = 0; i < n; i++) {
		memset(&vars[i], 0, sizeof(vars[i]));
		snprintf(vars[i].name, sizeof(vars[i].name), "v%d", i);
		vars[i].ndim = shapes[i][1] ? 2 : 1;
		vars[i].shape[0] = shapes[i][0];
		vars[i].shape[1] = shapes[i][1];
		vars[i].count = (size_t)shapes[i][0] * (size_t)(shapes[i][1] ? shapes[i][1] : 1);
		vars[i].offset = offset;
		offset += vars[i].count;
	}
	return (int)offset;
}

/* Every element of the flat buffer belongs to exactly one shard. */
static void check_covers_exactly(const struct dt_placement *p, size_t total)
{
	unsigned char *seen = calloc(total, 1);
	for (int i = 0; i < p->num_shards; i++) {
		const struct dt_shard *s = &p->shards[i];
		DT_CHECK(s->ps >= 0 && s->ps < p->num_ps);
		DT_CHECK(s->offset + s->count <= total);
		for (size_t e = s->offset; e < s->offset + s->count; e++) {
			DT_CHECK_INT_EQ(seen[e], 0);
			seen[e] = 1;
		}
	}
	for (size_t e = 0; e < total; e++)
		DT_CHECK_INT_EQ(seen[e], 1);
	free(seen);
	size_t sum = 0;
	for (int i = 0; i < p->num_ps; i++)
		sum += p->ps_elements[i];
	DT_CHECK_INT_EQ(sum, total);
}

DT_TEST(placement, small_variables_stay_whole_and_balance_greedily)
{
	/* mlp: 784x256, 256, 256x128, 128, 128x10, 10 — 784x256 floats is 784 KiB. */
	const int64_t shapes[][2] = { { 784, 256 }, { 256, 0 }, { 256, 128 }, { 128, 0 }, { 128, 10 }, { 10, 0 } };
	struct dt_variable vars[6];
	size_t total = (size_t)make_vars(vars, shapes, 6);
	struct dt_placement p;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_placement_compute(vars, 6, 1, 0, &p, &err), &err);
	DT_CHECK_INT_EQ(p.num_shards, 6); /* one server: nothing is split */
	check_covers_exactly(&p, total);
	dt_placement_release(&p);

	DT_CHECK_OK(dt_placement_compute(vars, 6, 2, 0, &p, &err), &err);
	/* 784 KiB > 256 KiB: split in min(2, ceil(784/256)=4) = 2 slices of 392 rows. */
	DT_CHECK_INT_EQ(p.num_shards, 7);
	DT_CHECK_INT_EQ(p.shards[0].num_slices, 2);
	DT_CHECK_INT_EQ(p.shards[0].row_begin, 0);
	DT_CHECK_INT_EQ(p.shards[0].row_end, 392);
	DT_CHECK_INT_EQ(p.shards[1].row_begin, 392);
	DT_CHECK_INT_EQ(p.shards[1].row_end, 784);
	DT_CHECK(p.shards[0].ps != p.shards[1].ps);
	check_covers_exactly(&p, total);
	/* Greedy keeps the servers within one shard's size of each other. */
	size_t a = p.ps_elements[0], b = p.ps_elements[1];
	DT_CHECK((a > b ? a - b : b - a) <= 256 * 128);
	dt_placement_release(&p);
}

DT_TEST(placement, uneven_rows_give_the_extra_rows_to_the_first_slices)
{
	const int64_t shapes[][2] = { { 1001, 100 } }; /* 391 KiB: 2 slices at most with 3 ps */
	struct dt_variable vars[1];
	size_t total = (size_t)make_vars(vars, shapes, 1);
	struct dt_placement p;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_placement_compute(vars, 1, 3, 0, &p, &err), &err);
	DT_CHECK_INT_EQ(p.num_shards, 2);
	DT_CHECK_INT_EQ(p.shards[0].row_end - p.shards[0].row_begin, 501);
	DT_CHECK_INT_EQ(p.shards[1].row_end - p.shards[1].row_begin, 500);
	check_covers_exactly(&p, total);
	DT_CHECK_INT_EQ(p.ps_shards[2], 0);
	dt_placement_release(&p);

	/* A huge variable over many servers: no more slices than rows or servers. */
	const int64_t tall[][2] = { { 3, 200000 } };
	make_vars(vars, tall, 1);
	DT_CHECK_OK(dt_placement_compute(vars, 1, 8, 0, &p, &err), &err);
	DT_CHECK_INT_EQ(p.num_shards, 3);
	dt_placement_release(&p);
}

DT_TEST(placement, is_a_pure_function_of_the_signature_and_server_count)
{
	const int64_t shapes[][2] = { { 3136, 128 }, { 128, 0 }, { 3, 3 }, { 64, 0 }, { 128, 10 }, { 10, 0 } };
	struct dt_variable vars[6];
	size_t total = (size_t)make_vars(vars, shapes, 6);
	for (int ps = 1; ps <= 4; ps++) {
		struct dt_placement a, b;
		struct dt_err err = DT_ERR_INIT;
		DT_CHECK_OK(dt_placement_compute(vars, 6, ps, 0, &a, &err), &err);
		DT_CHECK_OK(dt_placement_compute(vars, 6, ps, 0, &b, &err), &err);
		DT_CHECK_INT_EQ(a.num_shards, b.num_shards);
		DT_CHECK(memcmp(a.shards, b.shards, sizeof(*a.shards) * (size_t)a.num_shards) == 0);
		check_covers_exactly(&a, total);
		dt_placement_release(&a);
		dt_placement_release(&b);
	}
}

DT_TEST(placement, zero_servers_is_a_configuration_error)
{
	const int64_t shapes[][2] = { { 4, 4 } };
	struct dt_variable vars[1];
	make_vars(vars, shapes, 1);
	struct dt_placement p;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_placement_compute(vars, 1, 0, 0, &p, &err), DT_CONFIG);
	DT_CHECK_CONTAINS(err.msg, "0 parameter servers");
	dt_placement_release(&p);
}

DT_TEST(placement, table_names_every_shard_and_server)
{
	const int64_t shapes[][2] = { { 784, 256 }, { 256, 0 } };
	struct dt_variable vars[2];
	make_vars(vars, shapes, 2);
	strcpy(vars[0].name, "dense_1/kernel");
	strcpy(vars[1].name, "dense_1/bias");
	struct dt_placement p;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_placement_compute(vars, 2, 2, 0, &p, &err), &err);
	char path[600];
	FILE *f = fopen(dt_test_path(path, sizeof(path), "t.txt"), "w+");
	dt_placement_print(&p, vars, f);
	rewind(f);
	char text[4096] = { 0 };
	DT_CHECK(fread(text, 1, sizeof(text) - 1, f) > 0);
	fclose(f);
	DT_CHECK_CONTAINS(text, "dense_1/kernel");
	DT_CHECK_CONTAINS(text, "(784, 256)");
	DT_CHECK_CONTAINS(text, "0-391 (1/2)");
	DT_CHECK_CONTAINS(text, "ps:1 holds");
	dt_placement_release(&p);
}
