#include "net/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/clock.h"

#define MAX_EVENTS 64

struct reg {
	dt_loop_io_fn fn; /* NULL: not registered */
	void *arg;
	uint32_t gen;
	unsigned interest;
};

struct dt_loop {
	int epfd;
	int wake_fd;
	struct reg *regs; /* indexed by fd */
	size_t regs_cap;
	size_t nregs;
	uint32_t next_gen;
	struct dt_timer **heap; /* min-heap on `when` */
	size_t heap_len, heap_cap;
	int dispatching;
};

static uint64_t pack(int fd, uint32_t gen)
{
	return (uint64_t)gen << 32 | (uint32_t)fd;
}

static uint32_t to_epoll(unsigned interest)
{
	/* No EPOLLRDHUP: a half-closed peer shows up as a readable end of stream,
	 * and a level-triggered RDHUP would spin while a conn pauses reading. */
	uint32_t ev = 0;
	if (interest & DT_LOOP_READ)
		ev |= EPOLLIN;
	if (interest & DT_LOOP_WRITE)
		ev |= EPOLLOUT;
	return ev;
}

enum dt_status dt_loop_new(struct dt_loop **out, struct dt_err *err)
{
	*out = NULL;
	struct dt_loop *loop = dt_xcalloc(1, sizeof(*loop));
	loop->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (loop->epfd < 0) {
		free(loop);
		return dt_err_set(err, DT_IO, "cannot create an event loop: epoll_create1: %s", strerror(errno));
	}
	loop->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (loop->wake_fd < 0) {
		int e = errno;
		close(loop->epfd);
		free(loop);
		return dt_err_set(err, DT_IO, "cannot create an event loop: eventfd: %s", strerror(e));
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = UINT64_MAX };
	if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, loop->wake_fd, &ev) != 0) {
		int e = errno;
		close(loop->wake_fd);
		close(loop->epfd);
		free(loop);
		return dt_err_set(err, DT_IO, "cannot create an event loop: epoll_ctl: %s", strerror(e));
	}
	loop->next_gen = 1;
	*out = loop;
	return DT_OK;
}

void dt_loop_free(struct dt_loop *loop)
{
	if (!loop)
		return;
	for (size_t i = 0; i < loop->heap_len; i++)
		loop->heap[i]->heap_index_ = SIZE_MAX;
	free(loop->heap);
	free(loop->regs);
	close(loop->wake_fd);
	close(loop->epfd);
	free(loop);
}

enum dt_status dt_loop_add(struct dt_loop *loop, int fd, unsigned interest, dt_loop_io_fn fn, void *arg, struct dt_err *err)
{
	DT_ASSERT(fd >= 0 && fn);
	if ((size_t)fd >= loop->regs_cap) {
		size_t cap = loop->regs_cap ? loop->regs_cap : 64;
		while (cap <= (size_t)fd)
			cap *= 2;
		loop->regs = dt_xrealloc(loop->regs, cap * sizeof(*loop->regs));
		memset(loop->regs + loop->regs_cap, 0, (cap - loop->regs_cap) * sizeof(*loop->regs));
		loop->regs_cap = cap;
	}
	struct reg *r = &loop->regs[fd];
	DT_ASSERT(!r->fn); /* registering twice is our bug */
	uint32_t gen = loop->next_gen++;
	if (loop->next_gen == 0)
		loop->next_gen = 1;
	struct epoll_event ev = { .events = to_epoll(interest), .data.u64 = pack(fd, gen) };
	if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
		return dt_err_set(err, DT_IO, "cannot watch descriptor %d: %s", fd, strerror(errno));
	*r = (struct reg){ fn, arg, gen, interest };
	loop->nregs++;
	return DT_OK;
}

enum dt_status dt_loop_modify(struct dt_loop *loop, int fd, unsigned interest, struct dt_err *err)
{
	DT_ASSERT(fd >= 0 && (size_t)fd < loop->regs_cap && loop->regs[fd].fn);
	struct reg *r = &loop->regs[fd];
	if (r->interest == interest)
		return DT_OK;
	struct epoll_event ev = { .events = to_epoll(interest), .data.u64 = pack(fd, r->gen) };
	if (epoll_ctl(loop->epfd, EPOLL_CTL_MOD, fd, &ev) != 0)
		return dt_err_set(err, DT_IO, "cannot change the events of descriptor %d: %s", fd, strerror(errno));
	r->interest = interest;
	return DT_OK;
}

void dt_loop_remove(struct dt_loop *loop, int fd)
{
	if (fd < 0 || (size_t)fd >= loop->regs_cap || !loop->regs[fd].fn)
		return;
	epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
	memset(&loop->regs[fd], 0, sizeof(loop->regs[fd]));
	loop->nregs--;
}

size_t dt_loop_fd_count(const struct dt_loop *loop)
{
	return loop->nregs;
}

/* ---- timers: a binary min-heap of pointers into their owners ---- */

static void heap_set(struct dt_loop *loop, size_t i, struct dt_timer *t)
{
	loop->heap[i] = t;
	t->heap_index_ = i;
}

static void heap_up(struct dt_loop *loop, size_t i)
{
	struct dt_timer *t = loop->heap[i];
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (loop->heap[parent]->when <= t->when)
			break;
		heap_set(loop, i, loop->heap[parent]);
		i = parent;
	}
	heap_set(loop, i, t);
}

static void heap_down(struct dt_loop *loop, size_t i)
{
	struct dt_timer *t = loop->heap[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= loop->heap_len)
			break;
		if (c + 1 < loop->heap_len && loop->heap[c + 1]->when < loop->heap[c]->when)
			c++;
		if (loop->heap[c]->when >= t->when)
			break;
		heap_set(loop, i, loop->heap[c]);
		i = c;
	}
	heap_set(loop, i, t);
}

void dt_timer_init(struct dt_timer *t, dt_timer_fn fn, void *arg)
{
	t->when = 0;
	t->fn = fn;
	t->arg = arg;
	t->heap_index_ = SIZE_MAX;
}

int dt_timer_active(const struct dt_timer *t)
{
	return t->heap_index_ != SIZE_MAX;
}

void dt_timer_stop(struct dt_loop *loop, struct dt_timer *t)
{
	if (!dt_timer_active(t))
		return;
	size_t i = t->heap_index_;
	DT_ASSERT(i < loop->heap_len && loop->heap[i] == t);
	t->heap_index_ = SIZE_MAX;
	struct dt_timer *last = loop->heap[--loop->heap_len];
	if (i == loop->heap_len)
		return;
	heap_set(loop, i, last);
	heap_up(loop, i);
	heap_down(loop, last->heap_index_);
}

void dt_timer_start(struct dt_loop *loop, struct dt_timer *t, int64_t when)
{
	dt_timer_stop(loop, t);
	t->when = when;
	if (loop->heap_len == loop->heap_cap) {
		loop->heap_cap = loop->heap_cap ? loop->heap_cap * 2 : 16;
		loop->heap = dt_xrealloc(loop->heap, loop->heap_cap * sizeof(*loop->heap));
	}
	heap_set(loop, loop->heap_len++, t);
	heap_up(loop, loop->heap_len - 1);
}

static void run_timers(struct dt_loop *loop)
{
	int64_t now = dt_now_ns();
	/* Bounded by the timers due now: one that restarts itself for "now" waits for the next round. */
	size_t budget = loop->heap_len;
	while (budget-- > 0 && loop->heap_len > 0 && loop->heap[0]->when <= now) {
		struct dt_timer *t = loop->heap[0];
		dt_timer_stop(loop, t);
		t->fn(loop, t, t->arg);
	}
}

enum dt_status dt_loop_run_once(struct dt_loop *loop, int64_t deadline, struct dt_err *err)
{
	DT_ASSERT(!loop->dispatching); /* not from inside a callback */
	int64_t until = deadline;
	if (loop->heap_len > 0 && loop->heap[0]->when < until)
		until = loop->heap[0]->when;
	int timeout = dt_deadline_ms_left(until);
	if (until == DT_DEADLINE_NONE)
		timeout = -1;

	struct epoll_event events[MAX_EVENTS];
	int n = epoll_wait(loop->epfd, events, MAX_EVENTS, timeout);
	if (n < 0) {
		if (errno != EINTR)
			return dt_err_set(err, DT_IO, "event loop: epoll_wait failed: %s", strerror(errno));
		n = 0;
	}
	loop->dispatching = 1;
	for (int i = 0; i < n; i++) {
		uint64_t key = events[i].data.u64;
		if (key == UINT64_MAX) {
			uint64_t v;
			while (read(loop->wake_fd, &v, sizeof(v)) > 0)
				;
			continue;
		}
		int fd = (int)(uint32_t)key;
		uint32_t gen = (uint32_t)(key >> 32);
		if ((size_t)fd >= loop->regs_cap)
			continue;
		struct reg *r = &loop->regs[fd];
		if (!r->fn || r->gen != gen)
			continue; /* removed (and maybe reused) earlier in this round */
		uint32_t e = events[i].events;
		unsigned ready = 0;
		if (e & EPOLLIN)
			ready |= DT_LOOP_READ;
		if (e & EPOLLOUT)
			ready |= DT_LOOP_WRITE;
		if (e & (EPOLLHUP | EPOLLERR))
			ready |= DT_LOOP_HUP;
		r->fn(loop, fd, ready, r->arg);
	}
	run_timers(loop);
	loop->dispatching = 0;
	return DT_OK;
}

enum dt_status dt_loop_run_until(struct dt_loop *loop, int (*done)(void *arg), void *arg, int64_t deadline,
				 const char *what, struct dt_err *err)
{
	int64_t t0 = dt_now_ns();
	while (!done(arg)) {
		if (dt_deadline_passed(deadline))
			return dt_err_set(err, DT_TIMEOUT, "deadline exceeded after %.1f s waiting for %s",
					  (double)(dt_now_ns() - t0) / 1e9, what);
		enum dt_status st = dt_loop_run_once(loop, deadline, err);
		if (st)
			return st;
	}
	return DT_OK;
}

void dt_loop_wake(struct dt_loop *loop)
{
	uint64_t one = 1;
	ssize_t w = write(loop->wake_fd, &one, sizeof(one));
	(void)w;
}
