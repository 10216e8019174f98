#include "base/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"

static void release(struct dt_atomic_file *f)
{
	free(f->path);
	free(f->tmp_path);
	f->path = NULL;
	f->tmp_path = NULL;
	f->fd = -1;
}

enum dt_status dt_atomic_file_open(struct dt_atomic_file *f, const char *path, struct dt_err *err)
{
	f->fd = -1;
	f->path = dt_xstrdup(path);
	size_t n = strlen(path) + 32;
	f->tmp_path = dt_xmalloc(n);
	snprintf(f->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
	f->fd = open(f->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (f->fd < 0) {
		enum dt_status st = dt_err_set(err, DT_IO, "cannot create '%s': %s", f->tmp_path, strerror(errno));
		release(f);
		return st;
	}
	return DT_OK;
}

enum dt_status dt_atomic_file_write(struct dt_atomic_file *f, const void *data, size_t len, struct dt_err *err)
{
	const char *p = data;
	size_t left = len;
	while (left > 0) {
		ssize_t w = write(f->fd, p, left);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return dt_err_set(err, DT_IO, "cannot write '%s' (%zu of %zu bytes written): %s",
					  f->tmp_path, len - left, len, strerror(errno));
		}
		p += w;
		left -= (size_t)w;
	}
	return DT_OK;
}

enum dt_status dt_fsync_parent_dir(const char *path, struct dt_err *err)
{
	char *copy = dt_xstrdup(path);
	const char *dir = dirname(copy);
	enum dt_status st = DT_OK;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		st = dt_err_set(err, DT_IO, "cannot open directory '%s' to fsync it: %s", dir, strerror(errno));
	} else {
		if (fsync(dfd) != 0)
			st = dt_err_set(err, DT_IO, "cannot fsync directory '%s': %s", dir, strerror(errno));
		close(dfd);
	}
	free(copy);
	return st;
}

enum dt_status dt_atomic_file_commit(struct dt_atomic_file *f, struct dt_err *err)
{
	enum dt_status st = DT_OK;
	if (fsync(f->fd) != 0)
		st = dt_err_set(err, DT_IO, "cannot fsync '%s': %s", f->tmp_path, strerror(errno));
	if (close(f->fd) != 0 && st == DT_OK)
		st = dt_err_set(err, DT_IO, "cannot close '%s': %s", f->tmp_path, strerror(errno));
	f->fd = -1;
	if (st == DT_OK && rename(f->tmp_path, f->path) != 0)
		st = dt_err_set(err, DT_IO, "cannot rename '%s' to '%s': %s", f->tmp_path, f->path, strerror(errno));
	if (st != DT_OK) {
		unlink(f->tmp_path);
		release(f);
		return st;
	}
	st = dt_fsync_parent_dir(f->path, err);
	release(f);
	return st;
}

void dt_atomic_file_abort(struct dt_atomic_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	if (f->tmp_path)
		unlink(f->tmp_path);
	release(f);
}

enum dt_status dt_write_file_atomic(const char *path, const void *data, size_t len, struct dt_err *err)
{
	struct dt_atomic_file f;
	enum dt_status st = dt_atomic_file_open(&f, path, err);
	if (st)
		return st;
	st = dt_atomic_file_write(&f, data, len, err);
	if (st) {
		dt_atomic_file_abort(&f);
		return st;
	}
	return dt_atomic_file_commit(&f, err);
}

enum dt_status dt_read_file(const char *path, size_t max_bytes, char **out, size_t *len, struct dt_err *err)
{
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dt_err_set(err, DT_IO, "cannot open '%s': %s", path, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) != 0) {
		close(fd);
		return dt_err_set(err, DT_IO, "cannot stat '%s': %s", path, strerror(errno));
	}
	if ((size_t)sb.st_size > max_bytes) {
		close(fd);
		return dt_err_set(err, DT_IO, "'%s' is %lld bytes, more than the %zu allowed",
				  path, (long long)sb.st_size, max_bytes);
	}
	size_t cap = (size_t)sb.st_size;
	char *buf = dt_xmalloc(cap + 1);
	size_t got = 0;
	while (got < cap) {
		ssize_t r = read(fd, buf + got, cap - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			enum dt_status st = dt_err_set(err, DT_IO, "cannot read '%s': %s", path, strerror(errno));
			free(buf);
			close(fd);
			return st;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	buf[got] = '\0';
	*out = buf;
	if (len)
		*len = got;
	return DT_OK;
}
