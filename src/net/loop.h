/*
 * loop.h — a small event loop: descriptor readiness, timers, and a wake-up.
 *
 * One loop serves any number of connections from one thread. It blocks in
 * epoll_wait until a descriptor is ready, the earliest timer is due, the
 * caller's deadline passes, or another thread calls dt_loop_wake — it never
 * busy-polls (performance.md, Finding 3: a spinning thread on a 2-core
 * machine costs a 4 ms scheduler tick to everyone else).
 *
 * Invariants:
 *   - Single-threaded: every function but dt_loop_wake is called from the
 *     thread that runs the loop.
 *   - Callbacks may add, change and remove descriptors and timers, including
 *     their own; an event for a descriptor removed earlier in the same round
 *     is never delivered (each registration has a generation number).
 *   - The loop does not own registered descriptors: removing one does not
 *     close it. dt_loop_run_once must not be called from inside a callback.
 *   - Timers are intrusive (struct dt_timer lives in its owner), so starting
 *     one never allocates; a timer fires once per start and may restart itself.
 *     Due times are rounded up to the next millisecond: a timer never fires early.
 */
#ifndef DT_NET_LOOP_H
#define DT_NET_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct dt_loop;

#define DT_LOOP_READ 0x1u
#define DT_LOOP_WRITE 0x2u
#define DT_LOOP_HUP 0x4u /* reported only: the peer hung up or the descriptor has an error */

/* `events` is what is ready (DT_LOOP_READ | DT_LOOP_WRITE | DT_LOOP_HUP). */
typedef void (*dt_loop_io_fn)(struct dt_loop *loop, int fd, unsigned events, void *arg);

struct dt_timer;
typedef void (*dt_timer_fn)(struct dt_loop *loop, struct dt_timer *t, void *arg);

struct dt_timer {
	int64_t when; /* absolute monotonic ns while started */
	dt_timer_fn fn;
	void *arg;
	size_t heap_index_; /* private; SIZE_MAX when stopped */
};

enum dt_status dt_loop_new(struct dt_loop **out, struct dt_err *err) DT_MUST_CHECK;
/* Frees the loop; descriptors still registered are left open, timers stopped. NULL is a no-op. */
void dt_loop_free(struct dt_loop *loop);

/* Registers fd for `interest` (READ and/or WRITE; level-triggered). */
enum dt_status dt_loop_add(struct dt_loop *loop, int fd, unsigned interest, dt_loop_io_fn fn, void *arg,
			   struct dt_err *err) DT_MUST_CHECK;
/* Changes the interest of a registered fd (0 = only hang-ups and errors). */
enum dt_status dt_loop_modify(struct dt_loop *loop, int fd, unsigned interest, struct dt_err *err) DT_MUST_CHECK;
/* Unregisters fd; no-op if it is not registered. Call before closing it. */
void dt_loop_remove(struct dt_loop *loop, int fd);

void dt_timer_init(struct dt_timer *t, dt_timer_fn fn, void *arg);
/* (Re)starts the timer to fire at absolute time `when`. */
void dt_timer_start(struct dt_loop *loop, struct dt_timer *t, int64_t when);
void dt_timer_stop(struct dt_loop *loop, struct dt_timer *t);
int dt_timer_active(const struct dt_timer *t);

/* Waits for events until one round of them has been dispatched, or until
 * `deadline` (DT_DEADLINE_NONE: wait for an event), then runs due timers.
 * Returns DT_OK on a dispatched round or a deadline alike; DT_IO if
 * epoll_wait itself failed. */
enum dt_status dt_loop_run_once(struct dt_loop *loop, int64_t deadline, struct dt_err *err) DT_MUST_CHECK;

/* Runs rounds until done(arg) is nonzero (DT_OK) or the deadline passes
 * (DT_TIMEOUT, with `what` in the message: "waiting for <what>"). */
enum dt_status dt_loop_run_until(struct dt_loop *loop, int (*done)(void *arg), void *arg, int64_t deadline,
				 const char *what, struct dt_err *err) DT_MUST_CHECK;

/* Makes a blocked dt_loop_run_once return; safe from any thread and from signal handlers. */
void dt_loop_wake(struct dt_loop *loop);

/* Number of registered descriptors (for tests and leak checks). */
size_t dt_loop_fd_count(const struct dt_loop *loop);

#endif
