#include "tests/compare/report_checks.h"

#include <cJSON.h>
#include <check.h>
#include <expat.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    cJSON_ArrayForEach(r, req)
        ck_assert_msg(cJSON_GetObjectItem(v, r->valuestring), "%s: '%s' missing", at, r->valuestring);
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

char *report_read_file(const char *path) {
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

void report_check_json(const char *json) {
    char *schema_text = report_read_file(SCHEMA_PATH);
    cJSON *report = cJSON_Parse(json), *schema = cJSON_Parse(schema_text);
    ck_assert_msg(report, "report.json is not JSON: %s", json);
    ck_assert_msg(schema, "%s is not JSON", SCHEMA_PATH);
    validate(report, schema, "report");
    cJSON_Delete(report);
    cJSON_Delete(schema);
    free(schema_text);
}

void report_check_svg(const char *svg, const char *const *modes, int n_modes) {
    XML_Parser parser = XML_ParserCreate(NULL);
    svg_seen seen = {0};
    XML_SetUserData(parser, &seen);
    XML_SetElementHandler(parser, svg_start, NULL);
    XML_SetCharacterDataHandler(parser, svg_text);
    ck_assert_msg(XML_Parse(parser, svg, (int)strlen(svg), 1) == XML_STATUS_OK, "report.svg is not XML: %s at line %lu",
                  XML_ErrorString(XML_GetErrorCode(parser)), (unsigned long)XML_GetCurrentLineNumber(parser));
    XML_ParserFree(parser);
    ck_assert_int_gt(seen.elements, 10);
    for (int i = 0; i < n_modes; i++) {
        char line[64];
        snprintf(line, sizeof(line), "\n%s\n", modes[i]);
        ck_assert_msg(strstr(seen.text, line) || strncmp(seen.text, line + 1, strlen(line + 1)) == 0,
                      "the SVG does not name %s", modes[i]);
    }
}
