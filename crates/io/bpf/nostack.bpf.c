// SPDX-License-Identifier: GPL-2.0
/*
 * nostack: keeps the kernel's stack off an element's AF_PACKET port
 * (io::afpacket::AfPacket::keep_stack_off).
 *
 * What it does: drops every frame in the port's tcx ingress hook, after the packet
 * sockets have seen it (they take frames before tcx), so that the host's stack spends
 * nothing on the element's traffic and answers none of it. On a veth, `tessera_whole`
 * in the port's XDP hook passes every frame on: while an XDP program runs there, the
 * kernel takes the veth's peer's software segmentation away, so that the peer (a host
 * with a new veth's TSO and GSO, as a container's) sends frames no larger than the MTU
 * instead of socket buffers of many segments, which the packet socket's ring could not
 * take whole.
 *
 * What it reads: nothing. Maps: none.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* TCX_DROP (linux/bpf.h from 6.6 on). */
#define NOSTACK_DROP 2

SEC("tcx/ingress")
int tessera_nostack(struct __sk_buff *skb)
{
	return NOSTACK_DROP;
}

SEC("xdp")
int tessera_whole(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
