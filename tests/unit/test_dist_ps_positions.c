/* distribute/ps_positions.h: the position block ps:0 keeps from each
 * trainer's PS_STEP, and the PS_POSITIONS reply, byte by byte. */
#include <stdlib.h>
#include <string.h>

#include "distribute/ps_positions.h"
#include "dt_test.h"
#include "net/bytes.h"

DT_TEST(dist_ps_positions, blocks_fill_the_table_and_the_reply_round_trips)
{
	struct dt_ps_positions t = { 0 };
	uint8_t b[DT_PS_POSITION_BLOCK];
	struct dt_err err = DT_ERR_INIT;
	dt_ps_position_block_encode(2, 3, 1, 40, b);
	DT_CHECK(dt_get_u32le(b) == DT_PS_POSITION_VERSION && dt_get_u32le(b + 8) == 3);
	DT_CHECK_OK(dt_ps_positions_note(&t, b, sizeof(b), 90, &err), &err);
	DT_CHECK(t.trainers == 3 && t.at[0].epoch == -1 && t.at[1].epoch == -1);
	DT_CHECK(t.at[2].epoch == 1 && t.at[2].taken == 40 && t.at[2].step == 90);
	size_t n;
	uint8_t *r = dt_ps_positions_encode(&t, &n);
	DT_CHECK(n == DT_PS_POSITIONS_HEADER + 3 * DT_PS_POSITIONS_RECORD);
	struct dt_ps_positions back;
	DT_CHECK_OK(dt_ps_positions_decode(r, n, &back, &err), &err);
	DT_CHECK(back.trainers == 3 && back.at[2].taken == 40 && back.at[0].epoch == -1);
	dt_ps_positions_release(&back);
	DT_CHECK(dt_ps_positions_decode(r, n - 1, &back, &err) == DT_PROTOCOL);
	free(r);
	/* another trainer count starts a new table */
	dt_ps_position_block_encode(0, 2, 5, 1, b);
	DT_CHECK_OK(dt_ps_positions_note(&t, b, sizeof(b), 91, &err), &err);
	DT_CHECK(t.trainers == 2 && t.at[0].epoch == 5 && t.at[1].epoch == -1);
	/* refused: another version, a trainer past the count, a short block, nonzero reserved word */
	uint8_t bad[DT_PS_POSITION_BLOCK];
	memcpy(bad, b, sizeof(bad));
	dt_put_u32le(bad, 2);
	DT_CHECK(dt_ps_positions_note(&t, bad, sizeof(bad), 1, &err) == DT_PROTOCOL);
	DT_CHECK_CONTAINS(err.msg, "version 2");
	dt_ps_position_block_encode(2, 2, 0, 0, bad);
	DT_CHECK(dt_ps_positions_note(&t, bad, sizeof(bad), 1, &err) == DT_PROTOCOL);
	DT_CHECK(dt_ps_positions_note(&t, b, sizeof(b) - 1, 1, &err) == DT_PROTOCOL);
	memcpy(bad, b, sizeof(bad));
	bad[12] = 1;
	DT_CHECK(dt_ps_positions_note(&t, bad, sizeof(bad), 1, &err) == DT_PROTOCOL);
	DT_CHECK(t.trainers == 2 && t.at[0].epoch == 5); /* untouched by the refusals */
	dt_ps_positions_release(&t);
	/* an empty table: 8 bytes, 0 trainers */
	r = dt_ps_positions_encode(&t, &n);
	DT_CHECK(n == DT_PS_POSITIONS_HEADER);
	DT_CHECK_OK(dt_ps_positions_decode(r, n, &back, &err), &err);
	DT_CHECK(back.trainers == 0 && back.at == NULL);
	free(r);
}
