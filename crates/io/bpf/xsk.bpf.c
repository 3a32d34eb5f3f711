// SPDX-License-Identifier: GPL-2.0
/*
 * xsk: the programs of an AF_XDP port without an element's fast path (io::xsk).
 *
 * xsk_redirect: every frame to the AF_XDP socket of the receive queue it came in on; a
 * queue without a socket passes the frame to the kernel's stack.
 *
 * xsk_stamp: a receiving port for measurement (tessera sink --xdp, the benches' sinks).
 * IPv4 and IPv6 UDP frames get their receive time (bpf_ktime_get_ns, the kernel's
 * monotonic clock) in 8 bytes of metadata in front of the frame and go to the queue's
 * socket, which reads it there; everything else (ARP, neighbour discovery) goes to the
 * kernel's stack. A frame whose metadata the kernel refuses goes to the socket unstamped.
 *
 * What they read: xdp_md's receive queue; xsk_stamp also the EtherType and the IP
 * protocol. Maps: xsks (XSKMAP, one entry per receive queue, sized at load), whose
 * entries user space sets to its sockets.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("xdp")
int xsk_redirect(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

SEC("xdp")
int xsk_stamp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *p = data;
	__u8 proto;
	__u64 now;
	void *meta;

	if (data + 24 > end)
		return XDP_PASS;
	if (*(__u16 *)(p + 12) == bpf_htons(ETH_P_IP))
		proto = p[23];
	else if (*(__u16 *)(p + 12) == bpf_htons(ETH_P_IPV6))
		proto = p[20];
	else
		return XDP_PASS;
	if (proto != IPPROTO_UDP)
		return XDP_PASS;
	if (bpf_xdp_adjust_meta(ctx, -8) == 0) {
		now = bpf_ktime_get_ns();
		meta = (void *)(long)ctx->data_meta;
		data = (void *)(long)ctx->data;
		if (meta + 8 <= data)
			*(__u64 *)meta = now;
	}
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
