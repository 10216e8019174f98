/*
 * hparams_summary.c — TensorBoard's HParams plugin summaries (see
 * summary.h): the experiment, the session start with every hparam, and the
 * session end with its status, as hand-encoded protobufs inside event files.
 *
 * Messages and field numbers (tensorboard/plugins/hparams/plugin_data.proto
 * and api.proto; google/protobuf/struct.proto), written in field order:
 *   HParamsPluginData  1 version int32 (0: omitted), 2 experiment Experiment,
 *                      3 session_start_info SessionStartInfo,
 *                      4 session_end_info SessionEndInfo
 *   Experiment         3 time_created_secs double, 4 hparam_infos repeated
 *                      HParamInfo, 5 metric_infos repeated MetricInfo
 *   HParamInfo         1 name string, 4 type DataType (1 STRING, 2 BOOL,
 *                      3 FLOAT64)
 *   MetricInfo         1 name MetricName {1 group, 2 tag}, 5 dataset_type
 *                      DatasetType (1 TRAINING, 2 VALIDATION)
 *   SessionStartInfo   1 hparams map<string, Value> (entries {1 key,
 *                      2 value}), 5 start_time_secs double
 *   SessionEndInfo     1 status Status (1 SUCCESS, 2 FAILURE),
 *                      2 end_time_secs double
 *   Value              2 number_value double, 3 string_value string,
 *                      4 bool_value bool
 * Each is the content of a summary value of plugin "hparams" with the tag
 * "_hparams_/experiment", "_hparams_/session_start_info" or
 * "_hparams_/session_end_info" (the plugin's metadata.py).
 */
#include "train/summary.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "train/events.h"

enum { PD_EXPERIMENT = 2, PD_SESSION_START = 3, PD_SESSION_END = 4 };
enum { EXP_TIME_CREATED = 3, EXP_HPARAM_INFOS = 4, EXP_METRIC_INFOS = 5 };
enum { HPI_NAME = 1, HPI_TYPE = 4 };
enum { MI_NAME = 1, MI_DATASET_TYPE = 5, MN_GROUP = 1, MN_TAG = 2 };
enum { SSI_HPARAMS = 1, SSI_START_TIME = 5, MAP_KEY = 1, MAP_VALUE = 2 };
enum { SEI_STATUS = 1, SEI_END_TIME = 2 };
enum { VALUE_NUMBER = 2, VALUE_STRING = 3, VALUE_BOOL = 4 };
enum { TYPE_STRING = 1, TYPE_BOOL = 2, TYPE_FLOAT64 = 3 };
enum { DATASET_TRAINING = 1, DATASET_VALIDATION = 2 };

static void put_msg(struct dt_pb *b, unsigned field, struct dt_pb *inner)
{
	dt_pb_field_bytes(b, field, inner->data, inner->len);
	inner->len = 0;
}

static void put_str(struct dt_pb *b, unsigned field, const char *s)
{
	dt_pb_field_bytes(b, field, s, strlen(s));
}

/* The resolved hparams as a JSON object (nn/hparams.h's own writer). */
static json_t *hparams_object(const struct dt_hparams *hp)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	DT_ASSERT(f);
	dt_hparams_write_json(hp, f);
	fclose(f);
	json_t *o = json_loadb(text, len, 0, NULL);
	free(text);
	DT_ASSERT(json_is_object(o));
	/* A sweep's trial: its parameters (summary.h). A malformed variable
	 * is ignored: it comes from the launcher, and a summary must not
	 * cost a training run. */
	const char *trial = getenv("DTRAIN_TRIAL_PARAMS");
	json_t *params = trial ? json_loads(trial, 0, NULL) : NULL;
	const char *key;
	json_t *v;
	json_object_foreach(params, key, v) {
		if (!json_is_string(v) || json_object_get(o, key))
			continue;
		const char *s = json_string_value(v);
		char *end = NULL;
		double x = strtod(s, &end);
		json_object_set_new(o, key, *s && end && !*end ? json_real(x) : json_string(s));
	}
	json_decref(params);
	return o;
}

static int data_type(json_t *v)
{
	return json_is_boolean(v) ? TYPE_BOOL : json_is_number(v) ? TYPE_FLOAT64 : TYPE_STRING;
}

void dt__hparams_encode_experiment(struct dt_pb *out, const struct dt_hparams *hp, double now)
{
	json_t *o = hparams_object(hp);
	struct dt_pb exp = { 0 }, info = { 0 }, name = { 0 };
	dt_pb_field_double(&exp, EXP_TIME_CREATED, now);
	const char *key;
	json_t *v;
	json_object_foreach(o, key, v) {
		put_str(&info, HPI_NAME, key);
		dt_pb_field_varint(&info, HPI_TYPE, (uint64_t)data_type(v));
		put_msg(&exp, EXP_HPARAM_INFOS, &info);
	}
	/* The chief's scalars (train run) and the evaluator's (eval/ beside). */
	static const struct {
		const char *group, *tag;
		int dataset;
	} metrics[] = { { "", "loss", DATASET_TRAINING }, { "", "accuracy", DATASET_TRAINING },
			{ "eval", "loss", DATASET_VALIDATION }, { "eval", "accuracy", DATASET_VALIDATION } };
	for (size_t i = 0; i < DT_ARRAY_LEN(metrics); i++) {
		if (metrics[i].group[0])
			put_str(&name, MN_GROUP, metrics[i].group);
		put_str(&name, MN_TAG, metrics[i].tag);
		put_msg(&info, MI_NAME, &name);
		dt_pb_field_varint(&info, MI_DATASET_TYPE, (uint64_t)metrics[i].dataset);
		put_msg(&exp, EXP_METRIC_INFOS, &info);
	}
	put_msg(out, PD_EXPERIMENT, &exp);
	dt_pb_release(&exp);
	dt_pb_release(&info);
	dt_pb_release(&name);
	json_decref(o);
}

void dt__hparams_encode_session_start(struct dt_pb *out, const struct dt_hparams *hp, double now)
{
	json_t *o = hparams_object(hp);
	struct dt_pb ssi = { 0 }, entry = { 0 }, value = { 0 };
	const char *key;
	json_t *v;
	json_object_foreach(o, key, v) {
		if (json_is_boolean(v)) {
			dt_pb_field_varint(&value, VALUE_BOOL, json_is_true(v));
		} else if (json_is_number(v)) {
			dt_pb_field_double(&value, VALUE_NUMBER, json_number_value(v));
		} else if (json_is_string(v)) {
			put_str(&value, VALUE_STRING, json_string_value(v));
		} else {
			char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
			put_str(&value, VALUE_STRING, text ? text : "");
			free(text);
		}
		put_str(&entry, MAP_KEY, key);
		put_msg(&entry, MAP_VALUE, &value);
		put_msg(&ssi, SSI_HPARAMS, &entry);
	}
	dt_pb_field_double(&ssi, SSI_START_TIME, now);
	put_msg(out, PD_SESSION_START, &ssi);
	dt_pb_release(&ssi);
	dt_pb_release(&entry);
	dt_pb_release(&value);
	json_decref(o);
}

void dt__hparams_encode_session_end(struct dt_pb *out, int success, double now)
{
	struct dt_pb sei = { 0 };
	dt_pb_field_varint(&sei, SEI_STATUS, success ? 1 : 2);
	dt_pb_field_double(&sei, SEI_END_TIME, now);
	put_msg(out, PD_SESSION_END, &sei);
	dt_pb_release(&sei);
}
