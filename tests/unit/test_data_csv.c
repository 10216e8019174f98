/* Unit tests for src/data/csv.c: RFC 4180 parsing (quoted fields with
 * commas, newlines and doubled quotes, CRLF, a BOM, blank lines) and its
 * errors by line; the csv problem: label column by name, integer and named
 * labels, missing and non-numeric values named by file, row and column,
 * the seeded split and the standardized features. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dt_test.h"
#include "base/err.h"
#include "data/csv.h"
#include "data/problem.h"

static const char *field(const struct dt_csv *c, uint32_t row, uint32_t col)
{
	return c->field[(size_t)row * c->cols + col];
}

DT_TEST(data_csv, quoted_fields_follow_rfc_4180)
{
	const char text[] = "\xef\xbb\xbf" "name,\"note, with comma\",x\r\n"
			    "a,\"line one\nline two\",1\r\n"
			    "\n"
			    "\"say \"\"hi\"\"\",,2.5\n"
			    "last,\"\",3";
	struct dt_csv c;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_csv_parse(text, sizeof(text) - 1, "t.csv", 0, &c, &err), &err);
	DT_CHECK_INT_EQ(c.cols, 3);
	DT_CHECK_INT_EQ(c.rows, 3);
	DT_CHECK_STR_EQ(field(&c, 0, 0), "name");
	DT_CHECK_STR_EQ(field(&c, 0, 1), "note, with comma");
	DT_CHECK_STR_EQ(field(&c, 1, 1), "line one\nline two");
	DT_CHECK_STR_EQ(field(&c, 1, 2), "1");
	DT_CHECK_STR_EQ(field(&c, 2, 0), "say \"hi\"");
	DT_CHECK_STR_EQ(field(&c, 2, 1), "");
	DT_CHECK_STR_EQ(field(&c, 3, 1), "");
	DT_CHECK_STR_EQ(field(&c, 3, 2), "3");
	DT_CHECK_INT_EQ(c.line[1], 2);
	DT_CHECK_INT_EQ(c.line[2], 5); /* after the two-line field and a blank line */
	dt_csv_release(&c);
}

static void check_parse_error(const char *text, const char *want)
{
	struct dt_csv c;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_csv_parse(text, strlen(text), "bad.csv", 0, &c, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, want);
	dt_csv_release(&c);
}

DT_TEST(data_csv, malformed_text_is_an_error_naming_the_line)
{
	check_parse_error("a,b\n1,2\n3\n", "'bad.csv' line 3: 1 fields, but the header has 2");
	check_parse_error("a,b\n1,\"open\n2,3\n", "'bad.csv' line 2: the quoted field 2 opened there never closes");
	check_parse_error("a,b\n1,x\"y\n", "'bad.csv' line 2: a quote inside the unquoted field 2");
	check_parse_error("a,b\n\"1\"x,2\n", "'bad.csv' line 2: 'x' after the closing quote of field 1");
	check_parse_error("a,b\r1,2\n", "a carriage return not followed by a line feed");
	check_parse_error("", "'bad.csv' is empty");
	check_parse_error("\n\n", "'bad.csv' is empty");
	struct dt_csv c;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_INT_EQ(dt_csv_parse("a,b\n1,2\n", 8, "cap.csv", 3, &c, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "more than 3 fields");
	dt_csv_release(&c);
}

static void write_csv(char *path, size_t cap, const char *text)
{
	dt_test_path(path, cap, "data.csv");
	dt_test_write_file(path, text, strlen(text));
}

static struct dt_data_options label(const char *name, double split)
{
	struct dt_data_options o;
	dt_data_options_init(&o);
	snprintf(o.label_column, sizeof(o.label_column), "%s", name);
	o.validation_split = split;
	return o;
}

DT_TEST(data_csv, problem_reads_features_and_the_named_label)
{
	char path[512];
	write_csv(path, sizeof(path), "x1,\"species\",x2\n1,setosa,10\n2,virginica,20\n3,setosa,30\n4,\"versi, color\",40\n");
	struct dt_data_options o = label("species", 0);
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load("csv", path, &o, DT_SPLIT_TRAIN, 1, &ds, &err), &err);
	DT_CHECK_INT_EQ(ds.count, 4);
	DT_CHECK(ds.features && !ds.images && !ds.files);
	DT_CHECK_INT_EQ(ds.height, 1);
	DT_CHECK_INT_EQ(ds.width, 1);
	DT_CHECK_INT_EQ(ds.channels, 2);
	/* names sorted bytewise: setosa 0, versi, color 1, virginica 2 */
	DT_CHECK_INT_EQ(ds.num_classes, 3);
	const uint8_t want[4] = { 0, 2, 0, 1 };
	DT_CHECK(memcmp(ds.labels, want, 4) == 0);
	/* standardized: x1 = 1..4 has mean 2.5 and std sqrt(1.25) */
	DT_CHECK_NEAR(ds.features[0], (1 - 2.5) / sqrt(1.25), 1e-5);
	DT_CHECK_NEAR(ds.features[7], (40 - 25) / sqrt(125.0), 1e-5);
	dt_dataset_release(&ds);

	/* integer labels: class = value */
	write_csv(path, sizeof(path), "a,y\n0.5,0\n1.5,4\n-2e1,2\n");
	o = label("y", 0);
	DT_CHECK_OK(dt_problem_load("csv", path, &o, DT_SPLIT_TRAIN, 1, &ds, &err), &err);
	DT_CHECK_INT_EQ(ds.num_classes, 5);
	DT_CHECK_INT_EQ(ds.labels[1], 4);
	dt_dataset_release(&ds);
}

DT_TEST(data_csv, bad_values_name_the_file_row_and_column)
{
	char path[512];
	struct dt_data_options o = label("y", 0);
	struct dt_dataset ds;
	struct dt_err err = DT_ERR_INIT;
	write_csv(path, sizeof(path), "a,b,y\n1,2,0\n3,,1\n");
	DT_CHECK_INT_EQ(dt_problem_load("csv", path, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "data.csv' row 2 (line 3), column 'b': missing value");
	write_csv(path, sizeof(path), "a,b,y\n1,2,0\n\"3\",abc,1\n");
	DT_CHECK_INT_EQ(dt_problem_load("csv", path, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "row 2 (line 3), column 'b': 'abc' is not a number");
	write_csv(path, sizeof(path), "a,b,y\n1,nan,0\n");
	DT_CHECK_INT_EQ(dt_problem_load("csv", path, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "'nan' is not a finite number");
	write_csv(path, sizeof(path), "a,b,y\n1,2,\n");
	DT_CHECK_INT_EQ(dt_problem_load("csv", path, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "row 1 (line 2), column 'y': missing label");
	write_csv(path, sizeof(path), "a,b,y\n1,2,300\n");
	DT_CHECK_INT_EQ(dt_problem_load("csv", path, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_DATA);
	DT_CHECK_CONTAINS(err.msg, "at most 256 classes");
	/* the label column is named by a flag: a wrong name is a usage error listing the columns */
	write_csv(path, sizeof(path), "a,b,y\n1,2,0\n");
	o = label("label", 0);
	DT_CHECK_INT_EQ(dt_problem_load("csv", path, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "--label_column 'label' is not a column of");
	DT_CHECK_CONTAINS(err.msg, "its columns: 'a', 'b', 'y'");
	o = label("", 0);
	DT_CHECK_INT_EQ(dt_problem_load("csv", path, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_USAGE);
	DT_CHECK_CONTAINS(err.msg, "needs --label_column");
	char missing[512];
	dt_test_path(missing, sizeof(missing), "nope.csv");
	o = label("y", 0);
	DT_CHECK_INT_EQ(dt_problem_load("csv", missing, &o, DT_SPLIT_TRAIN, 1, &ds, &err), DT_IO);
	DT_CHECK_CONTAINS(err.msg, "cannot open");
}

DT_TEST(data_csv, split_is_disjoint_and_standardized_by_the_training_rows)
{
	char text[8192] = "v,y\n";
	for (int i = 0; i < 100; i++)
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "%d,%d\n", i, i % 3);
	char path[512];
	write_csv(path, sizeof(path), text);
	struct dt_data_options o = label("y", 0.2);
	struct dt_dataset tr, te;
	struct dt_err err = DT_ERR_INIT;
	DT_CHECK_OK(dt_problem_load("csv", path, &o, DT_SPLIT_TRAIN, 5, &tr, &err), &err);
	DT_CHECK_OK(dt_problem_load("csv", path, &o, DT_SPLIT_TEST, 5, &te, &err), &err);
	DT_CHECK_INT_EQ(tr.count, 80);
	DT_CHECK_INT_EQ(te.count, 20);
	double sum = 0, sum2 = 0;
	for (uint32_t i = 0; i < tr.count; i++) {
		sum += (double)tr.features[i];
		sum2 += (double)tr.features[i] * (double)tr.features[i];
	}
	DT_CHECK_NEAR(sum / 80, 0, 1e-5);
	DT_CHECK_NEAR(sum2 / 80, 1, 1e-4);
	/* disjoint: the test rows' standardized values are none of the training ones */
	for (uint32_t i = 0; i < te.count; i++)
		for (uint32_t j = 0; j < tr.count; j++)
			DT_CHECK(te.features[i] != tr.features[j]);
	dt_dataset_release(&tr);
	dt_dataset_release(&te);
}
