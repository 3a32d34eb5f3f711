//! The fast structure against the reference on a full real Internet table
//! (`../shared/data/ipv4-bgp-2023.txt.gz`, 901,899 prefixes): the first, last and a random
//! address of every prefix, and the addresses just outside it.
//!
//! The table lives outside the repository. Without it this test fails and says so; set
//! TESSERA_NO_REAL_TABLES=1 to acknowledge its absence (it then passes, printing that it
//! checked nothing).

use fib::{BinaryTrie, Lpm, Poptrie, Prefix};
use std::io::{BufRead, BufReader};

fn table() -> Option<Vec<Prefix>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/ipv4-bgp-2023.txt.gz"
    );
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            if std::env::var_os("TESSERA_NO_REAL_TABLES").is_some() {
                eprintln!("real table {path} absent ({e}); TESSERA_NO_REAL_TABLES is set, so nothing was checked");
                return None;
            }
            panic!(
                "real table {path} absent ({e}); set TESSERA_NO_REAL_TABLES=1 to run without it"
            );
        }
    };
    let r = BufReader::new(flate2::read::GzDecoder::new(f));
    Some(
        r.lines()
            .map(|l| {
                let l = l.unwrap();
                Prefix::parse_strict(l.split_whitespace().next().unwrap()).unwrap()
            })
            .collect(),
    )
}

#[test]
fn full_real_table_matches_the_reference() {
    let Some(prefixes) = table() else { return };
    assert_eq!(prefixes.len(), 901_899);
    let mut t = BinaryTrie::new();
    for (i, p) in prefixes.iter().enumerate() {
        t.insert(*p, i as u32);
    }
    let p = Poptrie::build(&t);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut addrs = Vec::with_capacity(prefixes.len() * 5);
    for pf in &prefixes {
        let first = pf.bits();
        let last = first | !fib::mask(pf.len());
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        addrs.extend([
            first,
            last,
            first | (rng as u32 & !fib::mask(pf.len())),
            first.wrapping_sub(1),
            last.wrapping_add(1),
        ]);
    }
    let mut out = vec![0u32; addrs.len()];
    p.lookup_batch_raw(&addrs, &mut out);
    let mut mismatches = 0;
    for (a, o) in addrs.iter().zip(&out) {
        let want = t.lookup((*a).into());
        if p.lookup((*a).into()) != want || *o != want.unwrap_or(fib::poptrie::NO_ROUTE) {
            mismatches += 1;
        }
    }
    assert_eq!(mismatches, 0, "of {} addresses", addrs.len());
    eprintln!(
        "{} prefixes, {} addresses checked; poptrie {} bytes ({:.2} per prefix), {} nodes, {} leaves",
        prefixes.len(),
        addrs.len(),
        p.memory_bytes(),
        p.memory_bytes() as f64 / prefixes.len() as f64,
        p.node_count(),
        p.leaf_count()
    );
}
