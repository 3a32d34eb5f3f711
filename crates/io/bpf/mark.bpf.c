// SPDX-License-Identifier: GPL-2.0
/*
 * mark: the socket filter of an element's AF_PACKET socket on a port whose tcx hook runs
 * the forwarder's fast path (io::afpacket, accept_mark).
 *
 * What it does: keeps every frame whose mark is the one told at load (the fast path marks
 * what it leaves to user space and receives it again, io::fastpath::TO_USER_SPACE_MARK);
 * every other frame is not copied to the socket, which sees each frame the fast path
 * left to it once, and none it forwarded.
 *
 * What it reads: the socket buffer's mark. Maps: none.
 * Told at load: the mark.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct mark_config {
	__u32 mark;
};

volatile const struct mark_config cfg;

SEC("socket")
int tessera_mark(struct __sk_buff *skb)
{
	/* The bytes to keep: the whole frame, or none. */
	return skb->mark == cfg.mark ? skb->len : 0;
}

char LICENSE[] SEC("license") = "GPL";
