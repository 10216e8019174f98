/* Fuzz-style round trip of the Kubernetes emitters (src/launch/emit.c):
 * arguments, image and output dir made of newlines, quotes, colons, '#',
 * unicode, leading dashes, YAML's special words and flow characters are
 * emitted (--emit=k8s and tfjob), parsed back with libyaml, and every
 * container's command, image and mountPath must equal what went in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "dt_test.h"
#include "launch/emit.h"
#include "launch/spec.h"
#include "launch/tasks.h"

static const char *const pieces[] = { "\n", "\"", "'", ":", ": ", "#", " #", "é", "€", "\xF0\x9F\x98\x80", "-", "--",
				      "- ", "\t", "\\", "{", "}", "[", "]", ",", "&", "*", "!", "|", ">", "%", "@",
				      "`", "0", "yes", "null", "~", " ", "a", "x=1", "---", "...", "\r\n", "\\n" };

static char *random_text(struct dt_rng *rng, int max_pieces)
{
	char buf[512] = "";
	int n = 1 + (int)dt_rng_below(rng, (uint64_t)max_pieces);
	for (int i = 0; i < n; i++)
		strncat(buf, pieces[dt_rng_below(rng, DT_ARRAY_LEN(pieces))], sizeof(buf) - strlen(buf) - 1);
	return strdup(buf);
}

static yaml_node_t *get(yaml_document_t *d, yaml_node_t *map, const char *key)
{
	if (!map || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(d, p->key);
		if (k && k->type == YAML_SCALAR_NODE && !strcmp((char *)k->data.scalar.value, key))
			return yaml_document_get_node(d, p->value);
	}
	return NULL;
}

static const char *text_of(yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* Checks every container under `node` (walked recursively); returns how many. */
static int check_containers(yaml_document_t *d, yaml_node_t *node, const struct dt_launch_spec *s)
{
	int found = 0;
	if (!node)
		return 0;
	if (node->type == YAML_MAPPING_NODE) {
		yaml_node_t *cmd = get(d, node, "command");
		if (cmd && cmd->type == YAML_SEQUENCE_NODE) {
			found++;
			/* The spec's args are the command's tail, in order. */
			int len = (int)(cmd->data.sequence.items.top - cmd->data.sequence.items.start);
			DT_CHECK(len >= s->nargs);
			for (int i = 0; i < s->nargs; i++) {
				yaml_node_t *item = yaml_document_get_node(d, cmd->data.sequence.items.start[len - s->nargs + i]);
				DT_CHECK_STR_EQ(text_of(item), s->args[i]);
			}
			DT_CHECK_STR_EQ(text_of(get(d, node, "image")), s->image);
			yaml_node_t *mounts = get(d, node, "volumeMounts");
			DT_CHECK(mounts && mounts->type == YAML_SEQUENCE_NODE);
			yaml_node_t *m = yaml_document_get_node(d, *mounts->data.sequence.items.start);
			DT_CHECK_STR_EQ(text_of(get(d, m, "mountPath")), s->output_dir);
		}
		for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++)
			found += check_containers(d, yaml_document_get_node(d, p->value), s);
	} else if (node->type == YAML_SEQUENCE_NODE) {
		for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++)
			found += check_containers(d, yaml_document_get_node(d, *it), s);
	}
	return found;
}

DT_TEST(launch_emit_yaml, any_argument_round_trips_through_the_manifests)
{
	struct dt_rng rng;
	dt_rng_seed(&rng, 20);
	for (int round = 0; round < 200; round++) {
		struct dt_launch_spec s;
		dt_launch_spec_init(&s);
		s.name = strdup("fuzz");
		s.model = strdup("mlp");
		s.ps = 1;
		s.workers = 2;
		s.evaluators = round % 2;
		s.nargs = 1 + (int)dt_rng_below(&rng, 4);
		s.args = calloc((size_t)s.nargs + 1, sizeof(char *));
		for (int i = 0; i < s.nargs; i++)
			s.args[i] = random_text(&rng, 8);
		s.image = random_text(&rng, 4);
		char *dir = random_text(&rng, 4);
		size_t dl = strlen(dir) + 2;
		s.output_dir = malloc(dl);
		snprintf(s.output_dir, dl, "/%s", dir);
		free(dir);
		for (int kind = 0; kind < 2; kind++) {
			char *text = NULL;
			size_t len = 0;
			FILE *out = open_memstream(&text, &len);
			DT_CHECK(out != NULL);
			struct dt_err err = DT_ERR_INIT;
			enum dt_status st = kind ? dt_launch_emit_tfjob(&s, out, &err) : dt_launch_emit_k8s(&s, out, &err);
			fclose(out);
			DT_CHECK_OK(st, &err);
			yaml_parser_t p;
			DT_CHECK(yaml_parser_initialize(&p));
			yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
			int containers = 0;
			for (int docs = 0; docs < 64; docs++) {
				yaml_document_t d;
				if (!yaml_parser_load(&p, &d))
					dt_test_fail(__FILE__, __LINE__, "round %d: the YAML does not parse back: %s\n%s", round,
						     p.problem ? p.problem : "?", text);
				yaml_node_t *root = yaml_document_get_root_node(&d);
				if (!root) {
					yaml_document_delete(&d);
					break;
				}
				containers += check_containers(&d, root, &s);
				yaml_document_delete(&d);
			}
			yaml_parser_delete(&p);
			/* k8s: one Job per task; tfjob: one template per replica type. */
			DT_CHECK_INT_EQ(containers, 3 + s.evaluators);
			free(text);
		}
		dt_launch_spec_release(&s);
	}
}
