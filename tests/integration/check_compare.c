/* ddp-compare on four workers of the mlp model: the report's numbers show DataParallel's
 * imbalance and DDP's balance, report.json follows the committed schema, report.svg is
 * XML that names every mode. */
#include <check.h>
#include <cJSON.h>
#include <expat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/integration/harness.h"
#include "tests/check_main.h"

#define WAIT_MS 100000     /* one launch, at most */

static char dir[64];

static void setup(void) {
    snprintf(dir, sizeof(dir), "/tmp/check_compare_%d", (int)getpid());
    mkdir(dir, 0755);
    idx_write_split(dir, "train", 1024, 28, 3);
    idx_write_split(dir, "t10k", 256, 28, 4);
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "%s missing", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    ck_assert_int_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* The subset of JSON Schema the committed schema uses: type, required, properties, items,
 * minItems, minimum, enum. Fails the test at the first violation, naming the path. */
static void validate(const cJSON *v, const cJSON *schema, const char *at) {
    const cJSON *type = cJSON_GetObjectItem(schema, "type");
    if (cJSON_IsString(type)) {
        const char *t = type->valuestring;
        bool ok = (!strcmp(t, "object") && cJSON_IsObject(v)) || (!strcmp(t, "array") && cJSON_IsArray(v)) ||
                  (!strcmp(t, "string") && cJSON_IsString(v)) || (!strcmp(t, "number") && cJSON_IsNumber(v)) ||
                  (!strcmp(t, "integer") && cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble) ||
                  (!strcmp(t, "boolean") && cJSON_IsBool(v));
        ck_assert_msg(ok, "%s: not of type %s", at, t);
    }
    const cJSON *min = cJSON_GetObjectItem(schema, "minimum");
    if (min && cJSON_IsNumber(v))
        ck_assert_msg(v->valuedouble >= min->valuedouble, "%s: %g below the minimum %g", at, v->valuedouble,
                      min->valuedouble);
    const cJSON *en = cJSON_GetObjectItem(schema, "enum"), *e;
    if (en) {
        bool found = false;
        cJSON_ArrayForEach(e, en) found = found || (cJSON_IsString(v) && !strcmp(e->valuestring, v->valuestring));
        ck_assert_msg(found, "%s: not one of the allowed values", at);
    }
    const cJSON *req = cJSON_GetObjectItem(schema, "required"), *r;
    cJSON_ArrayForEach(r, req) ck_assert_msg(cJSON_GetObjectItem(v, r->valuestring), "%s: '%s' missing", at,
                                             r->valuestring);
    const cJSON *props = cJSON_GetObjectItem(schema, "properties"), *p;
    cJSON_ArrayForEach(p, props) {
        const cJSON *child = cJSON_GetObjectItem(v, p->string);
        if (child) {
            char sub[256];
            snprintf(sub, sizeof(sub), "%s.%s", at, p->string);
            validate(child, p, sub);
        }
    }
    const cJSON *items = cJSON_GetObjectItem(schema, "items"), *minItems = cJSON_GetObjectItem(schema, "minItems");
    if (minItems)
        ck_assert_msg(cJSON_GetArraySize(v) >= minItems->valueint, "%s: fewer than %d items", at, minItems->valueint);
    if (items) {
        int i = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, v) {
            char sub[256];
            snprintf(sub, sizeof(sub), "%s[%d]", at, i++);
            validate(x, items, sub);
        }
    }
}

typedef struct {
    char text[8192];
    size_t len;
    int elements;
} svg_seen;

static void svg_start(void *user, const XML_Char *name, const XML_Char **attrs) {
    (void)name;
    (void)attrs;
    ((svg_seen *)user)->elements++;
}

static void svg_text(void *user, const XML_Char *s, int len) {
    svg_seen *seen = user;
    if (seen->len + (size_t)len + 2 < sizeof(seen->text)) {
        memcpy(seen->text + seen->len, s, (size_t)len);
        seen->len += (size_t)len;
        seen->text[seen->len++] = '\n';
        seen->text[seen->len] = '\0';
    }
}

static const cJSON *mode_of(const cJSON *report, const char *name) {
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(report, "modes")) if (!strcmp(
        cJSON_GetObjectItem(m, "mode")->valuestring, name)) return m;
    ck_abort_msg("mode %s not in the report", name);
    return NULL;
}

static double rank_memory(const cJSON *mode, int rank) {
    return cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(mode, "ranks"), rank), "peak_tracked_bytes")
        ->valuedouble;
}

START_TEST(test_compare_mlp_on_four) {
    char out[128];
    snprintf(out, sizeof(out), "%s/out", dir);
    const char *argv[] = {DDP_COMPARE_PATH, "-n", "4", "--modes", "dp,ddp,ps", "--steps", "4", "--out", out, "--",
                          "--data", dir, "--model", "mlp", NULL};
    proc p;
    proc_start(&p, argv, NULL);
    int code = proc_wait(&p, WAIT_MS);
    ck_assert_msg(code == 0, "exit %d: %s", code, proc_output(&p));
    ck_assert_msg(strstr(proc_output(&p), "| mode | samples/s |"), "%s", proc_output(&p));
    proc_close(&p);

    char path[256];
    snprintf(path, sizeof(path), "%s/report.json", out);
    char *text = slurp(path), *schema_text = slurp(SCHEMA_PATH);
    cJSON *report = cJSON_Parse(text), *schema = cJSON_Parse(schema_text);
    ck_assert_msg(report && schema, "report.json or the schema is not JSON");
    validate(report, schema, "report");

    /* DataParallel: rank 0 holds the velocity and the gathered outputs on top of what every rank holds */
    const cJSON *dp = mode_of(report, "dp");
    double n_params = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10, outputs = 128.0 * 10 * sizeof(float);
    double extra = n_params * sizeof(float) + outputs;
    for (int r = 1; r < 4; r++)
        ck_assert_msg(rank_memory(dp, 0) - rank_memory(dp, r) >= extra,
                      "dp: rank 0 holds %.0f bytes, rank %d %.0f: not %.0f more", rank_memory(dp, 0), r,
                      rank_memory(dp, r), extra);
    /* DDP: every rank alike */
    const cJSON *ddp = mode_of(report, "ddp");
    double lo = rank_memory(ddp, 0), hi = lo;
    for (int r = 1; r < 4; r++) {
        double m = rank_memory(ddp, r);
        lo = m < lo ? m : lo;
        hi = m > hi ? m : hi;
    }
    ck_assert_msg(hi <= lo * 1.05, "ddp: memory ranges from %.0f to %.0f bytes", lo, hi);
    ck_assert_msg(cJSON_GetObjectItem(dp, "memory_imbalance")->valuedouble > 1.05, "dp shows no imbalance");
    /* ps: the busiest link goes to ddpd */
    const cJSON *ps = mode_of(report, "ps");
    ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ps, "busiest_link"), "to")->valuestring, "ddpd");
    cJSON_Delete(report);
    cJSON_Delete(schema);
    free(text);
    free(schema_text);

    snprintf(path, sizeof(path), "%s/report.svg", out);
    char *svg = slurp(path);
    XML_Parser parser = XML_ParserCreate(NULL);
    svg_seen seen = {0};
    XML_SetUserData(parser, &seen);
    XML_SetElementHandler(parser, svg_start, NULL);
    XML_SetCharacterDataHandler(parser, svg_text);
    ck_assert_msg(XML_Parse(parser, svg, (int)strlen(svg), 1) == XML_STATUS_OK, "report.svg is not XML: %s at line %lu",
                  XML_ErrorString(XML_GetErrorCode(parser)), (unsigned long)XML_GetCurrentLineNumber(parser));
    XML_ParserFree(parser);
    ck_assert_int_gt(seen.elements, 10);
    const char *names[] = {"\ndp\n", "\nddp\n", "\nps\n"};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(strstr(seen.text, names[i]) || strstr(seen.text, names[i] + 1), "the SVG does not name %s",
                      names[i] + 1);
    free(svg);
    snprintf(path, sizeof(path), "%s/report.md", out);
    char *md = slurp(path);
    ck_assert_msg(strstr(md, "| dp |") && strstr(md, "| ddp |") && strstr(md, "| ps |"), "%s", md);
    free(md);
}
END_TEST

START_TEST(test_bad_flags) {
    const char *argv[] = {DDP_COMPARE_PATH, "-n", "2", "--modes", "dp,allreduce", NULL};
    proc p;
    proc_start(&p, argv, NULL);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 2);
    ck_assert_msg(strstr(proc_output(&p), "'allreduce' is not ddp, dp or ps"), "%s", proc_output(&p));
    proc_close(&p);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("compare");
    TCase *tc = tcase_create("compare");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 150); /* under CTest's 180 s (tests/CMakeLists.txt) */
    tcase_add_test(tc, test_compare_mlp_on_four);
    tcase_add_test(tc, test_bad_flags);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
