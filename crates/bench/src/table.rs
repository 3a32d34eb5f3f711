//! Route tables for benchmarks: text, gzip-compressed or plain, one prefix per line with an
//! optional next hop (`a.b.c.d/len [next-hop]`, more columns ignored), or a seeded
//! synthetic table with the prefix-length mix of a real one.

use fib::{Prefix, Prefix6};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

/// Routes and the next hops they use, numbered: `routes[i].1` indexes `next_hops`.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub routes: Vec<(Prefix, u32)>,
    pub next_hops: Vec<Ipv4Addr>,
}

/// Reads a table (text or MRT, plain or compressed; see `control::tables`). Prefixes
/// without a next hop get one of 16 synthetic next hops chosen by a hash of the prefix (a
/// router with a few upstreams). Returns the table and the count of skipped lines/records.
pub fn read(path: &Path) -> Result<(Table, usize), String> {
    // Every benchmark here measures lookups of one family: a table with none of its
    // prefixes has nothing to draw addresses from.
    let (routes, next_hops, skipped) = numbered(path, "IPv4", synthetic_hop, |each| {
        control::tables::read(path, each)
    })?;
    Ok((Table { routes, next_hops }, skipped))
}

/// Routes numbered by next hop, from `read_with` (one family's reader of `path`); the
/// next hop of a route without one is `synthetic(prefix)`.
#[allow(clippy::type_complexity)]
fn numbered<P: Copy, H: Copy + Eq + std::hash::Hash>(
    path: &Path,
    family: &str,
    synthetic: impl Fn(P) -> H,
    read_with: impl FnOnce(&mut dyn FnMut(P, Option<H>)) -> Result<control::tables::Stats, String>,
) -> Result<(Vec<(P, u32)>, Vec<H>, usize), String> {
    let (mut routes, mut hops) = (Vec::new(), Vec::new());
    let mut ids = std::collections::HashMap::new();
    let st = read_with(&mut |p, hop| {
        let hop = hop.unwrap_or_else(|| synthetic(p));
        let id = *ids.entry(hop).or_insert_with(|| {
            hops.push(hop);
            hops.len() as u32 - 1
        });
        routes.push((p, id));
    })?;
    if hops.len() as u32 > fib::poptrie::MAX_VALUE + 1 {
        return Err(format!(
            "{}: {} distinct next hops; the forwarding table's leaves hold at most {}",
            path.display(),
            hops.len(),
            fib::poptrie::MAX_VALUE + 1
        ));
    }
    if routes.is_empty() {
        return Err(format!(
            "{}: no {family} prefix in the table ({} lines or records skipped: other address \
             families, or unreadable)",
            path.display(),
            st.skipped
        ));
    }
    Ok((routes, hops, st.skipped))
}

fn synthetic_hop(p: Prefix) -> Ipv4Addr {
    let h = (p.bits() as u64 ^ (p.len() as u64) << 32).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60;
    Ipv4Addr::new(192, 0, 2, 1 + h as u8)
}

/// The prefix-length shares of a full IPv4 table (ipv4-bgp-2023: /8 .. /32, per 100,000).
const MIX: [(u8, u32); 17] = [
    (8, 2),
    (12, 33),
    (13, 64),
    (14, 133),
    (15, 233),
    (16, 1496),
    (17, 913),
    (18, 1530),
    (19, 2758),
    (20, 4725),
    (21, 5627),
    (22, 12044),
    (23, 10701),
    (24, 59619),
    (28, 2),
    (30, 1),
    (32, 98),
];

/// A prefix length drawn from `mix` ((length, share) pairs whose shares sum to `total`).
fn pick_len(mix: &[(u8, u32)], total: u32, rng: &mut crate::Rng) -> u8 {
    let mut r = (rng.next_u64() % total as u64) as u32;
    for &(len, share) in mix {
        if r < share {
            return len;
        }
        r -= share;
    }
    mix[mix.len() - 1].0
}

/// A seeded synthetic table of `n` distinct prefixes with the length mix of a real one.
pub fn synthetic(n: usize, seed: u64) -> Table {
    let mut rng = crate::Rng::new(seed);
    let total: u32 = MIX.iter().map(|m| m.1).sum();
    let mut seen = std::collections::HashSet::new();
    let mut t = Table {
        routes: Vec::with_capacity(n),
        next_hops: (1..=16).map(|i| Ipv4Addr::new(192, 0, 2, i)).collect(),
    };
    while t.routes.len() < n {
        let len = pick_len(&MIX, total, &mut rng);
        let a = (rng.next_u64() as u32) & fib::mask(len);
        let first = a >> 24;
        if first == 0 || first == 10 || first == 127 || first >= 224 {
            continue;
        }
        let p = Prefix::new(a.into(), len);
        if seen.insert(p) {
            t.routes.push((p, (rng.next_u64() % 16) as u32));
        }
    }
    t
}

/// An IPv6 table: routes and the next hops they use, numbered.
#[derive(Debug, Clone, Default)]
pub struct Table6 {
    pub routes: Vec<(Prefix6, u32)>,
    pub next_hops: Vec<Ipv6Addr>,
}

/// Reads the IPv6 routes of a table, as [`read`] the IPv4 ones (16 synthetic next hops
/// where the table gives none).
pub fn read6(path: &Path) -> Result<(Table6, usize), String> {
    let synthetic = |p: Prefix6| {
        let h = (p.bits() as u64 ^ (p.bits() >> 64) as u64 ^ p.len() as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            >> 60;
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1 + h as u16)
    };
    let (routes, next_hops, skipped) = numbered(path, "IPv6", synthetic, |each| {
        control::tables::read6(path, each)
    })?;
    Ok((Table6 { routes, next_hops }, skipped))
}

/// The prefix-length shares of a full IPv6 table (ipv6-bgp-2023, per 100,000; lengths
/// with fewer than 0.01% folded into their neighbours).
const MIX6: [(u8, u32); 25] = [
    (20, 10),
    (24, 19),
    (28, 121),
    (29, 2729),
    (30, 406),
    (31, 177),
    (32, 14080),
    (33, 1827),
    (34, 1625),
    (35, 651),
    (36, 3744),
    (37, 549),
    (38, 1010),
    (39, 860),
    (40, 8379),
    (41, 564),
    (42, 1437),
    (43, 625),
    (44, 8970),
    (45, 970),
    (46, 1897),
    (47, 1969),
    (48, 47136),
    (56, 15),
    (64, 115),
];

/// A seeded synthetic IPv6 table of `n` distinct prefixes with the length mix of a real
/// one, inside the /16s that real tables use (2001: to 2c0f:).
pub fn synthetic6(n: usize, seed: u64) -> Table6 {
    let mut rng = crate::Rng::new(seed);
    let total: u32 = MIX6.iter().map(|m| m.1).sum();
    let mut seen = std::collections::HashSet::new();
    let mut t = Table6 {
        routes: Vec::with_capacity(n),
        next_hops: (1..=16)
            .map(|i| Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i))
            .collect(),
    };
    while t.routes.len() < n {
        let len = pick_len(&MIX6, total, &mut rng);
        let top = 0x2001 + rng.below(0x2c10 - 0x2001) as u128;
        let low = ((rng.next_u64() as u128) << 64 | rng.next_u64() as u128) >> 16;
        let p = Prefix6::new((top << 112 | low).into(), len);
        if seen.insert(p) {
            t.routes.push((p, (rng.next_u64() % 16) as u32));
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_is_seeded_and_distinct() {
        let a = synthetic(5000, 7);
        let b = synthetic(5000, 7);
        assert_eq!(a.routes, b.routes);
        let s: std::collections::HashSet<_> = a.routes.iter().map(|r| r.0).collect();
        assert_eq!(s.len(), 5000);
        let share24 = a.routes.iter().filter(|r| r.0.len() == 24).count() as f64 / 5000.0;
        assert!((0.55..0.65).contains(&share24), "{share24}");
    }

    #[test]
    fn synthetic6_is_seeded_and_distinct() {
        let a = synthetic6(5000, 7);
        assert_eq!(a.routes, synthetic6(5000, 7).routes);
        let s: std::collections::HashSet<_> = a.routes.iter().map(|r| r.0).collect();
        assert_eq!(s.len(), 5000);
        let share48 = a.routes.iter().filter(|r| r.0.len() == 48).count() as f64 / 5000.0;
        assert!((0.42..0.52).contains(&share48), "{share48}");
    }

    #[test]
    fn reads_text_with_and_without_next_hops() {
        let dir = std::env::temp_dir().join(format!("tessera-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.txt");
        std::fs::write(
            &p,
            "10.0.0.0/8 192.0.2.9\n2001:db8::/32\n10.1.0.0/16\tx\n# c\n",
        )
        .unwrap();
        let (t, skipped) = read(&p).unwrap();
        assert_eq!((t.routes.len(), skipped), (2, 2));
        assert_eq!(
            t.next_hops[t.routes[0].1 as usize],
            Ipv4Addr::new(192, 0, 2, 9)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_table_without_ipv4_prefixes_is_an_error_not_a_panic() {
        let dir = std::env::temp_dir().join(format!("tessera-table6-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, body) in [
            ("empty.txt", ""),
            ("v6.txt", "2001:db8::/32\n2001:db8:1::/48\n"),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, body).unwrap();
            let e = read(&p).unwrap_err();
            assert!(e.contains("no IPv4 prefix"), "{e}");
        }
        let p = dir.join("v4.txt");
        std::fs::write(&p, "10.0.0.0/8\n").unwrap();
        let e = read6(&p).unwrap_err();
        assert!(e.contains("no IPv6 prefix"), "{e}");
        std::fs::write(&p, "10.0.0.0/8\n2001:db8::/32 2001:db8::9\n").unwrap();
        let (t, skipped) = read6(&p).unwrap();
        assert_eq!((t.routes.len(), skipped), (1, 1));
        assert_eq!(t.next_hops, ["2001:db8::9".parse::<Ipv6Addr>().unwrap()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
