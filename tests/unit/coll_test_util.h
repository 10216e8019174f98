/*
 * coll_test_util.h — helpers shared by the collective tests
 * (tests/unit/test_dist_collective*.c): a group of ranks as threads over
 * loopback (each builds its comm from the group's settings and runs the
 * group's function), the values they sum (exact in float32 and int64), and
 * ranks as forked processes for the failure cases (SIGKILL, SIGSTOP), whose
 * outcome each child writes to the test's directory.
 */
#ifndef DT_COLL_TEST_UTIL_H
#define DT_COLL_TEST_UTIL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "distribute/collective.h"
#include "net/handshake.h"

#define COLL_MAXR 8
/* The deadline of each collective in the failure tests: the survivors must
 * fail within twice this. */
#define COLL_FAULT_DEADLINE_S 2.0
/* The forked ranks' rendezvous deadline (dt_comm_new). */
#define COLL_CONNECT_S 20.0

/* ---- a group of ranks on threads ---- */

struct coll_group;
typedef enum dt_status (*coll_rank_fn)(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err);

struct coll_group {
	int n;
	int fds[COLL_MAXR];
	char addrs[COLL_MAXR][DT_COMM_ADDR_MAX];
	struct dt_comm_peer peers[COLL_MAXR];
	size_t seg_bytes;
	int algorithm; /* enum dt_comm_algorithm, 0: the cost model */
	int no_cma;           /* every byte over TCP */
	size_t cma_min_bytes; /* 0: the default */
	int reads_left[COLL_MAXR]; /* what each rank's comm agreed (dt_comm_reads_left_memory) */
	int no_shm;           /* every frame over TCP, not shared memory */
	int shm_links[COLL_MAXR];  /* dt_comm_shared_memory_links of each rank's comm */
	const char *tcp_congestion; /* the comm config's (NULL: the library's choice) */
	double cost_alpha_us[COLL_MAXR], cost_beta_ps[COLL_MAXR]; /* per rank: given link costs (0: none) */
	int measure_costs[COLL_MAXR];                               /* per rank: ask for them to be measured */
	double connect_s;
	int absent;      /* this rank never starts (its listener is closed); -1 none */
	coll_rank_fn fn;
	void *arg;
	const struct dt_hello *hellos; /* per rank, or NULL */
	enum dt_status st[COLL_MAXR];
	struct dt_err err[COLL_MAXR];
	atomic_int counter;
};

struct coll_procs {
	int n;
	int algorithm; /* the comm's config: 0 the cost model */
	int auth;      /* nonzero: a cluster secret, frames tagged */
	pid_t pid[COLL_MAXR];
	int fds[COLL_MAXR];
	char addrs[COLL_MAXR][DT_COMM_ADDR_MAX];
	struct dt_comm_peer peers[COLL_MAXR];
};

/* What a child does once connected; returns its status (err filled). */
typedef enum dt_status (*coll_proc_fn)(struct dt_comm *comm, int rank, struct dt_err *err);

/* One rank's thread: builds its comm from g's settings, runs g->fn, frees
 * the comm; its status and error land in g->st / g->err. */
struct coll_rank_arg {
	struct coll_group *g;
	int rank;
};
void *coll_rank_main(void *arg);
/* n ranks listening on loopback; connect deadline 20 s, nobody absent. */
void coll_group_init(struct coll_group *g, int n);
/* Runs every rank but the absent one on its own thread and joins them. */
void coll_group_run(struct coll_group *g);
/* Fails the test naming each rank that did not end DT_OK. */
void coll_group_expect_ok(struct coll_group *g);
/* Small integers: every partial sum is exact in float32, so the order of
 * additions cannot matter and results compare exactly. */
float coll_value(int rank, size_t i, int round);
/* Large int64s (beyond float32's 24 bits, both signs), sums below 2^62. */
int64_t coll_ivalue(int rank, size_t i, int round);
/* Whether this kernel lets a process use process_vm_readv at all. */
int coll_kernel_allows_cma(void);
/* A group's rank function: rank 1 leaves at once (its comm freed), the
 * others run one all-reduce and fail naming it. */
enum dt_status coll_leaving_rank(struct coll_group *g, int rank, struct dt_comm *comm, struct dt_err *err);

/* ---- ranks as processes ---- */

/* Whether this process still maps a comm's shared-memory region. */
int coll_maps_a_region(void);
/* Entries of /dev/shm whose name mentions dtrain (-1: cannot tell). */
int coll_dev_shm_entries(void);
/* Forks n ranks running fn (algorithm: the comm's; auth: a cluster secret). */
void coll_procs_start_with(struct coll_procs *p, int n, coll_proc_fn fn, int algorithm, int auth);
/* The same with the cost model's algorithms and no secret. */
void coll_procs_start(struct coll_procs *p, int n, coll_proc_fn fn);
/* Waits (bounded) until every child has built its comm; returns -1, or the
 * first rank not connected within timeout_s. */
int coll_procs_wait_ready(struct coll_procs *p, double timeout_s);
/* Waits for child i (bounded); returns its exit code (128+signal if killed). */
int coll_proc_wait(struct coll_procs *p, int i, double timeout_s);
/* What child `rank` reported: "<status> <message>" or "0 ok". */
const char *coll_proc_message(int rank);
/* Children's loops until a failure (at most 30 s): 800 KB all-reduces
 * (segments by reference on one host), and small ones. */
enum dt_status coll_until_failure(struct dt_comm *comm, int rank, struct dt_err *err);
enum dt_status coll_until_failure_small(struct dt_comm *comm, int rank, struct dt_err *err);
/* n ranks run fn; once all are connected, `victim` gets sig; every other
 * rank must exit 3 within twice the deadline, naming the victim. */
void coll_fault_test(int sig, int n, int victim, coll_proc_fn fn, int algorithm, int auth);

#endif
