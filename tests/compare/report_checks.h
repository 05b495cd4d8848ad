/* Checks of ddp-compare's report files, shared by the renderers' unit test and the
 * end-to-end test: report.json against the committed schema (report.schema.json, at
 * SCHEMA_PATH), report.svg as XML that names every mode. They fail the running Check test
 * at the first violation, naming where. */
#pragma once

/* The whole file, NUL-terminated, to free. */
char *report_read_file(const char *path);
void report_check_json(const char *json);
void report_check_svg(const char *svg, const char *const *modes, int n_modes);
