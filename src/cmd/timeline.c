/*
 * dtrain timeline — the timelines of several tasks as one trace.
 *
 *   dtrain timeline merge --to=OUT.json FILE...
 *
 * Each FILE is one task's `dtrain train --timeline` (base/trace.h): a
 * Chrome trace whose timestamps are the host's CLOCK_REALTIME. Merged,
 * every task is one process of the trace (its own row in Perfetto or
 * chrome://tracing), on the clock they share on one host; across hosts as
 * aligned as the hosts' clocks. The spans are kept as they are, with each
 * file's "dropped" added up; OUT is written atomically.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "base/atomic_file.h"
#include "cmd/cmd.h"

static const char usage[] = "dtrain timeline merge --to=OUT.json FILE...";

static int merge(const char *to, const char *const *files, int n)
{
	struct dt_err err = DT_ERR_INIT;
	json_t *events = json_array();
	json_int_t dropped = 0;
	for (int i = 0; i < n; i++) {
		json_error_t je;
		json_t *doc = json_load_file(files[i], 0, &je);
		json_t *ev = json_object_get(doc, "traceEvents");
		if (!doc || !json_is_array(ev)) {
			if (doc)
				dt_err_set(&err, DT_IO, "'%s' is not a timeline: it has no traceEvents array", files[i]);
			else
				dt_err_set(&err, DT_IO, "cannot read the timeline '%s': %s (line %d)", files[i], je.text,
					   je.line);
			dt_err_hint(&err, "give the files `dtrain train --timeline=PATH` wrote");
			json_decref(doc);
			json_decref(events);
			return dt_cmd_report(&err);
		}
		json_array_extend(events, ev);
		dropped += json_integer_value(json_object_get(json_object_get(doc, "otherData"), "dropped"));
		json_decref(doc);
	}
	json_t *out = json_pack("{s:o, s:s, s:{s:I, s:i}}", "traceEvents", events, "displayTimeUnit", "ms",
				"otherData", "dropped", dropped, "files", n);
	char *text = json_dumps(out, JSON_COMPACT);
	json_decref(out);
	enum dt_status st = dt_write_file_atomic(to, text, strlen(text), &err);
	free(text);
	if (st)
		return dt_cmd_report(&err);
	printf("merged %d timeline(s) into %s\n", n, to);
	return 0;
}

int dt_cmd_timeline(int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("usage: %s\n\nMerges the timelines of a run's tasks (dtrain train --timeline=PATH) into one "
		       "Chrome trace\n(open it in Perfetto, ui.perfetto.dev, or chrome://tracing).\n", usage);
		return 0;
	}
	if (argc < 2 || strcmp(argv[1], "merge") != 0) {
		fprintf(stderr, "error: %s\nusage: %s\n",
			argc < 2 ? "expected an action: merge" : "unknown timeline action; valid: merge", usage);
		return 2;
	}
	const char *to = "";
	struct dt_option opts[] = {
		DT_OPT_STRING("to", &to, "PATH", "the merged trace to write (replaced atomically)"),
		DT_OPT_END,
	};
	struct dt_args args;
	int code;
	if (!dt_cmd_parse(opts, argc - 1, argv + 1, usage, &args, &code))
		return code;
	if (!*to || args.count < 1) {
		fprintf(stderr, "error: %s\nusage: %s\n", !*to ? "--to=PATH is required" : "expected the timelines to merge",
			usage);
		dt_args_release(&args);
		return 2;
	}
	code = merge(to, args.items, args.count);
	dt_args_release(&args);
	return code;
}
