#include "server/prometheus.h"

#include <string.h>

/* Label values are printable ASCII already (wire.c); quotes and backslashes are escaped. */
static void label(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', out);
        fputc(*s, out);
    }
}

/* job="NAME",owner="USER": two users' jobs may share a name (each user has its own). */
static void job_labels(FILE *out, const Ddp__JobStatus *j) {
    fprintf(out, "job=\"");
    label(out, j->name);
    fprintf(out, "\",owner=\"");
    label(out, j->owner ? j->owner : "");
    fputc('"', out);
}

void prometheus_write(FILE *out, const Ddp__StatusReply *st) {
    fprintf(out, "# HELP ddpd_up Whether ddpd answered.\n# TYPE ddpd_up gauge\nddpd_up %d\n", st != NULL);
    if (!st)
        return;
    static const char *const states[] = {"forming", "running", "recovering"};
    size_t in_state[3] = {0};
    for (size_t i = 0; i < st->n_jobs; i++)
        for (int k = 0; k < 3; k++)
            in_state[k] += strcmp(st->jobs[i]->state, states[k]) == 0;
    fprintf(out, "# HELP ddpd_uptime_seconds Seconds since ddpd started.\n# TYPE ddpd_uptime_seconds gauge\n");
    fprintf(out, "ddpd_uptime_seconds %.3f\n", (double)st->uptime_ms / 1000.0);
    fprintf(out, "# HELP ddpd_jobs Jobs ddpd holds, by state.\n# TYPE ddpd_jobs gauge\n");
    for (int k = 0; k < 3; k++)
        fprintf(out, "ddpd_jobs{state=\"%s\"} %zu\n", states[k], in_state[k]);
    fprintf(out,
            "# HELP ddpd_bad_messages_total Messages ddpd dropped or refused as malformed.\n"
            "# TYPE ddpd_bad_messages_total counter\nddpd_bad_messages_total %llu\n",
            (unsigned long long)st->bad_messages);
    fprintf(out,
            "# HELP ddpd_job_aborts_total Jobs ended by a death or an operator.\n"
            "# TYPE ddpd_job_aborts_total counter\nddpd_job_aborts_total %llu\n",
            (unsigned long long)st->job_aborts);
    fprintf(out, "# HELP ddpd_job_members Members that joined a job.\n# TYPE ddpd_job_members gauge\n");
    for (size_t i = 0; i < st->n_jobs; i++) {
        fprintf(out, "ddpd_job_members{");
        job_labels(out, st->jobs[i]);
        fprintf(out, ",state=\"%s\",mode=\"", st->jobs[i]->state);
        label(out, st->jobs[i]->mode);
        fprintf(out, "\"} %zu\n", st->jobs[i]->withheld ? (size_t)st->jobs[i]->joined : st->jobs[i]->n_members);
    }
    fprintf(out, "# HELP ddpd_job_world_size The world size a job forms at.\n# TYPE ddpd_job_world_size gauge\n");
    for (size_t i = 0; i < st->n_jobs; i++) {
        fprintf(out, "ddpd_job_world_size{");
        job_labels(out, st->jobs[i]);
        fprintf(out, "} %u\n", st->jobs[i]->world_size);
    }
    fprintf(out, "# HELP ddpd_member_last_heard_seconds Seconds since ddpd last heard from a member.\n"
                 "# TYPE ddpd_member_last_heard_seconds gauge\n");
    for (size_t i = 0; i < st->n_jobs; i++)
        for (size_t k = 0; k < st->jobs[i]->n_members; k++) {
            const Ddp__MemberStatus *m = st->jobs[i]->members[k];
            fprintf(out, "ddpd_member_last_heard_seconds{");
            job_labels(out, st->jobs[i]);
            fprintf(out, ",rank=\"%d\",pid=\"%u\",host=\"", m->rank, m->pid);
            label(out, m->host);
            fprintf(out, "\"} %.3f\n", (double)m->last_heard_ms / 1000.0);
        }
    static const char *const progress[][2] = {
        {"ddpd_member_step", "Training steps a member reported."},
        {"ddpd_member_samples_per_second", "A member's throughput as it reported it."},
        {"ddpd_member_waiting_seconds", "How long a member has been blocked in a collective (0: not)."},
    };
    for (int p = 0; p < 3; p++) {
        fprintf(out, "# HELP %s %s\n# TYPE %s gauge\n", progress[p][0], progress[p][1], progress[p][0]);
        for (size_t i = 0; i < st->n_jobs; i++)
            for (size_t k = 0; k < st->jobs[i]->n_members; k++) {
                const Ddp__MemberStatus *m = st->jobs[i]->members[k];
                if (m->rank < 0) /* a forming job's member that asked for any rank: no progress yet, and no
                                    label that tells it from another such */
                    continue;
                fprintf(out, "%s{", progress[p][0]);
                job_labels(out, st->jobs[i]);
                fprintf(out, ",rank=\"%d\"} ", m->rank);
                if (p == 0) /* exact at any step: a %g would stop moving past a million */
                    fprintf(out, "%llu\n", (unsigned long long)m->step);
                else
                    fprintf(out, "%.3f\n", p == 1 ? m->samples_per_s : (double)m->waiting_ms / 1000.0);
            }
    }
}
