#include "net/messages.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strutil.h"
#include "net/bytes.h"

static const struct dt_msg_info catalogue[] = {
#define DT__MSG_INFO(name, num, str, cap) { num, str, cap },
	DT_MSG_LIST(DT__MSG_INFO)
#undef DT__MSG_INFO
};

const struct dt_msg_info *dt_msg_info(uint16_t type)
{
	for (size_t i = 0; i < DT_ARRAY_LEN(catalogue); i++)
		if (catalogue[i].type == type)
			return &catalogue[i];
	return NULL;
}

const char *dt_msg_name(uint16_t type)
{
	const struct dt_msg_info *info = dt_msg_info(type);
	return info ? info->name : "unknown";
}

const char *dt_wire_dtype_name(unsigned dtype)
{
	static const char *const names[] = {
		[DT_WIRE_F32] = "float32", [DT_WIRE_F64] = "float64", [DT_WIRE_F16] = "float16",
		[DT_WIRE_BF16] = "bfloat16", [DT_WIRE_I8] = "int8", [DT_WIRE_I32] = "int32",
		[DT_WIRE_I64] = "int64", [DT_WIRE_U8] = "uint8",
	};
	if (dtype < DT_ARRAY_LEN(names) && names[dtype])
		return names[dtype];
	return "unknown";
}

/* ---- signature ---- */

void dt_signature_init(struct dt_signature *sig)
{
	memset(sig, 0, sizeof(*sig));
}

void dt_signature_release(struct dt_signature *sig)
{
	if (!sig)
		return;
	for (uint32_t i = 0; i < sig->count; i++)
		free(sig->vars[i].name);
	free(sig->vars);
	memset(sig, 0, sizeof(*sig));
}

static int printable(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return 0;
	return 1;
}

static struct dt_sig_var *sig_push(struct dt_signature *sig)
{
	if (sig->count == sig->cap_) {
		uint32_t cap = sig->cap_ ? sig->cap_ * 2 : 16;
		sig->vars = dt_xrealloc(sig->vars, (size_t)cap * sizeof(*sig->vars));
		sig->cap_ = cap;
	}
	struct dt_sig_var *v = &sig->vars[sig->count++];
	memset(v, 0, sizeof(*v));
	return v;
}

enum dt_status dt_signature_add(struct dt_signature *sig, const char *name, enum dt_wire_dtype dtype,
				unsigned rank, const uint64_t *dims, struct dt_err *err)
{
	size_t n = strlen(name);
	if (n == 0 || n > DT_SIG_NAME_MAX || !dt_utf8_name_ok(name, n))
		return dt_err_set(err, DT_CONFIG, "variable name '%.64s' cannot be sent: names are 1..%d bytes of UTF-8 "
				  "without control characters", name, DT_SIG_NAME_MAX);
	if (rank > DT_SIG_MAX_RANK)
		return dt_err_set(err, DT_CONFIG, "variable '%s' has rank %u, more than the %d the protocol carries",
				  name, rank, DT_SIG_MAX_RANK);
	if ((unsigned)dtype < 1 || (unsigned)dtype > DT_WIRE_DTYPE_MAX)
		return dt_err_set(err, DT_CONFIG, "variable '%s' has no wire dtype (%u)", name, (unsigned)dtype);
	struct dt_sig_var *v = sig_push(sig);
	v->name = dt_xstrdup(name);
	v->dtype = (uint8_t)dtype;
	v->rank = (uint8_t)rank;
	for (unsigned i = 0; i < rank; i++)
		v->dims[i] = dims[i];
	return DT_OK;
}

void dt_signature_copy(struct dt_signature *dst, const struct dt_signature *src)
{
	dt_signature_release(dst);
	for (uint32_t i = 0; i < src->count; i++) {
		struct dt_sig_var *v = sig_push(dst);
		*v = src->vars[i];
		v->name = dt_xstrdup(src->vars[i].name);
	}
}

void dt_sig_shape_str(const struct dt_sig_var *v, char *buf, size_t cap)
{
	size_t used = 0;
	int n = snprintf(buf, cap, "(");
	used = n > 0 ? (size_t)n : 0;
	for (unsigned i = 0; i < v->rank && used < cap; i++) {
		n = snprintf(buf + used, cap - used, "%s%llu", i ? ", " : "", (unsigned long long)v->dims[i]);
		used += n > 0 ? (size_t)n : 0;
	}
	if (used < cap)
		snprintf(buf + used, cap - used, ")");
}

/* ---- HELLO / HELLO_OK ---- */

void dt_hello_release(struct dt_hello *h)
{
	if (!h)
		return;
	dt_signature_release(&h->signature);
}

size_t dt_hello_encode(const struct dt_hello *h, uint8_t *buf, size_t cap)
{
	struct dt_wcur w = dt_wcur_make(buf, cap);
	size_t role_len = strnlen(h->role, DT_ROLE_MAX);
	dt_wcur_u16(&w, h->protocol_version);
	dt_wcur_u16(&w, 0);
	dt_wcur_u32(&w, h->features);
	dt_wcur_u64(&w, h->cluster_fingerprint);
	dt_wcur_u64(&w, h->incarnation);
	dt_wcur_u32(&w, h->index);
	dt_wcur_u8(&w, (uint8_t)role_len);
	dt_wcur_bytes(&w, h->role, role_len);
	dt_wcur_u32(&w, h->signature.count);
	for (uint32_t i = 0; i < h->signature.count; i++) {
		const struct dt_sig_var *v = &h->signature.vars[i];
		dt_wcur_str16(&w, v->name, strlen(v->name));
		dt_wcur_u8(&w, v->dtype);
		dt_wcur_u8(&w, v->rank);
		for (unsigned d = 0; d < v->rank; d++)
			dt_wcur_u64(&w, v->dims[d]);
	}
	return w.pos;
}

uint8_t *dt_hello_encode_alloc(const struct dt_hello *h, size_t *len)
{
	*len = dt_hello_encode(h, NULL, 0);
	uint8_t *buf = dt_xmalloc(*len);
	size_t got = dt_hello_encode(h, buf, *len);
	DT_ASSERT(got == *len);
	return buf;
}

#define HELLO_FIXED 29 /* bytes before the role name */
#define VAR_MIN 5      /* u16 name length + 1 name byte + dtype + rank */

enum dt_status dt_hello_decode(struct dt_hello *out, const uint8_t *p, size_t len, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	struct dt_rcur r = dt_rcur_make(p, len);
	out->protocol_version = dt_rcur_u16(&r);
	(void)dt_rcur_u16(&r); /* reserved */
	out->features = dt_rcur_u32(&r);
	out->cluster_fingerprint = dt_rcur_u64(&r);
	out->incarnation = dt_rcur_u64(&r);
	out->index = dt_rcur_u32(&r);
	size_t role_len = dt_rcur_u8(&r);
	if (r.bad)
		return dt_err_set(err, DT_PROTOCOL, "hello is %zu bytes, shorter than its %d fixed bytes", len, HELLO_FIXED);
	const uint8_t *role = dt_rcur_take(&r, role_len);
	if (!role)
		return dt_err_set(err, DT_PROTOCOL, "hello is truncated in the role name (%zu bytes announced, %zu left)",
				  role_len, len - HELLO_FIXED);
	if (role_len == 0 || role_len > DT_ROLE_MAX || !printable(role, role_len))
		return dt_err_set(err, DT_PROTOCOL, "hello has an invalid role name (%zu bytes; 1..%d printable characters expected)",
				  role_len, DT_ROLE_MAX);
	memcpy(out->role, role, role_len);
	out->role[role_len] = '\0';

	uint32_t count = dt_rcur_u32(&r);
	if (r.bad)
		return dt_err_set(err, DT_PROTOCOL, "hello from %s:%u is truncated before its variable count", out->role, out->index);
	if (count > dt_rcur_left(&r) / VAR_MIN)
		return dt_err_set(err, DT_PROTOCOL, "hello from %s:%u announces %u variables but has only %zu bytes left",
				  out->role, out->index, count, dt_rcur_left(&r));
	if (count) {
		out->signature.vars = dt_xcalloc(count, sizeof(*out->signature.vars));
		out->signature.cap_ = count;
	}
	for (uint32_t i = 0; i < count; i++) {
		size_t name_len;
		const uint8_t *name = dt_rcur_str16(&r, &name_len);
		uint8_t dtype = dt_rcur_u8(&r);
		uint8_t rank = dt_rcur_u8(&r);
		if (r.bad)
			return dt_err_set(err, DT_PROTOCOL, "hello from %s:%u is truncated in variable %u of %u",
					  out->role, out->index, i, count);
		if (name_len == 0 || name_len > DT_SIG_NAME_MAX || !dt_utf8_name_ok((const char *)name, name_len))
			return dt_err_set(err, DT_PROTOCOL, "hello from %s:%u: variable %u has an invalid name (%zu bytes)",
					  out->role, out->index, i, name_len);
		if (rank > DT_SIG_MAX_RANK)
			return dt_err_set(err, DT_PROTOCOL, "hello from %s:%u: variable %u has rank %u (at most %d)",
					  out->role, out->index, i, rank, DT_SIG_MAX_RANK);
		struct dt_sig_var *v = &out->signature.vars[i];
		v->name = dt_xmalloc(name_len + 1);
		memcpy(v->name, name, name_len);
		v->name[name_len] = '\0';
		out->signature.count = i + 1; /* so release frees this name on a later failure */
		v->dtype = dtype;
		v->rank = rank;
		for (unsigned d = 0; d < rank; d++)
			v->dims[d] = dt_rcur_u64(&r);
		if (r.bad)
			return dt_err_set(err, DT_PROTOCOL, "hello from %s:%u is truncated in the shape of variable '%s'",
					  out->role, out->index, v->name);
	}
	if (dt_rcur_left(&r))
		return dt_err_set(err, DT_PROTOCOL, "hello from %s:%u has %zu unexpected bytes after its signature",
				  out->role, out->index, dt_rcur_left(&r));
	return DT_OK;
}

/* ---- REFUSE / ERROR / SHUTDOWN ---- */

const char *dt_refuse_code_name(uint32_t code)
{
	switch (code) {
	case DT_REFUSE_VERSION: return "protocol version";
	case DT_REFUSE_FINGERPRINT: return "cluster fingerprint";
	case DT_REFUSE_SIGNATURE: return "model signature";
	case DT_REFUSE_IDENTITY: return "identity";
	case DT_REFUSE_BUSY: return "busy";
	case DT_REFUSE_AUTH: return "authentication";
	default: return "unknown";
	}
}

uint32_t dt_wire_error_from_status(enum dt_status st)
{
	switch (st) {
	case DT_PROTOCOL: return DT_WIRE_ERR_PROTOCOL;
	case DT_USAGE:
	case DT_CONFIG: return DT_WIRE_ERR_CONFIG;
	case DT_PEER: return DT_WIRE_ERR_UNAVAILABLE;
	case DT_TIMEOUT: return DT_WIRE_ERR_TIMEOUT;
	case DT_IO:
	case DT_DATA:
	case DT_CKPT: return DT_WIRE_ERR_DATA;
	case DT_NOMEM:
	case DT_RUNTIME: return DT_WIRE_ERR_RUNTIME;
	default: return DT_WIRE_ERR_INTERNAL;
	}
}

enum dt_status dt_wire_error_to_status(uint32_t code)
{
	switch (code) {
	case DT_WIRE_ERR_PROTOCOL: return DT_PROTOCOL;
	case DT_WIRE_ERR_CONFIG: return DT_CONFIG;
	case DT_WIRE_ERR_TIMEOUT: return DT_TIMEOUT;
	case DT_WIRE_ERR_INTERNAL: return DT_INTERNAL;
	case DT_WIRE_ERR_RUNTIME: return DT_RUNTIME;
	case DT_WIRE_ERR_DATA: return DT_DATA;
	default: return DT_PEER; /* UNAVAILABLE and codes from newer peers */
	}
}

size_t dt_reason_encode(uint32_t code, const char *text, uint8_t *buf, size_t cap)
{
	struct dt_wcur w = dt_wcur_make(buf, cap);
	size_t n = strnlen(text, DT_REASON_MAX - 1);
	dt_wcur_u32(&w, code);
	dt_wcur_str16(&w, text, n);
	return w.pos;
}

enum dt_status dt_reason_decode(struct dt_reason_msg *out, const uint8_t *p, size_t len, struct dt_err *err)
{
	memset(out, 0, sizeof(*out));
	struct dt_rcur r = dt_rcur_make(p, len);
	out->code = dt_rcur_u32(&r);
	size_t n;
	const uint8_t *text = dt_rcur_str16(&r, &n);
	if (r.bad)
		return dt_err_set(err, DT_PROTOCOL, "reason payload of %zu bytes is truncated", len);
	if (dt_rcur_left(&r))
		return dt_err_set(err, DT_PROTOCOL, "reason payload has %zu unexpected trailing bytes", dt_rcur_left(&r));
	if (n > DT_REASON_MAX - 1)
		n = DT_REASON_MAX - 1;
	for (size_t i = 0; i < n; i++)
		out->text[i] = ((text[i] < 0x20 && text[i] != '\n') || text[i] > 0x7e) ? '?' : (char)text[i];
	out->text[n] = '\0';
	return DT_OK;
}
