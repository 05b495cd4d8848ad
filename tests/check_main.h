/* The main of every Check suite. With no argument it runs every test case of the suite;
 * with one, only the case of that name, as CTest runs the integration suites (one CTest
 * test per case, found by tests/CMakeLists.txt), so that they run in parallel and each
 * case is held to its own timeout. A name that matches no case is a failure, not a pass. */
#pragma once
#include <check.h>
#include <stdbool.h>

/* The process's exit code for CTest: 0, 1 (a failure), or 77 (skipped). */
int check_main(Suite *s, int argc, char **argv);

/* Whether the command line asks for this case (alone): a case whose needs are missing can
 * then skip, visibly, with check_skip() instead of passing without testing anything. */
bool check_selected(int argc, char **argv, const char *tcase);
/* Says why the case is skipped and returns CTest's skip code (77). */
int check_skip(const char *tcase, const char *why);
