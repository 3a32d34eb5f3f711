/*
 * DPDK's rte_lpm and rte_fib (IPv4), rte_lpm6 and rte_fib6 (IPv6) as contenders of
 * `tessera bench fib --dpdk`.
 *
 * rte_lpm's lookups are inline functions of its header, so they are called from here and
 * not through Rust declarations. Every timed pass is one C loop over the whole address
 * array, as our own passes are one Rust loop: no call crosses the language boundary per
 * lookup. Built only with the bench crate's `dpdk` feature (build.rs).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_lcore.h>
#include <rte_lpm.h>
#include <rte_lpm6.h>
#include <rte_memory.h>

#define BATCH 256

/* The value the lookups below give for an address without a route. */
#define NO_ROUTE 0xffffffffu
/* rte_fib's default next hop must fit its 31-bit next hops. */
#define FIB_NO_ROUTE 0x7fffffffu

/* Starts DPDK's environment once per process. `huge`: back DPDK's memory with huge pages
 * from the system's pool (in memory, no hugetlbfs mount needed) instead of ordinary pages.
 * Returns 0, or -1 with a message in `err`. */
int tessera_dpdk_init(int huge, unsigned mem_mb, char *err, size_t errlen)
{
	char mem[32];
	snprintf(mem, sizeof mem, "%u", mem_mb);
	char *argv[] = {"tessera-bench", "--no-pci", "--no-telemetry", "--log-level=error",
			"-l", "0", "-m", mem, huge ? "--in-memory" : "--no-huge", NULL};
	int argc = sizeof argv / sizeof argv[0] - 1;
	if (rte_eal_init(argc, argv) < 0) {
		snprintf(err, errlen, "rte_eal_init: %s", rte_strerror(rte_errno));
		return -1;
	}
	return 0;
}

/* Returns NULL on failure, with the reason in rte_errno (tessera_dpdk_error). */
const char *tessera_dpdk_error(void)
{
	return rte_strerror(rte_errno);
}

void *tessera_lpm_create(const char *name, uint32_t max_rules, uint32_t tbl8s)
{
	struct rte_lpm_config c = {.max_rules = max_rules, .number_tbl8s = tbl8s};
	return rte_lpm_create(name, SOCKET_ID_ANY, &c);
}

int tessera_lpm_add(void *lpm, uint32_t ip, uint8_t depth, uint32_t nh)
{
	return rte_lpm_add(lpm, ip, depth, nh);
}

void tessera_lpm_free(void *lpm)
{
	rte_lpm_free(lpm);
}

uint32_t tessera_lpm_lookup(const void *lpm, uint32_t ip)
{
	uint32_t nh;
	return rte_lpm_lookup(lpm, ip, &nh) == 0 ? nh : NO_ROUTE;
}

/* One pass of single lookups; returns the sum of the next hops (NO_ROUTE for a miss), so
 * that no lookup can be skipped. Every pass below sums the same way. */
uint64_t tessera_lpm_pass_single(const void *lpm, const uint32_t *ips, size_t n)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += tessera_lpm_lookup(lpm, ips[i]);
	return sum;
}

/* One pass in batches of BATCH through rte_lpm_lookup_bulk. */
uint64_t tessera_lpm_pass_bulk(const void *lpm, const uint32_t *ips, size_t n)
{
	uint32_t out[BATCH];
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i += BATCH) {
		unsigned k = n - i < BATCH ? (unsigned)(n - i) : BATCH;
		rte_lpm_lookup_bulk(lpm, ips + i, out, k);
		/* An entry is the next hop with flags; the flag says whether it was found. */
		for (unsigned j = 0; j < k; j++)
			sum += (out[j] & RTE_LPM_LOOKUP_SUCCESS) ? (out[j] & 0x00ffffff) : NO_ROUTE;
	}
	return sum;
}

/* One pass four addresses at a time through rte_lpm_lookupx4 (SSE), as DPDK's l3fwd does;
 * a tail of fewer than four goes through rte_lpm_lookup. */
uint64_t tessera_lpm_pass_x4(const void *lpm, const uint32_t *ips, size_t n)
{
	uint32_t hop[4];
	uint64_t sum = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		xmm_t ip = _mm_loadu_si128((const __m128i *)(ips + i));
		rte_lpm_lookupx4(lpm, ip, hop, NO_ROUTE);
		sum += (uint64_t)hop[0] + hop[1] + hop[2] + hop[3];
	}
	for (; i < n; i++)
		sum += tessera_lpm_lookup(lpm, ips[i]);
	return sum;
}

/* Returns NULL on failure, with the reason in rte_errno (tessera_dpdk_error). */
void *tessera_fib_create(const char *name, int max_routes, uint32_t tbl8s)
{
	struct rte_fib_conf c;
	memset(&c, 0, sizeof c);
	c.type = RTE_FIB_DIR24_8;
	c.default_nh = FIB_NO_ROUTE;
	c.max_routes = max_routes;
	c.dir24_8.nh_sz = RTE_FIB_DIR24_8_4B;
	c.dir24_8.num_tbl8 = tbl8s;
	return rte_fib_create(name, SOCKET_ID_ANY, &c);
}

int tessera_fib_add(void *fib, uint32_t ip, uint8_t depth, uint32_t nh)
{
	return rte_fib_add(fib, ip, depth, nh);
}

void tessera_fib_free(void *fib)
{
	rte_fib_free(fib);
}

/* rte_fib has no single lookup: one address is a bulk lookup of one. */
uint32_t tessera_fib_lookup(void *fib, uint32_t ip)
{
	uint64_t nh = FIB_NO_ROUTE;
	rte_fib_lookup_bulk(fib, &ip, &nh, 1);
	return nh == FIB_NO_ROUTE ? NO_ROUTE : (uint32_t)nh;
}

/* One pass of one-address bulk lookups. */
uint64_t tessera_fib_pass_single(void *fib, const uint32_t *ips, size_t n)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += tessera_fib_lookup(fib, ips[i]);
	return sum;
}

/* One pass in batches of BATCH through rte_fib_lookup_bulk. */
uint64_t tessera_fib_pass_bulk(void *fib, const uint32_t *ips, size_t n)
{
	uint64_t out[BATCH];
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i += BATCH) {
		unsigned k = n - i < BATCH ? (unsigned)(n - i) : BATCH;
		/* rte_fib_lookup_bulk takes a non-const array and does not write it. */
		rte_fib_lookup_bulk(fib, (uint32_t *)(ips + i), out, k);
		for (unsigned j = 0; j < k; j++)
			sum += out[j] == FIB_NO_ROUTE ? NO_ROUTE : out[j];
	}
	return sum;
}

/* IPv6. Addresses are arrays of 16 bytes in network order, as both libraries take them. */

void *tessera_lpm6_create(const char *name, uint32_t max_rules, uint32_t tbl8s)
{
	struct rte_lpm6_config c = {.max_rules = max_rules, .number_tbl8s = tbl8s};
	return rte_lpm6_create(name, SOCKET_ID_ANY, &c);
}

int tessera_lpm6_add(void *lpm, const uint8_t *ip, uint8_t depth, uint32_t nh)
{
	return rte_lpm6_add(lpm, ip, depth, nh);
}

void tessera_lpm6_free(void *lpm)
{
	rte_lpm6_free(lpm);
}

uint32_t tessera_lpm6_lookup(const void *lpm, const uint8_t *ip)
{
	uint32_t nh;
	return rte_lpm6_lookup(lpm, ip, &nh) == 0 ? nh : NO_ROUTE;
}

uint64_t tessera_lpm6_pass_single(const void *lpm, const uint8_t (*ips)[16], size_t n)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += tessera_lpm6_lookup(lpm, ips[i]);
	return sum;
}

/* One pass in batches of BATCH through rte_lpm6_lookup_bulk_func (-1 for a miss). */
uint64_t tessera_lpm6_pass_bulk(const void *lpm, const uint8_t (*ips)[16], size_t n)
{
	int32_t out[BATCH];
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i += BATCH) {
		unsigned k = n - i < BATCH ? (unsigned)(n - i) : BATCH;
		/* It takes a non-const array and does not write it. */
		rte_lpm6_lookup_bulk_func(lpm, (uint8_t(*)[16])(ips + i), out, k);
		for (unsigned j = 0; j < k; j++)
			sum += out[j] < 0 ? NO_ROUTE : (uint32_t)out[j];
	}
	return sum;
}

/* rte_fib6 of type TRIE (a 24-bit first table, then 8-bit tables), 4-byte next hops. */
void *tessera_fib6_create(const char *name, int max_routes, uint32_t tbl8s)
{
	struct rte_fib6_conf c;
	memset(&c, 0, sizeof c);
	c.type = RTE_FIB6_TRIE;
	c.default_nh = FIB_NO_ROUTE;
	c.max_routes = max_routes;
	c.trie.nh_sz = RTE_FIB6_TRIE_4B;
	c.trie.num_tbl8 = tbl8s;
	return rte_fib6_create(name, SOCKET_ID_ANY, &c);
}

int tessera_fib6_add(void *fib, const uint8_t *ip, uint8_t depth, uint32_t nh)
{
	return rte_fib6_add(fib, ip, depth, nh);
}

void tessera_fib6_free(void *fib)
{
	rte_fib6_free(fib);
}

uint32_t tessera_fib6_lookup(void *fib, const uint8_t *ip)
{
	uint64_t nh = FIB_NO_ROUTE;
	uint8_t a[1][16];
	memcpy(a[0], ip, 16);
	rte_fib6_lookup_bulk(fib, a, &nh, 1);
	return nh == FIB_NO_ROUTE ? NO_ROUTE : (uint32_t)nh;
}

uint64_t tessera_fib6_pass_single(void *fib, const uint8_t (*ips)[16], size_t n)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t nh = FIB_NO_ROUTE;
		rte_fib6_lookup_bulk(fib, (uint8_t(*)[16])(ips + i), &nh, 1);
		sum += nh == FIB_NO_ROUTE ? NO_ROUTE : nh;
	}
	return sum;
}

uint64_t tessera_fib6_pass_bulk(void *fib, const uint8_t (*ips)[16], size_t n)
{
	uint64_t out[BATCH];
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i += BATCH) {
		unsigned k = n - i < BATCH ? (unsigned)(n - i) : BATCH;
		rte_fib6_lookup_bulk(fib, (uint8_t(*)[16])(ips + i), out, (int)k);
		for (unsigned j = 0; j < k; j++)
			sum += out[j] == FIB_NO_ROUTE ? NO_ROUTE : out[j];
	}
	return sum;
}
