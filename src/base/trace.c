#include "base/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/atomic_file.h"

struct span {
	int64_t t0, t1;
	const char *cat, *name;
	int64_t step, bytes;
	int tid;
};

#define MAX_THREAD_NAMES 64

/* The one trace of the process (a recorder, like the log's level: set up
 * by the program, read by every layer). */
static struct {
	atomic_int on;
	pthread_mutex_t mu;
	char path[4096];
	char process[64];
	struct span *ring;
	size_t cap, next, count;
	uint64_t dropped;
	int tids[MAX_THREAD_NAMES];
	char tnames[MAX_THREAD_NAMES][32];
	int nthreads;
} tr = { .mu = PTHREAD_MUTEX_INITIALIZER };

static _Thread_local int my_tid;

static int tid(void)
{
	if (!my_tid)
		my_tid = (int)syscall(SYS_gettid);
	return my_tid;
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

enum dt_status dt_trace_open(const char *path, const char *process_name, size_t capacity, struct dt_err *err)
{
	DT_ASSERT(!atomic_load(&tr.on));
	if (!path || !*path || strlen(path) >= sizeof(tr.path))
		return dt_err_set(err, DT_USAGE, "--timeline: expected a file path of 1 to %zu bytes",
				  sizeof(tr.path) - 1);
	/* Fail now, not after the run: the file's directory must take a file. */
	char probe[sizeof(tr.path) + 32];
	snprintf(probe, sizeof(probe), "%s.probe.%d", path, (int)getpid());
	FILE *f = fopen(probe, "w");
	if (!f)
		return dt_err_set(err, DT_IO, "cannot write the timeline '%s': %s", path, strerror(errno));
	fclose(f);
	unlink(probe);
	pthread_mutex_lock(&tr.mu);
	snprintf(tr.path, sizeof(tr.path), "%s", path);
	snprintf(tr.process, sizeof(tr.process), "%s", process_name && *process_name ? process_name : "dtrain");
	tr.cap = capacity ? capacity : DT_TRACE_DEFAULT_CAPACITY;
	tr.ring = dt_xcalloc(tr.cap, sizeof(*tr.ring));
	tr.next = tr.count = 0;
	tr.dropped = 0;
	tr.nthreads = 0;
	pthread_mutex_unlock(&tr.mu);
	dt_trace_thread_name("main");
	atomic_store(&tr.on, 1);
	return DT_OK;
}

int dt_trace_on(void)
{
	return atomic_load_explicit(&tr.on, memory_order_relaxed);
}

int64_t dt_trace_begin(void)
{
	return dt_trace_on() ? now_ns() : 0;
}

void dt_trace_end(int64_t t0, const char *cat, const char *name, int64_t step, int64_t bytes)
{
	if (t0 == 0 || !dt_trace_on())
		return;
	const struct span s = { t0, now_ns(), cat, name, step, bytes, tid() };
	pthread_mutex_lock(&tr.mu);
	if (tr.ring) {
		tr.ring[tr.next] = s;
		tr.next = (tr.next + 1) % tr.cap;
		if (tr.count < tr.cap)
			tr.count++;
		else
			tr.dropped++;
	}
	pthread_mutex_unlock(&tr.mu);
}

void dt_trace_thread_name(const char *name)
{
	const int t = tid();
	pthread_mutex_lock(&tr.mu);
	int i = 0;
	while (i < tr.nthreads && tr.tids[i] != t)
		i++;
	if (i < MAX_THREAD_NAMES) {
		tr.tids[i] = t;
		snprintf(tr.tnames[i], sizeof(tr.tnames[i]), "%s", name);
		if (i == tr.nthreads)
			tr.nthreads++;
	}
	pthread_mutex_unlock(&tr.mu);
}

/* Appends printf output to a growing buffer. */
struct text {
	char *p;
	size_t len, cap;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		DT_ASSERT(n >= 0);
		if ((size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		t->cap = t->cap * 2 + (size_t)n;
		t->p = dt_xrealloc(t->p, t->cap);
	}
}

/* A JSON string of s (names are ours or the user's layer names: quotes,
 * backslashes and control bytes escaped). */
static void put_str(struct text *t, const char *s)
{
	put(t, "\"");
	for (; *s; s++) {
		const unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			put(t, "\\%c", c);
		else if (c < 0x20)
			put(t, "\\u%04x", c);
		else
			put(t, "%c", c);
	}
	put(t, "\"");
}

enum dt_status dt_trace_close(struct dt_err *err)
{
	if (!atomic_exchange(&tr.on, 0))
		return DT_OK;
	pthread_mutex_lock(&tr.mu);
	const int pid = (int)getpid();
	struct text t = { dt_xmalloc(1 << 16), 0, 1 << 16 };
	put(&t, "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", pid);
	put_str(&t, tr.process);
	put(&t, "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
	    pid, pid);
	for (int i = 0; i < tr.nthreads; i++) {
		put(&t, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", pid, tr.tids[i]);
		put_str(&t, tr.tnames[i]);
		put(&t, "}}");
	}
	const size_t first = tr.count < tr.cap ? 0 : tr.next;
	for (size_t k = 0; k < tr.count; k++) {
		const struct span *s = &tr.ring[(first + k) % tr.cap];
		put(&t, ",\n{\"name\":");
		put_str(&t, s->name);
		put(&t, ",\"cat\":");
		put_str(&t, s->cat);
		/* whole microseconds, start and end each rounded down: exact in a
		 * double (every reader's number), and nesting and order kept */
		put(&t, ",\"ph\":\"X\",\"ts\":%" PRId64 ",\"dur\":%" PRId64 ",\"pid\":%d,\"tid\":%d,\"args\":{",
		    s->t0 / 1000, s->t1 / 1000 - s->t0 / 1000, pid, s->tid);
		const char *sep = "";
		if (s->step >= 0) {
			put(&t, "\"step\":%" PRId64, s->step);
			sep = ",";
		}
		if (s->bytes >= 0)
			put(&t, "%s\"bytes\":%" PRId64, sep, s->bytes);
		put(&t, "}}");
	}
	put(&t, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped\":%" PRIu64 "}}\n", tr.dropped);
	free(tr.ring);
	tr.ring = NULL;
	char path[sizeof(tr.path)];
	snprintf(path, sizeof(path), "%s", tr.path);
	pthread_mutex_unlock(&tr.mu);
	enum dt_status st = dt_write_file_atomic(path, t.p, t.len, err);
	free(t.p);
	return st ? dt_err_prefix(err, "--timeline") : DT_OK;
}
