// SPDX-License-Identifier: GPL-2.0
/*
 * gen: the XDP frame generator (tessera gen --xdp, io::xdp::XdpGen).
 *
 * What it does: run by BPF_PROG_TEST_RUN in live-frames mode, never attached. Each run
 * reads the clock; a frame that is due (and within the count and the deadline) gets the
 * next number, is rewritten with the template's headers, its flow (number modulo the flow
 * count), its sequence number in the flow, the flow's UDP source port and its send time
 * (CLOCK_REALTIME: the monotonic clock plus an offset taken at load), optionally a
 * destination drawn at random from gen_dests, and leaves by the interface (bpf_redirect);
 * a run with nothing due drops its frame, which sends nothing. Due times advance by the
 * interval from the start, so late frames catch up and errors do not accumulate; a frame
 * more than the slack late stands for the last one due, and the frames it passed over are
 * counted skipped, not sent in a burst.
 *
 * What it reads: its state (gen_state) and the frame's bytes it writes.
 * Maps: gen_state (one entry: the schedule, the counters, the headers; io::xdp says what
 * user space writes and reads), gen_dests (destinations, when drawn from a table).
 * Told at load (its read-only global): the interface, the flows, where the fields sit.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* The template's bytes the program writes again on every run (Ethernet, IPv4 and UDP
 * headers): a frame's page comes back from the receiver with whatever it left in it. */
#define HEADER_LEN 42

struct gen_state {
	__u64 numbered;    /* frames numbered so far */
	__u64 due_ps;      /* when the next frame is due, monotonic picoseconds */
	__u64 count;       /* frames to send at most */
	__u64 deadline_ns; /* monotonic nanoseconds after which nothing is sent */
	__u64 interval_ps; /* picoseconds between frames (0: as fast as possible) */
	__u64 last_ns;     /* monotonic nanoseconds of the last frame sent */
	__u64 skipped;     /* frames skipped: more than the slack late */
	__u64 slack_ps;    /* how late a frame may be and still be sent */
	__u64 header[6];   /* the template's first HEADER_LEN bytes */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_state);
} gen_state SEC(".maps");

/* IPv4: the address, then the header checksum that goes with it (two bytes of padding);
 * IPv6: the destination's upper 64 bits. A power of two of them (max_entries set at
 * load). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} gen_dests SEC(".maps");

/* Told at load: the one read-only global (io::xdp's GenConfig). */
struct gen_config {
	__u32 ifindex;
	__u32 flows;
	__u32 flow_base;
	__u32 base_port;
	__u32 at_src_port; /* the UDP source port */
	__u32 at_flow;     /* the probe's flow id and 48-bit sequence number */
	__u32 at_time;     /* the probe's send time */
	__u32 need;        /* the frame's bytes the program writes */
	__s64 clock_offset; /* CLOCK_REALTIME less CLOCK_MONOTONIC, ns */
	__u32 dests;       /* destinations drawn from gen_dests */
	__u32 dest_mask;   /* their number less one */
	__u32 addr_at;     /* where the destination sits */
	__u32 csum_at;     /* where the IPv4 header checksum sits (0: IPv6) */
};

volatile const struct gen_config cfg = { .flows = 1 };

SEC("xdp")
int tessera_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 key = 0;
	struct gen_state *st = bpf_map_lookup_elem(&gen_state, &key);
	if (!st)
		return XDP_DROP;
	__u64 now = bpf_ktime_get_ns();
	if (now > st->deadline_ns)
		return XDP_DROP;
	__u64 now_ps = now * 1000;
	__u64 due = st->due_ps;
	if (due > now_ps)
		return XDP_DROP; /* not due yet */
	__u64 interval = st->interval_ps;
	__u64 late = now_ps - due;
	if (late > st->slack_ps && interval) {
		/* The missed frames are skipped: this one stands for the last one due, and
		 * the schedule keeps its phase (sent + skipped is exactly the frames due by
		 * the deadline). */
		__u64 missed = late / interval;
		st->skipped += missed;
		due += missed * interval;
	}
	st->due_ps = due + interval;
	__u64 n = st->numbered;
	if (n >= st->count)
		return XDP_DROP;
	st->numbered = n + 1;
	st->last_ns = now;
	if (data + cfg.need > data_end)
		return XDP_DROP;
	/* The headers as they were built, then what differs per frame. */
	__u64 *to = data;
#pragma unroll
	for (int k = 0; k < HEADER_LEN / 8; k++)
		to[k] = st->header[k];
	*(__u16 *)(data + HEADER_LEN / 8 * 8) = *(__u16 *)&st->header[HEADER_LEN / 8];
	__u64 flow = n % cfg.flows;
	__u64 seq = n / cfg.flows;
	*(__u64 *)(data + cfg.at_flow) = bpf_cpu_to_be64((flow + cfg.flow_base) << 48 | seq);
	*(__u16 *)(data + cfg.at_src_port) = bpf_htons((__u16)(flow + cfg.base_port));
	*(__u64 *)(data + cfg.at_time) = bpf_cpu_to_be64(now + cfg.clock_offset);
	if (cfg.dests) {
		__u32 d = bpf_get_prandom_u32() & cfg.dest_mask;
		__u64 *e = bpf_map_lookup_elem(&gen_dests, &d);
		if (!e)
			return XDP_DROP; /* cannot happen: an array, the key in range */
		if (cfg.csum_at) {
			*(__u32 *)(data + cfg.addr_at) = *(__u32 *)e;
			*(__u16 *)(data + cfg.csum_at) = *((__u16 *)e + 2);
		} else {
			*(__u64 *)(data + cfg.addr_at) = *e;
		}
	}
	return bpf_redirect(cfg.ifindex, 0);
}

char LICENSE[] SEC("license") = "GPL";
