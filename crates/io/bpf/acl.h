/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The filters of the forwarder's fast path (docs/filters.md): per port, the reverse-path
 * check and access list of what comes in, and the access list of what leaves by it.
 * Included by forward.bpf.c; every function here is inlined.
 *
 * Access lists are a tuple-space search (dataplane::acl::tss says why and how they are
 * compiled): a list is a range of tuples, each a mask over the packet's 44-byte key and
 * the first rule that uses it; one hash lookup per tuple finds the first rule among those
 * of the tuple whose masked values are the packet's. The tuples are walked in the order
 * of their first rule, and the walk stops where a tuple's first rule comes after the best
 * found. Up to ACL_INLINE_TUPLES tuples are walked in line; past that in bpf_loop, so that
 * the verifier checks one tuple, whatever their number.
 *
 * Two generations of lists live side by side: user space writes the one not in use, then
 * flips acl_state's `gen`, so that a packet sees one version of every list.
 *
 * Maps (io::fastpath::acl says their layouts; user space creates them): acl_state (the
 * generation, 0 without filters; the ports; the default route's next-hop group),
 * acl_ports (per generation and port, its lists and reverse-path mode), acl_subifs (per
 * generation, port and VLAN id, a filtering sub-interface's), acl_lists,
 * acl_tuples, acl_rules (the hash of masked keys), acl_counts (per generation and rule,
 * packets and bytes per CPU), acl_drops (per port: denied in, denied out, failed the
 * reverse-path check, per CPU), acl_cache (the last decisions by key, per CPU).
 */
#ifndef TESSERA_ACL_H
#define TESSERA_ACL_H

#define ACL_MAX_LISTS 64
#define ACL_MAX_TUPLES 1024 /* per generation */
#define ACL_MAX_SLOTS 65536 /* counters per generation */
#define ACL_MAX_TUPLES_PER_LIST 256
#define ACL_INLINE_TUPLES 8 /* walked in line up to this many; in bpf_loop past it */

/* The key's flags (dataplane::acl::tss). */
#define ACL_F_V6 1
#define ACL_F_PORTS 4
#define ACL_F_ICMP 8
#define ACL_F_TCP_FLAGS 16

#define ACL_PERMIT 0
#define ACL_DENY 1
#define ACL_REJECT 2

#define URPF_STRICT 1
#define URPF_LOOSE 2
#define URPF_ALLOW_DEFAULT 4

/* acl_port's flags: a sub-interface of the port filters (acl_subifs holds its entry). In
 * a sub-interface's entry, the flags from bit 8 up are the index of its drops in
 * acl_drops (index * 4 + kind). */
#define ACL_PORT_SUBIF 1
#define ACL_DROPS_SHIFT 8

/* acl_subifs' key: the generation (1 or 2), the port and the sub-interface's VLAN id. */
#define ACL_SUBIF_KEY(gen, port, vid) (((gen) << 30) | ((port) << 12) | ((vid) & 0xfff))

#define ACL_NO_SLOT 0xffffffff
/* What filter() leaves in *in_slot for a frame that failed the reverse-path check. */
#define ACL_URPF_SLOT 0xfffffffe

struct acl_state {
	__u32 gen;      /* 1 or 2; 0: no interface filters anything */
	__u32 nports;   /* acl_ports holds nports per generation */
	__u32 default4; /* the IPv4 table's entry of the default route; 0xffffffff: none */
	__u32 epoch;    /* one more at every change of the lists: the decision cache's tag */
};

struct acl_port {
	__u32 in;   /* the list of what comes in, plus 1; 0: none */
	__u32 out;  /* the list of what leaves, plus 1; 0: none */
	__u32 urpf; /* URPF_STRICT or URPF_LOOSE, with URPF_ALLOW_DEFAULT; 0: off */
	__u32 flags;
};

struct acl_list {
	__u32 first; /* the first tuple (acl_tuples' index) */
	__u32 count;
	__u32 dflt;  /* the default's action */
	__u32 dslot; /* the default's counters */
};

struct acl_key {
	__u32 tag; /* the tuple's index */
	__u8 src[16];
	__u8 dst[16];
	__u8 proto;
	__u8 dscp;
	__u8 flags;
	__u8 tcp_flags;
	__u16 sport; /* ICMP: the type */
	__u16 dport; /* ICMP: the code */
};

struct acl_tuple {
	struct acl_key mask;
	__u32 first_rule;
	__u32 all_action; /* with ACL_TUPLE_ALL: the empty mask's rule's action */
	__u32 all_slot;   /* ... and counters */
	__u32 flags;
	__u32 pad;
};

/* An empty mask: the tuple matches every packet (its first rule decides; no lookup), and
 * no tuple after it comes first. */
#define ACL_TUPLE_ALL 1

struct acl_hit {
	__u32 prio;
	__u32 slot;
	__u32 action;
};

struct acl_count {
	__u64 packets;
	__u64 bytes;
};

/* The decision cache (per CPU, direct-mapped, ACL_CACHE_SIZE entries): a list's last
 * decisions by the packet's key, as Open vSwitch's exact-match cache sits before its
 * tuple-space search. An entry holds for the lists' epoch it was made in; any change of
 * the lists makes a new epoch, so a packet never sees a decision of lists gone. */
#define ACL_CACHE_SIZE 4096

struct acl_cached {
	struct acl_key key; /* tag: the list (plus 1) */
	__u32 epoch;        /* 0: empty */
	__u32 slot;
	__u32 action;
	__u32 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct acl_state);
} acl_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct acl_port);
} acl_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct acl_port);
} acl_subifs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * ACL_MAX_LISTS);
	__type(key, __u32);
	__type(value, struct acl_list);
} acl_lists SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * ACL_MAX_TUPLES);
	__type(key, __u32);
	__type(value, struct acl_tuple);
} acl_tuples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct acl_key);
	__type(value, struct acl_hit);
} acl_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * ACL_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct acl_count);
} acl_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, struct acl_count);
} acl_drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ACL_CACHE_SIZE);
	__type(key, __u32);
	__type(value, struct acl_cached);
} acl_cache SEC(".maps");

/* What the walk of one list carries from tuple to tuple. */
struct acl_walk {
	struct acl_key key; /* the packet's */
	struct acl_key m;   /* masked */
	__u32 first;
	__u32 best; /* the best rule's place so far; 0xffffffff: none */
	struct acl_hit hit;
};

static __always_inline long acl_step(__u32 i, struct acl_walk *w)
{
	__u32 k = w->first + i;
	struct acl_tuple *t = bpf_map_lookup_elem(&acl_tuples, &k);
	if (!t || t->first_rule >= w->best)
		return 1; /* the rest come after the best found */
	if (t->flags & ACL_TUPLE_ALL) {
		w->best = t->first_rule;
		w->hit.prio = t->first_rule;
		w->hit.slot = t->all_slot;
		w->hit.action = t->all_action;
		return 1;
	}
	const __u32 *a = (const __u32 *)&w->key;
	const __u32 *b = (const __u32 *)&t->mask;
	__u32 *m = (__u32 *)&w->m;
#pragma unroll
	for (int j = 1; j < 11; j++)
		m[j] = a[j] & b[j];
	m[0] = k;
	struct acl_hit *h = bpf_map_lookup_elem(&acl_rules, &w->m);
	if (h && h->prio < w->best) {
		w->best = h->prio;
		w->hit = *h;
	}
	return 0;
}

/* acl_step as bpf_loop calls it. */
static long acl_tuple_step(__u32 i, void *arg)
{
	return acl_step(i, arg);
}

/* The key of the packet at ip (its header checked by the caller: 20 bytes of IPv4 without
 * options or 40 of IPv6 followed by TCP, UDP or ICMPv6, no fragment). -1 where the header
 * is not there (cannot happen after those checks; the verifier asks). */
static __always_inline int acl_key_of(struct acl_key *k, const __u8 *ip, void *end, int v6)
{
	__builtin_memset(k, 0, sizeof(*k));
	if ((void *)(ip + (v6 ? 40 : 20)) > end)
		return -1;
	const __u8 *l4;
	__u8 icmp;
	if (v6) {
		__builtin_memcpy(k->src, ip + 8, 16);
		__builtin_memcpy(k->dst, ip + 24, 16);
		k->proto = ip[6];
		k->dscp = (((ip[0] & 0xf) << 4) | (ip[1] >> 4)) >> 2;
		k->flags = ACL_F_V6;
		l4 = ip + 40;
		icmp = 58;
	} else {
		__builtin_memcpy(k->src, ip + 12, 4);
		__builtin_memcpy(k->dst, ip + 16, 4);
		k->proto = ip[9];
		k->dscp = ip[1] >> 2;
		l4 = ip + 20;
		icmp = 1;
	}
	__u8 p = k->proto;
	if ((p == 6 || p == 17 || p == 132) && (void *)(l4 + 4) <= end) {
		k->flags |= ACL_F_PORTS;
		k->sport = *(const __u16 *)l4;
		k->dport = *(const __u16 *)(l4 + 2);
		if (p == 6 && (void *)(l4 + 14) <= end) {
			k->flags |= ACL_F_TCP_FLAGS;
			k->tcp_flags = l4[13];
		}
	} else if (p == icmp && (void *)(l4 + 2) <= end) {
		k->flags |= ACL_F_ICMP;
		k->sport = bpf_htons(l4[0]);
		k->dport = bpf_htons(l4[1]);
	}
	return 0;
}

/* The decision cache's entry for list `list`'s decision on key `k`. */
static __always_inline struct acl_cached *acl_cache_entry(const struct acl_key *k, __u32 list)
{
	const __u32 *a = (const __u32 *)k;
	__u32 h = list * 0x9e3779b9;
#pragma unroll
	for (int j = 1; j < 11; j++)
		h = (h ^ a[j]) * 0x85ebca6b;
	__u32 i = (h ^ (h >> 15)) & (ACL_CACHE_SIZE - 1);
	return bpf_map_lookup_elem(&acl_cache, &i);
}

/* Whether entry c holds list `list`'s decision on key k in `epoch`. */
static __always_inline int acl_cache_hit(const struct acl_cached *c, const struct acl_key *k,
					 __u32 list, __u32 epoch)
{
	if (c->epoch != epoch || c->key.tag != list)
		return 0;
	const __u32 *a = (const __u32 *)k;
	const __u32 *b = (const __u32 *)&c->key;
	__u32 d = 0;
#pragma unroll
	for (int j = 1; j < 11; j++)
		d |= a[j] ^ b[j];
	return d == 0;
}

/* List `list` (plus 1) of generation `gen`'s decision on the walk's key (built by the
 * caller; a list of no tuples needs none), from the decision cache where it holds it for
 * the lists' `epoch`, else by the walk (and then kept there): the action, the counters'
 * slot to *slot. */
static __always_inline __u32 acl_decide(struct acl_walk *w, __u32 gen, __u32 epoch, __u32 list,
					__u32 *slot)
{
	struct acl_cached *c = acl_cache_entry(&w->key, list);
	if (c && acl_cache_hit(c, &w->key, list, epoch)) {
		*slot = c->slot;
		return c->action;
	}
	__u32 k = (gen - 1) * ACL_MAX_LISTS + list - 1;
	struct acl_list *l = bpf_map_lookup_elem(&acl_lists, &k);
	if (!l)
		return ACL_REJECT; /* cannot happen: to user space, which decides */
	w->first = l->first;
	w->best = 0xffffffff;
	__u32 n = l->count;
	if (n > ACL_MAX_TUPLES_PER_LIST)
		n = ACL_MAX_TUPLES_PER_LIST;
	if (n <= ACL_INLINE_TUPLES) {
		/* Few tuples (the common case): walked in line, no call per tuple. */
		for (__u32 i = 0; i < ACL_INLINE_TUPLES; i++)
			if (i >= n || acl_step(i, w))
				break;
	} else {
		bpf_loop(n, acl_tuple_step, w, 0);
	}
	__u32 action = l->dflt;
	*slot = l->dslot;
	if (w->best != 0xffffffff) {
		*slot = w->hit.slot;
		action = w->hit.action;
	}
	if (c) {
		c->key = w->key;
		c->key.tag = list;
		c->epoch = epoch;
		c->slot = *slot;
		c->action = action;
	}
	return action;
}

static __always_inline void acl_count(void *map, __u32 k, __u64 len)
{
	struct acl_count *c = bpf_map_lookup_elem(map, &k);
	if (c) {
		c->packets++;
		c->bytes += len;
	}
}
#endif
