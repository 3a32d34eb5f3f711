/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the elements' fast paths share: their per-port counters, the checks of an IPv4
 * packet that user space would otherwise make, and the hand-off from XDP to tcx
 * (io::handoff). Included by each fast path's program (l2.bpf.c, ...); every function
 * here is inlined.
 */
#ifndef TESSERA_FASTPATH_H
#define TESSERA_FASTPATH_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* Per port and CPU (io::fastpath::STATS): frames the fast path took in, left to user
 * space, sent out; bytes in, bytes out; frames and bytes shed over the slow path's
 * limit; frames handed to tcx. */
struct port_stats {
	__u64 in;
	__u64 to_user_space;
	__u64 out;
	__u64 in_bytes;
	__u64 out_bytes;
	__u64 shed;
	__u64 shed_bytes;
	__u64 handed_off;
};

/* The maps every element's fast path has, declared alike (the element creates them and
 * each port's copy reuses them; their sizes here are placeholders): `tx_ports`, the
 * ports' devices (a device map); `stats`, struct port_stats per port and CPU; `xsks`, this
 * port's AF_XDP sockets by receive queue. */
#define FASTPATH_TX_PORTS                                                      \
	struct {                                                               \
		__uint(type, BPF_MAP_TYPE_DEVMAP);                             \
		__uint(max_entries, 1);                                        \
		__type(key, __u32);                                            \
		__type(value, __u32);                                          \
	} tx_ports SEC(".maps")
#define FASTPATH_STATS                                                         \
	struct {                                                               \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                       \
		__uint(max_entries, 1);                                        \
		__type(key, __u32);                                            \
		__type(value, struct port_stats);                              \
	} stats SEC(".maps")
#define FASTPATH_XSKS                                                          \
	struct {                                                               \
		__uint(type, BPF_MAP_TYPE_XSKMAP);                             \
		__uint(max_entries, 1);                                        \
		__type(key, __u32);                                            \
		__type(value, __u32);                                          \
	} xsks SEC(".maps")

/* The hand-off's mark and its metadata's length (io::handoff::MAGIC, META_LEN). */
#define HANDOFF_MAGIC 0x7e550002
#define HANDOFF_META_LEN 8

/* A MAC address at p as the maps key it (io::fastpath::mac_u64): its six bytes, read
 * little-endian into the low 48 bits. */
static __always_inline __u64 mac_key(const void *p)
{
	return *(const __u32 *)p | (__u64)*(const __u16 *)(p + 4) << 32;
}

/* The counters of port `port` on this CPU, or NULL (a port past the map's end). */
#define PORT_STATS(map, port)                                                  \
	({                                                                     \
		__u32 __k = (port);                                            \
		(struct port_stats *)bpf_map_lookup_elem(map, &__k);           \
	})

/* Counts a frame of `len` bytes in port `port`'s counters of `map` (a port_stats per CPU
 * array): forwarded out of it where `out`, else taken in by it. */
static __always_inline void count_frame(void *map, __u32 port, int out, __u64 len)
{
	struct port_stats *s = PORT_STATS(map, port);
	if (!s)
		return;
	if (out) {
		s->out++;
		s->out_bytes += len;
	} else {
		s->in++;
		s->in_bytes += len;
	}
}

/* An IPv4 header at `ip` (the frame's end at `end`): version 4 without options, not a
 * fragment, exactly as long as the rest of the frame. Its total length, else 0. The
 * caller has checked that the 20 bytes are there. */
static __always_inline __u32 plain_ipv4(const __u8 *ip, const void *end)
{
	if (ip[0] != 0x45)
		return 0;
	if (*(const __u16 *)(ip + 6) & bpf_htons(0x3fff))
		return 0; /* MF, or an offset: a fragment */
	__u32 len = bpf_ntohs(*(const __u16 *)(ip + 2));
	if ((long)(end - (const void *)ip) != len)
		return 0;
	return len;
}

/* An IPv4 packet of `len` bytes at `ip` (plain_ipv4's): 1 when it is TCP or UDP whose
 * checksum is left to offload (the field holds the pseudo-header's sum alone, which only
 * a socket buffer's state could complete: user space completes it), 0 when complete or
 * another protocol, -1 when the transport header is cut short. */
static __always_inline int offload_left_ipv4(const __u8 *ip, const void *end, __u32 len)
{
	__u8 proto = ip[9];
	const __u8 *l4 = ip + 20;
	__u16 field;
	if (proto == 6) {
		if ((const void *)(l4 + 18) > end)
			return -1;
		field = *(const __u16 *)(l4 + 16);
	} else if (proto == 17) {
		if ((const void *)(l4 + 8) > end)
			return -1;
		field = *(const __u16 *)(l4 + 6);
	} else {
		return 0;
	}
	/* The pseudo-header's sum, in the words as read (little-endian): the addresses, the
	 * protocol and the transport length. */
	__u32 sum = (__u32)proto << 8;
#pragma unroll
	for (int k = 12; k < 20; k += 2)
		sum += *(const __u16 *)(ip + k);
	sum += bpf_htons((__u16)(len - 20));
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum == field;
}

/* Makes room for the hand-off's metadata in front of the frame (before the frame is
 * touched: refused, the frame goes to user space unchanged). 0 when made. */
static __always_inline int handoff_room(struct xdp_md *ctx)
{
	return bpf_xdp_adjust_meta(ctx, -HANDOFF_META_LEN);
}

/* In a ports entry's interface word (io::fastpath::PORT_PEER): the device is a veth whose
 * peer lives in another namespace; in the hand-off's metadata, its top bit. */
#define PORT_PEER (1ULL << 33)
#define HANDOFF_PEER 0x80000000

/* Writes the hand-off's metadata (its mark, then the egress interface index, its top bit
 * set where the frame may go straight to the veth's peer: PORT_PEER) in the room
 * handoff_room made: 0, or -1 where the room is gone (cannot happen). */
static __always_inline int handoff_write(struct xdp_md *ctx, __u64 ifword)
{
	__u32 *meta = (void *)(long)ctx->data_meta;
	if ((void *)(meta + 2) > (void *)(long)ctx->data)
		return -1;
	meta[0] = HANDOFF_MAGIC;
	meta[1] = (__u32)ifword | ((ifword & PORT_PEER) ? HANDOFF_PEER : 0);
	return 0;
}

#endif
