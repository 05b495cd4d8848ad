#include "tests/check_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_SKIP_CODE 77

bool check_selected(int argc, char **argv, const char *tcase) {
    return argc == 2 && strcmp(argv[1], tcase) == 0;
}

int check_skip(const char *tcase, const char *why) {
    printf("SKIPPED %s: %s\n", tcase, why);
    return CHECK_SKIP_CODE;
}

int check_main(Suite *s, int argc, char **argv) {
    if (argc > 2) {
        fprintf(stderr, "usage: %s [TEST_CASE]\n", argv[0]);
        return EXIT_FAILURE;
    }
    const char *tcase = argc == 2 ? argv[1] : NULL;
    SRunner *sr = srunner_create(s);
    srunner_run(sr, NULL, tcase, CK_NORMAL);
    int ran = srunner_ntests_run(sr), failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (ran == 0) {
        fprintf(stderr, "%s: no test case named '%s'\n", argv[0], tcase ? tcase : "(any)");
        return EXIT_FAILURE;
    }
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
