//! `bench forward --rounds N`: the whole run N times over, so that the contenders take
//! turns (A, B, C, A, B, C, ...), and what each round gives side by side.
//!
//! On a shared machine a contender's peak moves by half between minutes (another tenant,
//! the host's scheduling): one run that measures A, then B, compares A's minute with B's.
//! A ratio of two peaks measured in the same round, and its median over rounds, is what
//! such a machine can tell; each round's ratio is kept, so that the spread shows.

use super::*;

/// Runs `opts` `rounds` times, round K into `OUT/round-K`, and writes the rounds'
/// summary ([`summarize`]) to `OUT/rounds.json` (again after every round, so that a run
/// cut short keeps what it measured); returns it with the rounds' folders.
pub fn run_rounds(opts: &ForwardOpts, rounds: usize) -> Result<Value, String> {
    let mut results = Vec::new();
    for k in 1..=rounds {
        eprintln!("bench forward: round {k} of {rounds}");
        let mut o = opts.clone();
        o.out = opts.out.join(format!("round-{k}"));
        results.push(run(&o)?);
        let so_far = summarize(&results, &base_of(opts));
        eprintln!("{}", table(&so_far));
        write(
            &opts.out.join("rounds.json"),
            &serde_json::to_string_pretty(&so_far).unwrap_or_default(),
        )?;
    }
    let mut v = summarize(&results, &base_of(opts));
    v["round_dirs"] = json!((1..=rounds)
        .map(|k| opts.out.join(format!("round-{k}")))
        .collect::<Vec<_>>());
    Ok(v)
}

/// The contender the others are compared with: `forwarder-fast` where it is measured
/// (the variants with filters or flow export are its own config changed), else the
/// first.
fn base_of(opts: &ForwardOpts) -> String {
    let names: Vec<&str> = opts.contenders.iter().map(|c| c.0.as_str()).collect();
    if names.contains(&FAST) {
        FAST.to_string()
    } else {
        names.first().unwrap_or(&"forwarder").to_string()
    }
}

/// A case of the matrix, as the rows name it.
fn case_of(row: &Value) -> String {
    format!(
        "{} {} prefixes {}B {} flow",
        row["family"].as_str().unwrap_or("ipv4"),
        row["table_prefixes"],
        row["frame_bytes"],
        row["flows"].as_str().unwrap_or("?")
    )
}

/// A contender's name without the family's suffix (`NAME-ipv6`): the name the base has
/// in the same family.
fn base_in_family(base: &str, row: &Value) -> String {
    if row["family"] == "ipv6" {
        format!("{base}-ipv6")
    } else {
        base.to_string()
    }
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Per case and contender: its peak (the highest forwarded rate among the steps) in each
/// round and their median; and, for every contender but `base`, its peak over `base`'s in
/// the same round and case, per round, with their median, least and most. `results`:
/// each round's results (the `points` of [`run`]'s value).
pub fn summarize(results: &[Value], base: &str) -> Value {
    // (case, contender) -> peak per round, in the order first met.
    let mut order: Vec<(String, String)> = Vec::new();
    let mut peaks: std::collections::HashMap<(String, String), Vec<Option<f64>>> =
        std::collections::HashMap::new();
    let mut bases: std::collections::HashMap<(String, String), String> =
        std::collections::HashMap::new();
    for (k, r) in results.iter().enumerate() {
        for row in r["points"].as_array().into_iter().flatten() {
            if row["kind"] != "step" {
                continue;
            }
            let (Some(c), Some(pps)) = (row["contender"].as_str(), row["forwarded_pps"].as_f64())
            else {
                continue;
            };
            let key = (case_of(row), c.to_string());
            bases
                .entry(key.clone())
                .or_insert_with(|| base_in_family(base, row));
            let v = peaks.entry(key.clone()).or_insert_with(|| {
                order.push(key.clone());
                Vec::new()
            });
            v.resize(results.len(), None);
            v[k] = Some(v[k].map_or(pps, |p: f64| p.max(pps)));
        }
    }
    let mut rows = Vec::new();
    for key in &order {
        let mine = &peaks[key];
        let got: Vec<f64> = mine.iter().flatten().copied().collect();
        let mut row = json!({
            "case": key.0, "contender": key.1,
            "peak_pps": mine.iter().map(|p| p.map(f64::round)).collect::<Vec<_>>(),
            "median_peak_pps": median(&got).map(f64::round),
        });
        let b = &bases[key];
        if *b != key.1 {
            if let Some(theirs) = peaks.get(&(key.0.clone(), b.clone())) {
                let ratios: Vec<Option<f64>> = mine
                    .iter()
                    .zip(theirs)
                    .map(|(m, t)| match (m, t) {
                        (Some(m), Some(t)) if *t > 0.0 => Some(round3(m / t)),
                        _ => None,
                    })
                    .collect();
                let r: Vec<f64> = ratios.iter().flatten().copied().collect();
                row["against"] = json!(b);
                row["ratio"] = json!(ratios);
                row["median_ratio"] = json!(median(&r).map(round3));
                row["least_ratio"] = json!(r.iter().copied().reduce(f64::min));
                row["most_ratio"] = json!(r.iter().copied().reduce(f64::max));
            }
        }
        rows.push(row);
    }
    json!({"rounds": results.len(), "base": base, "contenders": rows})
}

/// The summary as a table for a person.
pub fn table(v: &Value) -> String {
    let mut s = format!(
        "{:<44} {:<32} {:>12} {:>7}  ratios by round\n",
        "case", "contender", "median pps", "ratio"
    );
    for r in v["contenders"].as_array().into_iter().flatten() {
        let ratios: Vec<String> = r["ratio"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| x.as_f64().map_or("-".into(), |x| format!("{x:.2}")))
            .collect();
        s.push_str(&format!(
            "{:<44} {:<32} {:>12} {:>7}  {}\n",
            r["case"].as_str().unwrap_or(""),
            r["contender"].as_str().unwrap_or(""),
            r["median_peak_pps"]
                .as_f64()
                .map_or("-".into(), |x| format!("{x:.0}")),
            r["median_ratio"]
                .as_f64()
                .map_or("".into(), |x| format!("{x:.3}")),
            ratios.join(" ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(contender: &str, family: &str, pps: f64) -> Value {
        json!({"contender": contender, "family": family, "table_prefixes": 10, "frame_bytes": 64,
               "flows": "one", "kind": "step", "forwarded_pps": pps})
    }

    #[test]
    fn ratios_are_taken_within_a_round_and_their_median_over_rounds() {
        let round = |a: f64, b: f64, c: f64| {
            json!({"points": [
                step("forwarder-fast", "ipv4", a / 2.0),
                step("forwarder-fast", "ipv4", a),
                step("forwarder-fast-acl-1000", "ipv4", b),
                step("forwarder-fast-ipv6", "ipv6", c),
                {"contender": "forwarder-fast", "kind": "zero_loss_pps", "zero_loss_pps": 9e9},
            ]})
        };
        // The base's peak moves threefold between rounds; the ratio does not.
        let v = summarize(
            &[
                round(1e6, 0.9e6, 1.0),
                round(3e6, 2.7e6, 1.0),
                round(2e6, 1.0e6, 1.0),
            ],
            "forwarder-fast",
        );
        assert_eq!(v["rounds"], 3);
        let rows = v["contenders"].as_array().unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0]["contender"], "forwarder-fast");
        assert_eq!(rows[0]["peak_pps"], json!([1e6, 3e6, 2e6]));
        assert_eq!(rows[0]["median_peak_pps"], 2e6);
        assert!(rows[0].get("ratio").is_none(), "the base has no ratio");
        assert_eq!(rows[1]["against"], "forwarder-fast");
        assert_eq!(rows[1]["ratio"], json!([0.9, 0.9, 0.5]));
        assert_eq!(rows[1]["median_ratio"], 0.9);
        assert_eq!(rows[1]["least_ratio"], 0.5);
        assert_eq!(rows[1]["most_ratio"], 0.9);
        // IPv6 rows are their own case; the base there would be `forwarder-fast-ipv6`.
        assert_eq!(rows[2]["case"], "ipv6 10 prefixes 64B one flow");
        assert!(rows[2].get("ratio").is_none());
        assert!(table(&v).contains("0.90 0.90 0.50"));
    }

    #[test]
    fn a_round_without_a_contender_leaves_a_gap_not_a_shift() {
        let v = summarize(
            &[
                json!({"points": [step("forwarder", "ipv4", 1e6), step("linux", "ipv4", 5e5)]}),
                json!({"points": [step("linux", "ipv4", 4e5)]}),
            ],
            "forwarder",
        );
        let rows = v["contenders"].as_array().unwrap();
        assert_eq!(rows[1]["contender"], "linux");
        assert_eq!(rows[1]["ratio"], json!([0.5, null]));
        assert_eq!(rows[1]["median_ratio"], 0.5);
        assert_eq!(rows[0]["peak_pps"], json!([1e6, null]));
    }

    #[test]
    fn median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
    }
}
