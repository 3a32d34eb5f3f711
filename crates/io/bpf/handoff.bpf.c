// SPDX-License-Identifier: GPL-2.0
/*
 * handoff: the fast path's hand-off from XDP to tcx (io::handoff).
 *
 * What it does: a port's XDP fast path that finds a frame bound to a device which takes
 * no frames redirected in XDP (a veth whose peer runs no NAPI, a tun/tap, a bond) does
 * the lookup, TTL and rewrite itself, writes eight bytes of metadata in front of the
 * frame (HANDOFF_MAGIC, then the egress interface index) and passes it to the kernel,
 * which builds a socket buffer. This program, in the same port's tcx ingress hook, finds
 * that metadata, clears the mark (so that no later hook of any element takes the frame
 * for one of ours) and sends the frame out of the egress with bpf_redirect, or, where
 * the index's top bit says the egress is a veth whose peer lives in another namespace,
 * straight into that peer's ingress with bpf_redirect_peer (no transmit on the veth, no
 * backlog queue on the far side: the frame reaches the host in the same softirq pass).
 * Every other frame goes on (TCX_NEXT) as if this program were not there.
 *
 * What it reads: the socket buffer's metadata (data_meta to data).
 * Maps: none. No state: a restart or an upgrade puts a new copy in the pinned link in one
 * step, and the XDP programs of any start find it alike.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* The hand-off's mark: io::handoff::MAGIC. */
#define HANDOFF_MAGIC 0x7e550002
/* The index's top bit: to the veth's peer (io::fastpath::PORT_PEER). */
#define HANDOFF_PEER 0x80000000
/* TCX_NEXT (linux/bpf.h from 6.6 on): on to the next program, or the stack. */
#define HANDOFF_NEXT (-1)

SEC("tcx/ingress")
int handoff(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	__u32 *meta = (void *)(long)skb->data_meta;

	if ((void *)(meta + 2) > data)
		return HANDOFF_NEXT;
	if (meta[0] != HANDOFF_MAGIC)
		return HANDOFF_NEXT;
	meta[0] = 0;
	__u32 to = meta[1];
	if (to & HANDOFF_PEER)
		return bpf_redirect_peer(to & ~HANDOFF_PEER, 0);
	return bpf_redirect(to, 0);
}

char LICENSE[] SEC("license") = "GPL";
