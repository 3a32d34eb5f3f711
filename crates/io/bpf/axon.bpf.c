// SPDX-License-Identifier: GPL-2.0
/*
 * axon: the Axon's fast path (io::fastpath::axon, docs/axon.md), in the XDP hook of each
 * of its ports, one copy per port.
 *
 * What it does: a source-routed frame passing through takes it when it is an Axon frame
 * (EtherType 0x88b6, untagged) of type data or control whose header is well formed
 * (hlen fits the hop counts, at most 32 hops, the whole header inside the frame), whose
 * forward path is not used up, and whose next port (the nibble at `rev`) is an Axon link
 * that takes fast-path frames (a neighbour Axon heard now, neither a capacity nor a
 * delay). The program does what the user-space Axon does with it (dataplane::axon):
 * writes the input port in the nibble's place, shifts the counts (fwd one less, rev one
 * more), sets the outer MACs (the neighbour's port, then this port's own) and sends it
 * out of that port: through the device map, or, where the port's device takes no frames
 * redirected in XDP, through the hand-off to its tcx hook (io::handoff). Everything else
 * (hellos, probes, frames to this Axon's control plane or out of a host port, plain
 * frames from hosts, malformed headers) goes to the port's AF_XDP socket and the
 * user-space Axon, which stays the one source of truth.
 *
 * What it reads: the outer Ethernet header and the Axon header (wire::axon).
 * Maps (the Axon's, shared by its ports' programs): axon_ports (per port: the neighbour
 * port's MAC with bit 48 set while frames may leave there in the fast path, this port's
 * own MAC, and 1 << 32 | its interface index where they leave through the hand-off),
 * axon_deadline (the time after which an Axon that handed its fast path over to its
 * next start forwards nothing here; 0: none), tx_ports (the ports' devices), stats (per
 * port and CPU), xsks (this port's AF_XDP sockets, by receive queue).
 * Told at load: the port it runs on (a nibble, 0 to 14).
 */
#include "fastpath.h"

#define AXON_ETHERTYPE 0x88b6
/* An axon_ports entry's first word: frames may leave by the port in the fast path. */
#define PORT_ELIGIBLE (1ULL << 48)
/* Hops a header holds at most (wire::axon::MAX_HOPS). */
#define MAX_HOPS 32
/* Where the header's fields sit in the frame (after the outer Ethernet header). */
#define KIND 14
#define HLEN 15
#define FWD 16
#define REV 17
#define PATH 18
/* The control plane's nibble. */
#define CONTROL_PLANE 15

struct axon_port {
	__u64 to;      /* the neighbour port's MAC (mac_key), | PORT_ELIGIBLE */
	__u64 mine;    /* this port's own MAC (mac_key) */
	__u64 handoff; /* 1 << 32 | the interface index, or 0 */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct axon_port);
} axon_ports SEC(".maps");

/* One word: bpf_ktime_get_ns() after which the fast path takes no frame (0: none). An
 * Axon that hands its fast path over keeps it ahead while it runs; its successor's
 * programs replace these in the pinned links. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} axon_deadline SEC(".maps");

FASTPATH_TX_PORTS;

FASTPATH_STATS;

FASTPATH_XSKS;

/* Told at load: the one read-only global (io::fastpath::axon's AxonConfig). */
struct axon_config {
	__u32 port; /* the port this copy runs on */
};

volatile const struct axon_config cfg;

/* A MAC kept as mac_key packs it, written at p. */
static __always_inline void put_mac(void *p, __u64 mac)
{
	*(__u32 *)p = (__u32)mac;
	*(__u16 *)(p + 4) = (__u16)(mac >> 32);
}

SEC("xdp")
int tessera_axon(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 me = cfg.port & 0xf;
	__u8 *f = data;
	/* The outer header and the header's fixed part. */
	if (data + PATH > end)
		goto slow;
	if (*(__u16 *)(f + 12) != bpf_htons(AXON_ETHERTYPE))
		goto slow;
	/* Data (0) or control (1); hellos and probes are user space's. */
	if (f[KIND] >= 2)
		goto slow;
	/* A forward path not used up, at most 32 hops, and hlen = 4 + ceil(hops / 2). */
	__u32 fwd = f[FWD], rev = f[REV];
	if (fwd == 0 || fwd + rev >= MAX_HOPS + 1)
		goto slow;
	__u32 hlen = ((fwd + rev + 1) >> 1) + 4;
	if (f[HLEN] != hlen)
		goto slow;
	/* The whole header inside the frame. */
	if (data + hlen + 14 > end)
		goto slow;
	/* The path byte of nibble `rev` (rev < 32: at most 15 bytes in); the next hop, the
	 * high nibble at an even index, the low one at an odd. */
	__u32 odd = rev & 1, at = (rev >> 1) & 15;
	__u8 *p = data + at;
	if ((void *)(p + PATH + 1) > end)
		goto slow;
	__u32 next = odd ? p[PATH] & 15 : p[PATH] >> 4;
	/* The control plane's, or this very port: user space's. */
	if (next == CONTROL_PLANE || next == me)
		goto slow;
	/* An Axon link that takes fast-path frames (a port without an entry is a miss). */
	struct axon_port *port = bpf_map_lookup_elem(&axon_ports, &next);
	if (!port || !(port->to & PORT_ELIGIBLE))
		goto slow;
	__u64 to = port->to, mine = port->mine, handoff = port->handoff;
	/* Past the deadline of an Axon gone without a successor: user space's (none). */
	__u32 zero = 0;
	__u64 *deadline = bpf_map_lookup_elem(&axon_deadline, &zero);
	if (!deadline || (*deadline && bpf_ktime_get_ns() > *deadline))
		goto slow;
	if (handoff) {
		/* Out through the hand-off: room for its metadata first (refused: user
		 * space's, the frame untouched yet), then the frame's bounds again. */
		if (handoff_room(ctx))
			goto slow;
		data = (void *)(long)ctx->data;
		end = (void *)(long)ctx->data_end;
		if (data + PATH > end)
			goto slow;
		f = data;
	}
	/* The path byte again, where it is now (the verifier follows one pointer from its
	 * check to its use). */
	p = data + at;
	if ((void *)(p + PATH + 1) > end)
		goto slow;
	/* The outer MACs: the neighbour's port, then this Axon's port. */
	put_mac(f, to);
	put_mac(f + 6, mine);
	/* This hop's input port in the next hop's place. */
	p[PATH] = odd ? (p[PATH] & 0xf0) | me : (p[PATH] & 0x0f) | me << 4;
	/* One hop less ahead, one more behind. */
	f[FWD]--;
	f[REV]++;
	count_frame(&stats, me, 0, end - data);
	count_frame(&stats, next, 1, end - data);
	if (handoff >> 32) {
		if (handoff_write(ctx, (__u32)handoff))
			return XDP_DROP; /* cannot happen: the room made is gone */
		struct port_stats *s = PORT_STATS(&stats, next);
		if (s)
			s->handed_off++;
		return XDP_PASS;
	}
	return bpf_redirect_map(&tx_ports, next, 0);
slow:;
	struct port_stats *m = PORT_STATS(&stats, me);
	if (m)
		m->to_user_space++;
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
