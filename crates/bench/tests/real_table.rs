//! The fast structures (IPv4 and IPv6) against the reference on a full table: the first, last and a random
//! address of every prefix, and the addresses just outside it.
//!
//! The table is ../shared/data/ipv4-bgp-2023.txt.gz (901,899 prefixes), which lives outside
//! the repository; when it is absent the test says so and checks a seeded synthetic table
//! of the same size and prefix-length mix instead.

use fib::{BinaryTrie, Lpm, Poptrie};

/// The table `name` of ../shared/data (`name`.txt.gz, `prefixes` of them), or, when it is
/// absent, a seeded synthetic one of that size and mix, said so on stderr.
fn real_or_synthetic<T>(
    name: &'static str,
    prefixes: usize,
    read: fn(&std::path::Path) -> Result<(T, usize), String>,
    synthetic: fn(usize, u64) -> T,
) -> (T, &'static str) {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../../shared/data/{name}.txt.gz"));
    match read(&path) {
        Ok((t, _)) => (t, name),
        Err(e) => {
            eprintln!(
                "REAL TABLE ABSENT ({e}): checking a synthetic table of {prefixes} prefixes instead"
            );
            (synthetic(prefixes, 2023), "synthetic")
        }
    }
}

#[test]
fn full_table_matches_the_reference() {
    let (t, what) = real_or_synthetic(
        "ipv4-bgp-2023",
        901_899,
        bench::table::read,
        bench::table::synthetic,
    );
    assert_eq!(t.routes.len(), 901_899);
    let mut rib = BinaryTrie::new();
    for (i, (p, _)) in t.routes.iter().enumerate() {
        // Values as distinct as 16-bit leaves allow: neighbouring prefixes never share
        // one, the hardest case for leaf compression, and a wrong match shows.
        rib.insert(*p, i as u32 % (fib::poptrie::MAX_VALUE + 1));
    }
    let pop = Poptrie::build(&rib);
    let d24 = fib::Dir24::build(&rib);
    let mut rng = bench::Rng::new(9);
    let mut addrs = Vec::with_capacity(t.routes.len() * 5);
    for (p, _) in &t.routes {
        let first = p.bits();
        let last = first | !fib::mask(p.len());
        addrs.extend([
            first,
            last,
            first | (rng.next_u64() as u32 & !fib::mask(p.len())),
            first.wrapping_sub(1),
            last.wrapping_add(1),
        ]);
    }
    let mut batch = vec![0u32; addrs.len()];
    pop.lookup_batch_raw(&addrs, &mut batch);
    let mut mismatches = 0;
    for (a, b) in addrs.iter().zip(&batch) {
        let want = rib.lookup((*a).into());
        let raw = want.unwrap_or(fib::poptrie::NO_ROUTE);
        if pop.lookup((*a).into()) != want || *b != raw || d24.lookup((*a).into()) != want {
            mismatches += 1;
        }
    }
    eprintln!(
        "{what}: {} prefixes, {} addresses checked; poptrie {} bytes ({:.2} per prefix with a distinct value per prefix)",
        t.routes.len(),
        addrs.len(),
        pop.memory_bytes(),
        pop.memory_bytes() as f64 / t.routes.len() as f64
    );
    assert_eq!(mismatches, 0, "of {} addresses", addrs.len());
}

/// The same for IPv6: Poptrie6's single and batched lookups against the reference trie on
/// ../shared/data/ipv6-bgp-2023.txt.gz (160,147 prefixes), or a synthetic table of that
/// size and mix when it is absent.
#[test]
fn full_ipv6_table_matches_the_reference() {
    use fib::v6::{mask6, BinaryTrie6, Poptrie6};
    let (t, what) = real_or_synthetic(
        "ipv6-bgp-2023",
        160_147,
        bench::table::read6,
        bench::table::synthetic6,
    );
    assert_eq!(t.routes.len(), 160_147);
    let mut rib = BinaryTrie6::new();
    for (i, (p, _)) in t.routes.iter().enumerate() {
        rib.insert(*p, i as u32 % (fib::poptrie::MAX_VALUE + 1));
    }
    let pop = Poptrie6::build(&rib);
    let mut rng = bench::Rng::new(9);
    let mut addrs = Vec::with_capacity(t.routes.len() * 5);
    for (p, _) in &t.routes {
        let first = p.bits();
        let last = first | !mask6(p.len());
        let random = (rng.next_u64() as u128) << 64 | rng.next_u64() as u128;
        addrs.extend([
            first,
            last,
            first | (random & !mask6(p.len())),
            first.wrapping_sub(1),
            last.wrapping_add(1),
        ]);
    }
    let mut batch = vec![0u32; addrs.len()];
    pop.lookup_batch_raw(&addrs, &mut batch);
    let mut mismatches = 0;
    for (a, b) in addrs.iter().zip(&batch) {
        let want = rib.lookup((*a).into());
        if pop.lookup((*a).into()) != want || *b != want.unwrap_or(fib::poptrie::NO_ROUTE) {
            mismatches += 1;
        }
    }
    eprintln!(
        "{what}: {} prefixes, {} addresses checked; poptrie6 {} bytes",
        t.routes.len(),
        addrs.len(),
        pop.memory_bytes()
    );
    assert_eq!(mismatches, 0, "of {} addresses", addrs.len());
}
