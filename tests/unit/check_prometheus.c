/* server/prometheus.c: ddpd's status as Prometheus text, for the metrics file and ddpctl
 * metrics alike. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/prometheus.h"
#include "tests/check_main.h"

static char *render(const Ddp__StatusReply *st) {
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    prometheus_write(f, st);
    fclose(f);
    return text;
}

/* Steps past a million print exactly (a %g would freeze dashboards there); the counters
 * are there; a label with a quote is escaped. */
START_TEST(test_values) {
    Ddp__MemberStatus m = DDP__MEMBER_STATUS__INIT;
    m.rank = 3;
    m.pid = 42;
    m.host = (char *)"lab\"1";
    m.step = 123456789;
    m.samples_per_s = 15432.25;
    Ddp__MemberStatus *members[] = {&m};
    Ddp__JobStatus j = DDP__JOB_STATUS__INIT;
    j.name = (char *)"lab";
    j.state = (char *)"running";
    j.mode = (char *)"ddp";
    j.world_size = 4;
    j.members = members;
    j.n_members = 1;
    Ddp__JobStatus *jobs[] = {&j};
    Ddp__StatusReply st = DDP__STATUS_REPLY__INIT;
    st.uptime_ms = 1500;
    st.jobs = jobs;
    st.n_jobs = 1;
    st.bad_messages = 7;
    st.job_aborts = 2;
    char *text = render(&st);
    static const char *const expected[] = {
        "ddpd_up 1\n",
        "ddpd_member_step{job=\"lab\",rank=\"3\"} 123456789\n",
        "ddpd_member_samples_per_second{job=\"lab\",rank=\"3\"} 15432.250\n",
        "ddpd_bad_messages_total 7\n",
        "ddpd_job_aborts_total 2\n",
        "host=\"lab\\\"1\"",
        "ddpd_jobs{state=\"running\"} 1\n",
    };
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++)
        ck_assert_msg(strstr(text, expected[i]), "expected '%s' in:\n%s", expected[i], text);
    free(text);
}
END_TEST

/* Down: ddpd_up 0 and nothing that would pass for live figures. */
START_TEST(test_down) {
    char *text = render(NULL);
    ck_assert_str_eq(text, "# HELP ddpd_up Whether ddpd answered.\n# TYPE ddpd_up gauge\nddpd_up 0\n");
    free(text);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("prometheus");
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 30);
    tcase_add_test(core, test_values);
    tcase_add_test(core, test_down);
    suite_add_tcase(s, core);
    return check_main(s, argc, argv);
}
