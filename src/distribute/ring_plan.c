/*
 * ring_plan.c — what each collective sends and receives: its plan, a pure
 * function of (count, ring size, rank, segment size), so the two ends of a
 * link always agree on every frame's length without telling each other.
 *
 *   - ring all-reduce: step s (0 .. 2n-3) sends chunk send_chunk(s) to the
 *     right and receives chunk send_chunk(s) - 1 from the left; the first n-1
 *     steps reduce (reduce-scatter), the rest copy (all-gather). Send segment j
 *     of step s depends on recv segment j of step s-1 (the same chunk).
 *   - span: one message out and one in (a step of recursive doubling,
 *     halving-doubling or a tree, coll_algo.c), in segments of whole
 *     elements, no dependencies;
 *   - broadcast: segments forwarded along the ring from the root;
 *   - ring all-gather: step s (0 .. n-2) sends block me - s to the right and
 *     receives block me - s - 1 from the left (copies); send segment j of
 *     step s depends on recv segment j of step s-1 (the same block).
 */
#include "distribute/comm_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static void reserve(struct dt__coll_item **items, size_t *cap, size_t need)
{
	if (need <= *cap)
		return;
	free(*items);
	*items = dt_xmallocarray(need, sizeof(**items));
	*cap = need;
}

/* Chunk c of n over count elements: sizes differ by at most one. */
void dt__plan_chunk(size_t count, int n, int c, size_t *off, size_t *len)
{
	size_t base = count / (size_t)n, rem = count % (size_t)n, cc = (size_t)c;
	*off = cc * base + (cc < rem ? cc : rem);
	*len = base + (cc < rem ? 1 : 0);
}

static size_t segs_of(size_t len, size_t seg)
{
	return (len + seg - 1) / seg;
}

void dt__plan_ring_allreduce(struct dt_comm *c, size_t count, size_t esize, struct dt__plan *p)
{
	int n = c->n, me = c->rank;
	size_t seg = c->seg_bytes / esize ? c->seg_bytes / esize : 1;
	size_t per_step = segs_of(count / (size_t)n + 1, seg);
	size_t steps = 2 * (size_t)(n - 1);
	reserve(&c->send_items, &c->send_cap, steps * per_step + 1);
	reserve(&c->recv_items, &c->recv_cap, steps * per_step + 1);
	long ns = 0, nr = 0, prev_first = -1;
	for (size_t s = 0; s < steps; s++) {
		int sc, rc;
		int reduce = s < (size_t)(n - 1);
		if (reduce) {
			sc = (int)(((long)me - (long)s) % n + n) % n;
			rc = (sc - 1 + n) % n;
		} else {
			long t = (long)s - (n - 1);
			sc = (int)(((long)me + 1 - t) % n + n) % n;
			rc = (sc - 1 + n) % n;
		}
		size_t off, len;
		dt__plan_chunk(count, n, sc, &off, &len);
		for (size_t j = 0; j * seg < len; j++) {
			size_t l = len - j * seg < seg ? len - j * seg : seg;
			c->send_items[ns++] = (struct dt__coll_item){ (off + j * seg) * esize, l * esize,
								      s == 0 ? -1 : prev_first + (long)j, 0 };
		}
		prev_first = nr;
		dt__plan_chunk(count, n, rc, &off, &len);
		for (size_t j = 0; j * seg < len; j++) {
			size_t l = len - j * seg < seg ? len - j * seg : seg;
			c->recv_items[nr++] = (struct dt__coll_item){ (off + j * seg) * esize, l * esize, -1,
								      reduce };
		}
	}
	*p = (struct dt__plan){ c->send_items, c->recv_items, ns, nr };
}

void dt__plan_ring_allgather(struct dt_comm *c, size_t block, struct dt__plan *p)
{
	int n = c->n, me = c->rank;
	size_t seg = c->seg_bytes ? c->seg_bytes : 1, per_step = segs_of(block, seg);
	size_t steps = (size_t)(n - 1);
	reserve(&c->send_items, &c->send_cap, steps * per_step + 1);
	reserve(&c->recv_items, &c->recv_cap, steps * per_step + 1);
	long ns = 0, nr = 0, prev_first = -1;
	for (size_t s = 0; s < steps; s++) {
		size_t sb = (size_t)((((long)me - (long)s) % n + n) % n), rb = (sb + (size_t)n - 1) % (size_t)n;
		for (size_t j = 0; j * seg < block; j++) {
			size_t l = block - j * seg < seg ? block - j * seg : seg;
			c->send_items[ns++] = (struct dt__coll_item){ sb * block + j * seg, l,
								      s == 0 ? -1 : prev_first + (long)j, 0 };
		}
		prev_first = nr;
		for (size_t j = 0; j * seg < block; j++) {
			size_t l = block - j * seg < seg ? block - j * seg : seg;
			c->recv_items[nr++] = (struct dt__coll_item){ rb * block + j * seg, l, -1, 0 };
		}
	}
	*p = (struct dt__plan){ c->send_items, c->recv_items, ns, nr };
}

void dt__plan_span(struct dt_comm *c, size_t s_off, size_t s_len, size_t r_off, size_t r_len, int reduce,
		   size_t esize, struct dt__plan *p)
{
	/* Whole elements per segment: a reduce item is added as it arrives, an
	 * element at a time, and both ends cut at the same places. */
	size_t seg = c->seg_bytes - c->seg_bytes % esize;
	if (seg == 0)
		seg = esize;
	size_t ns = segs_of(s_len, seg), nr = segs_of(r_len, seg);
	reserve(&c->send_items, &c->send_cap, ns + 1);
	reserve(&c->recv_items, &c->recv_cap, nr + 1);
	for (size_t j = 0; j < ns; j++) {
		size_t l = s_len - j * seg < seg ? s_len - j * seg : seg;
		c->send_items[j] = (struct dt__coll_item){ s_off + j * seg, l, -1, 0 };
	}
	for (size_t j = 0; j < nr; j++) {
		size_t l = r_len - j * seg < seg ? r_len - j * seg : seg;
		c->recv_items[j] = (struct dt__coll_item){ r_off + j * seg, l, -1, reduce };
	}
	*p = (struct dt__plan){ c->send_items, c->recv_items, (long)ns, (long)nr };
}

void dt__plan_broadcast(struct dt_comm *c, size_t bytes, int root, struct dt__plan *p)
{
	int pos = (c->rank - root + c->n) % c->n;
	size_t seg = c->seg_bytes, nseg = segs_of(bytes, seg);
	reserve(&c->send_items, &c->send_cap, nseg + 1);
	reserve(&c->recv_items, &c->recv_cap, nseg + 1);
	for (size_t j = 0; j < nseg; j++) {
		size_t l = bytes - j * seg < seg ? bytes - j * seg : seg;
		c->send_items[j] = (struct dt__coll_item){ j * seg, l, pos == 0 ? -1 : (long)j, 0 };
		c->recv_items[j] = (struct dt__coll_item){ j * seg, l, -1, 0 };
	}
	*p = (struct dt__plan){ c->send_items, c->recv_items, pos != c->n - 1 ? (long)nseg : 0, pos != 0 ? (long)nseg : 0 };
}
