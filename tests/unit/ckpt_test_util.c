/* Helpers shared by the checkpoint tests (ckpt_test_util.h). */
#include "ckpt_test_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/rng.h"
#include "dt_test.h"
#include "models/builtin.h"

void small_init(struct small *s, int side, const char *optimizer, uint64_t seed)
{
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_hparams_from_set("mlp_base", &s->hp, &err), &err);
	snprintf(s->hp.optimizer, sizeof(s->hp.optimizer), "%s", optimizer);
	DT_CHECK_OK(dt_model_new(&dt_models_builtin, &s->hp, side, side, 1, 3, 4, &s->m, &err), &err);
	dt_model_init_params(s->m, seed);
	DT_CHECK_OK(dt_optimizer_init(&s->opt, &s->hp, dt_model_num_params(s->m), &err), &err);
	struct dt_rng rng;
	dt_rng_seed(&rng, seed);
	for (size_t i = 0; i < (size_t)s->opt.num_slots * s->opt.count; i++)
		s->opt.slots[i] = dt_rng_normal(&rng);
	dt_ckpt_contents_for_model(&s->c, s->m);
	dt_ckpt_contents_set_optimizer(&s->c, &s->opt);
}

void small_release(struct small *s)
{
	dt_optimizer_release(&s->opt);
	dt_model_free(s->m);
}

void save_step(const char *dir, struct small *s, int64_t step, int keep)
{
	struct dt_err err = DT_ERR_INIT;
	s->c.global_step = step;
	s->c.has_rng = 1;
	dt_rng_seed(&s->c.dropout_rng, (uint64_t)step);
	s->c.pipeline_epoch = step / 10;
	s->c.pipeline_offset = step % 10 * 64;
	DT_CHECK_OK(dt_ckpt_save(dir, &s->c, keep, NULL, &err), &err);
}

char *slurp(const char *path, size_t *len)
{
	char *buf;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_read_file(path, 1u << 30, &buf, len, &err), &err);
	return buf;
}

void flip_byte(const char *path, long at_from_end)
{
	int fd = open(path, O_RDWR);
	DT_CHECK(fd >= 0);
	off_t size = lseek(fd, 0, SEEK_END);
	unsigned char b;
	DT_CHECK(pread(fd, &b, 1, size - at_from_end) == 1);
	b ^= 0x10;
	DT_CHECK(pwrite(fd, &b, 1, size - at_from_end) == 1);
	close(fd);
}

/* Captures this process's stderr (the log) while fn runs. */
static int saved_stderr = -1;
static char capture_path[600];
void capture_start(void)
{
	dt_test_path(capture_path, sizeof(capture_path), "stderr.txt");
	fflush(stderr);
	saved_stderr = dup(2);
	int fd = open(capture_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	DT_CHECK(fd >= 0 && saved_stderr >= 0);
	dup2(fd, 2);
	close(fd);
}
char *capture_end(void)
{
	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	size_t len;
	return slurp(capture_path, &len);
}

