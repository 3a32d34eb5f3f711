// SPDX-License-Identifier: GPL-2.0
/*
 * forward: the forwarder's fast path (io::fastpath, docs/fast-path.md), one copy per port:
 * `tessera_fast` in the XDP hook of an AF_XDP port, `tessera_fast_tc` in the tcx ingress
 * hook of an AF_PACKET one.
 *
 * What it does: an unfragmented IPv4 packet without options, to the port's own MAC, of
 * exactly the frame's length, with a valid header checksum and a TTL above 1, whose source
 * and destination are neither martian nor the router's own (nor a connected network's
 * broadcast address), with (in XDP) a TCP or UDP checksum not left to offload, and a route
 * to a single next hop on a port whose MTU it fits (in tcx, a socket buffer of many
 * segments: each segment) and whose neighbour is resolved, gets
 * the neighbour's and the egress port's MACs, its TTL decremented with the RFC 1624
 * checksum update, is counted and leaves by the egress port (XDP: the device map, or the
 * hand-off to tcx, io::handoff, where that port's device takes no frames redirected in
 * XDP; tcx: bpf_redirect). IPv6 likewise (next header TCP, UDP or ICMPv6; hop limit above
 * 1; neither multicast, link-local, ::/8 nor the router's own address at either end).
 * Frames tagged with one of the port's VLAN ids run as untagged ones (XDP: the tag comes
 * off and goes back on the way to user space; tcx: it stays in the socket buffer), and
 * leave tagged with the egress VLAN's id (priority 0) where the route says so.
 * A star member (docs/star.md; XDP, no sub-interfaces) sends packets for another member's
 * network across the star's switch with the star header in front, and takes star frames
 * to it off the switch and out of the port the header names, with no lookup.
 * Everything else goes to the user-space forwarder, which stays the one source of truth:
 * XDP, to the AF_XDP socket of the receive queue; tcx, marked and received again on the
 * port, where the packet socket takes only marked frames. Frames the router itself must
 * answer (its own or a broadcast address, martians, bad checksums, expiring TTLs, no
 * route, unresolved neighbours) go there through a token bucket per port and CPU; the
 * excess is dropped and counted as shed.
 *
 * What it reads: the Ethernet header, the IPv4 or IPv6 header, the TCP or UDP checksum, a
 * star header.
 * Maps (the element's, shared by its ports' programs; io::fastpath says their layouts):
 * fib (the IPv4 table: DIR-24-8 words, next hops, groups), neigh, fib6 (Poptrie6's
 * records), hops6, neigh6, ports (per port: MAC and MTU, interface index and hand-off
 * flag, deadline), tx_ports, stats, police (the token buckets), xsks (this port's AF_XDP
 * sockets, XDP only).
 * Told at load (struct forward_config): the port, its MAC and interface index, the router's
 * addresses, the port's VLAN ids, the slow path's limit, and a star member's facts.
 */
#include "fastpath.h"
#include "acl.h"

/* The IPv4 table's layout (io::fastpath: NH_BASE, NH_SLOTS, TBL8_BASE), its entries that
 * send frames to user space (NO_ROUTE: none; SLOW: the fast path's not to take) and its
 * next-hop word that does (NH_SLOW). */
#define NH_BASE (1u << 22)
#define TBL8_BASE (NH_BASE + (1u << 15))
#define NO_ROUTE 0x7ffe
#define NH_SLOW (1ULL << 63)
/* Poptrie6's layout (fib::v6): dir's entries, the bit that makes one a leaf; no route. */
#define DIR6_BITS 16
#define DIR_LEAF (1u << 31)
#define NO_ROUTE6 0xffff
/* A hops6 entry's flags (io::fastpath: ROUTE6_SLOW, ROUTE6_CONNECTED). */
#define ROUTE6_SLOW 1
#define ROUTE6_CONNECTED 2
/* The mark of a frame left to user space in tcx (io::fastpath::TO_USER_SPACE_MARK). */
#define TO_USER_SPACE_MARK 0x7e550001
/* The star header's versions and lengths (wire::star). */
#define STAR_VERSION 1
#define STAR_HEADER_LEN 12
#define STAR_VERSION6 2
#define STAR_HEADER6_LEN 36
#define ETH_P_STAR 0x88b7
/* tcx's verdict that drops (TCX_DROP of linux/bpf.h from 6.6 on). */
#define TCX_DROP 2

/* struct forward_config's bounds (io::fastpath::program's twins). */
#define MAX_SPECIAL 512
#define MAX_SPECIAL6 128
#define MAX_MEMBERS 128
#define MAX_STAR_PORTS 256
#define MAX_INGRESS6 32

/* forward_config.flags. */
#define F_TAGGED 1    /* next hops may carry a VLAN id */
#define F_IPV6 2      /* IPv6 on */
#define F_STAR 4      /* a star member: frames out of the internal port are special */
#define F_STAR_FAST 8 /* ... and this program does the star's work (XDP, no tags) */
#define F_STAR_IN 16  /* ... on the internal port: star frames come in here */

struct star_member {
	__u32 net; /* host order */
	__u32 mask;
	__u64 mac; /* the member's internal MAC (mac_key) */
	__u32 port; /* the member's port index on the network */
	__u32 pad;
};

struct star_member6 {
	__u8 net[16]; /* network order */
	__u8 mask[16];
	__u64 mac;
	__u32 port;
	__u32 pad;
};

struct star_port {
	__u32 iface; /* the interface index a star header names */
	__u32 port;  /* its fast-path port */
};

struct ingress6 {
	__u8 net[16];
	__u8 mask[16];
	__u8 addr[16];
};

/* Told at load: the one read-only global (io::fastpath::program's ForwardConfig). */
struct forward_config {
	__u64 mac;          /* the port's MAC (mac_key) */
	__u64 police_cost;  /* ns of credit a frame to user space takes; 0: no limit */
	__u64 police_burst; /* the most credit a bucket holds */
	__u32 port;         /* the port this copy runs on */
	__u32 ifindex;      /* its interface index (tcx: where marked frames go again) */
	__u32 flags;
	__u32 nspecial;
	__u32 nspecial6;
	__u32 star_internal; /* the internal port */
	__u32 star_ingress;  /* this port's IPv4 address (host order), for star headers */
	__u32 nmembers;
	__u32 nmembers6;
	__u32 nstar_ports;
	__u32 ningress6;
	__u32 nvlans;
	__u64 vlans[64];             /* a bit per VLAN id of the port's sub-interfaces */
	__u64 special_bits[16];      /* special_hash of every special address, IPv4 and IPv6 */
	__u32 special[MAX_SPECIAL]; /* the router's own and broadcast addresses, as read */
	__u8 special6[MAX_SPECIAL6][16];
	struct star_member members[MAX_MEMBERS]; /* longest prefixes first */
	struct star_member6 members6[MAX_MEMBERS];
	struct star_port star_ports[MAX_STAR_PORTS];
	struct ingress6 ingress6[MAX_INGRESS6];
	__u8 ingress6_else[16];
};

volatile const struct forward_config cfg;

/* A ports entry: the MAC (low 48 bits) and IP MTU (high 16), the interface index (low 32)
 * and hand-off flag (bit 32), the deadline (0: none). */
struct port_entry {
	__u64 word;
	__u64 ifword;
	__u64 deadline;
};

struct hop6 {
	__u8 gw[16];
	__u16 port;
	__u16 vlan;
	__u32 flags;
};

struct neigh6_key {
	__u32 word; /* vlan << 16 | port */
	__u8 addr[16];
};

struct bucket {
	__u64 credit; /* ns */
	__u64 last;   /* the last frame's time */
};

struct fib_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	__uint(max_entries, TBL8_BASE);
	__type(key, __u32);
	__type(value, __u64);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct fib_table);
} fib SEC(".maps");

struct fib6_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64[3]);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct fib6_table);
} fib6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} neigh SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 15);
	__type(key, __u32);
	__type(value, struct hop6);
} hops6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct neigh6_key);
	__type(value, __u64);
} neigh6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct port_entry);
} ports SEC(".maps");

FASTPATH_TX_PORTS;

FASTPATH_STATS;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bucket);
} police SEC(".maps");

FASTPATH_XSKS;

/* What a stage decides: go on, to user space, to user space through the bucket
 * (the router answers it), or give up (a move of the frame's start refused: cannot
 * happen). */
enum { GO_ON, SLOW, POLICE, ABORT, FILTERED, DROPPED /* star_in: dropped, counted */ };

/* Where a packet leaves: the port, the VLAN id (0: untagged), the neighbour (IPv4: the
 * key of neigh; IPv6: of neigh6), the port's entry words. */
struct egress {
	__u32 port;
	__u32 vlan;
	__u32 entry; /* IPv4: the table's next-hop entry */
	__u64 key;
	struct neigh6_key key6;
	__u64 word;
	__u64 ifword;
};

static __always_inline __u16 fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

/* Bits set in x (no popcount instruction in BPF). */
static __always_inline __u64 popcount(__u64 x)
{
	x -= (x >> 1) & 0x5555555555555555ULL;
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (x * 0x0101010101010101ULL) >> 56;
}

static __always_inline void write_mac(__u8 *p, __u64 mac)
{
	*(__u32 *)p = mac;
	*(__u16 *)(p + 4) = mac >> 32;
}

/* A port's VLAN id, one of this port's sub-interfaces'. */
static __always_inline int our_vlan(__u32 vid)
{
	return (cfg.vlans[(vid >> 6) & 63] >> (vid & 63)) & 1;
}

/* A first byte of a martian IPv4 address: 0/8, 127/8, multicast, class E, broadcast. */
static __always_inline int martian(__u8 first)
{
	return first == 0 || first == 127 || first >= 224;
}

/* Where an address's 32-bit word (as read from the frame: an IPv4 address, the last word
 * of an IPv6 one) falls in special_bits (io::fastpath::program's special_hash): a word
 * whose bit is clear is no special address's, and most packets' are, so they skip the
 * list. */
static __always_inline int maybe_special(__u32 w)
{
	__u32 h = (w ^ (w >> 16) ^ (w >> 8)) & 1023;
	return (cfg.special_bits[h >> 6] >> (h & 63)) & 1;
}

/* The IPv4 packet's source or destination (at ip + 12 and ip + 16, as read from the
 * frame) is martian, or one of the router's own or a broadcast address. */
static __always_inline int special4(const __u8 *ip)
{
	if (martian(ip[12]) || martian(ip[16]))
		return 1;
	__u32 src = *(const __u32 *)(ip + 12), dst = *(const __u32 *)(ip + 16);
	if (!maybe_special(src) && !maybe_special(dst))
		return 0;
	/* (The count read once: each read of the configuration is a load.) */
	__u32 n = cfg.nspecial;
	for (__u32 i = 0; i < n && i < MAX_SPECIAL; i++) {
		__u32 a = cfg.special[i];
		if (src == a || dst == a)
			return 1;
	}
	return 0;
}

/* The checks of an IPv4 packet (the 34 bytes of the Ethernet and IPv4 headers checked):
 * plain (version 4 without options, not a fragment), a TTL above 1, exactly `frame` - 14
 * bytes long, a good header checksum, neither end special, and in XDP a TCP or UDP
 * checksum not left to offload. Its length to *len. */
static __always_inline int check_ipv4(__u8 *ip, void *end, __u32 frame, int xdp, __u32 *len)
{
	if (ip[0] != 0x45)
		return SLOW;
	if (*(__u16 *)(ip + 6) & bpf_htons(0x3fff))
		return SLOW; /* a fragment */
	if (ip[8] < 2)
		return POLICE; /* the TTL would expire */
	__u32 total = bpf_ntohs(*(__u16 *)(ip + 2));
	if (frame - 14 != total)
		return SLOW; /* link padding or truncated: user space trims or drops */
	*len = total;
	__u32 sum = 0;
#pragma unroll
	for (int k = 0; k < 20; k += 2)
		sum += *(__u16 *)(ip + k);
	if (fold(sum) != 0xffff)
		return POLICE; /* a bad header checksum */
	if (special4(ip))
		return POLICE;
	if (xdp) {
		int left = offload_left_ipv4(ip, end, total);
		if (left)
			return SLOW; /* cut short, or left to offload */
	}
	return GO_ON;
}

/* The route of IPv4 destination `dst` (host order) in the DIR-24-8 table: its port,
 * VLAN id and neighbour key. */
static __always_inline int route4(__u32 dst, __u32 flags, struct egress *e)
{
	__u32 k = 0;
	void *table = bpf_map_lookup_elem(&fib, &k);
	if (!table)
		return SLOW;
	k = dst >> 10;
	__u64 *w = bpf_map_lookup_elem(table, &k);
	if (!w)
		return SLOW;
	__u32 entry = (*w >> (((dst >> 8) & 3) * 16)) & 0xffff;
	if (entry & 0x8000) {
		/* A group of longer prefixes: 256 entries, four to a word. */
		k = TBL8_BASE + (entry & 0x7fff) * 64 + ((dst & 0xff) >> 2);
		w = bpf_map_lookup_elem(table, &k);
		if (!w)
			return SLOW;
		entry = (*w >> ((dst & 3) * 16)) & 0xffff;
		if (entry & 0x8000)
			return SLOW; /* cannot happen: groups do not nest */
	}
	if (entry == NO_ROUTE)
		return POLICE; /* user space answers */
	e->entry = entry;
	k = NH_BASE + entry;
	w = bpf_map_lookup_elem(table, &k);
	if (!w)
		return SLOW;
	__u64 nh = *w; /* vlan << 48 | port << 32 | gateway, or slow */
	if (nh & NH_SLOW)
		return SLOW;
	e->port = (nh >> 32) & 0xffff;
	e->vlan = nh >> 48;
	if (!(flags & F_TAGGED) && e->vlan)
		return SLOW; /* cannot happen: no VLAN ids in this table */
	__u32 gw = nh;
	e->key = (nh >> 32) << 32 | (gw ? gw : dst);
	return GO_ON;
}

/* The checks of an IPv6 packet (54 bytes checked): version 6, exactly `frame` - 54 bytes
 * of payload, a hop limit above 1, neither end multicast, link-local, in ::/8 nor the
 * router's own, next header ICMPv6, or TCP or UDP (in XDP with a checksum not left to
 * offload). Its length to *len. */
static __always_inline int check_ipv6(__u8 *ip, void *end, __u32 frame, int xdp, __u32 *len)
{
	if ((ip[0] & 0xf0) != 0x60)
		return SLOW;
	__u32 payload = bpf_ntohs(*(__u16 *)(ip + 4));
	if (frame - 54 != payload)
		return SLOW; /* link padding or truncated: user space trims or drops */
	*len = payload + 40;
	if (ip[7] < 2)
		return POLICE; /* the hop limit would expire */
#pragma unroll
	for (int at = 8; at <= 24; at += 16) {
		const __u8 *a = ip + at;
		if (a[0] == 0 || a[0] == 0xff)
			return SLOW; /* ::/8 (unspecified, loopback, mapped), multicast */
		if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
			return SLOW; /* fe80::/10 */
		__u32 n = maybe_special(*(const __u32 *)(a + 12)) ? cfg.nspecial6 : 0;
		for (__u32 i = 0; i < n && i < MAX_SPECIAL6; i++) {
			const volatile __u8 *s = cfg.special6[i];
			if (*(const __u32 *)a == *(const volatile __u32 *)s &&
			    *(const __u32 *)(a + 4) == *(const volatile __u32 *)(s + 4) &&
			    *(const __u32 *)(a + 8) == *(const volatile __u32 *)(s + 8) &&
			    *(const __u32 *)(a + 12) == *(const volatile __u32 *)(s + 12))
				return POLICE; /* one of the router's addresses */
		}
	}
	__u8 proto = ip[6];
	if (proto == 58)
		return GO_ON;
	if (proto != 6 && proto != 17)
		return SLOW; /* an extension header, or another protocol */
	if (!xdp)
		return GO_ON; /* the socket buffer keeps the offload's state */
	/* A TCP or UDP checksum left to offload (the field holds the pseudo-header's sum). */
	const __u8 *l4 = ip + 40;
	__u16 field;
	if (proto == 6) {
		if ((void *)(l4 + 18) > end)
			return SLOW;
		field = *(const __u16 *)(l4 + 16);
	} else {
		if ((void *)(l4 + 8) > end)
			return SLOW;
		field = *(const __u16 *)(l4 + 6);
	}
	__u32 sum = (__u32)proto << 8;
#pragma unroll
	for (int k = 8; k < 40; k += 2)
		sum += *(const __u16 *)(ip + k);
	sum += bpf_htons((__u16)payload);
	return fold(sum) == field ? SLOW : GO_ON;
}

/* The record `i` of an IPv6 table, or NULL. */
static __always_inline __u64 *record(void *table, __u32 i)
{
	return bpf_map_lookup_elem(table, &i);
}

/* The route of the IPv6 destination at `dst` in the table of fib6, as
 * fib::Poptrie6::lookup_raw walks it: dir, the wide quarter and up to four levels below
 * (to bit 64: a connected /64), then the leaf; a prefix that goes on past bit 64 is user
 * space's. Its port, VLAN id and neighbour key. */
static __always_inline int route6(const __u8 *dst, __u32 flags, struct egress *e)
{
	__u64 hi = bpf_be64_to_cpu(*(const __u64 *)dst);
	__u32 zero = 0;
	void *table = bpf_map_lookup_elem(&fib6, &zero);
	if (!table)
		return SLOW;
	__u64 *r = record(table, hi >> 48);
	if (!r)
		return SLOW;
	__u64 leaf = r[0];
	if (!(leaf & DIR_LEAF)) {
		__u32 b = (hi >> 32) & 0xffff;
		__u64 quarter = r[0] + (b >> 6);
		__u32 pos = b & 63;
		int found = 0;
#pragma unroll
		for (int step = 0; step < 5; step++) {
			__u64 *q = record(table, quarter + (1 << DIR6_BITS));
			if (!q)
				return SLOW;
			__u64 v = q[0] << (63 - pos);
			if (!(v >> 63)) {
				/* A leaf, in this quarter: the run it lies in. */
				__u64 n = popcount(q[1] << (63 - pos));
				__u64 at = (q[2] >> 32) + n - 1;
				__u64 *first = record(table, 0);
				if (!first)
					return SLOW;
				r = record(table, first[1] + at);
				if (!r)
					return SLOW;
				leaf = r[0];
				found = 1;
				break;
			}
			if (step == 4)
				return SLOW; /* a child still: past /64, user space's */
			/* A child: its first quarter, then the quarter of the next 8 bits. */
			__u64 child = popcount(v) * 4 + (__u32)q[2] - 4;
			b = (hi >> (24 - 8 * step)) & 0xff;
			quarter = child + (b >> 6);
			pos = b & 63;
		}
		if (!found)
			return SLOW;
	}
	__u32 id = leaf & 0xffff;
	if (id == NO_ROUTE6)
		return POLICE; /* user space answers */
	struct hop6 *h = bpf_map_lookup_elem(&hops6, &id);
	if (!h || (h->flags & ROUTE6_SLOW))
		return SLOW;
	e->port = h->port;
	e->vlan = h->vlan;
	if (!(flags & F_TAGGED) && e->vlan)
		return SLOW; /* cannot happen: no VLAN ids in this table */
	e->key6.word = e->vlan << 16 | e->port;
	__builtin_memcpy(e->key6.addr, h->flags & ROUTE6_CONNECTED ? dst : h->gw, 16);
	return GO_ON;
}

/* The egress port's entry, with `len` bytes to carry (plus `extra` of a header put in
 * front): past its deadline, or over its MTU (0 for a port user space sends on), SLOW. */
static __always_inline int egress_port(struct egress *e, __u32 len, __u32 extra)
{
	__u32 k = e->port;
	struct port_entry *p = bpf_map_lookup_elem(&ports, &k);
	if (!p)
		return SLOW;
	__u64 deadline = p->deadline;
	if (deadline && bpf_ktime_get_ns() > deadline)
		return SLOW; /* an element that handed over and never came back */
	e->word = p->word;
	e->ifword = p->ifword;
	if (len + extra > (e->word >> 48))
		return SLOW; /* larger than the egress MTU */
	return GO_ON;
}

/* The TTL decremented, with the RFC 1624 update of the header checksum the user-space
 * path uses: HC' = ~(~HC + ~m + m'), and with m' = m - 0x100, ~m + m' = 0xfeff. */
static __always_inline void decrement_ttl(__u8 *ip)
{
	ip[8]--;
	__u32 hc = bpf_ntohs(*(__u16 *)(ip + 10));
	*(__u16 *)(ip + 10) = bpf_htons(~fold((hc ^ 0xffff) + 0xfeff) & 0xffff);
}

/* The frame the router answers itself, on its way to user space: through this port's
 * bucket (per CPU), which holds a tenth of a second's worth of frames; 1 when it is shed
 * (counted, with `len` bytes), 0 when it goes on. */
static __always_inline int shed(__u64 len)
{
	if (!cfg.police_cost)
		return 0;
	__u32 k = cfg.port;
	struct bucket *b = bpf_map_lookup_elem(&police, &k);
	if (!b)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 credit = b->credit + (now - b->last);
	b->last = now;
	if (credit >= cfg.police_burst)
		credit = cfg.police_burst;
	if (cfg.police_cost > credit) {
		b->credit = credit;
		struct port_stats *s = PORT_STATS(&stats, cfg.port);
		if (s) {
			s->shed++;
			s->shed_bytes += len;
		}
		return 1;
	}
	b->credit = credit - cfg.police_cost;
	return 0;
}

static __always_inline void count_to_user_space(void)
{
	struct port_stats *s = PORT_STATS(&stats, cfg.port);
	if (s)
		s->to_user_space++;
}

/* The frame at p (34 bytes checked) to the port's MAC `own`: an IPv4 or (with F_IPV6) an
 * IPv6 packet the fast path takes, and its route: the egress to *e, the packet's length
 * to *len, the family to *v6. `frame`: the frame's length; `xdp`: the XDP hook's checks. */
static __always_inline int route(__u8 *p, void *end, __u32 frame, int xdp, __u32 flags,
				 __u64 own, struct egress *e, __u32 *len, int *v6)
{
	if (mac_key(p) != (own & 0xffffffffffffULL))
		return SLOW; /* not to the port's MAC */
	__u16 type = *(__u16 *)(p + 12);
	int r;
	if (type == bpf_htons(0x86dd) && (flags & F_IPV6)) {
		if ((void *)(p + 54) > end)
			return SLOW;
		*v6 = 1;
		r = check_ipv6(p + 14, end, frame, xdp, len);
		return r == GO_ON ? route6(p + 38, flags, e) : r;
	}
	if (type != bpf_htons(0x0800))
		return SLOW;
	r = check_ipv4(p + 14, end, frame, xdp, len);
	return r == GO_ON ? route4(bpf_ntohl(*(__u32 *)(p + 30)), flags, e) : r;
}

/* The neighbour's MAC of the egress `e` (its family's map), or NULL: not resolved. */
static __always_inline __u64 *neighbour(struct egress *e, int v6)
{
	return v6 ? bpf_map_lookup_elem(&neigh6, &e->key6) : bpf_map_lookup_elem(&neigh, &e->key);
}

/* The frame from data to end rewritten for the egress `e`: the neighbour's MAC `to` and
 * the port's, the TTL or hop limit decremented. -1 where the headers are not there
 * (cannot happen: checked before the frame moved). */
static __always_inline int rewrite(void *data, void *end, struct egress *e, __u64 to, int v6)
{
	__u8 *p = data;
	if (data + 54 > end)
		if (v6 || data + 34 > end)
			return -1;
	write_mac(p, to);
	write_mac(p + 6, e->word);
	if (v6)
		p[21]--;
	else
		decrement_ttl(p + 14);
	return 0;
}

/* ---- Filters (acl.h) ---- */

/* Counts a drop of kind `kind` (0: denied in, 1: denied out, 2: failed the strict
 * reverse-path check, 3: the loose one) on port `port`. */
static __always_inline void acl_drop(__u32 port, __u32 kind, __u64 len)
{
	acl_count(&acl_drops, port * 4 + kind, len);
}

/* The reverse-path check (`mode`) of the packet at p that came in on this port, on its
 * sub-interface of VLAN `vid` (0: untagged), its drops counted at `drops`: GO_ON,
 * FILTERED (counted) or SLOW (user space decides: a source routed over ECMP, an IPv6 one
 * under a loose check that does not count the default route). */
static __always_inline int urpf(__u8 *p, int v6, __u32 mode, struct acl_state *st,
				__u32 flags, __u64 len, __u32 vid, __u32 drops)
{
	struct egress s = {};
	int r = v6 ? route6(p + 22, flags, &s) : route4(bpf_ntohl(*(__u32 *)(p + 26)), flags, &s);
	__u32 kind = (mode & URPF_STRICT) ? 2 : 3;
	if (r == POLICE) {
		acl_drop(drops, kind, len); /* no route to the source */
		return FILTERED;
	}
	if (r != GO_ON)
		return SLOW;
	int ok;
	if (mode & URPF_STRICT)
		ok = s.port == cfg.port && s.vlan == vid;
	else if (mode & URPF_ALLOW_DEFAULT)
		ok = 1;
	else if (v6)
		return SLOW;
	else
		ok = s.entry != st->default4;
	if (ok)
		return GO_ON;
	acl_drop(drops, kind, len);
	return FILTERED;
}

/* The lists that permitted a frame of `len` bytes, counted as it leaves. */
static __always_inline void count_permits(__u32 in_slot, __u32 out_slot, __u64 len)
{
	if (in_slot != ACL_NO_SLOT)
		acl_count(&acl_counts, in_slot, len);
	if (out_slot != ACL_NO_SLOT)
		acl_count(&acl_counts, out_slot, len);
}

/* The entry of a sub-interface of a port whose sub-interfaces filter: of port `port`,
 * VLAN `vid`, generation `gen` (NULL: none written; user space decides). */
static __always_inline struct acl_port *subif(__u32 gen, __u32 port, __u32 vid)
{
	__u32 k = ACL_SUBIF_KEY(gen, port, vid);
	return bpf_map_lookup_elem(&acl_subifs, &k);
}

/* The filters of the packet at p (route() took it) that came in on this port (`vid_in`:
 * on its sub-interface of that VLAN; 0: untagged) and leaves by `e`: GO_ON with the
 * counters' slots of the lists that permitted it in *in_slot and *out_slot (ACL_NO_SLOT:
 * none), FILTERED (denied, or failed the reverse-path check: counted; *in_slot is then
 * ACL_URPF_SLOT), POLICE (rejected:
 * user space answers, rate limited), SLOW (user space decides). */
static __always_inline int filter(__u8 *p, void *end, int v6, __u32 vid_in, struct egress *e,
				  __u32 flags, __u64 len, __u32 *in_slot, __u32 *out_slot)
{
	__u32 k = 0;
	struct acl_state *st = bpf_map_lookup_elem(&acl_state, &k);
	if (!st || !st->gen)
		return GO_ON;
	__u32 gen = st->gen & 3;
	if (gen != 1 && gen != 2)
		return SLOW;
	__u32 base = (gen - 1) * st->nports;
	k = base + cfg.port;
	struct acl_port *in = bpf_map_lookup_elem(&acl_ports, &k);
	k = base + e->port;
	struct acl_port *out = bpf_map_lookup_elem(&acl_ports, &k);
	if (!in || !out)
		return SLOW;
	__u32 in_list = in->in, mode = in->urpf, out_list = out->out;
	__u32 in_drops = cfg.port, out_drops = e->port;
	if (vid_in) {
		in_list = 0;
		mode = 0;
		if (in->flags & ACL_PORT_SUBIF) {
			struct acl_port *s = subif(gen, cfg.port, vid_in);
			if (!s)
				return SLOW;
			in_list = s->in;
			mode = s->urpf;
			in_drops = s->flags >> ACL_DROPS_SHIFT;
		}
	}
	if (e->vlan) {
		out_list = 0;
		if (out->flags & ACL_PORT_SUBIF) {
			struct acl_port *s = subif(gen, e->port, e->vlan);
			if (!s)
				return SLOW;
			out_list = s->out;
			out_drops = s->flags >> ACL_DROPS_SHIFT;
		}
	}
	if (mode) {
		int r = urpf(p, v6, mode, st, flags, len, vid_in, in_drops);
		if (r == FILTERED)
			*in_slot = ACL_URPF_SLOT; /* says why, to the flow sample */
		if (r != GO_ON)
			return r;
	}
	if (!in_list && !out_list)
		return GO_ON;
	struct acl_walk w;
	if (acl_key_of(&w.key, p + 14, end, v6))
		return SLOW;
	if (in_list) {
		__u32 a = acl_decide(&w, gen, st->epoch, in_list, in_slot);
		if (a == ACL_REJECT)
			return POLICE;
		if (a == ACL_DENY) {
			acl_count(&acl_counts, *in_slot, len);
			acl_drop(in_drops, 0, len);
			return FILTERED;
		}
	}
	if (out_list) {
		__u32 a = acl_decide(&w, gen, st->epoch, out_list, out_slot);
		if (a == ACL_REJECT)
			return POLICE;
		if (a == ACL_DENY) {
			count_permits(*in_slot, *out_slot, len); /* in: permitted; out: denied */
			acl_drop(out_drops, 1, len);
			return FILTERED;
		}
	}
	return GO_ON;
}

/* The access list of what leaves by `e` only, for a packet at `ip` that another star
 * member looked up and filtered in (`len`: the frame's bytes as it leaves): GO_ON with
 * the counters' slot of the list that permits it in *out_slot (ACL_NO_SLOT: none),
 * FILTERED (denied: counted) or SLOW (user space decides: rejected, or a key it cannot
 * read). */
static __always_inline int filter_out(__u8 *ip, void *end, int v6, struct egress *e,
				      __u64 len, __u32 *out_slot)
{
	__u32 k = 0;
	struct acl_state *st = bpf_map_lookup_elem(&acl_state, &k);
	if (!st || !st->gen)
		return GO_ON;
	__u32 gen = st->gen & 3;
	if (gen != 1 && gen != 2)
		return SLOW;
	k = (gen - 1) * st->nports + e->port;
	struct acl_port *out = bpf_map_lookup_elem(&acl_ports, &k);
	if (!out)
		return SLOW;
	if (!out->out)
		return GO_ON;
	struct acl_walk w;
	if (acl_key_of(&w.key, ip, end, v6))
		return SLOW;
	__u32 a = acl_decide(&w, gen, st->epoch, out->out, out_slot);
	if (a == ACL_REJECT)
		return SLOW;
	if (a == ACL_DENY) {
		acl_count(&acl_counts, *out_slot, len);
		acl_drop(e->port, 1, len);
		return FILTERED;
	}
	return GO_ON;
}

/* ---- Flow sampling (docs/flows.md) ---- */

/* flow_cfg: 1 in `interval` frames sampled (0: off), written by user space, with
 * `below` = 2^32 / interval: a frame is sampled where a random 32-bit number falls below
 * it (a compare per frame, not a division). */
struct flow_cfg {
	__u32 interval;
	__u32 below;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flow_cfg);
} flow_cfg SEC(".maps");

/* The samples, to user space's flow cache (io::fastpath::flows reads them). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} flow_samples SEC(".maps");

/* Samples the ring buffer had no room for, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} flow_lost SEC(".maps");

/* One sample: the packet's key (as the filters build it), where it came in and went out
 * (port and VLAN id; out_port 0xffffffff: it did not leave), its bytes (the IP packet's
 * length and an Ethernet header's), the next
 * hop, its IPFIX forwardingStatus and the interval it was sampled at. */
struct flow_sample {
	struct acl_key key;
	__u32 in_port;
	__u32 in_vlan;
	__u32 out_port;
	__u32 out_vlan;
	__u32 len;
	__u32 interval;
	__u8 next_hop[16];
	__u8 status;
	__u8 pad[3];
};

/* forwardingStatus (RFC 7270; wire::ipfix::status). */
#define FLOW_FORWARDED 64
#define FLOW_DROPPED_ACL_DENY 129
#define FLOW_DROPPED_RPF 140

/* Samples the packet at `ip` (1 in the interval, at random): in on this port's VLAN
 * `vid_in`, out by `e` (NULL: dropped). */
static __always_inline void flow_sample(const __u8 *ip, void *end, int v6, __u32 vid_in,
					 struct egress *e, __u8 status)
{
	__u32 k = 0;
	struct flow_cfg *c = bpf_map_lookup_elem(&flow_cfg, &k);
	if (!c || !c->interval)
		return;
	__u32 n = c->interval;
	if (n > 1 && bpf_get_prandom_u32() >= c->below)
		return;
	struct flow_sample *s = bpf_ringbuf_reserve(&flow_samples, sizeof(*s), 0);
	if (!s) {
		__u64 *lost = bpf_map_lookup_elem(&flow_lost, &k);
		if (lost)
			*lost += 1;
		return;
	}
	if (acl_key_of(&s->key, ip, end, v6) || (void *)(ip + 6) > end) {
		bpf_ringbuf_discard(s, 0);
		return;
	}
	s->in_port = cfg.port;
	s->in_vlan = vid_in;
	/* The packet's length as its header says, with an Ethernet header: a frame the
	 * kernel merged (GRO) counts whole, not its first buffer alone. */
	s->len = 14 + (v6 ? 40 + bpf_ntohs(*(__u16 *)(ip + 4)) : bpf_ntohs(*(__u16 *)(ip + 2)));
	s->interval = n;
	s->status = status;
	__builtin_memset(s->next_hop, 0, 16);
	if (e) {
		s->out_port = e->port;
		s->out_vlan = e->vlan;
		if (v6) {
			__builtin_memcpy(s->next_hop, e->key6.addr, 16);
		} else {
			__u32 gw = bpf_htonl((__u32)e->key);
			__builtin_memcpy(s->next_hop, &gw, 4);
		}
	} else {
		s->out_port = 0xffffffff;
		s->out_vlan = 0;
	}
	bpf_ringbuf_submit(s, 0);
}

/* ---- XDP ---- */

/* Puts an 802.1Q tag with control information `tci` (network order) in front of the
 * frame: 0, or -1 where the kernel refuses the room. */
static __always_inline int push_tag(struct xdp_md *ctx, __u16 tci)
{
	if (bpf_xdp_adjust_head(ctx, -4))
		return -1;
	__u8 *p = (void *)(long)ctx->data;
	if ((void *)(p + 18) > (void *)(long)ctx->data_end)
		return -1;
	__u32 a = *(__u32 *)(p + 4), b = *(__u32 *)(p + 8), c = *(__u32 *)(p + 12);
	*(__u32 *)p = a;
	*(__u32 *)(p + 4) = b;
	*(__u32 *)(p + 8) = c;
	*(__u16 *)(p + 12) = bpf_htons(0x8100);
	*(__u16 *)(p + 14) = tci;
	return 0;
}

/* To the AF_XDP socket of the frame's receive queue, with the tag it came with back on
 * (`tag_in`: 1 << 16 | its control information as read; 0: untagged). */
static __always_inline int xdp_slow(struct xdp_md *ctx, __u32 tag_in)
{
	count_to_user_space();
	if (tag_in && push_tag(ctx, tag_in))
		return XDP_ABORTED;
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

/* Sends the frame out of `port` (counted): through the hand-off to tcx where that port
 * takes no frames redirected in XDP (`ifword`), else the device map. */
static __always_inline int xdp_out(struct xdp_md *ctx, __u32 port, __u64 ifword)
{
	if (!(ifword >> 32))
		return bpf_redirect_map(&tx_ports, port, 0);
	if (handoff_write(ctx, ifword))
		return XDP_DROP; /* cannot happen: the room made for it is gone */
	struct port_stats *s = PORT_STATS(&stats, port);
	if (s)
		s->handed_off++;
	return XDP_PASS;
}

/* Counts the frame out of `port` and sends it there (xdp_out). */
static __always_inline int xdp_send(struct xdp_md *ctx, __u32 port, __u64 ifword)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	count_frame(&stats, port, 1, end - data);
	return xdp_out(ctx, port, ifword);
}

/* Where the egress port takes no frames redirected in XDP: room for the hand-off's
 * metadata, before the frame is touched (refused: SLOW, the frame as it was). */
static __always_inline int xdp_room(struct xdp_md *ctx, __u64 ifword)
{
	if ((ifword >> 32) && handoff_room(ctx))
		return SLOW;
	return GO_ON;
}

/* The star member `e->key`'s next hop (host order) lies in: its MAC and port, or SLOW. */
static __always_inline int star_member(__u32 nh, __u64 *mac, __u32 *port)
{
	for (__u32 i = 0; i < cfg.nmembers && i < MAX_MEMBERS; i++) {
		if ((nh & cfg.members[i].mask) == cfg.members[i].net) {
			*mac = cfg.members[i].mac;
			*port = cfg.members[i].port;
			return GO_ON;
		}
	}
	return SLOW;
}

/* `a` (16 bytes, network order) masked with `mask` is `net`. */
static __always_inline int masked_eq(const __u8 *a, const volatile __u8 *net,
				     const volatile __u8 *mask)
{
#pragma unroll
	for (int w = 0; w < 16; w += 4) {
		__u32 m = *(const volatile __u32 *)(mask + w);
		if ((*(const __u32 *)(a + w) & m) != *(const volatile __u32 *)(net + w))
			return 0;
	}
	return 1;
}

static __always_inline int star_member6(const __u8 *nh, __u64 *mac, __u32 *port)
{
	for (__u32 i = 0; i < cfg.nmembers6 && i < MAX_MEMBERS; i++) {
		if (masked_eq(nh, cfg.members6[i].net, cfg.members6[i].mask)) {
			*mac = cfg.members6[i].mac;
			*port = cfg.members6[i].port;
			return GO_ON;
		}
	}
	return SLOW;
}

/* The fast-path port of the interface a star header names (not the internal one). */
static __always_inline int star_port(__u32 iface, __u32 *port)
{
	for (__u32 i = 0; i < cfg.nstar_ports && i < MAX_STAR_PORTS; i++) {
		if (cfg.star_ports[i].iface == iface) {
			*port = cfg.star_ports[i].port;
			return GO_ON;
		}
	}
	return SLOW;
}

/* An Ethernet header at p: to `to`, from `from`, EtherType `type`. */
static __always_inline void ethernet(__u8 *p, __u64 to, __u64 from, __u16 type)
{
	write_mac(p, to);
	write_mac(p + 6, from);
	*(__u16 *)(p + 12) = bpf_htons(type);
}

/* A star member's packet for another member's network (egress: the internal port; its
 * neighbour key holds the next hop): the member whose network holds the next hop, the
 * internal port's MTU less the header, then the TTL or hop limit decremented, the star
 * header (the member's port, the next hop, the address this packet entered by) and an
 * Ethernet header to the member in front, out of the internal port. */
static __always_inline int star_out(struct xdp_md *ctx, struct egress *e, __u32 len, int v6,
				    __u32 vid_in)
{
	__u64 mac;
	__u32 member;
	int r = v6 ? star_member6(e->key6.addr, &mac, &member) : star_member(e->key, &mac, &member);
	if (r != GO_ON)
		return r;
	__u32 header = v6 ? STAR_HEADER6_LEN : STAR_HEADER_LEN;
	if (egress_port(e, len, header) != GO_ON || xdp_room(ctx, e->ifword) != GO_ON)
		return SLOW;
	__u8 *p = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if ((void *)(p + 54) > end)
		if (v6 || (void *)(p + 34) > end)
			return SLOW;
	/* The ingress address (IPv6): of this port's interface, the first whose network holds
	 * the source, else the fallback. */
	__u32 ingress[4];
	if (v6) {
		const volatile __u8 *from = cfg.ingress6_else;
		for (__u32 i = 0; i < cfg.ningress6 && i < MAX_INGRESS6; i++) {
			if (masked_eq(p + 22, cfg.ingress6[i].net, cfg.ingress6[i].mask)) {
				from = cfg.ingress6[i].addr;
				break;
			}
		}
		/* (Read as volatile: the configuration is set at load, not the zeros clang
		 * sees.) */
#pragma unroll
		for (int w = 0; w < 4; w++)
			ingress[w] = *(const volatile __u32 *)(from + 4 * w);
		p[21]--;
	} else {
		decrement_ttl(p + 14);
	}
	count_frame(&stats, cfg.port, 0, end - (void *)p);
	/* Sampled here, where it entered the star, out by the internal port (as user space
	 * samples it); the member it leaves by does not sample it again. */
	flow_sample(p + 14, end, v6, vid_in, e, FLOW_FORWARDED);
	if (bpf_xdp_adjust_head(ctx, -(int)header))
		return ABORT;
	p = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if ((void *)(p + 14 + STAR_HEADER6_LEN) > end)
		if (v6 || (void *)(p + 14 + STAR_HEADER_LEN) > end)
			return ABORT;
	ethernet(p, mac, e->word, ETH_P_STAR);
	p[14] = v6 ? STAR_VERSION6 : STAR_VERSION;
	p[15] = member;
	*(__u16 *)(p + 16) = 0;
	if (v6) {
		if ((void *)(p + 50) > end)
			return ABORT;
		__builtin_memcpy(p + 18, e->key6.addr, 16);
		__builtin_memcpy(p + 34, ingress, 16);
	} else {
		if ((void *)(p + 26) > end)
			return ABORT;
		*(__u32 *)(p + 18) = bpf_htonl((__u32)e->key);
		*(__u32 *)(p + 22) = bpf_htonl(cfg.star_ingress);
	}
	return xdp_send(ctx, e->port, e->ifword);
}

/* A star frame to this member on the internal port (to the port's MAC): a port of this
 * forwarder, an IPv4 (version 1) or IPv6 (version 2) packet of exactly the rest of the
 * frame that fits that port's MTU, a resolved neighbour for the next hop the header
 * names. The header comes off, the MACs are the neighbour's and the port's, and the
 * packet leaves with no lookup and no TTL or hop-limit decrement (the member where it
 * entered did both). Anything else is user space's, as it came. */
static __always_inline int star_in(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if ((void *)(p + 14 + STAR_HEADER_LEN + 20) > end)
		return SLOW;
	int v6 = 0;
	if (p[14] == STAR_VERSION6 && (cfg.flags & F_IPV6))
		v6 = 1;
	else if (p[14] != STAR_VERSION)
		return SLOW;
	__u32 header = v6 ? STAR_HEADER6_LEN : STAR_HEADER_LEN;
	if (v6 && (void *)(p + 14 + STAR_HEADER6_LEN + 40) > end)
		return SLOW;
	struct egress e = {};
	if (star_port(p[15], &e.port) != GO_ON)
		return SLOW;
	__u8 *ip = p + 14 + header;
	__u32 len;
	if (v6) {
		if ((ip[0] & 0xf0) != 0x60)
			return SLOW;
		len = bpf_ntohs(*(__u16 *)(ip + 4)) + 40;
	} else {
		if (ip[0] != 0x45)
			return SLOW;
		len = bpf_ntohs(*(__u16 *)(ip + 2));
	}
	if ((__u64)(end - (void *)ip) != len)
		return SLOW; /* padding or truncated */
	if (v6) {
		e.key6.word = e.port;
		__builtin_memcpy(e.key6.addr, p + 18, 16);
	} else {
		e.key = (__u64)e.port << 32 | bpf_ntohl(*(__u32 *)(p + 18));
	}
	if (egress_port(&e, len, 0) != GO_ON || xdp_room(ctx, e.ifword) != GO_ON)
		return SLOW; /* fragments, an ICMP error: user space's */
	/* The egress port's acl_out, here where the port is (the frame read again: making
	 * room may have moved it). */
	__u32 out_slot = ACL_NO_SLOT;
	p = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	int r = filter_out(p + 14 + header, end, v6, &e, len + 14, &out_slot);
	if (r == FILTERED)
		return DROPPED;
	if (r != GO_ON)
		return SLOW;
	__u64 *mac = neighbour(&e, v6);
	if (!mac)
		return SLOW; /* not resolved: user space asks */
	__u64 to = *mac;
	p = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if ((void *)(p + 14 + STAR_HEADER6_LEN) > end)
		if (v6 || (void *)(p + 14 + STAR_HEADER_LEN) > end)
			return SLOW;
	count_frame(&stats, cfg.port, 0, end - (void *)p);
	/* The star header off: the Ethernet header is written just before the packet, and the
	 * frame starts there. */
	if (v6)
		ethernet(p + STAR_HEADER6_LEN, to, e.word, 0x86dd);
	else
		ethernet(p + STAR_HEADER_LEN, to, e.word, 0x0800);
	if (bpf_xdp_adjust_head(ctx, header))
		return ABORT;
	count_permits(ACL_NO_SLOT, out_slot, len + 14);
	return xdp_send(ctx, e.port, e.ifword);
}

SEC("xdp")
int tessera_fast(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 tag_in = 0; /* 1 << 16 | the tag's control information as read; 0: untagged */
	__u32 len = 0;
	struct egress e; /* (each path writes what it reads) */
	int r;
	__u8 *p = data;
	/* The configuration's words this path reads, each read once (a read is a load). */
	const __u32 flags = cfg.flags;
	const __u64 own = cfg.mac; /* the port's MAC */
	if (cfg.nvlans) {
		/* Tagged with one of the port's VLAN ids: the tag comes out (the MACs move up
		 * four bytes, the frame starts four later), and the frame runs as an untagged
		 * one; on its way to user space it gets the tag back. */
		if (data + 18 > end)
			goto slow;
		if (*(__u16 *)(p + 12) == bpf_htons(0x8100)) {
			__u16 tci = *(__u16 *)(p + 14);
			if (!our_vlan(bpf_ntohs(tci) & 0xfff))
				goto slow;
			__u32 a = *(__u32 *)p, b = *(__u32 *)(p + 4), c = *(__u32 *)(p + 8);
			*(__u32 *)(p + 4) = a;
			*(__u32 *)(p + 8) = b;
			*(__u32 *)(p + 12) = c;
			if (bpf_xdp_adjust_head(ctx, 4))
				return XDP_ABORTED;
			tag_in = 0x10000 | tci;
			data = (void *)(long)ctx->data;
			end = (void *)(long)ctx->data_end;
			p = data;
		}
	}
	if (data + 34 > end)
		goto slow;
	int v6 = 0;
	if (*(__u16 *)(p + 12) == bpf_htons(ETH_P_STAR) && (flags & F_STAR_IN) &&
	    mac_key(p) == (own & 0xffffffffffffULL)) {
		r = star_in(ctx);
		if (r == ABORT)
			return XDP_ABORTED;
		if (r == SLOW)
			goto slow;
		if (r == DROPPED)
			return XDP_DROP;
		return r;
	}
	r = route(p, end, end - data, 1, flags, own, &e, &len, &v6);
	if (r == POLICE)
		goto police;
	if (r != GO_ON)
		goto slow;
	__u32 in_slot = ACL_NO_SLOT, out_slot = ACL_NO_SLOT;
	__u32 vid_in = tag_in ? bpf_ntohs(tag_in & 0xffff) & 0xfff : 0;
	r = filter(p, end, v6, vid_in, &e, flags, end - data, &in_slot, &out_slot);
	if (r == FILTERED) {
		flow_sample(p + 14, end, v6, vid_in, NULL,
			    in_slot == ACL_URPF_SLOT ? FLOW_DROPPED_RPF : FLOW_DROPPED_ACL_DENY);
		return XDP_DROP;
	}
	if (r == POLICE)
		goto police;
	if (r != GO_ON)
		goto slow;
	if ((flags & F_STAR) && e.port == cfg.star_internal) {
		/* Across the star's switch. */
		if (!(flags & F_STAR_FAST))
			goto slow;
		r = star_out(ctx, &e, len, v6, vid_in);
		if (r == ABORT)
			return XDP_ABORTED;
		if (r == SLOW)
			goto slow;
		return r;
	}
	if (egress_port(&e, len, 0) != GO_ON || xdp_room(ctx, e.ifword) != GO_ON)
		goto slow;
	__u64 *mac = neighbour(&e, v6);
	if (!mac)
		goto police; /* not resolved: user space asks */
	__u64 to = *mac;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (rewrite(data, end, &e, to, v6))
		goto slow;
	flow_sample(data + 14, end, v6, vid_in, &e, FLOW_FORWARDED);
	count_permits(in_slot, out_slot, end - data);
	count_frame(&stats, cfg.port, 0, end - data);
	count_frame(&stats, e.port, 1, end - data);
	/* Out of a sub-interface: its tag goes in (priority 0, as user space tags). */
	if (e.vlan && push_tag(ctx, bpf_htons(e.vlan)))
		return XDP_ABORTED;
	return xdp_out(ctx, e.port, e.ifword);
police:
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (shed(end - data))
		return XDP_DROP;
slow:
	return xdp_slow(ctx, tag_in);
}

/* ---- tcx ---- */

SEC("tcx/ingress")
int tessera_fast_tc(struct __sk_buff *skb)
{
	__u32 len = 0;
	struct egress e = {};
	int r;
	const __u32 flags = cfg.flags;
	const __u64 own = cfg.mac; /* the port's MAC */
	if (skb->mark == TO_USER_SPACE_MARK)
		return TCX_DROP; /* left to user space by this program, back for the socket */
	/* A frame's 802.1Q tag is not in the bytes the program reads: the kernel takes it out
	 * into the socket buffer before tcx. One of the port's VLAN ids: on as an untagged
	 * frame, the tag staying in the socket buffer until the frame leaves or goes to user
	 * space with it; any other tag is user space's. */
	int tagged_in = 0;
	__u32 vid_in = 0;
	if (skb->vlan_present) {
		if (!cfg.nvlans || skb->vlan_proto != bpf_htons(0x8100) ||
		    !our_vlan(skb->vlan_tci & 0xfff))
			goto slow;
		tagged_in = 1;
		vid_in = skb->vlan_tci & 0xfff;
	}
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	if (data + 54 > end) {
		/* The headers made linear where the program reads them (a frame sent from a
		 * ring may have little more than its Ethernet header there). */
		bpf_skb_pull_data(skb, 54);
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}
	if (data + 34 > end)
		goto slow;
	int v6 = 0;
	r = route(data, end, skb->len, 0, flags, own, &e, &len, &v6);
	if (r == POLICE)
		goto police;
	if (r != GO_ON)
		goto slow;
	__u32 in_slot = ACL_NO_SLOT, out_slot = ACL_NO_SLOT;
	r = filter(data, end, v6, vid_in, &e, flags, skb->len, &in_slot, &out_slot);
	if (r == FILTERED) {
		flow_sample(data + 14, end, v6, vid_in, NULL,
			    in_slot == ACL_URPF_SLOT ? FLOW_DROPPED_RPF : FLOW_DROPPED_ACL_DENY);
		return TCX_DROP;
	}
	if (r == POLICE)
		goto police;
	if (r != GO_ON)
		goto slow;
	if ((flags & F_STAR) && e.port == cfg.star_internal)
		goto slow; /* across the star's switch: user space's in tcx */
	if (skb->gso_size) {
		/* A socket buffer of many segments (a TCP or UDP send from a host whose veth
		 * segments late, as a new veth and a container's do), cut into frames as it
		 * leaves: each segment must fit the egress device's MTU, which the kernel checks
		 * (BPF_MTU_CHK_SEGS), not the whole. User space could not take it (larger than
		 * a frame of its ring). */
		if (egress_port(&e, 0, 0) != GO_ON)
			goto slow;
		__u32 mtu_len = 0;
		if (bpf_check_mtu(skb, (__u32)e.ifword, &mtu_len, 0, BPF_MTU_CHK_SEGS))
			goto slow;
	} else if (egress_port(&e, len, 0) != GO_ON) {
		goto slow;
	}
	__u64 *mac = neighbour(&e, v6);
	if (!mac)
		goto police;
	__u64 to = *mac;
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	if (rewrite(data, end, &e, to, v6))
		goto slow;
	flow_sample(data + 14, end, v6, vid_in, &e, FLOW_FORWARDED);
	count_permits(in_slot, out_slot, skb->len);
	count_frame(&stats, cfg.port, 0, skb->len);
	count_frame(&stats, e.port, 1, skb->len);
	/* The frame leaves with the egress VLAN's tag in its socket buffer, as a driver that
	 * inserts tags takes it: the tag it came with off, the egress one on (priority 0). */
	if (tagged_in && bpf_skb_vlan_pop(skb))
		return TCX_DROP; /* for want of memory */
	if (e.vlan && bpf_skb_vlan_push(skb, bpf_htons(0x8100), e.vlan))
		return TCX_DROP;
	if (e.ifword & PORT_PEER) /* a veth whose peer lives elsewhere: into its ingress */
		return bpf_redirect_peer((__u32)e.ifword, 0);
	return bpf_redirect((__u32)e.ifword, 0);
police:
	if (shed(skb->len))
		return TCX_DROP;
slow:
	count_to_user_space();
	skb->mark = TO_USER_SPACE_MARK;
	return bpf_redirect(cfg.ifindex, BPF_F_INGRESS);
}

char LICENSE[] SEC("license") = "GPL";
