// SPDX-License-Identifier: GPL-2.0
/*
 * l2: the switch's fast path (io::fastpath::l2, docs/switch.md), in the XDP hook of each
 * of its ports, one copy per port.
 *
 * What it does: a frame takes it when its source MAC is a unicast one the switch has
 * learned on this very port (learning and moves stay user space's), its destination MAC a
 * unicast one learned on another port, and that port takes fast-path frames (neither a
 * capacity nor a delay: no queue, nothing to schedule); an untagged IPv4 frame must
 * moreover be a plain packet (no options, not a fragment, exactly the frame's length)
 * whose TCP or UDP checksum is not left to offload, since user space completes those. It
 * leaves by the destination's port unchanged: through the device map, or, where that
 * port's device takes no frames redirected in XDP, through the hand-off to its tcx hook.
 * Everything else (broadcast, multicast, unknown destinations to flood, unknown or moved
 * sources, shaped or delayed ports) goes to the port's AF_XDP socket and the user-space
 * switch, which stays the one source of truth.
 *
 * What it reads: the Ethernet header; of an IPv4 frame, its IP header and the TCP or UDP
 * checksum.
 * Maps (the switch's, shared by its ports' programs): switch_macs (learned MAC to port),
 * switch_ports (per port: may take fast-path frames, through the hand-off, its interface
 * index), switch_deadline (the time after which a switch that handed its fast path over
 * to its next start forwards nothing here; 0: none), tx_ports (the ports' devices), stats
 * (per port and CPU), xsks (this port's AF_XDP sockets, by receive queue).
 * Told at load: the port it runs on.
 */
#include "fastpath.h"

/* A switch_ports word: frames may leave by the port in the fast path; they leave through
 * the hand-off to tcx; the port's interface index in the high 32 bits. */
#define PORT_ELIGIBLE 1
#define PORT_HANDOFF 2

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32);
} switch_macs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} switch_ports SEC(".maps");

/* One word: bpf_ktime_get_ns() after which the fast path takes no frame (0: none). A
 * switch that hands its fast path over keeps it ahead while it runs; its successor's
 * programs replace these in the pinned links. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} switch_deadline SEC(".maps");

FASTPATH_TX_PORTS;

FASTPATH_STATS;

FASTPATH_XSKS;

/* Told at load: the one read-only global (io::fastpath::l2's L2Config). */
struct l2_config {
	__u32 port; /* the port this copy runs on */
};

volatile const struct l2_config cfg;

/* The port a learned MAC at p is on, or -1. */
static __always_inline long learned(const void *p)
{
	__u64 key = mac_key(p);
	__u32 *port = bpf_map_lookup_elem(&switch_macs, &key);
	return port ? *port : -1;
}

SEC("xdp")
int tessera_l2(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 me = cfg.port;
	__u8 *eth = data;
	if (data + 14 > end)
		goto slow;
	/* Group destinations are flooded, group sources refused: user space's. */
	if ((eth[0] & 1) || (eth[6] & 1))
		goto slow;
	/* The source, learned on this port (else user space learns it, or its move). */
	if (learned(eth + 6) != me)
		goto slow;
	/* The destination, learned on another port that takes fast-path frames. */
	long to = learned(eth);
	if (to < 0 || to == me)
		goto slow;
	__u32 out = to;
	__u64 *word = bpf_map_lookup_elem(&switch_ports, &out);
	if (!word || !(*word & PORT_ELIGIBLE))
		goto slow;
	__u64 w = *word;
	/* Past the deadline of a switch gone without a successor: user space's (none). */
	__u32 zero = 0;
	__u64 *deadline = bpf_map_lookup_elem(&switch_deadline, &zero);
	if (!deadline || (*deadline && bpf_ktime_get_ns() > *deadline))
		goto slow;
	/* An untagged IPv4 frame: a plain packet whose checksum is not left to offload. */
	if (*(__u16 *)(eth + 12) == bpf_htons(0x0800)) {
		if (data + 34 > end)
			goto slow;
		__u32 len = plain_ipv4(eth + 14, end);
		if (!len || offload_left_ipv4(eth + 14, end, len))
			goto slow;
	}
	if (!(w & PORT_HANDOFF)) {
		count_frame(&stats, me, 0, end - data);
		count_frame(&stats, out, 1, end - data);
		return bpf_redirect_map(&tx_ports, out, 0);
	}
	/* To a port that takes no frames redirected in XDP: room for the hand-off's
	 * metadata (refused: user space's), the frame counted, the metadata written, to
	 * this port's tcx hook (io::handoff). */
	if (handoff_room(ctx))
		goto slow;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + 14 > end)
		goto slow;
	count_frame(&stats, me, 0, end - data);
	count_frame(&stats, out, 1, end - data);
	if (handoff_write(ctx, w >> 32))
		goto slow;
	struct port_stats *s = PORT_STATS(&stats, out);
	if (s)
		s->handed_off++;
	return XDP_PASS;
slow:;
	struct port_stats *m = PORT_STATS(&stats, me);
	if (m)
		m->to_user_space++;
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
