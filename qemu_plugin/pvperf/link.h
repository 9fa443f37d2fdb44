/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * link.h - each vCPU's SOCK_SEQPACKET connection to the host service
 * (messages: pvperf_proto.h), and the guard that keeps atexit from
 * pulling guest RAM and sockets from under a running callback.
 */
#ifndef PVPERF_LINK_H
#define PVPERF_LINK_H

#include <stdbool.h>
#include <stdint.h>

#include "pvperf_proto.h"

void link_init(void);
bool link_enter(void);
void link_leave(void);
int64_t link_exchange(unsigned vcpu, const struct pvperf_proto_hcall *msg,
		      struct pvperf_proto_reply *reply);
/* Flow control: whether this overflow must be SYNC (every 64th). */
bool link_credit_spent(unsigned vcpu);
void link_send_overflow(unsigned vcpu, const struct pvperf_proto_overflow *m);
void link_vcpu_exit(unsigned vcpu);
bool link_exit(void);

#endif /* PVPERF_LINK_H */
