// SPDX-License-Identifier: GPL-2.0
/*
 * count: the cheapest receive a sink can have (tessera sink --count, io::fastpath::count).
 *
 * What it does: counts the generator's test frames and drops them in the XDP hook, with
 * no socket and no copy. A frame counted is an Ethernet frame of IPv4 (no options) or
 * IPv6 (UDP right after the fixed header), no VLAN tag, carrying UDP whose payload starts
 * with a test probe's data magic (wire::probe::DATA). A generator's end markers
 * (wire::probe::END) are dropped and not counted. Everything else (ARP, neighbour
 * discovery, other UDP, other protocols) passes to the host's stack.
 *
 * What it reads: the Ethernet, IP and UDP headers and the payload's first two bytes.
 * Maps: sink_count (per CPU, one entry: frames, bytes), which user space sums.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* A probe's first two bytes (wire::probe): a data frame's, an end marker's. */
#define PROBE_DATA 0x7e55
#define PROBE_END 0x7e5e

struct counts {
	__u64 frames;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counts);
} sink_count SEC(".maps");

SEC("xdp")
int count(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *p = data;
	__u16 magic;
	__u32 key = 0;
	struct counts *c;

	/* Ethernet, IPv4 and UDP headers and a probe's magic: 44 bytes. */
	if (data + 44 > end)
		return XDP_PASS;
	if (*(__u16 *)(p + 12) == bpf_htons(ETH_P_IP)) {
		/* Version 4, a header of 20 bytes; UDP. */
		if (p[14] != 0x45 || p[23] != IPPROTO_UDP)
			return XDP_PASS;
		magic = *(__u16 *)(p + 42);
	} else if (*(__u16 *)(p + 12) == bpf_htons(ETH_P_IPV6)) {
		/* Ethernet, IPv6 and UDP headers and the magic: 64 bytes. */
		if (data + 64 > end)
			return XDP_PASS;
		if (p[20] != IPPROTO_UDP)
			return XDP_PASS;
		magic = *(__u16 *)(p + 62);
	} else {
		return XDP_PASS;
	}
	if (magic == bpf_htons(PROBE_END))
		return XDP_DROP;
	if (magic != bpf_htons(PROBE_DATA))
		return XDP_PASS;
	c = bpf_map_lookup_elem(&sink_count, &key);
	if (c) {
		c->frames++;
		c->bytes += end - data;
	}
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
