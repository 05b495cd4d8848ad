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
        "ddpd_member_step{job=\"lab\",owner=\"\",rank=\"3\"} 123456789\n",
        "ddpd_member_samples_per_second{job=\"lab\",owner=\"\",rank=\"3\"} 15432.250\n",
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

/* No series twice (Prometheus refuses the whole file): two users' jobs of one name, and a
 * forming job whose members asked for any rank (-1 each); a recovering job counted as
 * such; a job withheld from the viewer still says how many joined. */
START_TEST(test_series_unique) {
    Ddp__MemberStatus a = DDP__MEMBER_STATUS__INIT, b = DDP__MEMBER_STATUS__INIT;
    a.rank = b.rank = -1;
    a.pid = 10;
    b.pid = 11;
    a.host = b.host = (char *)"lab1";
    Ddp__MemberStatus *members[] = {&a, &b};
    Ddp__JobStatus j[3] = {DDP__JOB_STATUS__INIT, DDP__JOB_STATUS__INIT, DDP__JOB_STATUS__INIT};
    const char *owners[] = {"alice", "bob", "carol"}, *job_states[] = {"forming", "recovering", "running"};
    for (int i = 0; i < 3; i++) {
        j[i].name = (char *)(i < 2 ? "lab" : "other");
        j[i].owner = (char *)owners[i];
        j[i].state = (char *)job_states[i];
        j[i].mode = (char *)"ddp";
        j[i].world_size = 4;
    }
    j[0].members = members;
    j[0].n_members = j[0].joined = 2;
    j[1].withheld = true;
    j[1].joined = 3;
    Ddp__JobStatus *jobs[] = {&j[0], &j[1], &j[2]};
    Ddp__StatusReply st = DDP__STATUS_REPLY__INIT;
    st.jobs = jobs;
    st.n_jobs = 3;
    char *text = render(&st);
    /* every sample line's series (all but its value) is new */
    size_t n_series = 0;
    char *series[64];
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        *strrchr(line, ' ') = '\0';
        for (size_t i = 0; i < n_series; i++)
            ck_assert_msg(strcmp(series[i], line) != 0, "%s twice", line);
        ck_assert_uint_lt(n_series, 64);
        series[n_series++] = line;
    }
    free(text);
    text = render(&st);
    static const char *const expected[] = {
        "ddpd_jobs{state=\"forming\"} 1\n",
        "ddpd_jobs{state=\"recovering\"} 1\n",
        "ddpd_jobs{state=\"running\"} 1\n",
        "ddpd_job_members{job=\"lab\",owner=\"bob\",state=\"recovering\",mode=\"ddp\"} 3\n",
        "ddpd_member_last_heard_seconds{job=\"lab\",owner=\"alice\",rank=\"-1\",pid=\"11\",host=\"lab1\"}",
    };
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++)
        ck_assert_msg(strstr(text, expected[i]), "expected '%s' in:\n%s", expected[i], text);
    ck_assert_msg(!strstr(text, "ddpd_member_step{job=\"lab\""), "%s", text);
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
    tcase_add_test(core, test_series_unique);
    tcase_add_test(core, test_down);
    suite_add_tcase(s, core);
    return check_main(s, argc, argv);
}
