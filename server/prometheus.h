/* ddpd's status in the Prometheus text exposition format, for node_exporter's textfile
 * collector (ddpd --metrics-file) and ddpctl metrics. */
#pragma once
#include <stdio.h>

#include "proto/ddp.pb-c.h"

void prometheus_write(FILE *out, const Ddp__StatusReply *status);
