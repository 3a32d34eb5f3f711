// SPDX-License-Identifier: GPL-2.0
/*
 * lb: the load balancer's fast path (io::fastpath::lb, docs/lb.md), in the XDP hook of
 * each of its ports, one copy per port.
 *
 * What it does, on the LB's two common cases:
 * - Balance (from an external port): an untagged IPv4 packet (plain: no options, not a
 *   fragment, exactly the frame's length) to the port's own MAC and not to a multicast or
 *   the broadcast address, whose first matching classifier rule balances it, whose TCP or
 *   UDP checksum is not left to offload, and whose flow hash (dataplane::routes::
 *   flow_hash, computed alike) lands on a table slot of a back-end served here: its
 *   destination MAC becomes the back-end's, it is tagged with the port's VLAN id and
 *   leaves by the back-end's port, counted for that back-end.
 * - Int-to-ext (from an internal port): an IPv4 packet as above, tagged with the VLAN id of
 *   an external port, whose first matching rule sends it outward: the tag comes out, the
 *   source MAC becomes the external port's and it leaves there.
 * IPv6 TCP and UDP alike (no extension header; not to a multicast, a link-local nor one of
 * the port's own addresses; flow_hash6). A frame leaves through the device map, or, where
 * the egress port's device takes no frames redirected in XDP, through the hand-off to tcx
 * (io::handoff). Everything else (ARP, neighbour discovery and all ICMPv6, DIST, the
 * Virtual-CP's traffic, anything a rule does not balance, fragments, options, the
 * round-robin mode) goes to the port's AF_XDP socket and the user-space LB, which stays
 * the one source of truth.
 *
 * What it reads: the Ethernet header and 802.1Q tag, the IPv4 or IPv6 header, the TCP or
 * UDP ports and checksum.
 * Maps (the LB's, shared by its ports' programs): lb_state (an array of maps whose one
 * table of u64 words holds the ports, VLAN ids, back-ends, hand-off words and slots, laid
 * out as io::fastpath::lb says, replaced whole when it changes), tx_ports, stats (per port
 * and CPU), the filters' maps (acl.h: the external ports' access lists, before balancing
 * and on the way out), lb_counts (per back-end counter id and CPU), lb_deadline (the time after which
 * the program takes nothing: an LB that hands over and never comes back), xsks (this
 * port's AF_XDP sockets, by receive queue).
 * Told at load (struct lb_config): the port, its MAC, the classifier's rules that may
 * match an IPv4 or an IPv6 TCP or UDP frame, in their order, and the port's IPv6 addresses.
 */
#include "fastpath.h"
#include "acl.h"

/* The state's layout (io::fastpath::lb: PORT_BASE, VLAN_BASE, ENTRY_BASE, HANDOFF_BASE,
 * SLOT_BASE) and bounds. */
#define MAX_PORTS 64
#define MAX_ENTRIES 4096
#define PORT_BASE 1
#define VLAN_BASE (PORT_BASE + 2 * MAX_PORTS)
#define ENTRY_BASE (VLAN_BASE + 4096 / 4)
#define HANDOFF_BASE (ENTRY_BASE + MAX_ENTRIES)
#define SLOT_BASE (HANDOFF_BASE + MAX_PORTS)
#define ROLE_EXTERNAL 1
#define ROLE_INTERNAL 2

/* struct lb_config's bounds (io::fastpath::lb's twins). */
#define MAX_RULES 128
#define MAX_ADDRS6 64

/* A rule's fields that are set (lb_rule.flags), and its verdict: the fast path's (it
 * balances from outside, or sends outward from inside) or user space's. */
#define R_PROTOCOL 1
#define R_PORT 2
#define R_TO_ROUTER 4
#define R_FAST 8

/* The rule lists, one per side and family. */
#define EXT4 0
#define INT4 1
#define EXT6 2
#define INT6 3

struct lb_rule {
	__u32 flags;
	__u32 protocol;
	__u32 port; /* the source or the destination port of TCP and UDP */
	__u32 to_router;
};

/* Told at load: the one read-only global (io::fastpath::lb's LbConfig). */
struct lb_config {
	__u64 mac;        /* the port's MAC (mac_key) */
	__u32 port;       /* the port this copy runs on */
	__u32 nrules[4];  /* per list */
	__u32 naddrs6;
	struct lb_rule rules[4][MAX_RULES];
	__u8 addrs6[MAX_ADDRS6][16]; /* the router's IPv6 addresses on the port */
};

volatile const struct lb_config cfg;

struct lb_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct lb_table);
} lb_state SEC(".maps");

FASTPATH_TX_PORTS;

FASTPATH_STATS;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 128);
	__type(key, __u32);
	__type(value, __u64);
} lb_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lb_deadline SEC(".maps");

FASTPATH_XSKS;

/* What the classifier matches on: the protocol, the TCP or UDP ports (source << 16 |
 * destination; none: no ports), whether the packet is to the router. */
struct key {
	__u32 protocol;
	__u32 ports;
	int has_ports;
	int to_router;
};

/* The state's word `i`, or NULL. */
static __always_inline __u64 *word(void *state, __u32 i)
{
	return bpf_map_lookup_elem(state, &i);
}

/* The 16-bit entry `i` of the packed entries from word `base` (four to a word, the first
 * in the low bits), or -1. */
static __always_inline long packed(void *state, __u32 base, __u32 i)
{
	__u64 *w = word(state, base + (i >> 2));
	if (!w)
		return -1;
	return (*w >> ((i & 3) * 16)) & 0xffff;
}

/* Lists up to this long are walked in a loop of the program's own (a few nanoseconds a
 * rule); longer ones with bpf_loop, whose callback the verifier checks once however many
 * rules there are, at the cost of a call per rule. */
#define INLINE_RULES 32

/* Rule `i` of list `list` on `k`: -1 when it does not match, else whether its verdict is
 * the fast path's (R_FAST) or user space's (0). */
static __always_inline int rule_says(int list, __u32 i, const struct key *k)
{
	__u32 flags = cfg.rules[list][i].flags;
	if ((flags & R_PROTOCOL) && cfg.rules[list][i].protocol != k->protocol)
		return -1;
	if (flags & R_PORT) {
		__u32 port = cfg.rules[list][i].port;
		if (!k->has_ports || ((k->ports >> 16) != port && (k->ports & 0xffff) != port))
			return -1;
	}
	if ((flags & R_TO_ROUTER) && cfg.rules[list][i].to_router != k->to_router)
		return -1;
	return flags & R_FAST;
}

/* A walk of a long rule list (bpf_loop's context): the list, the key, the verdict found. */
struct walk {
	int list;
	const struct key *k;
	int fast;
};

/* Rule `i` of the walk's list: on to the next when it does not match; else the walk
 * ends with its verdict. */
static long rule_step(__u64 i, struct walk *w)
{
	if (i >= MAX_RULES)
		return 1;
	int r = rule_says(w->list & 3, i, w->k);
	if (r < 0)
		return 0;
	w->fast = r;
	return 1;
}

/* The rules of list `list`, in order, on `k`: the first that matches says whether the
 * fast path takes the frame; no match, user space. */
static __always_inline int rules_say_fast(int list, const struct key *k)
{
	__u32 n = cfg.nrules[list];
	if (n <= INLINE_RULES) {
		for (__u32 i = 0; i < n && i < INLINE_RULES; i++) {
			int r = rule_says(list, i, k);
			if (r >= 0)
				return r;
		}
		return 0;
	}
	struct walk w = {.list = list, .k = k};
	bpf_loop(n < MAX_RULES ? n : MAX_RULES, rule_step, &w, 0);
	return w.fast;
}

/* An IPv4 packet at `ip` is plain (plain_ipv4) and matches list `list`'s rules for the
 * fast path; `addr`: the router's address on this port (host order; 0: none). */
static __always_inline int ipv4_fast(const __u8 *ip, void *end, __u32 addr, int list)
{
	if ((void *)(ip + 20) > end || !plain_ipv4(ip, end))
		return 0;
	struct key k = {.protocol = ip[9]};
	__u32 dst = bpf_ntohl(*(const __u32 *)(ip + 16));
	k.to_router = (addr && dst == addr) || (dst >> 8) == 0xe00000;
	if ((k.protocol == 6 || k.protocol == 17) && (void *)(ip + 24) <= end) {
		k.ports = bpf_ntohl(*(const __u32 *)(ip + 20));
		k.has_ports = 1;
	}
	return rules_say_fast(list, &k);
}

/* An IPv6 packet at `ip`: exactly the rest of the frame, TCP or UDP right behind the fixed
 * header, to neither a multicast, a link-local nor one of the port's addresses, and list
 * `list`'s rules take it (its key: the next header, the ports, never to the router). */
static __always_inline int ipv6_fast(const __u8 *ip, void *end, int list)
{
	if ((void *)(ip + 40) > end || (ip[0] & 0xf0) != 0x60)
		return 0;
	if ((__u64)(end - (void *)ip) - 40 != bpf_ntohs(*(const __u16 *)(ip + 4)))
		return 0;
	struct key k = {.protocol = ip[6]};
	if (k.protocol != 6 && k.protocol != 17)
		return 0;
	const __u8 *dst = ip + 24;
	if (dst[0] == 0xff || (dst[0] == 0xfe && (dst[1] & 0xc0) == 0x80))
		return 0; /* multicast, link-local */
	for (__u32 i = 0; i < cfg.naddrs6 && i < MAX_ADDRS6; i++) {
		const volatile __u8 *a = cfg.addrs6[i];
		if (*(const __u32 *)dst == *(const volatile __u32 *)a &&
		    *(const __u32 *)(dst + 4) == *(const volatile __u32 *)(a + 4) &&
		    *(const __u32 *)(dst + 8) == *(const volatile __u32 *)(a + 8) &&
		    *(const __u32 *)(dst + 12) == *(const volatile __u32 *)(a + 12))
			return 0; /* to the router */
	}
	if ((void *)(ip + 44) <= end) {
		k.ports = bpf_ntohl(*(const __u32 *)(ip + 40));
		k.has_ports = 1;
	}
	return rules_say_fast(list, &k);
}

static __always_inline __u64 mix(__u64 h)
{
	h = (h ^ (h >> 31)) * 0x7fb5d329728ea185ULL;
	h = (h ^ (h >> 27)) * 0x81dadef4bc2dd44dULL;
	return (__u32)(h ^ (h >> 33));
}

static __always_inline __u64 rotl(__u64 x, int r)
{
	return x << r | x >> (64 - r);
}

/* The TCP or UDP ports at `l4`, rotated as the flow hashes mix them in (0: cut short). */
static __always_inline __u64 hashed_ports(const __u8 *l4, void *end)
{
	if ((void *)(l4 + 4) > end)
		return 0;
	return (__u64)bpf_ntohl(*(const __u32 *)l4) << 23;
}

/* dataplane::routes::flow_hash of the IPv4 packet at ip (plain, its 20 bytes there). */
static __always_inline __u32 flow_hash(const __u8 *ip, void *end)
{
	__u64 h = (__u64)bpf_ntohl(*(const __u32 *)(ip + 12)) << 32 |
		  bpf_ntohl(*(const __u32 *)(ip + 16));
	h ^= (__u64)ip[9] << 17;
	if (ip[9] == 6 || ip[9] == 17)
		h ^= hashed_ports(ip + 20, end);
	return mix(h);
}

/* dataplane::routes::flow_hash6 of the IPv6 packet at ip (TCP or UDP, 40 bytes there). */
static __always_inline __u32 flow_hash6(const __u8 *ip, void *end)
{
	__u64 h = bpf_be64_to_cpu(*(const __u64 *)(ip + 8));
	h ^= rotl(bpf_be64_to_cpu(*(const __u64 *)(ip + 16)), 21);
	h ^= rotl(bpf_be64_to_cpu(*(const __u64 *)(ip + 24)), 42);
	h ^= rotl(bpf_be64_to_cpu(*(const __u64 *)(ip + 32)), 11);
	h ^= (__u64)(bpf_ntohl(*(const __u32 *)ip) & 0xfffff) << 20;
	h ^= (__u64)ip[6] << 44;
	h ^= hashed_ports(ip + 40, end);
	return mix(h);
}

/* A TCP or UDP checksum at the IPv6 packet `ip` (TCP or UDP) left to offload, or cut
 * short: 1. */
static __always_inline int offload_left_ipv6(const __u8 *ip, void *end)
{
	__u8 proto = ip[6];
	const __u8 *l4 = ip + 40;
	__u16 field;
	if (proto == 6) {
		if ((void *)(l4 + 18) > end)
			return 1;
		field = *(const __u16 *)(l4 + 16);
	} else {
		if ((void *)(l4 + 8) > end)
			return 1;
		field = *(const __u16 *)(l4 + 6);
	}
	__u32 sum = (__u32)proto << 8;
#pragma unroll
	for (int k = 8; k < 40; k += 2)
		sum += *(const __u16 *)(ip + k);
	sum += *(const __u16 *)(ip + 4); /* the payload length, as read */
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum == field;
}

/* Where the egress port hands off (its hand-off word, 1 << 32 | the interface index; 0:
 * it takes frames redirected in XDP): room for the metadata, before the frame is touched.
 * 0 when done, -1 when refused (the frame as it was). */
static __always_inline int room(struct xdp_md *ctx, __u64 handoff)
{
	if (handoff && handoff_room(ctx))
		return -1;
	return 0;
}

/* Counts the frame in here and out of `port`, and sends it there (the hand-off, or the
 * device map). */
static __always_inline int send(struct xdp_md *ctx, __u32 port, __u64 handoff)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	count_frame(&stats, cfg.port, 0, end - data);
	count_frame(&stats, port, 1, end - data);
	if (!handoff)
		return bpf_redirect_map(&tx_ports, port, 0);
	if (handoff_write(ctx, handoff))
		return XDP_ABORTED; /* cannot happen: the room made for it is gone */
	struct port_stats *s = PORT_STATS(&stats, port);
	if (s)
		s->handed_off++;
	return XDP_PASS;
}

/* Balances the packet (hash `hash`) to its slot's back-end: tagged with the port's VLAN
 * id (`me`: this port's state word), to the back-end's MAC, counted for it. -1: user
 * space's; else the verdict. */
static __always_inline int balance(struct xdp_md *ctx, void *state, __u64 me, __u32 hash)
{
	__u64 *w = word(state, 0);
	if (!w || !*w)
		return -1; /* no table here */
	long entry = packed(state, SLOT_BASE, hash % *w);
	if (entry < 0 || entry >= MAX_ENTRIES)
		return -1;
	w = word(state, ENTRY_BASE + entry);
	if (!w || !(*w >> 63))
		return -1; /* not served here */
	__u64 backend = *w;
	__u32 port = (backend >> 48) & 0xff;
	__u32 id = (backend >> 56) & 0x7f;
	w = word(state, HANDOFF_BASE + port);
	if (!w)
		return -1;
	__u64 handoff = *w;
	if (room(ctx, handoff))
		return -1;
	/* Tagged (priority 0, as user space tags): the MACs move down four bytes. */
	if (bpf_xdp_adjust_head(ctx, -4))
		return XDP_ABORTED;
	__u8 *p = (void *)(long)ctx->data;
	if ((void *)(p + 18) > (void *)(long)ctx->data_end)
		return XDP_ABORTED;
	__u32 a = *(__u32 *)(p + 4), b = *(__u32 *)(p + 8), c = *(__u32 *)(p + 12);
	*(__u32 *)(p + 4) = b;
	*(__u32 *)(p + 8) = c;
	*(__u32 *)p = a;
	*(__u16 *)(p + 12) = bpf_htons(0x8100);
	*(__u16 *)(p + 14) = bpf_htons((me >> 48) & 0xfff);
	*(__u32 *)p = backend;
	*(__u16 *)(p + 4) = backend >> 32;
	__u64 *n = bpf_map_lookup_elem(&lb_counts, &id);
	if (n)
		(*n)++;
	return send(ctx, port, handoff);
}

/* The access list of external port `port` (acl.h; docs/filters.md): `acl_in` on what comes
 * in there (`out` 0), `acl_out` on what leaves by it (`out` 1), on the packet at `ip` (the
 * checks of ipv4_fast or ipv6_fast passed). 0: permitted (its rule's counters to *slot,
 * ACL_NO_SLOT where no list applies); 1: denied (counted); -1: user space's. */
static __always_inline int lb_filter(const __u8 *ip, void *end, int v6, __u32 port, int out,
				     __u64 len, __u32 *slot)
{
	__u32 k = 0;
	struct acl_state *st = bpf_map_lookup_elem(&acl_state, &k);
	if (!st || !st->gen)
		return 0;
	__u32 gen = st->gen & 3;
	if (gen != 1 && gen != 2)
		return -1;
	k = (gen - 1) * st->nports + port;
	struct acl_port *b = bpf_map_lookup_elem(&acl_ports, &k);
	if (!b)
		return -1;
	__u32 list = out ? b->out : b->in;
	if (!list)
		return 0;
	struct acl_walk w;
	if (acl_key_of(&w.key, ip, end, v6))
		return -1;
	__u32 a = acl_decide(&w, gen, st->epoch, list, slot);
	if (a == ACL_DENY) {
		acl_count(&acl_counts, *slot, len);
		acl_count(&acl_drops, port * 4 + out, len);
		return 1;
	}
	return a == ACL_PERMIT ? 0 : -1;
}

/* Sends the packet tagged with `vid` out of the external port of that VLAN: the tag comes
 * out, the source MAC becomes the port's. -1: user space's; else the verdict. */
static __always_inline int to_external(struct xdp_md *ctx, void *state, __u32 vid, int v6)
{
	long port = packed(state, VLAN_BASE, vid);
	if (port < 0 || port >= MAX_PORTS)
		return -1; /* no external port has it */
	__u32 slot = ACL_NO_SLOT;
	{
		__u8 *d = (void *)(long)ctx->data;
		void *e = (void *)(long)ctx->data_end;
		if ((void *)(d + 18) > e)
			return -1;
		int f = lb_filter(d + 18, e, v6, port, 1, e - (void *)d - 4, &slot);
		if (f)
			return f > 0 ? XDP_DROP : -1;
	}
	__u64 *w = word(state, PORT_BASE + 2 * port);
	if (!w)
		return -1;
	__u64 mac = *w;
	w = word(state, HANDOFF_BASE + port);
	if (!w)
		return -1;
	__u64 handoff = *w;
	if (room(ctx, handoff))
		return -1;
	__u8 *p = (void *)(long)ctx->data;
	if ((void *)(p + 18) > (void *)(long)ctx->data_end)
		return -1;
	__u32 a = *(__u32 *)p, b = *(__u32 *)(p + 4), c = *(__u32 *)(p + 8);
	*(__u32 *)(p + 4) = a;
	*(__u32 *)(p + 8) = b;
	*(__u32 *)(p + 12) = c;
	if (bpf_xdp_adjust_head(ctx, 4))
		return XDP_ABORTED;
	p = (void *)(long)ctx->data;
	if ((void *)(p + 14) > (void *)(long)ctx->data_end)
		return XDP_ABORTED;
	*(__u32 *)(p + 6) = mac;
	*(__u16 *)(p + 10) = mac >> 32;
	if (slot != ACL_NO_SLOT)
		acl_count(&acl_counts, slot, (void *)(long)ctx->data_end - (void *)p);
	return send(ctx, port, handoff);
}

/* The fast part: -1 for user space, else the verdict. */
static __always_inline int fast(struct xdp_md *ctx)
{
	if (cfg.port >= MAX_PORTS)
		return -1; /* beyond the fast path's reach */
	__u8 *p = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if ((void *)(p + 34) > end)
		return -1;
	/* Past the deadline of an LB that handed its fast path over: user space's. */
	__u32 zero = 0;
	__u64 *deadline = bpf_map_lookup_elem(&lb_deadline, &zero);
	if (!deadline || (*deadline && bpf_ktime_get_ns() > *deadline))
		return -1;
	void *state = bpf_map_lookup_elem(&lb_state, &zero);
	if (!state)
		return -1;
	__u64 *w = word(state, PORT_BASE + 2 * cfg.port);
	if (!w)
		return -1;
	__u64 me = *w; /* role << 60 | vlan << 48 | MAC */
	w = word(state, PORT_BASE + 2 * cfg.port + 1);
	if (!w)
		return -1;
	__u32 addr = *w;
	__u16 type = *(__u16 *)(p + 12);
	if (me >> 60 == ROLE_EXTERNAL) {
		/* From outside: balance. */
		if ((cfg.mac & 1) || mac_key(p) != cfg.mac)
			return -1; /* not to our MAC */
		__u8 *ip = p + 14;
		__u32 slot = ACL_NO_SLOT;
		int f, r;
		if (type == bpf_htons(0x86dd)) {
			if ((void *)(ip + 40) > end || !ipv6_fast(ip, end, EXT6))
				return -1;
			if (offload_left_ipv6(ip, end))
				return -1; /* user space fills the checksum in */
			f = lb_filter(ip, end, 1, cfg.port, 0, end - (void *)p, &slot);
			if (f)
				return f > 0 ? XDP_DROP : -1;
			r = balance(ctx, state, me, flow_hash6(ip, end));
			if (r >= 0 && slot != ACL_NO_SLOT)
				acl_count(&acl_counts, slot, end - (void *)p);
			return r;
		}
		if (type != bpf_htons(0x0800) || !ipv4_fast(ip, end, addr, EXT4))
			return -1; /* tagged ones are dropped in user space */
		__u8 d = ip[16];
		if (d >= 224 && (d < 240 || *(__u32 *)(ip + 16) == 0xffffffff))
			return -1; /* multicast, the broadcast */
		__u32 len = bpf_ntohs(*(__u16 *)(ip + 2));
		if (offload_left_ipv4(ip, end, len))
			return -1; /* left to offload, or cut short */
		f = lb_filter(ip, end, 0, cfg.port, 0, end - (void *)p, &slot);
		if (f)
			return f > 0 ? XDP_DROP : -1;
		r = balance(ctx, state, me, flow_hash(ip, end));
		if (r >= 0 && slot != ACL_NO_SLOT)
			acl_count(&acl_counts, slot, end - (void *)p);
		return r;
	}
	if (me >> 60 == ROLE_INTERNAL) {
		/* From inside: out of the external port of the frame's VLAN. */
		if ((void *)(p + 38) > end || type != bpf_htons(0x8100))
			return -1; /* untagged: user space drops it */
		__u16 inner = *(__u16 *)(p + 16);
		__u8 *ip = p + 18;
		int v6 = inner == bpf_htons(0x86dd);
		if (v6) {
			if (!ipv6_fast(ip, end, INT6))
				return -1;
		} else if (inner != bpf_htons(0x0800) || !ipv4_fast(ip, end, addr, INT4)) {
			return -1;
		}
		return to_external(ctx, state, bpf_ntohs(*(__u16 *)(p + 14)) & 0xfff, v6);
	}
	return -1;
}

SEC("xdp")
int tessera_lb(struct xdp_md *ctx)
{
	int r = fast(ctx);
	if (r >= 0)
		return r;
	struct port_stats *s = PORT_STATS(&stats, cfg.port);
	if (s)
		s->to_user_space++;
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
