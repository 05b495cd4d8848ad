#include "worker/tools/compare_report.h"

#include <cJSON.h>
#include <errno.h>
#include <stdlib.h>

static int stream_result(FILE *f) {
    return ferror(f) ? -EIO : 0;
}

static void fmt_bytes(double b, char *buf, size_t size) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

/* The table, as Markdown: the terminal shows it, report.md keeps it. */
static void write_modes(FILE *f, const mode_result *m, int n_modes) {
    fprintf(f,
            "| mode | transport | samples/s | step ms: compute / comm / wait | step ms per rank: forward / backward / "
            "optimizer | peak tracked memory per rank | imbalance (max/min) | peak RSS per rank | sent / received per "
            "rank | busiest link | final loss | accuracy |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n_modes; i++) {
        const mode_result *r = &m[i];
        double steps = r->steps > 0 ? r->steps : 1, c = 0, co = 0, w = 0;
        for (int k = 0; k < r->world; k++) {
            c += r->ranks[k].compute_s;
            co += r->ranks[k].comm_s;
            w += r->ranks[k].wait_s;
        }
        fprintf(f, "| %s | %s | %.0f | %.2f / %.2f / %.2f | ", r->mode, r->transport, r->samples_per_s,
                c / r->world / steps * 1e3, co / r->world / steps * 1e3, w / r->world / steps * 1e3);
        for (int k = 0; k < r->world; k++) /* dp's rank 0 alone steps the optimizer */
            fprintf(f, "%s%.2f / %.2f / %.2f", k ? ", " : "", r->ranks[k].forward_s / steps * 1e3,
                    r->ranks[k].backward_s / steps * 1e3, r->ranks[k].optimizer_s / steps * 1e3);
        fprintf(f, " | ");
        char b1[32], b2[32];
        for (int k = 0; k < r->world; k++) {
            fmt_bytes(r->ranks[k].peak_tracked, b1, sizeof(b1));
            fprintf(f, "%s%s", k ? ", " : "", b1);
            if (r->ranks[k].device_used >= 0) { /* a GPU: what the device says is in use */
                fmt_bytes(r->ranks[k].device_used, b2, sizeof(b2));
                fprintf(f, " (GPU in use %s)", b2);
            }
        }
        fprintf(f, " | %.2f | ", r->imbalance);
        for (int k = 0; k < r->world; k++)
            fprintf(f, "%s%.0f MiB", k ? ", " : "", r->ranks[k].peak_rss_kb / 1024);
        fprintf(f, " | ");
        for (int k = 0; k < r->world; k++) {
            fmt_bytes(r->ranks[k].sent, b1, sizeof(b1));
            fmt_bytes(r->ranks[k].received, b2, sizeof(b2));
            fprintf(f, "%s%s / %s", k ? ", " : "", b1, b2);
        }
        fmt_bytes(r->link_bytes, b1, sizeof(b1));
        if (r->link_to == r->world)
            fprintf(f, " | rank %d -> ddpd: %s", r->link_from, b1);
        else
            fprintf(f, " | rank %d -> rank %d: %s", r->link_from, r->link_to, b1);
        fprintf(f, " | %.4f | %.4f |\n", r->loss, r->accuracy);
    }
}

static cJSON *mode_json(const mode_result *r) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "mode", r->mode);
    cJSON_AddStringToObject(j, "transport", r->transport);
    cJSON_AddNumberToObject(j, "world", r->world);
    cJSON_AddNumberToObject(j, "steps", r->steps);
    cJSON_AddNumberToObject(j, "samples_per_s", r->samples_per_s);
    cJSON_AddNumberToObject(j, "seconds", r->seconds);
    cJSON_AddNumberToObject(j, "final_loss", r->loss);
    cJSON_AddNumberToObject(j, "test_accuracy", r->accuracy);
    cJSON_AddNumberToObject(j, "memory_imbalance", r->imbalance);
    cJSON *link = cJSON_AddObjectToObject(j, "busiest_link");
    cJSON_AddNumberToObject(link, "from_rank", r->link_from);
    if (r->link_to == r->world)
        cJSON_AddStringToObject(link, "to", "ddpd");
    else
        cJSON_AddNumberToObject(link, "to", r->link_to);
    cJSON_AddNumberToObject(link, "bytes", r->link_bytes);
    cJSON *ranks = cJSON_AddArrayToObject(j, "ranks");
    for (int k = 0; k < r->world; k++) {
        const rank_result *x = &r->ranks[k];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", k);
        cJSON_AddNumberToObject(o, "peak_tracked_bytes", x->peak_tracked);
        if (x->device_used >= 0)
            cJSON_AddNumberToObject(o, "device_used_bytes", x->device_used);
        cJSON_AddNumberToObject(o, "peak_rss_kb", x->peak_rss_kb);
        cJSON_AddNumberToObject(o, "bytes_sent", x->sent);
        cJSON_AddNumberToObject(o, "bytes_received", x->received);
        cJSON_AddNumberToObject(o, "compute_s", x->compute_s);
        cJSON_AddNumberToObject(o, "comm_s", x->comm_s);
        cJSON_AddNumberToObject(o, "wait_s", x->wait_s);
        cJSON_AddNumberToObject(o, "forward_s", x->forward_s);
        cJSON_AddNumberToObject(o, "backward_s", x->backward_s);
        cJSON_AddNumberToObject(o, "optimizer_s", x->optimizer_s);
        cJSON_AddItemToArray(ranks, o);
    }
    return j;
}

/* A run's name under its bars: the mode, and below it the transport. */
static void write_label(FILE *f, int x, int bottom, const mode_result *r) {
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, bottom + 18, r->mode);
    if (r->transport[0])
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"10\">%s</text>\n", x, bottom + 32,
                r->transport);
}

/* Grouped bars: throughput per mode on the left, peak tracked memory per rank per mode on
 * the right; values written on the bars, so it reads without the table. */
static void write_svg(FILE *f, const mode_result *m, int n_modes) {
    static const char *const colors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                         "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"};
    int width = 960, height = 420, top = 80, bottom = 340;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n",
            width, height, width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"16\" text-anchor=\"middle\">ddp-compare: %d workers</text>\n",
            width / 2, m[0].world);
    /* left: samples/s */
    double best = 1;
    for (int i = 0; i < n_modes; i++)
        best = m[i].samples_per_s > best ? m[i].samples_per_s : best;
    fprintf(f, "<text x=\"200\" y=\"48\" text-anchor=\"middle\">throughput (samples/s)</text>\n");
    int step = n_modes > 3 ? 330 / n_modes : 110, wide = step * 7 / 11; /* runs fit left of x 400 */
    for (int i = 0; i < n_modes; i++) {
        double h = (bottom - top) * m[i].samples_per_s / best;
        int x = 60 + i * step;
        fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\"/>\n", x, bottom - h, wide, h,
                colors[i % 8]);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", x + wide / 2, bottom - h - 4,
                m[i].samples_per_s);
        write_label(f, x + wide / 2, bottom, &m[i]);
    }
    fprintf(f, "<line x1=\"50\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", bottom, 60 + n_modes * step,
            bottom);
    /* right: memory per rank per mode */
    double most = 1;
    for (int i = 0; i < n_modes; i++)
        for (int k = 0; k < m[i].world; k++)
            most = m[i].ranks[k].peak_tracked > most ? m[i].ranks[k].peak_tracked : most;
    int left = 440, group = (width - left - 40) / (n_modes ? n_modes : 1),
        bar = (group - 20) / (m[0].world ? m[0].world : 1);
    fprintf(f, "<text x=\"%d\" y=\"48\" text-anchor=\"middle\">peak tracked memory per rank (MiB)</text>\n",
            left + (width - left) / 2);
    for (int i = 0; i < n_modes; i++) {
        int gx = left + i * group;
        for (int k = 0; k < m[i].world; k++) {
            double h = (bottom - top) * m[i].ranks[k].peak_tracked / most;
            int x = gx + k * bar;
            fprintf(
                f,
                "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\"><title>%s rank %d</title></rect>\n",
                x, bottom - h, bar - 2, h, colors[k % 8], m[i].mode, k);
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%.1f</text>\n", x + bar / 2,
                    bottom - h - 3, m[i].ranks[k].peak_tracked / 1048576.0);
        }
        write_label(f, gx + (bar * m[i].world) / 2, bottom, &m[i]);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left - 10, bottom, width - 30,
            bottom);
    for (int k = 0; k < m[0].world && k < 8; k++) {
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>\n", left + k * 70, bottom + 46,
                colors[k]);
        fprintf(f, "<text x=\"%d\" y=\"%d\">rank %d</text>\n", left + k * 70 + 14, bottom + 55, k);
    }
    fprintf(f, "</svg>\n");
}

static void write_sweep(FILE *f, const compare_report *r) {
    if (!r->n_sweep)
        return;
    fprintf(f, "\n| ddp bucket size (MiB) | samples/s |\n|---|---|\n");
    for (int i = 0; i < r->n_sweep; i++)
        fprintf(f, "| %g | %.0f |\n", r->sweep[i].bucket_mb, r->sweep[i].samples_per_s);
}

int compare_write_table(FILE *f, const compare_report *r) {
    write_modes(f, r->modes, r->n_modes);
    write_sweep(f, r);
    return stream_result(f);
}

int compare_write_markdown(FILE *f, const compare_report *r) {
    fprintf(f, "# ddp-compare: %d workers\n\n", r->world);
    return compare_write_table(f, r);
}

int compare_write_json(FILE *f, const compare_report *r) {
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "modes");
    cJSON_AddNumberToObject(root, "world", r->world);
    for (int i = 0; i < r->n_modes; i++)
        cJSON_AddItemToArray(arr, mode_json(&r->modes[i]));
    if (r->n_sweep) {
        cJSON *s = cJSON_AddArrayToObject(root, "bucket_sweep");
        for (int i = 0; i < r->n_sweep; i++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "bucket_mb", r->sweep[i].bucket_mb);
            cJSON_AddNumberToObject(x, "samples_per_s", r->sweep[i].samples_per_s);
            cJSON_AddItemToArray(s, x);
        }
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return -ENOMEM;
    fprintf(f, "%s\n", text);
    free(text);
    return stream_result(f);
}

int compare_write_svg(FILE *f, const compare_report *r) {
    write_svg(f, r->modes, r->n_modes);
    return stream_result(f);
}
